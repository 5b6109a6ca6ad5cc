package entcapture_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	gomysql "github.com/go-sql-driver/mysql"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
	cc "github.com/heraldgo/herald/internal/capturecases"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent/reader"
	"github.com/heraldgo/herald/internal/capturecases/entcc/ent/tag"
	"github.com/heraldgo/herald/internal/testkit"
)

// TestMySQLUpsertClassified: on MySQL (MariaDB here), where an upsert is
// INSERT … ON DUPLICATE KEY UPDATE with no RETURNING, each row is
// classified from a locked read before the statement and a read after it:
// a row whose conflict key was there is updated (with the row it
// replaced in BeforeAndAfter), skipped under DoNothing and Ignore (an
// update of every column to itself), and a new key is inserted with the
// id the database gave it. Single creates and bulks, with and without
// client.Tx.
func TestMySQLUpsertClassified(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	type upsertCase struct {
		name string
		run  func(c conn) error
	}
	cases := []upsertCase{
		{"OnConflictColumns.UpdateNewValues, bulk", func(c conn) error {
			return c.Reader.CreateBulk(
				c.Reader.Create().SetName("Bob").SetEmail("b@x"), // updated
				c.Reader.Create().SetName("Dot").SetEmail("d@x"), // updated
				c.Reader.Create().SetName("Cid").SetEmail("c@x"), // inserted
				c.Reader.Create().SetName("Eve").SetEmail("e@x"), // inserted
			).OnConflictColumns(reader.FieldEmail).UpdateNewValues().Exec(ctx)
		}},
		{"OnConflictColumns.UpdateNewValues, single, updated", func(c conn) error {
			return c.Reader.Create().SetName("Bob").SetEmail("b@x").OnConflictColumns(reader.FieldEmail).UpdateNewValues().Exec(ctx)
		}},
		{"OnConflictColumns.UpdateNewValues, single, inserted", func(c conn) error {
			return c.Reader.Create().SetName("Cid").SetEmail("c@x").OnConflictColumns(reader.FieldEmail).UpdateNewValues().Exec(ctx)
		}},
		{"OnConflictColumns.Update of a column", func(c conn) error {
			return c.Reader.Create().SetName("Bob").SetEmail("b@x").OnConflictColumns(reader.FieldEmail).
				Update(func(u *ent.ReaderUpsert) { u.SetName("Bob!") }).Exec(ctx)
		}},
		{"OnConflictColumns.DoNothing, bulk", func(c conn) error {
			return c.Reader.CreateBulk(
				c.Reader.Create().SetName("Ann").SetEmail("a@x"), // inserted
				c.Reader.Create().SetName("Bob").SetEmail("b@x"), // skipped
			).OnConflictColumns(reader.FieldEmail).DoNothing().Exec(ctx)
		}},
		{"OnConflictColumns.Ignore, bulk", func(c conn) error {
			return c.Reader.CreateBulk(
				c.Reader.Create().SetName("Ann").SetEmail("a@x"), // inserted
				c.Reader.Create().SetName("Bob").SetEmail("b@x"), // skipped
			).OnConflictColumns(reader.FieldEmail).Ignore().Exec(ctx)
		}},
		{"OnConflict().UpdateNewValues by id, bulk", func(c conn) error {
			return c.Reader.CreateBulk(
				c.Reader.Create().SetID(10).SetName("Bea").SetEmail("b@x"), // updated
				c.Reader.Create().SetID(30).SetName("Fay").SetEmail("f@x"), // inserted
			).OnConflict().UpdateNewValues().Exec(ctx)
		}},
	}
	for _, mode := range []envelope.PayloadMode{envelope.After, envelope.BeforeAndAfter} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, envelope.MySQL, entcapture.Config{Options: map[string]envelope.Options{"Reader": {Payload: mode}}})
			_, err := e.db.Exec(`CREATE UNIQUE INDEX readers_email ON readers (email)`)
			must(t, err)
			for _, uc := range cases {
				for _, inTx := range []bool{false, true} {
					name := uc.name
					if inTx {
						name += "/in Tx"
					}
					t.Run(name, func(t *testing.T) {
						for _, q := range []string{`DELETE FROM readers`, `INSERT INTO readers (id, name, email) VALUES (10, 'Bee', 'b@x'), (20, 'Dee', 'd@x')`, `DELETE FROM herald_outbox`} {
							_, err := e.db.Exec(q)
							must(t, err)
						}
						before := readerRows(t, e)
						c := clientConn(e.client)
						var tx *ent.Tx
						if inTx {
							tx, err = e.client.Tx(ctx)
							must(t, err)
							c = txConn(tx)
						}
						err := uc.run(c)
						if tx != nil {
							if err != nil {
								_ = tx.Rollback()
							} else {
								err = tx.Commit()
							}
						}
						must(t, err)
						checkReaderEvents(t, e, mode, before, readerRows(t, e))
					})
				}
			}
			t.Run("refused", func(t *testing.T) {
				err := e.client.Reader.Create().SetName("Bob").SetEmail("b@x").OnConflict().UpdateNewValues().Exec(ctx)
				if !errors.Is(err, envelope.ErrUnsupported) {
					t.Errorf("OnConflict() without columns or ids: err %v, want ErrUnsupported", err)
				}
				err = e.client.Reader.Create().SetName("Bob").SetEmail("b@x").
					OnConflict(entsql.ConflictColumns(reader.FieldEmail), entsql.UpdateWhere(entsql.NEQ(reader.FieldName, "Dee"))).UpdateNewValues().Exec(ctx)
				if !errors.Is(err, envelope.ErrUnsupported) {
					t.Errorf("UpdateWhere: err %v, want ErrUnsupported", err)
				}
			})
		})
	}
}

// TestMySQLConcurrentUpsertOfOneNewKey: two transactions upsert one key
// that no row holds. The first inserts it and stays open; the second's
// locked read waits for it (InnoDB's lock on the new row), and once the
// first commits, reads the committed row: its event is an update of that
// row, with it as the before image — not a second "inserted".
func TestMySQLConcurrentUpsertOfOneNewKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, envelope.MySQL, entcapture.Config{Options: map[string]envelope.Options{"Reader": {Payload: envelope.BeforeAndAfter}}})
	_, err := e.db.Exec(`CREATE UNIQUE INDEX readers_email ON readers (email)`)
	must(t, err)
	upsert := func(c conn, name string) error {
		return c.Reader.Create().SetName(name).SetEmail("k@x").OnConflictColumns(reader.FieldEmail).UpdateNewValues().Exec(ctx)
	}
	tx1, err := e.client.Tx(ctx)
	must(t, err)
	must(t, upsert(txConn(tx1), "First"))
	done := make(chan error, 1)
	go func() {
		tx2, err := e.client.Tx(ctx)
		if err != nil {
			done <- err
			return
		}
		if err := upsert(txConn(tx2), "Second"); err != nil {
			_ = tx2.Rollback()
			done <- err
			return
		}
		done <- tx2.Commit()
	}()
	// The second waits on the first's row lock. Watch the server's lock
	// waits and the second transaction at once: if it ends before it is
	// seen waiting, its outcome says why.
	var (
		finished bool
		second   error
		lastErr  error
	)
	waited := testkit.WaitFor(2*time.Minute, func() bool {
		select {
		case second = <-done:
			finished = true
			return true
		default:
		}
		// Waiting: in InnoDB's lock wait, or any other wait that keeps a
		// statement of this database running for a second or more (a
		// locked read of one row takes microseconds unblocked). A
		// prepared statement runs as COMMAND 'Execute', and MariaDB 10.11
		// was seen listing the waiting transaction nowhere in INNODB_TRX.
		var n int
		lastErr = e.db.QueryRow(`SELECT
			(SELECT COUNT(*) FROM information_schema.INNODB_TRX t JOIN information_schema.PROCESSLIST p ON p.ID = t.trx_mysql_thread_id
				WHERE t.trx_state = 'LOCK WAIT' AND p.DB = DATABASE())
			+ (SELECT COUNT(*) FROM information_schema.PROCESSLIST
				WHERE DB = DATABASE() AND ID <> CONNECTION_ID() AND COMMAND IN ('Query', 'Execute') AND TIME >= 1)`).Scan(&n)
		return lastErr == nil && n > 0
	})
	switch {
	case finished:
		_ = tx1.Rollback()
		t.Fatalf("the second upsert ended (err %v) while the first, holding the key, was still open: it never waited for the first's lock", second)
	case !waited:
		_ = tx1.Rollback()
		t.Fatalf("the second upsert was not seen waiting for the first's lock within 2 minutes (last look at information_schema: err %v); connections: %q", lastErr, connections(e.db))
	}
	must(t, tx1.Commit())
	must(t, <-done)
	var ops []string
	for _, ev := range e.events(t) {
		p, err := cc.Decode(ev.Payload)
		must(t, err)
		b, _ := p["before"].(map[string]any)
		a, _ := p["after"].(map[string]any)
		ops = append(ops, fmt.Sprintf("%s %v→%v", p["operation"], nameOf(b), nameOf(a)))
	}
	if want := "[inserted <nil>→First updated First→Second]"; fmt.Sprint(ops) != want {
		t.Errorf("events %v, want %s", ops, want)
	}
}

// connections describes the other connections of db's database (for a
// failure message).
func connections(db *sql.DB) []string {
	rows, err := db.Query(`SELECT COMMAND, COALESCE(STATE, ''), TIME, COALESCE(LEFT(INFO, 200), '') FROM information_schema.PROCESSLIST WHERE DB = DATABASE() AND ID <> CONNECTION_ID()`)
	if err != nil {
		return []string{err.Error()}
	}
	defer rows.Close()
	var states []string
	for rows.Next() {
		var cmd, state, info string
		var secs int
		if err := rows.Scan(&cmd, &state, &secs, &info); err != nil {
			return append(states, err.Error())
		}
		states = append(states, fmt.Sprintf("%s %q %ds %q", cmd, state, secs, info))
	}
	if err := rows.Err(); err != nil {
		states = append(states, err.Error())
	}
	return states
}

func nameOf(m map[string]any) any {
	if m == nil {
		return nil
	}
	return m["name"]
}

// TestMySQLManyKeysOneParameter: a bulk update and a delete of 9,000
// rows (string keys), pinned to the rows read before them, capture every
// row (their key sets are one JSON parameter at any size:
// TestMySQLLargeCascade counts them).
func TestMySQLManyKeysOneParameter(t *testing.T) {
	if testing.Short() {
		t.Skip("server test")
	}
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, envelope.MySQL, entcapture.Config{Options: map[string]envelope.Options{"Tag": {Payload: envelope.BeforeAndAfter}}})
	const n = 9000
	for i := 0; i < n; i += 1000 {
		q := `INSERT INTO tags (code, label) VALUES `
		for j := i; j < i+1000; j++ {
			if j > i {
				q += ", "
			}
			q += fmt.Sprintf("('t%d', 'x')", j)
		}
		_, err := e.db.Exec(q)
		must(t, err)
	}
	got, err := e.client.Tag.Update().SetLabel("y").Save(ctx)
	must(t, err)
	if got != n {
		t.Fatalf("updated %d, want %d", got, n)
	}
	if c := e.count(t, "herald_outbox"); c != n {
		t.Fatalf("%d events after the update, want %d", c, n)
	}
	del, err := e.client.Tag.Delete().Exec(ctx)
	must(t, err)
	if del != n || e.count(t, "herald_outbox") != 2*n {
		t.Fatalf("deleted %d, %d events; want %d, %d", del, e.count(t, "herald_outbox"), n, 2*n)
	}
}

// TestMySQLPinnedWriteLocksOnlyItsRows: while a transaction holds a
// captured bulk update and a bulk delete open (BeforeAndAfter: each read
// FOR UPDATE by its WHERE, then run pinned to those rows — joined to
// their key set), another transaction locks a row of the same table
// outside both sets at once (NOWAIT fails rather than wait): the pinned
// writes reach their rows by the key's index, no scan that locks the
// table. A row inside a set is locked (the same NOWAIT fails), which
// shows that the probe sees locks.
func TestMySQLPinnedWriteLocksOnlyItsRows(t *testing.T) {
	if testing.Short() {
		t.Skip("server test")
	}
	t.Parallel()
	ctx := context.Background()
	e := newEnv(t, envelope.MySQL, entcapture.Config{Options: map[string]envelope.Options{"Tag": {Payload: envelope.BeforeAndAfter}}})
	const n = 4000
	code := func(i int) string { return fmt.Sprintf("t%05d", i) }
	q := `INSERT INTO tags (code, label) VALUES `
	for i := range n {
		if i > 0 {
			q += ", "
		}
		q += fmt.Sprintf("('%s', 'x')", code(i))
	}
	_, err := e.db.Exec(q)
	must(t, err)
	_, err = e.db.Exec(`ANALYZE TABLE tags`)
	must(t, err)

	tx, err := e.client.Tx(ctx)
	must(t, err)
	defer func() { _ = tx.Rollback() }()
	got, err := tx.Tag.Update().Where(tag.IDLT(code(n / 4))).SetLabel("y").Save(ctx)
	must(t, err)
	if got != n/4 {
		t.Fatalf("updated %d, want %d", got, n/4)
	}
	del, err := tx.Tag.Delete().Where(tag.IDGTE(code(n/2)), tag.IDLT(code(n/2+n/4))).Exec(ctx)
	must(t, err)
	if del != n/4 {
		t.Fatalf("deleted %d, want %d", del, n/4)
	}
	probe := func(id string) error {
		conn, err := e.db.Conn(ctx)
		must(t, err)
		defer conn.Close()
		ptx, err := conn.BeginTx(ctx, nil)
		must(t, err)
		defer func() { _ = ptx.Rollback() }()
		var got string
		return ptx.QueryRowContext(ctx, "SELECT code FROM tags WHERE code = ? FOR UPDATE NOWAIT", id).Scan(&got)
	}
	for _, c := range []struct {
		id     string
		locked bool
	}{
		{code(n - 1), false},
		{code(n/2 - 10), false},
		{code(10), true},
		{code(n/2 + 10), true},
	} {
		err := probe(c.id)
		var me *gomysql.MySQLError
		lockErr := errors.As(err, &me) && (me.Number == 1205 || me.Number == 3572)
		switch {
		case c.locked && !lockErr:
			t.Errorf("tag %s: %v, want it locked by the open transaction", c.id, err)
		case !c.locked && err != nil:
			t.Errorf("tag %s: %v: a row outside the writes' sets is locked", c.id, err)
		}
	}
}

// README.md, "ent on MySQL and MariaDB".
func readmeEntMySQL(ctx context.Context, check func(error)) *ent.Client {
	db, err := sql.Open("mysql", "root@tcp(127.0.0.1:3306)/test?parseTime=true")
	check(err)
	check(envelope.Migrate(ctx, db, envelope.MySQL, ""))
	client := ent.NewClient(ent.Driver(entcapture.Driver(entsql.OpenDB(dialect.MySQL, db))))
	return client
}

var _ = readmeEntMySQL
