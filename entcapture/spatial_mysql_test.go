package entcapture_test

import (
	"context"
	"strings"
	"testing"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/entcapture/internal/entspatial/ent"
	_ "github.com/heraldgo/herald/entcapture/internal/entspatial/ent/runtime"
	"github.com/heraldgo/herald/entcapture/internal/entspatial/geo"
	"github.com/heraldgo/herald/envelope"
)

// TestMySQLSpatialForms: an ent field with a MySQL spatial SchemaType —
// a field.Other whose Go type binds WKT through ST_GeomFromText (point),
// a field.Bytes holding the server's geometry bytes (linestring, and the
// generic geometry) — is GeoJSON in the events, as gormcapture's
// (gormcapture's TestMySQLSpatialForms): create, update, delete
// (BeforeAndAfter), the Go values read back as written.
func TestMySQLSpatialForms(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := openDB(t, envelope.MySQL)
	c := ent.NewClient(ent.Driver(entcapture.Driver(entsql.OpenDB(dialect.MySQL, db), entcapture.Config{})))
	createSchema(t, func(ctx context.Context) error { return c.Schema.Create(ctx) })
	wkb := func(wkt string) []byte {
		t.Helper()
		var b []byte
		must(t, db.QueryRow(`SELECT ST_GeomFromText(?)`, wkt).Scan(&b))
		return b
	}
	p, err := c.Place.Create().SetName("a").SetSpot(geo.Point{X: 1, Y: 2}).
		SetRoute(wkb("LINESTRING(0 0,1 1)")).SetShape(wkb("POLYGON((0 0,1 1,1 0,0 0))")).Save(ctx)
	must(t, err)
	must(t, c.Place.UpdateOneID(p.ID).SetSpot(geo.Point{X: 3, Y: 4.5}).Exec(ctx))
	got, err := c.Place.Get(ctx, p.ID)
	must(t, err)
	if got.Spot != (geo.Point{X: 3, Y: 4.5}) {
		t.Errorf("spot read back %+v", got.Spot)
	}
	must(t, c.Place.DeleteOneID(p.ID).Exec(ctx))

	rows, err := db.Query(`SELECT ` + payloadText(envelope.MySQL) + ` FROM herald_outbox ORDER BY sequence`)
	must(t, err)
	defer rows.Close()
	var evs []string
	for rows.Next() {
		var s string
		must(t, rows.Scan(&s))
		evs = append(evs, s)
	}
	must(t, rows.Err())
	if len(evs) != 3 {
		t.Fatalf("%d events, want 3: %q", len(evs), evs)
	}
	for i, want := range [][]string{
		{`"spot":{"type":"Point","coordinates":[1,2]}`, `"route":{"type":"LineString","coordinates":[[0,0],[1,1]]}`,
			`"shape":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,0]]]}`},
		{`"before":{`, `"spot":{"type":"Point","coordinates":[1,2]}`, `"spot":{"type":"Point","coordinates":[3,4.5]}`},
		{`"before":{`, `"spot":{"type":"Point","coordinates":[3,4.5]}`, `"shape":{"type":"Polygon"`},
	} {
		for _, w := range want {
			if !strings.Contains(evs[i], w) {
				t.Errorf("event %d lacks %s:\n %s", i, w, evs[i])
			}
		}
	}
}
