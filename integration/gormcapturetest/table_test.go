package gormcapture_test

import (
	"context"
	"testing"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
)

// Writes that name a table, not a model: db.Table(name) with maps, and the
// map-only statements GORM builds itself (gorm.G's association updates).
// They are captured as the writes of the captured model whose table they
// name, and GORM builds them exactly as without the plugin.

type (
	// Member is captured; it has a soft-delete column and an
	// autoUpdateTime, which GORM adds to writes through the model but not
	// to writes through db.Table.
	Member struct {
		ID        int64
		Name      string
		Age       int
		UpdatedAt int64 `gorm:"autoUpdateTime"`
		DeletedAt gorm.DeletedAt
	}
	// MemberView shares Member's table; Config.Models lists Member first,
	// so the table's writes without a model are Member's.
	MemberView struct {
		ID   int64
		Name string
	}
	// Guest is not captured.
	Guest struct {
		ID   int64
		Name string
	}
)

func (MemberView) TableName() string { return "members" }

// Every kind of db.Table write to a captured model's table gets its events,
// rendered from the stored rows, in each payload mode; a bulk write costs a
// constant number of statements; an alias, a subquery or a table no
// captured model has stays uncaptured; what GORM writes is unchanged (a
// delete through db.Table is a hard delete, the caller's map is not filled
// in).
func TestTableWrites(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		for _, mode := range []envelope.PayloadMode{envelope.Keys, envelope.After, envelope.BeforeAndAfter} {
			t.Run(mode.String(), func(t *testing.T) {
				db, log := countingDB(t, d)
				must(t, db.AutoMigrate(&Member{}, &Guest{}))
				p := gormcapture.New(gormcapture.Config{Models: []any{&Member{}, &MemberView{}}})
				must(t, p.Capture(&Member{}, envelope.Options{Payload: mode})) // listed: captured before db.Use
				must(t, p.Capture(&MemberView{}, envelope.Options{Payload: mode}))
				must(t, db.Use(p))
				e := &env{name: string(d), dialect: d, db: db, plugin: p}
				sqlDB, err := db.DB()
				must(t, err)
				e.sql = sqlDB
				e.wake = &recorder{}

				row := map[string]any{"name": "ann", "age": 30}
				must(t, db.Table("members").Create(row).Error)
				// GORM sets "@id" on SQLite (LastInsertId), nothing on
				// PostgreSQL; the plugin's RETURNING fills in nothing else.
				if want := map[envelope.Dialect]int{envelope.SQLite: 3, envelope.Postgres: 2}[d]; len(row) != want || (d == envelope.SQLite && row["@id"] != int64(1)) {
					t.Errorf("the caller's map: %v", row)
				}
				rows := []map[string]any{{"name": "bob", "age": 40}, {"name": "cy", "age": 50}}
				must(t, db.Table("members").Create(&rows).Error)
				wantLines(t, e.events(t), "member.inserted 1", "member.inserted 2", "member.inserted 3")
				if mode != envelope.Keys {
					if a := afterOf(t, e.events(t), 2); a["name"] != "bob" || a["age"] != float64(40) || a["updated_at"] != nil {
						t.Errorf("after image of member 2: %v", a)
					}
				}
				clearEvents(t, e)

				// A bulk update: GORM's own UPDATE (no updated_at: db.Table
				// does not add it), its events in a constant number of
				// statements.
				var tx *gorm.DB
				stmts := log.record(func() { tx = db.Table("members").Where("1 = 1").Update("age", gorm.Expr("age + 1")) })
				must(t, tx.Error)
				if tx.RowsAffected != 3 {
					t.Errorf("RowsAffected %d, want 3", tx.RowsAffected)
				}
				if n := countKind(kinds(stmts), "INSERT herald_outbox"); len(stmts) > 5 || n > 1 {
					t.Errorf("bulk update of 3 rows ran %d statements (%d event INSERTs):\n%s", len(stmts), n, short(stmts))
				}
				wantLines(t, e.events(t), "member.updated 1 [age]", "member.updated 2 [age]", "member.updated 3 [age]")
				evs := e.events(t)
				if mode != envelope.Keys {
					if a := afterOf(t, evs, 3); a["age"] != float64(51) || a["updated_at"] != nil {
						t.Errorf("after image of member 3: %v (want age 51, updated_at untouched: null)", a)
					}
				}
				if mode == envelope.BeforeAndAfter {
					if b := beforeOf(t, evs, 3); b["age"] != float64(50) {
						t.Errorf("before image of member 3: %v, want age 50", b)
					}
				}
				clearEvents(t, e)

				must(t, db.Table("members").Where("id = ?", 1).UpdateColumn("name", "anne").Error)
				must(t, db.Table("members").Where("id = ?", 2).Updates(map[string]any{"name": "rob", "age": 41}).Error)
				wantLines(t, e.events(t), "member.updated 1 [name]", "member.updated 2 [name age]")
				clearEvents(t, e)

				// A delete through db.Table is a hard delete, as without
				// the plugin.
				must(t, db.Table("members").Where("id = ?", 3).Delete(nil).Error)
				wantLines(t, e.events(t), "member.deleted 3")
				var left int64
				must(t, db.Unscoped().Model(&Member{}).Where("id = ?", 3).Count(&left).Error)
				if left != 0 {
					t.Errorf("db.Table delete left the row (soft delete?)")
				}
				clearEvents(t, e)

				// Not captured: an alias, a table no captured model has.
				if d == envelope.Postgres { // SQLite has no UPDATE with an alias
					must(t, db.Table("members m").Where("m.id = ?", 1).Update("age", 1).Error)
					must(t, db.Table("members AS m").Where("m.id = ?", 1).Update("age", 1).Error)
				}
				must(t, db.Table("guests").Create(map[string]any{"name": "g"}).Error)
				must(t, db.Table("guests").Where("1 = 1").Update("name", "h").Error)
				if evs := e.events(t); len(evs) != 0 {
					t.Errorf("events for uncaptured writes:\n%s", dump(evs))
				}
			})
		}
	})
}

func countKind(ks []string, k string) int {
	n := 0
	for _, x := range ks {
		if x == k {
			n++
		}
	}
	return n
}

func imageOf(t *testing.T, evs []event, id float64, which string) map[string]any {
	t.Helper()
	for _, ev := range evs {
		if ev.Payload["pk"] == id {
			m, _ := ev.Payload[which].(map[string]any)
			return m
		}
	}
	t.Fatalf("no event for %v in\n%s", id, dump(evs))
	return nil
}

func afterOf(t *testing.T, evs []event, id float64) map[string]any {
	t.Helper()
	return imageOf(t, evs, id, "after")
}

func beforeOf(t *testing.T, evs []event, id float64) map[string]any {
	t.Helper()
	return imageOf(t, evs, id, "before")
}

type (
	// Speaker has many Tongues through speaker_tongues.
	Speaker struct {
		ID      int64
		Name    string
		Tongues []Tongue `gorm:"many2many:speaker_tongues"`
	}
	Tongue struct {
		Code string `gorm:"primaryKey"`
		Name string
	}
)

// gorm.G's association update of a many-to-many relation builds a
// statement without a model (Table("tongues")…Updates(map)): the
// related rows it changes get their events.
func TestGenericAssociationUpdate(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := newEnv(t, d, nil, gormcapture.Config{CaptureAll: &envelope.Options{Payload: envelope.After}}, &Speaker{}, &Tongue{})
		ctx := context.Background()
		s := Speaker{Name: "sam", Tongues: []Tongue{{Code: "es", Name: "Spanish"}, {Code: "de", Name: "German"}}}
		must(t, e.db.Create(&s).Error)
		clearEvents(t, e)

		upd := clause.Association{Association: "Tongues", Type: clause.OpUpdate,
			Set:        []clause.Assignment{{Column: clause.Column{Name: "name"}, Value: "Espanol"}},
			Conditions: []clause.Expression{clause.Eq{Column: clause.Column{Name: "code"}, Value: "es"}}}
		_, err := gorm.G[Speaker](e.db).Where("id = ?", s.ID).Set(upd).Update(ctx)
		must(t, err)
		evs := e.events(t)
		wantLines(t, evs, "tongue.updated es [name]")
		if len(evs) == 1 {
			if a, _ := evs[0].Payload["after"].(map[string]any); a["name"] != "Espanol" {
				t.Errorf("after image %v, want name Espanol", a)
			}
		}
	})
}

// When two captured models share a table, its writes without a model are
// the first one's: Config.Models in order.
func TestTableSharedByTwoModels(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := newEnv(t, d, nil, gormcapture.Config{CaptureAll: &envelope.Options{Payload: envelope.Keys}}, &MemberView{}, &Member{})
		must(t, e.db.Table("members").Create(map[string]any{"name": "x"}).Error)
		evs := e.events(t)
		if len(evs) != 1 || evs[0].Payload["model"] != "MemberView" {
			t.Fatalf("events %s, want one of MemberView (listed first)", dump(evs))
		}
	})
}
