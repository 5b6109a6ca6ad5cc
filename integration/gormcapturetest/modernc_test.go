package gormcapture_test

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"
	msqlite "modernc.org/sqlite"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/internal/testkit"
)

// ModStamp has a composite key of a time and an integer, on
// modernc.org/sqlite; ModMove is the same captured with the rows after the
// write only (an update moving several rows to new keys cannot pair
// before images).
type ModStamp struct {
	At   time.Time `gorm:"primaryKey"`
	Seq  int64     `gorm:"primaryKey;autoIncrement:false"`
	Name string
}

type ModMove struct {
	At   time.Time `gorm:"primaryKey"`
	Seq  int64     `gorm:"primaryKey;autoIncrement:false"`
	Name string
}

// TestModerncTimeKeys: on modernc.org/sqlite, with its default time
// format (time.Time.String) and with _time_format=sqlite, the rows the
// plugin reads by a set of (time, integer) keys — the rows an upsert
// meets (keys from the caller's values), an UPDATE … RETURNING's rows
// read again (keys from the rows read before), the rows an UPDATE …
// RETURNING moved to new keys (keys from the rows it returned) — are
// found with the keys as ONE JSON parameter (the driver's text of each
// time, which the rows hold), for times in zones other than UTC and with
// nanoseconds: one event per row, of the right kind, with the row's
// values.
func TestModerncTimeKeys(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, dsn string }{
		{"default", ""},
		{"time_format=sqlite", "&_time_format=sqlite"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			const n = 600 // keys: 2n parameters if bound one by one
			log := &stmtLog{}
			dsn := testkit.ModerncDSN(testkit.SQLitePath(t)) + c.dsn
			sqlDB := sql.OpenDB(countingConnector{dsnConnector{dsn, &msqlite.Driver{}}, log})
			t.Cleanup(func() { _ = sqlDB.Close() })
			db, err := gorm.Open(sqlite.New(sqlite.Config{Conn: sqlDB}), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
			must(t, err)
			must(t, envelope.Migrate(context.Background(), sqlDB, envelope.SQLite, ""))
			must(t, db.AutoMigrate(&ModStamp{}, &ModMove{}))
			p := gormcapture.New(gormcapture.Config{Models: []any{&ModStamp{}, &ModMove{}}})
			must(t, p.Capture(&ModStamp{}, envelope.Options{Payload: envelope.BeforeAndAfter}))
			must(t, p.Capture(&ModMove{}, envelope.Options{}))
			must(t, db.Use(p))
			e := &env{dialect: envelope.SQLite, db: db, sql: sqlDB}

			// Two rows per time (the integer tells them apart), in +05:45
			// and -03:30, with nanoseconds.
			zones := []*time.Location{time.FixedZone("NPT", 5*3600+45*60), time.FixedZone("NST", -(3*3600 + 30*60))}
			at := func(i int) time.Time {
				return time.Date(2024, 3, 1, 10, 0, 0, 123456789, zones[i/2%2]).Add(time.Duration(i/2) * (time.Minute + time.Nanosecond))
			}
			stamps := func(lo, hi int, name string) []ModStamp {
				out := make([]ModStamp, 0, hi-lo)
				for i := lo; i < hi; i++ {
					out = append(out, ModStamp{At: at(i), Seq: int64(i), Name: name})
				}
				return out
			}
			// setBased fails a statement binding more than a few
			// parameters that is neither the caller's (prefix) nor the
			// events' INSERT, and a write that read no key set.
			setBased := func(what string, stmts []string, args []int, caller string) {
				t.Helper()
				sets := 0
				for i, s := range stmts {
					if strings.Contains(s, "json_each(") {
						sets++
					}
					own := strings.Contains(s, "herald_outbox") || (caller != "" && strings.HasPrefix(s, caller))
					if args[i] > 16 && !own {
						t.Errorf("%s: a statement binds %d parameters: %.300s", what, args[i], s)
					}
				}
				if sets == 0 {
					t.Errorf("%s: no statement reads a key set (json_each)\n%s", what, short(stmts))
				}
			}
			// check reads the events: one per row i in [lo, hi) (its key
			// (at(i), i+shift) in the after image), of kind updated below
			// mid and inserted from mid, each with the row's name after the
			// write and before it ("": no before image).
			check := func(what string, lo, mid, hi int, before, after string, shift int64) {
				t.Helper()
				evs := e.events(t)
				seen := make(map[int]bool)
				bad := 0 // events reported: a few are enough
				for _, ev := range evs {
					a, _ := ev.Payload["after"].(map[string]any)
					b, _ := ev.Payload["before"].(map[string]any)
					s, _ := a["at"].(string)
					got, err := time.Parse(time.RFC3339Nano, s)
					seq, _ := a["seq"].(float64)
					i := int(int64(seq) - shift)
					kind := "inserted"
					if i < mid {
						kind = "updated"
					}
					var wrong string
					switch {
					case err != nil || i < lo || i >= hi || !got.Equal(at(i)) || seen[i]:
						wrong = "an event of no row or of a row seen before"
					case !strings.HasSuffix(ev.Topic, "."+kind):
						wrong = "want a " + kind + " event"
					case a["name"] != after:
						wrong = fmt.Sprintf("want name %q after", after)
					case before == "" || kind == "inserted":
						if b != nil {
							wrong = "want no before image"
						}
					case b["name"] != before || b["seq"] != a["seq"] || b["at"] != a["at"]:
						wrong = fmt.Sprintf("want a before image of the same key and name %q", before)
					}
					seen[i] = true
					if wrong != "" {
						if bad++; bad <= 5 {
							t.Errorf("%s: %s: %s %v", what, wrong, ev.Topic, ev.Payload)
						}
					}
				}
				if len(evs) != hi-lo || bad > 0 {
					t.Errorf("%s: %d events, %d wrong; want %d", what, len(evs), bad, hi-lo)
				}
				must(t, db.Exec(`DELETE FROM herald_outbox`).Error)
			}

			rows := stamps(0, n, "a")
			must(t, db.Create(&rows).Error)
			check("Create", 0, 0, n, "", "a", 0)

			// An upsert of rows n/2 to 3n/2: the first half exist (met by
			// their keys as the caller gives them), the second are new.
			var res *gorm.DB
			up := stamps(n/2, n+n/2, "u")
			stmts, args := log.recordArgs(func() {
				res = db.Clauses(clause.OnConflict{
					Columns:   []clause.Column{{Name: "at"}, {Name: "seq"}},
					DoUpdates: clause.AssignmentColumns([]string{"name"}),
				}).Create(&up)
			})
			must(t, res.Error)
			setBased("upsert", stmts, args, "INSERT INTO `mod_stamps`")
			check("upsert", n/2, n, n+n/2, "a", "u", 0)

			// The rows an UPDATE … RETURNING changed, read again by key.
			var got []ModStamp
			stmts, args = log.recordArgs(func() {
				res = db.Model(&got).Clauses(clause.Returning{}).Where("name = ?", "u").Update("name", "b")
			})
			must(t, res.Error)
			setBased("Update … RETURNING", stmts, args, "")
			if res.RowsAffected != n || len(got) != n {
				t.Errorf("Update: %d rows, %d returned; want %d", res.RowsAffected, len(got), n)
			}
			check("Update … RETURNING", n/2, n+n/2, n+n/2, "u", "b", 0)

			// The rows an UPDATE … RETURNING moved to new keys (the same
			// times), read by their new keys.
			moves := make([]ModMove, n)
			for i := range moves {
				moves[i] = ModMove{At: at(i), Seq: int64(i), Name: "a"}
			}
			must(t, db.Create(&moves).Error)
			must(t, db.Exec(`DELETE FROM herald_outbox`).Error)
			var moved []ModMove
			stmts, args = log.recordArgs(func() {
				res = db.Model(&moved).Clauses(clause.Returning{}).Where("name = ?", "a").
					Updates(map[string]any{"seq": gorm.Expr("seq + ?", n), "name": "m"})
			})
			must(t, res.Error)
			setBased("Update … RETURNING that moves the keys", stmts, args, "")
			if res.RowsAffected != n || len(moved) != n || moved[0].Name != "m" || moved[0].Seq < n {
				t.Errorf("moving Update: %d rows, %d returned (first %+v); want %d", res.RowsAffected, len(moved), moved[:min(1, len(moved))], n)
			}
			check("moving Update", 0, n, n, "", "m", n)
		})
	}
}
