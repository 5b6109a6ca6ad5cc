package gormcapture_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	gomysql "github.com/go-sql-driver/mysql"
	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/internal/testkit"
)

// KeyParent and KeyChild: a child row per parent, deleted by the
// database's ON DELETE CASCADE, which the plugin reads before the
// parents' DELETE (by the parents' keys).
type KeyParent struct {
	ID       int64
	Name     string     `gorm:"size:40"`
	Code     string     `gorm:"size:40;uniqueIndex"`
	Children []KeyChild `gorm:"foreignKey:ParentID;constraint:OnDelete:CASCADE"`
}

type KeyChild struct {
	ID       int64
	ParentID int64  `gorm:"index"`
	Name     string `gorm:"size:40"`
}

// paramLog records, below the plugin, each statement and its number of
// bound parameters.
type paramLog struct {
	mu    sync.Mutex
	stmts []paramStmt
}

type paramStmt struct {
	q string
	n int
}

func (l *paramLog) add(q string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.stmts = append(l.stmts, paramStmt{q, n})
}

// take returns the statements since the last take.
func (l *paramLog) take() []paramStmt {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.stmts
	l.stmts = nil
	return s
}

type paramConnector struct {
	driver.Connector
	log *paramLog
}

func (c paramConnector) Connect(ctx context.Context) (driver.Conn, error) {
	cn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &paramConn{Conn: cn, log: c.log}, nil
}

type paramConn struct {
	driver.Conn
	log *paramLog
}

func (c *paramConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	c.log.add(q, len(args))
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c *paramConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	c.log.add(q, len(args))
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (c *paramConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *paramConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

// mysqlParamEnv is mysqlEnv on a connection pool whose statements and
// parameters log records.
func mysqlParamEnv(t *testing.T, log *paramLog, models ...any) *env {
	t.Helper()
	other, dsn := testkit.MySQL(t)
	cfg, err := gomysql.ParseDSN(dsn)
	must(t, err)
	conn, err := gomysql.NewConnector(cfg)
	must(t, err)
	sqlDB := sql.OpenDB(paramConnector{Connector: conn, log: log})
	t.Cleanup(func() { _ = sqlDB.Close() })
	db, err := gorm.Open(mysql.New(mysql.Config{Conn: sqlDB}), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	must(t, err)
	must(t, envelope.Migrate(context.Background(), sqlDB, envelope.MySQL, ""))
	must(t, db.AutoMigrate(models...))
	e := &env{name: "mysql", dialect: envelope.MySQL, db: db, sql: other}
	e.plugin = gormcapture.New(gormcapture.Config{Models: models})
	for _, m := range models {
		must(t, e.plugin.Capture(m, envelope.Options{Payload: envelope.BeforeAndAfter}))
	}
	must(t, db.Use(e.plugin))
	return e
}

// TestMySQLManyKeysOneParameter: on MySQL every set of keys the plugin
// binds — an UPDATE's rows read back by key, the children a DELETE's
// cascade reaches, an upsert's rows by unique value and by key, a
// create's rows read back — is one JSON parameter, whatever the number of
// rows: below the plugin no statement but GORM's own INSERT and the
// events' INSERT binds more than a handful of parameters, and the number
// of statements does not grow with the rows. A regression to one
// parameter per key fails it.
func TestMySQLManyKeysOneParameter(t *testing.T) {
	if testing.Short() {
		t.Skip("server test")
	}
	t.Parallel()
	const n = 3000
	log := &paramLog{}
	e := mysqlParamEnv(t, log, &KeyParent{}, &KeyChild{})
	raw := func(q string) {
		t.Helper()
		_, err := e.sql.Exec(q)
		must(t, err)
	}
	// n parents and a child each, written past the plugin.
	var ps, cs []string
	for i := 1; i <= n; i++ {
		ps = append(ps, fmt.Sprintf("(%d, 'p', 'c%d')", i, i))
		cs = append(cs, fmt.Sprintf("(%d, %d, 'k')", i, i))
	}
	raw("INSERT INTO key_parents (id, name, code) VALUES " + strings.Join(ps, ", "))
	raw("INSERT INTO key_children (id, parent_id, name) VALUES " + strings.Join(cs, ", "))
	outbox := func() int {
		t.Helper()
		var c int
		must(t, e.sql.QueryRow("SELECT COUNT(*) FROM herald_outbox").Scan(&c))
		raw("DELETE FROM herald_outbox")
		return c
	}
	setBased := func(what string, gorms ...string) {
		t.Helper()
		stmts := log.take()
		for _, s := range stmts {
			own := false
			for _, g := range gorms {
				own = own || strings.HasPrefix(s.q, g)
			}
			if s.n > 16 && !own && !strings.Contains(s.q, "herald_outbox") {
				t.Errorf("%s of %d rows: a statement binds %d parameters: %.200s", what, n, s.n, s.q)
			}
		}
		if len(stmts) > 16 {
			t.Errorf("%s of %d rows: %d statements", what, n, len(stmts))
		}
	}

	log.take()
	res := e.db.Model(&KeyChild{}).Where("id > ?", 0).Update("name", "u")
	must(t, res.Error)
	setBased("Update")
	if c := outbox(); res.RowsAffected != n || c != n {
		t.Errorf("Update: %d rows, %d events; want %d", res.RowsAffected, c, n)
	}

	// An upsert of every parent, by its unique code (each row's values
	// change: updated), and of n new ones (inserted).
	rows := make([]KeyParent, 0, 2*n)
	for i := 1; i <= 2*n; i++ {
		rows = append(rows, KeyParent{Name: "q", Code: fmt.Sprint("c", i)})
	}
	log.take()
	must(t, e.db.Clauses(clause.OnConflict{DoUpdates: clause.AssignmentColumns([]string{"name"})}).CreateInBatches(&rows, 2*n).Error)
	setBased("upsert", "INSERT INTO `key_parents`")
	if c := outbox(); c != 2*n {
		t.Errorf("upsert: %d events, want %d", c, 2*n)
	}

	log.take()
	res = e.db.Where("id > ?", 0).Delete(&KeyParent{})
	must(t, res.Error)
	setBased("Delete with a cascade")
	var children int
	must(t, e.sql.QueryRow("SELECT COUNT(*) FROM key_children").Scan(&children))
	if c := outbox(); res.RowsAffected != 2*n || c != 3*n || children != 0 {
		t.Errorf("Delete: %d parents, %d events, %d children left; want %d, %d, 0", res.RowsAffected, c, children, 2*n, 3*n)
	}
}

// TestMySQLBulkWriteLocksOnlyItsRows: while a transaction holds a
// captured bulk DELETE of some parents open — their children read FOR
// UPDATE by the parents' keys before it, for the cascade — another
// transaction locks a row of each table outside that set at once (NOWAIT
// fails rather than wait): the plugin's locked reads by a set of keys
// reach the rows by index and lock them alone, no scan of the table. The
// rows inside the set are locked (the same NOWAIT fails), which shows
// that the probe can see a lock.
func TestMySQLBulkWriteLocksOnlyItsRows(t *testing.T) {
	if testing.Short() {
		t.Skip("server test")
	}
	t.Parallel()
	const n = 2000
	e := mysqlEnv(t, false, &KeyParent{}, &KeyChild{})
	var ps, cs []string
	for i := 1; i <= n; i++ {
		ps = append(ps, fmt.Sprintf("(%d, 'p', 'c%d')", i, i))
		cs = append(cs, fmt.Sprintf("(%d, %d, 'k')", i, i))
	}
	_, err := e.sql.Exec("INSERT INTO key_parents (id, name, code) VALUES " + strings.Join(ps, ", "))
	must(t, err)
	_, err = e.sql.Exec("INSERT INTO key_children (id, parent_id, name) VALUES " + strings.Join(cs, ", "))
	must(t, err)
	_, err = e.sql.Exec("ANALYZE TABLE key_parents, key_children")
	must(t, err)

	tx := e.db.Begin()
	must(t, tx.Error)
	defer tx.Rollback()
	res := tx.Where("id <= ?", n/4).Delete(&KeyParent{})
	must(t, res.Error)
	if res.RowsAffected != n/4 {
		t.Fatalf("deleted %d parents, want %d", res.RowsAffected, n/4)
	}
	// The update of rows reached by key after the write (not locked by the
	// read, but by the write): an UPDATE of other children, captured.
	res = tx.Model(&KeyChild{}).Where("id > ? AND id <= ?", n/2, n/2+n/4).Update("name", "u")
	must(t, res.Error)

	ctx := context.Background()
	probe := func(q string, id int) error {
		conn, err := e.sql.Conn(ctx)
		must(t, err)
		defer conn.Close()
		ptx, err := conn.BeginTx(ctx, nil)
		must(t, err)
		defer func() { _ = ptx.Rollback() }()
		var got int
		return ptx.QueryRowContext(ctx, q, id).Scan(&got)
	}
	for _, c := range []struct {
		q      string
		id     int
		locked bool
	}{
		{"SELECT id FROM key_children WHERE id = ? FOR UPDATE NOWAIT", n - 1, false},
		{"SELECT id FROM key_parents WHERE id = ? FOR UPDATE NOWAIT", n - 1, false},
		{"SELECT id FROM key_children WHERE id = ? FOR UPDATE NOWAIT", n/2 - 10, false},
		{"SELECT id FROM key_children WHERE id = ? FOR UPDATE NOWAIT", 10, true},
		{"SELECT id FROM key_children WHERE id = ? FOR UPDATE NOWAIT", n/2 + 10, true},
	} {
		err := probe(c.q, c.id)
		var me *gomysql.MySQLError
		lockErr := errors.As(err, &me) && (me.Number == 1205 || me.Number == 3572 || me.Number == 1213)
		switch {
		case c.locked && !lockErr:
			t.Errorf("%s [%d]: %v, want the row locked by the open transaction", c.q, c.id, err)
		case !c.locked && err != nil:
			t.Errorf("%s [%d]: %v: a row outside the write's set is locked", c.q, c.id, err)
		}
	}
}
