package pgform_test

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/heraldgo/herald/internal/pgform"
)

// wkb builds MySQL's internal geometry value: SRID 4326, then WKB in the
// byte order le says, of type typ with the given body.
type wkbBuf struct {
	b  []byte
	be bool
}

func (w *wkbBuf) u32(v uint32) *wkbBuf {
	if w.be {
		w.b = binary.BigEndian.AppendUint32(w.b, v)
	} else {
		w.b = binary.LittleEndian.AppendUint32(w.b, v)
	}
	return w
}

func (w *wkbBuf) head(typ uint32) *wkbBuf {
	if w.be {
		w.b = append(w.b, 0)
	} else {
		w.b = append(w.b, 1)
	}
	return w.u32(typ)
}

func (w *wkbBuf) pts(ps ...float64) *wkbBuf {
	for _, p := range ps {
		if w.be {
			w.b = binary.BigEndian.AppendUint64(w.b, math.Float64bits(p))
		} else {
			w.b = binary.LittleEndian.AppendUint64(w.b, math.Float64bits(p))
		}
	}
	return w
}

func srid(w *wkbBuf) []byte { return append([]byte{0xe6, 0x10, 0, 0}, w.b...) }

// TestMySQLGeometry: MySQL's and MariaDB's spatial values (SRID, then
// WKB in either byte order) are GeoJSON; a truncated value is an error
// naming the column; PostgreSQL's text of point and polygon is read as
// before; a column declared geometry is GeoJSON when it holds MySQL's
// bytes, and otherwise (PostGIS declares that name too: its hex EWKB,
// a Go type's own form) jsonform's of its Go value, as before it was
// handled (issue 23, section 1).
func TestMySQLGeometry(t *testing.T) {
	poly := (&wkbBuf{}).head(3).u32(1).u32(4).pts(0, 0, 1, 1, 1, 0, 0, 0)
	cases := []struct {
		decl string
		v    []byte
		want string
	}{
		{"point", srid((&wkbBuf{}).head(1).pts(1, 2)), `{"type":"Point","coordinates":[1,2]}`},
		{"POINT", srid((&wkbBuf{be: true}).head(1).pts(1.5, -2)), `{"type":"Point","coordinates":[1.5,-2]}`},
		{"linestring", srid((&wkbBuf{}).head(2).u32(2).pts(1, 2, 3, 4)), `{"type":"LineString","coordinates":[[1,2],[3,4]]}`},
		{"polygon", srid(poly), `{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,0]]]}`},
		{"multipoint", srid((&wkbBuf{}).head(4).u32(2).head(1).pts(1, 2).head(1).pts(3, 4)), `{"type":"MultiPoint","coordinates":[[1,2],[3,4]]}`},
		{"multipolygon", srid(func() *wkbBuf {
			w := (&wkbBuf{}).head(6).u32(1)
			w.b = append(w.b, poly.b...)
			return w
		}()), `{"type":"MultiPolygon","coordinates":[[[[0,0],[1,1],[1,0],[0,0]]]]}`},
		{"geometrycollection", srid((&wkbBuf{}).head(7).u32(2).head(1).pts(1, 2).head(2).u32(2).pts(0, 0, 1, 1)),
			`{"type":"GeometryCollection","geometries":[{"type":"Point","coordinates":[1,2]},{"type":"LineString","coordinates":[[0,0],[1,1]]}]}`},
		{"point", []byte("(1,2)"), `{"type":"Point","coordinates":[1,2]}`},
		{"multilinestring", []byte("not wkb"), `"not wkb"`},
	}
	for _, c := range cases {
		got, err := pgform.Append(nil, "spot", c.decl, c.v)
		if err != nil {
			t.Errorf("%s %x: %v", c.decl, c.v, err)
			continue
		}
		if string(got) != c.want || !json.Valid(got) {
			t.Errorf("%s %x:\n got  %s\n want %s", c.decl, c.v, got, c.want)
		}
	}
	for _, c := range []struct {
		v    any
		want string
	}{
		{srid(poly), `{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,0]]]}`},
		{string(srid((&wkbBuf{}).head(1).pts(1, 2))), `{"type":"Point","coordinates":[1,2]}`},
		{"0101000020E6100000000000000000F03F0000000000000040", `"0101000020E6100000000000000000F03F0000000000000040"`}, // PostGIS's hex EWKB
		{[]byte("not wkb"), `"bm90IHdrYg=="`},
		{map[string]any{"type": "Point"}, `{"type":"Point"}`},
		{nil, `null`},
	} {
		for _, decl := range []string{"geometry", "GEOMETRY"} {
			got, err := pgform.Append(nil, "shape", decl, c.v)
			if err != nil || string(got) != c.want {
				t.Errorf("%s %v: %s, %v; want %s", decl, c.v, got, err, c.want)
			}
		}
	}
	if got, err := pgform.Append(nil, "shapes", "geometry[]", "{a,b}"); err != nil || string(got) != `["a","b"]` {
		t.Errorf("geometry[]: %s, %v; want an array of text", got, err)
	}
	bad := srid((&wkbBuf{}).head(2).u32(1000).pts(1, 2))
	if _, err := pgform.Append(nil, "spot", "linestring", bad); err == nil || !strings.Contains(err.Error(), "spot") {
		t.Errorf("a count beyond the value: %v, want an error naming the column", err)
	}
}

// FuzzMySQLGeometry: any bytes in a spatial column give valid JSON or an
// error, never a panic or a hang.
func FuzzMySQLGeometry(f *testing.F) {
	f.Add(srid((&wkbBuf{}).head(1).pts(1, 2)))
	f.Add(srid((&wkbBuf{}).head(7).u32(2).head(1).pts(1, 2).head(2).u32(2).pts(0, 0, 1, 1)))
	f.Add(srid((&wkbBuf{be: true}).head(3).u32(1).u32(4).pts(0, 0, 1, 1, 1, 0, 0, 0)))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, decl := range []string{"point", "geometrycollection"} {
			got, err := pgform.Append(nil, "g", decl, b)
			if err == nil && !json.Valid(got) {
				t.Fatalf("%s %x: invalid JSON %s", decl, b, got)
			}
		}
	})
}
