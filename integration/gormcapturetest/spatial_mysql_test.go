package gormcapture_test

import (
	"context"
	"strconv"
	"testing"

	"gorm.io/driver/mysql"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/internal/testkit"
)

// WKT is a spatial value a model writes as text: GORM binds it through
// ST_GeomFromText.
type WKT string

func (w WKT) GormValue(context.Context, *gorm.DB) clause.Expr {
	return clause.Expr{SQL: "ST_GeomFromText(?)", Vars: []any{string(w)}}
}

// Place has MySQL spatial columns.
type Place struct {
	ID    int
	Name  string
	Spot  WKT    `gorm:"type:point"`
	Route WKT    `gorm:"type:linestring"`
	Area  WKT    `gorm:"type:polygon"`
	Shape WKT    `gorm:"type:geometry"`
	Meta  string `gorm:"type:json"`
	Raw   []byte `gorm:"type:json"`
}

// TestMySQLSpatialForms: MySQL's spatial columns (POINT, LINESTRING,
// POLYGON, and the any-shape GEOMETRY), which the server reads as
// SRID-prefixed WKB, are GeoJSON in
// the events a relay delivers from gormcapture on MariaDB — they failed
// the user's update before ("point value … is not a number": the
// PostgreSQL text parser got WKB) — and JSON columns are embedded
// whether the field is a string or []byte (issue 23, section 1).
func TestMySQLSpatialForms(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, dsn := testkit.MySQL(t)
	gdb, err := gorm.Open(mysql.Open(dsn), &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)})
	must(t, err)
	if sqlDB, err := gdb.DB(); err == nil {
		t.Cleanup(func() { _ = sqlDB.Close() })
	}
	must(t, gdb.AutoMigrate(&Place{}))
	must(t, envelope.Migrate(ctx, db, envelope.MySQL, ""))
	p := gormcapture.New(gormcapture.Config{})
	must(t, gdb.Use(p))
	must(t, p.Capture(&Place{}, envelope.Options{Payload: envelope.BeforeAndAfter}))

	pl := &Place{Name: "a", Spot: "POINT(1 2)", Route: "LINESTRING(0 0,1 1)", Area: "POLYGON((0 0,1 1,1 0,0 0))", Shape: "MULTIPOINT(1 2,3 4)",
		Meta: `{"a": [1, 2]}`, Raw: []byte(`[true, null]`)}
	must(t, gdb.Create(pl).Error)
	must(t, gdb.Model(&Place{ID: pl.ID}).Update("spot", WKT("POINT(3 4)")).Error)
	must(t, gdb.Delete(&Place{ID: pl.ID}).Error)

	got := relayed(t, db)(3)
	for i, want := range [][]string{
		{`"spot":{"type":"Point","coordinates":[1,2]}`, `"route":{"type":"LineString","coordinates":[[0,0],[1,1]]}`,
			`"area":{"type":"Polygon","coordinates":[[[0,0],[1,1],[1,0],[0,0]]]}`, `"meta":{"a":[1,2]}`, `"raw":[true,null]`,
			`"shape":{"type":"MultiPoint","coordinates":[[1,2],[3,4]]}`},
		{`"spot":{"type":"Point","coordinates":[3,4]}`},
		{`"before":{"id":1,"name":"a","spot":{"type":"Point","coordinates":[3,4]}`},
	} {
		contains(t, "event "+strconv.Itoa(i), got[i], want...)
	}
}
