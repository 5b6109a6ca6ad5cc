package pgform

import (
	"encoding/binary"
	"fmt"
	"math"
)

// MySQL and MariaDB read a spatial column (POINT, LINESTRING, POLYGON,
// the MULTI… types, GEOMETRY, GEOMETRYCOLLECTION) as their internal
// format: a 4-byte little-endian SRID, then the value's WKB (OGC
// well-known binary). It is rendered as the same GeoJSON PostgreSQL's
// point and polygon are: Point, LineString, Polygon, MultiPoint,
// MultiLineString, MultiPolygon and GeometryCollection, coordinates
// [x, y]. The SRID is dropped (GeoJSON's coordinates carry none).

// isMySQLGeometry reports whether s is MySQL's internal geometry format:
// an SRID, then WKB whose byte-order byte is 0 or 1 and whose type is one
// of the seven. PostgreSQL's geometric text never starts so (it starts
// with a bracket), so the two are told apart by the bytes.
func isMySQLGeometry(s string) bool {
	if len(s) < 9 || (s[4] != 0 && s[4] != 1) {
		return false
	}
	typ := binary.LittleEndian.Uint32([]byte(s[5:9]))
	if s[4] == 0 {
		typ = binary.BigEndian.Uint32([]byte(s[5:9]))
	}
	return typ >= 1 && typ <= 7
}

// wkbReader reads one WKB value.
type wkbReader struct {
	b []byte
}

func (r *wkbReader) u32(be bool) (uint32, error) {
	if len(r.b) < 4 {
		return 0, fmt.Errorf("WKB ends early")
	}
	var v uint32
	if be {
		v = binary.BigEndian.Uint32(r.b)
	} else {
		v = binary.LittleEndian.Uint32(r.b)
	}
	r.b = r.b[4:]
	return v, nil
}

func (r *wkbReader) f64(be bool) (float64, error) {
	if len(r.b) < 8 {
		return 0, fmt.Errorf("WKB ends early")
	}
	var v uint64
	if be {
		v = binary.BigEndian.Uint64(r.b)
	} else {
		v = binary.LittleEndian.Uint64(r.b)
	}
	r.b = r.b[8:]
	return math.Float64frombits(v), nil
}

// count reads a count and checks that the rest of the value can hold it
// (each item at least size bytes), so a corrupt count cannot make the
// reader allocate or loop without end.
func (r *wkbReader) count(be bool, size int) (int, error) {
	n, err := r.u32(be)
	if err != nil {
		return 0, err
	}
	if int64(n)*int64(size) > int64(len(r.b)) {
		return 0, fmt.Errorf("WKB count %d exceeds the value", n)
	}
	return int(n), nil
}

// header reads a geometry's byte order and type.
func (r *wkbReader) header() (be bool, typ uint32, err error) {
	if len(r.b) < 5 {
		return false, 0, fmt.Errorf("WKB ends early")
	}
	be = r.b[0] == 0
	r.b = r.b[1:]
	typ, err = r.u32(be)
	return be, typ, err
}

func (r *wkbReader) points(dst []byte, be bool) ([]byte, error) {
	n, err := r.count(be, 16)
	if err != nil {
		return dst, err
	}
	dst = append(dst, '[')
	for i := range n {
		if i > 0 {
			dst = append(dst, ',')
		}
		if dst, err = r.point(dst, be); err != nil {
			return dst, err
		}
	}
	return append(dst, ']'), nil
}

func (r *wkbReader) point(dst []byte, be bool) ([]byte, error) {
	x, err := r.f64(be)
	if err != nil {
		return dst, err
	}
	y, err := r.f64(be)
	if err != nil {
		return dst, err
	}
	return appendPoint(dst, x, y), nil
}

func (r *wkbReader) rings(dst []byte, be bool) ([]byte, error) {
	n, err := r.count(be, 4)
	if err != nil {
		return dst, err
	}
	dst = append(dst, '[')
	for i := range n {
		if i > 0 {
			dst = append(dst, ',')
		}
		if dst, err = r.points(dst, be); err != nil {
			return dst, err
		}
	}
	return append(dst, ']'), nil
}

var geoJSONTypes = [...]string{1: "Point", 2: "LineString", 3: "Polygon", 4: "MultiPoint", 5: "MultiLineString", 6: "MultiPolygon", 7: "GeometryCollection"}

// geometry appends one WKB geometry as GeoJSON; depth bounds nested
// collections.
func (r *wkbReader) geometry(dst []byte, depth int) ([]byte, error) {
	if depth > 16 {
		return dst, fmt.Errorf("WKB nested deeper than 16 collections")
	}
	be, typ, err := r.header()
	if err != nil {
		return dst, err
	}
	if typ < 1 || typ > 7 {
		return dst, fmt.Errorf("WKB type %d is not a 2D geometry", typ)
	}
	dst = append(dst, `{"type":"`+geoJSONTypes[typ]+`",`...)
	if typ == 7 {
		dst = append(dst, `"geometries":[`...)
	} else {
		dst = append(dst, `"coordinates":`...)
	}
	switch typ {
	case 1:
		dst, err = r.point(dst, be)
	case 2:
		dst, err = r.points(dst, be)
	case 3:
		dst, err = r.rings(dst, be)
	default: // the Multi… types and collections: each member a whole WKB value
		n, cerr := r.count(be, 5)
		if cerr != nil {
			return dst, cerr
		}
		if typ != 7 {
			dst = append(dst, '[')
		}
		for i := range n {
			if i > 0 {
				dst = append(dst, ',')
			}
			if typ == 7 {
				if dst, err = r.geometry(dst, depth+1); err != nil {
					return dst, err
				}
				continue
			}
			mbe, mt, herr := r.header()
			if herr != nil {
				return dst, herr
			}
			if mt != typ-3 {
				return dst, fmt.Errorf("WKB %s holds a type %d", geoJSONTypes[typ], mt)
			}
			switch mt {
			case 1:
				dst, err = r.point(dst, mbe)
			case 2:
				dst, err = r.points(dst, mbe)
			case 3:
				dst, err = r.rings(dst, mbe)
			}
			if err != nil {
				return dst, err
			}
		}
	}
	if err != nil {
		return dst, err
	}
	if typ >= 4 {
		dst = append(dst, ']')
	}
	return append(dst, '}'), nil
}

// appendMySQLGeometry appends s, a value in MySQL's internal geometry
// format, as GeoJSON.
func appendMySQLGeometry(dst []byte, s string) ([]byte, error) {
	r := &wkbReader{b: []byte(s[4:])}
	out, err := r.geometry(dst, 0)
	if err != nil {
		return dst, err
	}
	if len(r.b) != 0 {
		return dst, fmt.Errorf("%d bytes after the WKB value", len(r.b))
	}
	return out, nil
}
