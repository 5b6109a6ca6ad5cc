package gormcapture_test

import (
	"context"
	"database/sql"
	"regexp"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
)

// Varied has a column of every type a fused insert renders in SQL.
type Varied struct {
	ID    int64
	Name  string
	Note  *string
	Flag  bool
	N16   int16 `gorm:"type:smallint"`
	N32   int32
	U     uuid.UUID       `gorm:"type:uuid"`
	S     string          `gorm:"type:uuid"`
	Fee   decimal.Decimal `gorm:"type:numeric(12,3)"`
	Price string          `gorm:"type:numeric(10,2)"`
	At    time.Time
	Naive time.Time `gorm:"type:timestamp"`
	Ch    string    `gorm:"type:char(6)"`
	VC    string    `gorm:"type:varchar(40)"`
	NS    sql.NullString
	NI    sql.NullInt64
	NB    sql.NullBool
}

// Coded's key is given by the writer, not generated: its events' topic and
// ordering key are known before the insert.
type Coded struct {
	Code  string `gorm:"primaryKey"`
	Label string
}

type headersKey struct{}

// A fused single-row create (one statement, its event's envelope built by
// PostgreSQL from the stored row) writes the very bytes the Go path
// writes: the same rows, created on a second database whose capture has
// an Extend (which the fused insert cannot run), give events equal byte
// for byte but for occurred_at — topic, payload, headers and ordering key.
// The rows' strings hold what JSON escapes (quotes, backslashes, control
// characters, U+2028 and U+2029) and what it does not (é, emoji, <&>);
// some writes carry headers from the context, so both forms of the
// statement (with and without headers) are judged.
func TestFusedCreateBytes(t *testing.T) {
	ctxHeaders := func(ctx context.Context) map[string]string {
		if v, _ := ctx.Value(headersKey{}).(string); v != "" {
			return map[string]string{"traceparent": v}
		}
		return nil
	}
	t.Cleanup(envelope.SetContextHeaders(ctxHeaders))

	fusedDB, fusedLog := countingDB(t, envelope.Postgres)
	goDB, goLog := countingDB(t, envelope.Postgres)
	must(t, fusedDB.AutoMigrate(&Varied{}, &Coded{}))
	must(t, goDB.AutoMigrate(&Varied{}, &Coded{}))
	fused, viaGo := gormcapture.New(gormcapture.Config{}), gormcapture.New(gormcapture.Config{})
	must(t, fusedDB.Use(fused))
	must(t, goDB.Use(viaGo))
	must(t, fused.Capture(&Varied{}, envelope.Options{}))
	noExtension := func(context.Context, envelope.Change) (*envelope.Extension, error) { return nil, nil }
	must(t, viaGo.Capture(&Varied{}, envelope.Options{Extend: noExtension}))
	codedOptions := envelope.Options{Topic: "coded.{pk}", OrderingKey: "{table}"}
	must(t, fused.Capture(&Coded{}, codedOptions))
	codedOptions.Extend = noExtension
	must(t, viaGo.Capture(&Coded{}, codedOptions))

	note := "quote \" back\\slash \u2028 line \u2029 para \x01\x1f\n\t é 😀 <&> ' $1"
	at := time.Date(2026, 12, 7, 10, 20, 30, 123456789, time.UTC)
	rows := []Varied{
		{Name: note, Note: &note, Flag: true, N16: -32768, N32: 2147483647, U: uuid.MustParse("01a24fff-44c1-7077-8623-14a73859454c"),
			S: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", Fee: decimal.RequireFromString("-1.0005"), Price: "12.5", At: at, Naive: at,
			Ch: "ab", VC: "\u2029", NS: sql.NullString{String: note, Valid: true}, NI: sql.NullInt64{Int64: -9223372036854775808, Valid: true},
			NB: sql.NullBool{Bool: false, Valid: true}},
		{Name: "", S: "00000000-0000-0000-0000-000000000000", Fee: decimal.Zero, Price: "0", At: at.Add(-time.Hour * 24 * 365 * 30), Naive: time.Date(1999, 1, 1, 0, 0, 0, 0, time.UTC)},
		{Name: "plain", S: "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", Fee: decimal.RequireFromString("99999999.999"), Price: "-0.01", At: at.Truncate(time.Second), Naive: at.Truncate(time.Millisecond), Ch: "αβγδεζ"},
	}
	for i, r := range rows {
		ctx := context.Background()
		if i == 1 {
			ctx = context.WithValue(ctx, headersKey{}, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		}
		for j := range 2 { // the second of each shape runs the cached statement
			fr, gr := r, r
			stmts := fusedLog.record(func() { must(t, fusedDB.WithContext(ctx).Create(&fr).Error) })
			if k := kinds(stmts); i+j > 0 && !slices.Equal(k, []string{"WITH"}) {
				t.Fatalf("row %d: the captured database ran %q, want one fused statement", i, k)
			}
			stmts = goLog.record(func() { must(t, goDB.WithContext(ctx).Create(&gr).Error) })
			if k := kinds(stmts); slices.Contains(k, "WITH") {
				t.Fatalf("row %d: the database with Extend ran %q, want the Go path", i, k)
			}
			if fr.ID != gr.ID {
				t.Fatalf("row %d: ids %d and %d", i, fr.ID, gr.ID)
			}
		}
	}
	for _, code := range []string{"a", "it's \\ \u2028"} {
		c := Coded{Code: code, Label: note}
		stmts := fusedLog.record(func() { must(t, fusedDB.Create(&c).Error) })
		// The first insert of a table learns its column types first (a SELECT).
		if k := slices.DeleteFunc(kinds(stmts), func(k string) bool { return k == "SELECT" }); !slices.Equal(k, []string{"WITH"}) {
			t.Fatalf("Coded %q: the captured database ran %q, want one fused statement", code, k)
		}
		must(t, goDB.Create(&Coded{Code: code, Label: note}).Error)
	}

	occurred := regexp.MustCompile(`"occurred_at":"[^"]*"`)
	events := func(db interface {
		Query(string, ...any) (*sql.Rows, error)
	}) [][4]string {
		rs, err := db.Query(`SELECT topic, payload::text, headers::text, COALESCE(ordering_key, '') FROM herald_outbox ORDER BY sequence`)
		must(t, err)
		defer rs.Close()
		var out [][4]string
		for rs.Next() {
			var e [4]string
			must(t, rs.Scan(&e[0], &e[1], &e[2], &e[3]))
			e[1] = occurred.ReplaceAllString(e[1], `"occurred_at":"…"`)
			out = append(out, e)
		}
		must(t, rs.Err())
		return out
	}
	fusedSQL, err := fusedDB.DB()
	must(t, err)
	goSQL, err := goDB.DB()
	must(t, err)
	got, want := events(fusedSQL), events(goSQL)
	if len(got) != 2*len(rows)+2 || len(want) != len(got) {
		t.Fatalf("%d fused events and %d from the Go path, want %d each", len(got), len(want), 2*len(rows)+2)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("event %d:\nfused  %q\nGo     %q", i+1, got[i], want[i])
		}
	}
	if got[2][2] == "{}" || got[0][2] != "{}" {
		t.Errorf("headers %q and %q: want the second row's events to carry the context's", got[0][2], got[2][2])
	}
}
