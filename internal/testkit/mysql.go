package testkit

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// EnvMySQL points tests at a MySQL or MariaDB server (a go-sql-driver/mysql
// DSN without a database name).
const EnvMySQL = "HERALD_MYSQL_DSN"

// DefaultMySQLDSN is the machine's MariaDB.
const DefaultMySQLDSN = "root@tcp(127.0.0.1:3306)/"

// MySQLDSN returns the DSN of the test server (HERALD_MYSQL_DSN).
func MySQLDSN() string { return env(EnvMySQL, DefaultMySQLDSN) }

// MySQL creates a database of the test's own and returns a *sql.DB
// (go-sql-driver/mysql, parseTime on) open on it and its DSN. The database
// is dropped and the DB closed when the test ends.
func MySQL(t testing.TB) (*sql.DB, string) {
	t.Helper()
	needServer(t, "MySQL or MariaDB")
	base := MySQLDSN()
	admin, err := sql.Open("mysql", base)
	if err != nil {
		t.Fatalf("testkit: %s=%q: %v", EnvMySQL, base, err)
	}
	defer admin.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := admin.PingContext(ctx); err != nil {
		t.Fatalf("testkit: MySQL/MariaDB at %s is unreachable: %v\n"+
			"start it with `start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd` (or run .ci/run), "+
			"point %s at another server, or skip server tests with `go test -short`", base, err, EnvMySQL)
	}
	name := "herald_t_" + randomHex(6)
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+name+" CHARACTER SET utf8mb4"); err != nil {
		t.Fatalf("testkit: create database: %v", err)
	}
	t.Cleanup(func() {
		a, err := sql.Open("mysql", base)
		if err != nil {
			return
		}
		defer a.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = a.ExecContext(ctx, "DROP DATABASE IF EXISTS "+name)
	})
	cfg, err := mysql.ParseDSN(base)
	if err != nil {
		t.Fatalf("testkit: %s=%q: %v", EnvMySQL, base, err)
	}
	cfg.DBName = name
	cfg.ParseTime = true
	dsn := cfg.FormatDSN()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("testkit: open database %s: %v", name, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db, dsn
}
