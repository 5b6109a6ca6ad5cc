package gormcapture_test

import (
	"context"
	"errors"
	"fmt"
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

// Account has a unique key besides its primary key: MySQL's ON DUPLICATE
// KEY UPDATE conflicts on either, whatever clause.OnConflict.Columns says.
type Account struct {
	ID    int64
	Email string `gorm:"size:100;uniqueIndex;not null"`
	Name  string `gorm:"not null"`
}

// mysqlEnv is a MariaDB/MySQL database with the plugin installed,
// BeforeAndAfter on every model; foundRows sets CLIENT_FOUND_ROWS.
func mysqlEnv(t *testing.T, foundRows bool, models ...any) *env {
	t.Helper()
	other, dsn := testkit.MySQL(t)
	cfg, err := gomysql.ParseDSN(dsn)
	must(t, err)
	cfg.ClientFoundRows = foundRows
	db, err := gorm.Open(mysql.Open(cfg.FormatDSN()), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	must(t, err)
	sqlDB, err := db.DB()
	must(t, err)
	t.Cleanup(func() { _ = sqlDB.Close() })
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

// TestMySQLUpsertClassification: one ON DUPLICATE KEY UPDATE of three
// rows — one new, one whose values change, one whose values do not — is
// one inserted and one updated event (with the row as it was), and no
// event for the unchanged row, which MySQL does not write; GORM's
// RowsAffected is the server's own (1 + 2 + 0, or + 1 for the unchanged
// row under CLIENT_FOUND_ROWS), as without the plugin.
func TestMySQLUpsertClassification(t *testing.T) {
	for _, found := range []bool{false, true} {
		t.Run(fmt.Sprintf("clientFoundRows=%v", found), func(t *testing.T) {
			e := mysqlEnv(t, found, &Tag{})
			must(t, e.db.Create(&[]Tag{{Code: "a", Label: "A"}, {Code: "b", Label: "B"}}).Error)
			must(t, e.db.Exec("DELETE FROM herald_outbox").Error)
			rows := []Tag{{Code: "a", Label: "A"}, {Code: "b", Label: "Bee"}, {Code: "c", Label: "Cee"}}
			res := e.db.Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "code"}}, DoUpdates: clause.AssignmentColumns([]string{"label"})}).Create(&rows)
			must(t, res.Error)
			want := int64(3)
			if found {
				want = 4
			}
			if res.RowsAffected != want {
				t.Errorf("RowsAffected = %d, want %d (the server's count)", res.RowsAffected, want)
			}
			got := e.events(t)
			if len(got) != 2 {
				t.Fatalf("%d events, want 2 (b updated, c inserted):\n%s", len(got), dump(got))
			}
			b, c := got[0].Payload, got[1].Payload
			if b["operation"] != "updated" || fmt.Sprint(b["pk"]) != "b" ||
				fmt.Sprint(b["before"]) != "map[code:b label:B]" || fmt.Sprint(b["after"]) != "map[code:b label:Bee]" {
				t.Errorf("event 0 = %v, want b updated from B to Bee", b)
			}
			if c["operation"] != "inserted" || fmt.Sprint(c["pk"]) != "c" || c["before"] != nil {
				t.Errorf("event 1 = %v, want c inserted", c)
			}
		})
	}
}

// TestMySQLUpsertOnOtherUniqueKey: MySQL's upsert conflicts on any unique
// key, not only the one GORM names: a row conflicting on the unique email
// is updated under the existing row's primary key.
func TestMySQLUpsertOnOtherUniqueKey(t *testing.T) {
	e := mysqlEnv(t, false, &Account{})
	must(t, e.db.Create(&Account{Email: "x@example.com", Name: "X"}).Error)
	must(t, e.db.Exec("DELETE FROM herald_outbox").Error)
	rows := []Account{{Email: "x@example.com", Name: "X2"}, {Email: "y@example.com", Name: "Y"}}
	must(t, e.db.Clauses(clause.OnConflict{DoUpdates: clause.AssignmentColumns([]string{"name"})}).Create(&rows).Error)
	got := e.events(t)
	if len(got) != 2 {
		t.Fatalf("%d events, want 2:\n%s", len(got), dump(got))
	}
	if p := got[0].Payload; p["operation"] != "updated" || fmt.Sprint(p["pk"]) != "1" || fmt.Sprint(p["after"]) != "map[email:x@example.com id:1 name:X2]" {
		t.Errorf("event 0 = %v, want account 1 updated to X2", p)
	}
	if p := got[1].Payload; p["operation"] != "inserted" || fmt.Sprint(p["after"]) != "map[email:y@example.com id:2 name:Y]" {
		t.Errorf("event 1 = %v, want account 2 inserted", p)
	}
}

// TestMySQLConcurrentUpsertsOfOneKey: writers upserting the same missing
// key at once, each in its own transaction. Exactly one is an insert; the
// others are updates, and in commit (sequence) order each update's before
// image is the row the previous event left — which holds only if every
// classification and image was read under the key's lock (the gap lock
// of a locking read of a missing key). A writer that deadlocks (1213:
// two gap locks, two inserts) retries, as an application would.
func TestMySQLConcurrentUpsertsOfOneKey(t *testing.T) {
	e := mysqlEnv(t, false, &Tag{})
	const writers = 8
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for attempt := 0; ; attempt++ {
				rows := []Tag{{Code: "k", Label: fmt.Sprintf("w%d", i)}}
				err := e.db.Clauses(clause.OnConflict{Columns: []clause.Column{{Name: "code"}}, DoUpdates: clause.AssignmentColumns([]string{"label"})}).Create(&rows).Error
				var me *gomysql.MySQLError
				if err != nil && errors.As(err, &me) && (me.Number == 1213 || me.Number == 1205) && attempt < 50 {
					continue
				}
				errs <- err
				return
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err)
	}
	got := e.events(t)
	if len(got) != writers {
		t.Fatalf("%d events, want %d:\n%s", len(got), writers, dump(got))
	}
	if got[0].Payload["operation"] != "inserted" {
		t.Fatalf("first event %v, want the insert", got[0].Payload)
	}
	prev := got[0].Payload["after"]
	for i, ev := range got[1:] {
		p := ev.Payload
		if p["operation"] != "updated" {
			t.Fatalf("event %d = %v, want an update", i+1, p)
		}
		if fmt.Sprint(p["before"]) != fmt.Sprint(prev) {
			t.Errorf("event %d: before %v, but the previous event left %v", i+1, p["before"], prev)
		}
		prev = p["after"]
	}
	var label string
	must(t, e.db.Raw("SELECT label FROM tags WHERE code = 'k'").Scan(&label).Error)
	if fmt.Sprint(prev) != fmt.Sprintf("map[code:k label:%s]", label) {
		t.Errorf("last event's after %v, the row holds label %s", prev, label)
	}
}

// TestMySQLBulkUpdateAndDelete: a bulk UPDATE and a bulk DELETE are
// captured from the rows their WHERE locks: an event per matched row
// (PostgreSQL's semantics: a row set to the values it holds is updated
// too), RowsAffected the server's (changed rows only).
func TestMySQLBulkUpdateAndDelete(t *testing.T) {
	e := mysqlEnv(t, false, &Loan{})
	loans := []Loan{{Status: "lent", Days: 7}, {Status: "lent", Days: 14, Returned: true}, {Status: "lost", Days: 1}}
	must(t, e.db.Create(&loans).Error)
	must(t, e.db.Exec("DELETE FROM herald_outbox").Error)
	res := e.db.Model(&Loan{}).Where("status = ?", "lent").Update("returned", true)
	must(t, res.Error)
	if res.RowsAffected != 1 {
		t.Errorf("RowsAffected = %d, want 1 (MySQL counts changed rows)", res.RowsAffected)
	}
	got := e.events(t)
	if len(got) != 2 || got[0].Payload["operation"] != "updated" || fmt.Sprint(got[0].Payload["pk"]) != "1" || fmt.Sprint(got[1].Payload["pk"]) != "2" {
		t.Fatalf("events:\n%s\nwant loans 1 and 2 updated", dump(got))
	}
	must(t, e.db.Exec("DELETE FROM herald_outbox").Error)
	res = e.db.Where("days < ?", 10).Delete(&Loan{})
	must(t, res.Error)
	got = e.events(t)
	if res.RowsAffected != 2 || len(got) != 2 || got[0].Payload["operation"] != "deleted" || fmt.Sprint(got[1].Payload["before"]) != "map[days:1 id:3 note:<nil> reader_id:<nil> returned:false status:lost]" {
		t.Fatalf("RowsAffected %d, events:\n%s\nwant loans 1 and 3 deleted", res.RowsAffected, dump(got))
	}
}

// NoReadBack's key is one GORM never reads back (`->:false`): the capture
// takes the inserted rows' keys from LAST_INSERT_ID (GORM's own TestCreate
// has such a model).
type NoReadBack struct {
	ID   int `gorm:"primaryKey;->:false"`
	Name string
}

// TestMySQLCreateKeyNotReadBack: a batch Create of a model whose key GORM
// does not read back still gets an event per row, keyed by the generated
// keys in VALUES order.
func TestMySQLCreateKeyNotReadBack(t *testing.T) {
	e := mysqlEnv(t, false, &NoReadBack{})
	must(t, e.db.Create(&[]NoReadBack{{Name: "a"}, {Name: "b"}}).Error)
	got := e.events(t)
	if len(got) != 2 || fmt.Sprint(got[0].Payload["pk"]) != "1" || fmt.Sprint(got[1].Payload["pk"]) != "2" ||
		got[1].Payload["operation"] != "inserted" {
		t.Fatalf("events:\n%s\nwant rows 1 and 2 inserted", dump(got))
	}
}
