package gormcapture_test

import (
	"database/sql"
	"database/sql/driver"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/shopspring/decimal"

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

type (
	// Stored has columns the database stores otherwise than the Go value
	// given (precision, scale, zone) and database defaults of non-text
	// types read into strings; every one has a rendering in SQL, so its
	// single-row creates are fused on PostgreSQL.
	Stored struct {
		ID        int64
		Name      string
		At        time.Time
		Fee       decimal.Decimal `gorm:"type:numeric(10,2)"`
		Price     string          `gorm:"type:numeric(10,2);default:2"`
		Doc       string          `gorm:"type:jsonb;default:'{\"b\": 2, \"a\": 1}'"`
		Level     *int
		Note      sql.NullString
		CreatedAt time.Time
		DeletedAt gorm.DeletedAt
	}
	// Odd has columns without a rendering in SQL: a string read from a
	// timestamptz, a serializer.
	Odd struct {
		ID    int64
		Name  string
		Stamp string `gorm:"type:timestamptz;default:'2026-01-02 03:04:05.5+00'"`
		Prefs Prefs  `gorm:"serializer:json"`
		More  *Prefs `gorm:"serializer:json"`
		Def   Prefs  `gorm:"serializer:json;default:'{\"theme\":\"d\",\"size\":1}'"`
	}
	Prefs struct {
		Theme string `json:"theme"`
		Size  int    `json:"size"`
	}
)

// Every create path's event holds the row as the database stored it, in
// the JSON form every other path gives it: the inserted image equals the
// before image the next update reads from the database, for a single-row
// create (fused on PostgreSQL, or not), a batch create, and on both
// dialects.
func TestCreateEventHoldsStoredRow(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		db, log := countingDB(t, d)
		must(t, db.AutoMigrate(&Stored{}, &Odd{}))
		p := gormcapture.New(gormcapture.Config{})
		must(t, db.Use(p))
		must(t, p.Capture(&Stored{}, envelope.Options{Payload: envelope.BeforeAndAfter}))
		must(t, p.Capture(&Odd{}, envelope.Options{Payload: envelope.BeforeAndAfter}))
		at := time.Date(2026, 10, 6, 12, 4, 5, 123456789, time.FixedZone("", 3600))
		stored := func(name string) *Stored {
			return &Stored{Name: name, At: at, Fee: decimal.RequireFromString("1.005"), Note: sql.NullString{String: name, Valid: name != "first"},
				DeletedAt: gorm.DeletedAt{Time: at, Valid: name == "batch2"}}
		}
		must(t, db.Create(stored("first")).Error) // learns the column types
		stmts := log.record(func() { must(t, db.Create(stored("fused")).Error) })
		// Doc is jsonb: its form is pgform's, in Go (Spec.Typed), so Stored's
		// creates are not fused (issue 23).
		if d == envelope.Postgres && !slices.Equal(kinds(stmts), []string{"INSERT storeds", "INSERT herald_outbox"}) {
			t.Errorf("second single-row create: %q, want the Go path's two statements", kinds(stmts))
		}
		must(t, db.Create(&[]*Stored{stored("batch1"), stored("batch2")}).Error)
		single := Odd{Name: "single"}
		must(t, db.Create(&single).Error)
		if single.Def != (Prefs{Theme: "d", Size: 1}) {
			t.Errorf("the serializer field's default was not filled in: %+v", single.Def)
		}
		must(t, db.Create(&Odd{Name: "again", More: &Prefs{}}).Error)
		must(t, db.Create(&[]Odd{{Name: "batch1"}, {Name: "batch2", Prefs: Prefs{Theme: "dark", Size: 2}}}).Error)
		must(t, db.Unscoped().Model(&Stored{}).Where("id > 0").Update("name", "x").Error)
		must(t, db.Model(&Odd{}).Where("id > 0").Update("name", "x").Error)

		var evs []event
		rows, err := db.Raw(`SELECT topic, payload FROM herald_outbox ORDER BY sequence`).Rows()
		must(t, err)
		defer rows.Close()
		for rows.Next() {
			var topic string
			var payload []byte
			must(t, rows.Scan(&topic, &payload))
			var pl map[string]any
			must(t, json.Unmarshal(payload, &pl))
			evs = append(evs, event{Topic: topic, Payload: pl})
		}
		must(t, rows.Err())
		inserted := map[string]map[string]any{}
		for _, ev := range evs {
			key := fmt.Sprintf("%s %v", ev.Payload["model"], ev.Payload["pk"])
			switch ev.Payload["operation"] {
			case "inserted":
				inserted[key] = ev.Payload["after"].(map[string]any)
			case "updated":
				before := ev.Payload["before"].(map[string]any)
				if !reflect.DeepEqual(inserted[key], before) {
					t.Errorf("%s: inserted as\n  %v\nbut the database holds\n  %v", key, inserted[key], before)
				}
			}
		}
		if len(inserted) != 8 {
			t.Fatalf("%d inserted events, want 8: %v", len(inserted), evs)
		}
		// The stored values themselves.
		wantFee, wantAt := "1.01", "2026-10-06T11:04:05.123456Z" // pgx sends microseconds
		if d == envelope.SQLite {
			// SQLite keeps what it is given: the decimal's text, the time
			// with its offset.
			wantFee, wantAt = "1.005", "2026-10-06T12:04:05.123456789+01:00"
		}
		for _, k := range []string{"Stored 1", "Stored 2", "Stored 3"} {
			a := inserted[k]
			if a["fee"] != wantFee || a["at"] != wantAt || a["price"] != "2.00" && d == envelope.Postgres || a["level"] != nil {
				t.Errorf("%s: fee %v at %v price %v level %v; want %s, %s, 2.00, nil", k, a["fee"], a["at"], a["price"], a["level"], wantFee, wantAt)
			}
			// The database default's JSON, embedded (not a string of it).
			if doc, ok := a["doc"].(map[string]any); !ok || doc["a"] != 1.0 || doc["b"] != 2.0 {
				t.Errorf("%s: doc %#v, want the stored JSON object", k, a["doc"])
			}
		}
		for _, k := range []string{"Odd 1", "Odd 3"} {
			if a := inserted[k]; a["prefs"] != `{"theme":"","size":0}` || a["more"] != nil {
				t.Errorf("%s: prefs %#v more %#v, want the zero struct serialized and null", k, a["prefs"], a["more"])
			}
		}
		if a := inserted["Odd 2"]; a["more"] != `{"theme":"","size":0}` {
			t.Errorf("Odd 2: more %#v, want the zero struct serialized", a["more"])
		}
	})
}

type (
	// Shown's Valuer renders NULL for a value it reads back with an
	// empty name (GORM's own ExampleStruct does so): the row holds bytes.
	Shown struct {
		Name, Val string
	}
	// Kept holds a Shown in a bytes column and, in a NOT NULL JSON
	// serializer column, a nil slice, which GORM's JSON serializer
	// stores as ''.
	Kept struct {
		ID   int64
		Note string
		Blob Shown     `gorm:"type:bytes"`
		Tags *[]string `gorm:"serializer:json;not null"`
	}
)

func (s Shown) Value() (driver.Value, error) {
	if s.Name == "" {
		return nil, nil
	}
	return json.Marshal(Shown{Val: s.Val}) // stores {"Name":"","Val":…}
}

func (s *Shown) Scan(src any) error {
	switch v := src.(type) {
	case []byte:
		return json.Unmarshal(v, s)
	case string:
		return json.Unmarshal([]byte(v), s)
	}
	return fmt.Errorf("Shown: cannot scan %T", src)
}

// Images are what the row holds, not what the field's Go type renders:
// a bytes column whose Valuer renders NULL for the value read back holds
// its bytes in the event (base64, as any bytes); a serializer column
// holding ” holds "" (not null).
func TestImagesAreWhatTheRowHolds(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := newEnv(t, d, nil, gormcapture.Config{CaptureAll: &envelope.Options{Payload: envelope.BeforeAndAfter}}, &Kept{})
		stored := base64.StdEncoding.EncodeToString([]byte(`{"Name":"","Val":"v"}`))
		k := Kept{Note: "a", Blob: Shown{Name: "n", Val: "v"}}
		must(t, e.db.Create(&k).Error)
		must(t, e.db.Model(&k).Update("note", "b").Error)
		must(t, e.db.Model(&Kept{}).Where("1 = 1").Update("note", "c").Error)
		evs := e.events(t)
		if len(evs) != 3 {
			t.Fatalf("events %s, want 3", dump(evs))
		}
		for i, ev := range evs {
			for _, which := range []string{"before", "after"} {
				img, ok := ev.Payload[which].(map[string]any)
				if !ok {
					continue
				}
				if img["blob"] != stored || img["tags"] != "" {
					t.Errorf("event %d (%s) %s: blob %v, tags %#v; want %s and \"\" (what the row holds)", i, ev.Topic, which, img["blob"], img["tags"], stored)
				}
			}
		}
	})
}

// Gadget holds a net.IP in a bytes column.
type Gadget struct {
	ID   int64
	Addr net.IP
}

// TestBytesGoTypeWithoutText: a net.IP field holding bytes that are no IP
// (nine bytes of text) has no IP form; its column holds the bytes, so the
// events carry them as any bytes (base64), where the capture failed the
// write before. A valid IP keeps its text.
func TestBytesGoTypeWithoutText(t *testing.T) {
	t.Parallel()
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := newEnv(t, d, nil, gormcapture.Config{CaptureAll: &envelope.Options{Payload: envelope.BeforeAndAfter}}, &Gadget{})
		g := Gadget{Addr: net.IP("127.0.0.1")}
		must(t, e.db.Create(&g).Error)
		must(t, e.db.Create(&[]Gadget{{Addr: net.IP{192, 0, 2, 1}}, {Addr: net.IP("bad")}}).Error)
		must(t, e.db.Model(&g).Update("addr", net.IP("10.0.0.1")).Error)
		must(t, e.db.Delete(&g).Error)
		var got []string
		for _, ev := range e.events(t) {
			b, _ := ev.Payload["before"].(map[string]any)
			a, _ := ev.Payload["after"].(map[string]any)
			got = append(got, fmt.Sprintf("%s %v %v", ev.Payload["operation"], b["addr"], a["addr"]))
		}
		want := []string{
			"inserted <nil> " + b64("127.0.0.1"),
			"inserted <nil> 192.0.2.1", "inserted <nil> " + b64("bad"),
			"updated " + b64("127.0.0.1") + " " + b64("10.0.0.1"),
			"deleted " + b64("10.0.0.1") + " <nil>",
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("events' addr:\n got %q\nwant %q", got, want)
		}
	})
}
