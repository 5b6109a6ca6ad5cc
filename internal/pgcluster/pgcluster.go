// Package pgcluster runs a PostgreSQL cluster of its own: initdb in a
// temporary directory, pg_ctl on a free port. Tests get one through
// testkit.NewCluster; programs (integration/gormsuite's WAL judge)
// call Start.
package pgcluster

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Cluster is a PostgreSQL cluster of the test's (or program's) own, made with
// initdb in a temporary directory and run with pg_ctl on a free port, so a
// test can crash and restart it (or run it with settings of its own)
// without touching the machine's shared server. It runs as the OS user
// postgres when the test runs as root (initdb refuses root).
type Cluster struct {
	bin, dir, data, sock, log string
	port                      int
	asUser                    string
	mu                        sync.Mutex
	crashes                   int
}

// Start initialises and starts a private cluster with the given extra
// server settings ("name=value"). The caller stops and removes it with
// Stop (also after an error, when the cluster is not nil).
func Start(settings ...string) (*Cluster, error) {
	bin, err := postgresBin()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "herald-pg-")
	if err != nil {
		return nil, err
	}
	p := &Cluster{bin: bin, dir: dir, data: filepath.Join(dir, "data"),
		sock: dir, log: filepath.Join(dir, "server.log")}
	if os.Geteuid() == 0 {
		p.asUser = "postgres"
		u, err := user.Lookup("postgres")
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("running as root, and there is no postgres OS user to run a private cluster as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	if err := p.run("initdb", "-D", p.data, "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"); err != nil {
		return p, fmt.Errorf("initdb: %w", err)
	}
	if p.port, err = freePort(); err != nil {
		return p, err
	}
	conf := fmt.Sprintf("port = %d\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '%s'\n", p.port, p.sock)
	for _, s := range settings {
		conf += s + "\n"
	}
	f, err := os.OpenFile(filepath.Join(p.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return p, err
	}
	_, err = f.WriteString(conf)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return p, err
	}
	return p, p.Start()
}

// Stop stops the server (immediately: nothing of it is kept) and removes
// its directory.
func (p *Cluster) Stop() error {
	err := p.run("pg_ctl", "-D", p.data, "-m", "immediate", "-w", "stop")
	if rerr := os.RemoveAll(p.dir); err == nil {
		err = rerr
	}
	return err
}

// Addr is the server's "127.0.0.1:port".
func (p *Cluster) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p.port)) }

// DSN is a pgx DSN for database db on addr ("" = the server's own address;
// give a proxy's address to go through it).
func (p *Cluster) DSN(addr, db string) string {
	if addr == "" {
		addr = p.Addr()
	}
	return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&connect_timeout=5", addr, db)
}

// Start starts the server and waits until it accepts connections.
func (p *Cluster) Start() error {
	if err := p.run("pg_ctl", "-D", p.data, "-l", p.log, "-w", "-t", "60", "start"); err != nil {
		b, _ := os.ReadFile(p.log)
		return fmt.Errorf("pg_ctl start: %w\n%s", err, b)
	}
	return nil
}

// Crash stops the server the way a power cut would (pg_ctl stop -m
// immediate: no checkpoint, recovery from the WAL at the next start).
func (p *Cluster) Crash() error {
	p.mu.Lock()
	p.crashes++
	p.mu.Unlock()
	return p.run("pg_ctl", "-D", p.data, "-m", "immediate", "-w", "stop")
}

// Crashes is how many times Crash ran.
func (p *Cluster) Crashes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.crashes
}

// CreateDatabase creates database name.
func (p *Cluster) CreateDatabase(t testing.TB, name string) {
	t.Helper()
	db, err := sql.Open("pgx", p.DSN("", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("testkit: create database %s: %v", name, err)
	}
}

// RequirePassword gives the postgres role password and makes TCP logins
// authenticate with SCRAM (pg_hba.conf: host … scram-sha-256; the unix
// socket stays trust), then reloads the server. DSN's logins then fail
// with SQLSTATE 28P01; PasswordDSN's succeed.
func (p *Cluster) RequirePassword(password string) error {
	db, err := sql.Open("pgx", p.DSN("", "postgres"))
	if err != nil {
		return err
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := db.ExecContext(ctx, "SET password_encryption = 'scram-sha-256'; ALTER ROLE postgres PASSWORD "+quoteLiteral(password)); err != nil {
		return err
	}
	hba := "local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n"
	if err := os.WriteFile(filepath.Join(p.data, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		return err
	}
	if _, err := db.ExecContext(ctx, "SELECT pg_reload_conf()"); err != nil {
		return err
	}
	return nil
}

// PasswordDSN is DSN with the postgres role's password.
func (p *Cluster) PasswordDSN(db, password string) string {
	return fmt.Sprintf("postgres://postgres:%s@%s/%s?sslmode=disable&connect_timeout=5", url.QueryEscape(password), p.Addr(), db)
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func (p *Cluster) run(tool string, args ...string) error {
	path := filepath.Join(p.bin, tool)
	var cmd *exec.Cmd
	if p.asUser != "" {
		cmd = exec.Command("runuser", append([]string{"-u", p.asUser, "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %v: %w: %s", tool, args, err, out)
	}
	return nil
}

// postgresBin finds the newest installed PostgreSQL server's bin directory
// (Debian: /usr/lib/postgresql/N/bin), or HERALD_PG_BIN.
func postgresBin() (string, error) {
	if b := os.Getenv("HERALD_PG_BIN"); b != "" {
		return b, nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi < vj
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", fmt.Errorf("no PostgreSQL server binaries (initdb, pg_ctl) found under /usr/lib/postgresql/*/bin or on PATH: install the postgresql package, or set HERALD_PG_BIN")
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
