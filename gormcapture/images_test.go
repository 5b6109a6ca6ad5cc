package gormcapture_test

import (
	"fmt"
	"sort"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
)

// What events hold: the rows as the database stored them, in one JSON form
// whatever the path that wrote them.

// An UPDATE with clause.Returning that moves rows to new primary keys
// writes their events, with the rows as they are now; the caller gets the
// returned rows as without the plugin.
func TestReturningUpdateMovesKey(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		for _, mode := range []envelope.PayloadMode{envelope.After, envelope.BeforeAndAfter} {
			e := newEnv(t, d, nil, gormcapture.Config{}, &Tag{})
			must(t, e.plugin.Capture(&Tag{}, envelope.Options{Payload: mode}))
			must(t, e.db.Create(&[]Tag{{Code: "a", Label: "A"}, {Code: "b", Label: "B"}, {Code: "c", Label: "C"}}).Error)
			clearEvents(t, e)

			var out []Tag
			tx := e.db.Model(&out).Clauses(clause.Returning{}).Where("code = ?", "a").Update("code", "z")
			must(t, tx.Error)
			if tx.RowsAffected != 1 || fmt.Sprint(out) != "[{z A}]" {
				t.Errorf("%s: RowsAffected %d, returned %v; want 1, [{z A}]", mode, tx.RowsAffected, out)
			}
			evs := e.events(t)
			if len(evs) != 1 || evs[0].Payload["pk"] != "z" || evs[0].Payload["after"].(map[string]any)["code"] != "z" {
				t.Fatalf("%s: events %s, want one for z", mode, dump(evs))
			}
			if b, _ := evs[0].Payload["before"].(map[string]any); mode == envelope.BeforeAndAfter && b["code"] != "a" {
				t.Errorf("%s: before %v, want code a", mode, b)
			}
			if mode == envelope.After {
				// Several rows at once, with an expression.
				clearEvents(t, e)
				var many []Tag
				tx = e.db.Model(&many).Clauses(clause.Returning{Columns: []clause.Column{{Name: "code"}}}).
					Where("code IN ?", []string{"b", "c"}).Update("code", gorm.Expr("code || 'x'"))
				must(t, tx.Error)
				codes := []string{}
				for _, m := range many {
					codes = append(codes, m.Code+m.Label)
				}
				sort.Strings(codes)
				if tx.RowsAffected != 2 || fmt.Sprint(codes) != "[bx cx]" {
					t.Errorf("RowsAffected %d, returned %v; want 2, [bx cx] (only code returned)", tx.RowsAffected, codes)
				}
				wantLines(t, e.events(t), "tag.updated bx [code]", "tag.updated cx [code]")
			}
		}
	})
}
