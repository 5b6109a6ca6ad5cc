package gormcapture_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
)

// SetParent and SetChild: a child row per parent, deleted by the
// database's ON DELETE CASCADE, which the plugin reads before the
// parents' DELETE by the parents' keys (integers).
type SetParent struct {
	ID       int64
	Children []SetChild `gorm:"foreignKey:ParentID;constraint:OnDelete:CASCADE"`
}

type SetChild struct {
	ID       int64
	ParentID int64 `gorm:"index"`
	Name     string
}

// SetPair has a composite key of a string and a uuid.
type SetPair struct {
	Region string    `gorm:"primaryKey;size:20"`
	Ref    uuid.UUID `gorm:"primaryKey;type:uuid"`
	Name   string
}

// SetMove is SetPair captured with the rows after the write only (an
// update moving several rows to new keys cannot pair before images).
type SetMove struct {
	Region string    `gorm:"primaryKey;size:20"`
	Ref    uuid.UUID `gorm:"primaryKey;type:uuid"`
	Name   string
}

// SetStamp has a composite key of a time and an integer.
type SetStamp struct {
	At   time.Time `gorm:"primaryKey;type:timestamp"`
	Seq  int64     `gorm:"primaryKey;autoIncrement:false"`
	Name string
}

// TestManyKeysOneParameter: on PostgreSQL and SQLite the sets of keys the
// plugin reads rows by — the children a DELETE's cascade reaches (an
// integer foreign key), the rows an UPDATE … RETURNING changed read back
// by their composite key (string and uuid; timestamp and integer), the rows an UPDATE … RETURNING moved to new keys — are one
// bind parameter whatever the number of rows (rule 5): below the plugin,
// no statement but GORM's own and the events' INSERT binds more than a
// handful, though the sets exceed the bind-parameter limits (32766 on
// SQLite; the plugin bound 30000 per statement before), and the rows and
// events are all there.
func TestManyKeysOneParameter(t *testing.T) {
	if testing.Short() {
		t.Skip("large writes")
	}
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		const n = 40000 // keys of the cascade (above both limits)
		const m = 20000 // composite keys (2m parameters as tuples)
		db, log := countingDB(t, d)
		models := []any{&SetParent{}, &SetChild{}, &SetPair{}, &SetMove{}, &SetStamp{}}
		must(t, db.AutoMigrate(models...))
		p := gormcapture.New(gormcapture.Config{Models: models})
		for _, mdl := range models {
			opts := envelope.Options{Payload: envelope.BeforeAndAfter}
			if _, ok := mdl.(*SetMove); ok {
				opts = envelope.Options{}
			}
			must(t, p.Capture(mdl, opts))
		}
		must(t, db.Use(p))
		sqlDB, err := db.DB()
		must(t, err)
		raw := func(q string) {
			t.Helper()
			_, err := sqlDB.Exec(q)
			must(t, err)
		}
		count := func(q string) int {
			t.Helper()
			var c int
			must(t, sqlDB.QueryRow(q).Scan(&c))
			return c
		}
		outbox := func() int {
			t.Helper()
			c := count("SELECT COUNT(*) FROM herald_outbox")
			raw("DELETE FROM herald_outbox")
			return c
		}
		series := func(k int) string {
			return fmt.Sprintf("WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g+1 FROM s WHERE g < %d) SELECT g", k)
		}
		raw("INSERT INTO set_parents (id) " + series(n) + " FROM s")
		raw("INSERT INTO set_children (id, parent_id, name) " + series(n) + ", g, 'k' FROM s")
		pairs := func(i int) (string, string) {
			return fmt.Sprintf("r%d", i%7), fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i)
		}
		for lo := 0; lo < m; lo += 1000 {
			var vs []string
			for i := lo; i < lo+1000; i++ {
				r, u := pairs(i)
				vs = append(vs, fmt.Sprintf("('%s', '%s', 'a')", r, u))
			}
			raw("INSERT INTO set_pairs (region, ref, name) VALUES " + strings.Join(vs, ", "))
			raw("INSERT INTO set_moves (region, ref, name) VALUES " + strings.Join(vs, ", "))
		}
		// setBased fails a statement binding more than a few parameters
		// that is neither the caller's (prefix) nor the events' INSERT,
		// and more than a few statements besides the events' INSERTs.
		setBased := func(what string, stmts []string, args []int, gorms ...string) {
			t.Helper()
			others := 0
			for i, s := range stmts {
				own := strings.Contains(s, "herald_outbox")
				if !own {
					others++
				}
				for _, g := range gorms {
					own = own || strings.HasPrefix(s, g)
				}
				if args[i] > 16 && !own {
					t.Errorf("%s: a statement binds %d parameters: %.300s", what, args[i], s)
				}
			}
			if others > 12 {
				t.Errorf("%s: %d statements\n%s", what, len(stmts), short(stmts))
			}
		}

		var res *gorm.DB
		stmts, args := log.recordArgs(func() { res = db.Where("id > ?", 0).Delete(&SetParent{}) })
		must(t, res.Error)
		setBased("Delete with a cascade", stmts, args)
		if c, left := outbox(), count("SELECT COUNT(*) FROM set_children"); res.RowsAffected != n || c != 2*n || left != 0 {
			t.Errorf("Delete: %d parents, %d events, %d children left; want %d, %d, 0", res.RowsAffected, c, left, n, 2*n)
		}

		// The rows an UPDATE … RETURNING changed, read again by key.
		var got []SetPair
		stmts, args = log.recordArgs(func() {
			res = db.Model(&got).Clauses(clause.Returning{}).Where("name = ?", "a").Update("name", "b")
		})
		must(t, res.Error)
		setBased("Update … RETURNING by a string and uuid key", stmts, args)
		// The after images are the rows as updated, found by their keys.
		afterB := count(`SELECT COUNT(*) FROM herald_outbox WHERE CAST(payload AS TEXT) LIKE '%"b"%'`)
		evs := outbox()
		if res.RowsAffected != m || len(got) != m || evs != m || afterB != m {
			t.Errorf("Update: %d rows, %d returned, %d events, %d with the new value; want %d", res.RowsAffected, len(got), evs, afterB, m)
		}

		// An UPDATE … RETURNING that moves the rows to new keys: the rows
		// read by their new keys.
		var moved []SetMove
		stmts, args = log.recordArgs(func() {
			res = db.Model(&moved).Clauses(clause.Returning{}).Where("name = ?", "a").Update("region", gorm.Expr("region || 'x'"))
		})
		must(t, res.Error)
		setBased("Update … RETURNING that moves the keys", stmts, args)
		evs = outbox()
		if res.RowsAffected != m || len(moved) != m || evs != m || !strings.HasSuffix(moved[0].Region, "x") {
			t.Errorf("moving Update: %d rows, %d returned (first %+v), %d events; want %d", res.RowsAffected, len(moved), moved[:min(1, len(moved))], evs, m)
		}

		// A timestamp and an integer: on PostgreSQL the JSON text of the
		// time is read as the column's type (the wall clock, as pgx binds
		// it); on SQLite it is the text the driver writes for a time
		// (mattn's layout), which the rows hold.
		if d == envelope.Postgres {
			raw(fmt.Sprintf("INSERT INTO set_stamps (at, seq, name) SELECT TIMESTAMP '2024-03-01 10:00:00.123456' + g * INTERVAL '1 second', g, 'a' FROM generate_series(1, %d) g", m))
		} else {
			base := time.Date(2024, 3, 1, 10, 0, 0, 123456000, time.UTC)
			for lo := 1; lo <= m; lo += 1000 {
				var vs []string
				for i := lo; i < lo+1000; i++ {
					vs = append(vs, fmt.Sprintf("('%s', %d, 'a')", base.Add(time.Duration(i)*time.Second).Format("2006-01-02 15:04:05.999999999-07:00"), i))
				}
				raw("INSERT INTO set_stamps (at, seq, name) VALUES " + strings.Join(vs, ", "))
			}
		}
		var stamps []SetStamp
		stmts, args = log.recordArgs(func() {
			res = db.Model(&stamps).Clauses(clause.Returning{}).Where("name = ?", "a").Update("name", "b")
		})
		must(t, res.Error)
		setBased("Update … RETURNING by a timestamp and integer key", stmts, args)
		afterB = count(`SELECT COUNT(*) FROM herald_outbox WHERE CAST(payload AS TEXT) LIKE '%"b"%'`)
		evs = outbox()
		if res.RowsAffected != m || len(stamps) != m || evs != m || afterB != m {
			t.Errorf("Update: %d rows, %d returned, %d events, %d with the new value; want %d", res.RowsAffected, len(stamps), evs, afterB, m)
		}
	})
}
