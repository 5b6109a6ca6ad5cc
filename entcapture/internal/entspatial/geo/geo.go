// Package geo is a spatial value for entspatial's schema.
package geo

import (
	"database/sql/driver"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"

	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/sql"
)

// Point is a MySQL POINT: written as WKT through ST_GeomFromText, read
// from the server's SRID-prefixed WKB.
type Point struct{ X, Y float64 }

// Value is the point's WKT.
func (p Point) Value() (driver.Value, error) {
	return "POINT(" + strconv.FormatFloat(p.X, 'g', -1, 64) + " " + strconv.FormatFloat(p.Y, 'g', -1, 64) + ")", nil
}

// FormatParam binds the WKT through ST_GeomFromText on MySQL.
func (Point) FormatParam(placeholder string, info *sql.StmtInfo) string {
	if info != nil && info.Dialect == dialect.MySQL {
		return "ST_GeomFromText(" + placeholder + ")"
	}
	return placeholder
}

// Scan reads MySQL's geometry bytes: a 4-byte SRID, then the WKB of a
// point (byte order, type 1, x, y).
func (p *Point) Scan(v any) error {
	b, ok := v.([]byte)
	if !ok {
		return fmt.Errorf("geo.Point: scan %T", v)
	}
	if len(b) != 25 || b[4] != 1 || binary.LittleEndian.Uint32(b[5:9]) != 1 {
		return fmt.Errorf("geo.Point: not a little-endian WKB point: %x", b)
	}
	p.X = math.Float64frombits(binary.LittleEndian.Uint64(b[9:17]))
	p.Y = math.Float64frombits(binary.LittleEndian.Uint64(b[17:25]))
	return nil
}
