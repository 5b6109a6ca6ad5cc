// Package schema declares the entspatial schema.
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect"
	"entgo.io/ent/schema/field"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/entcapture/internal/entspatial/geo"
	"github.com/heraldgo/herald/envelope"
)

// Place has MySQL spatial columns: spot a field.Other of geo.Point (WKT
// through ST_GeomFromText), route a field.Bytes of the server's own
// geometry bytes (SRID + WKB) in a LINESTRING column, shape the same in a
// GEOMETRY column.
type Place struct{ ent.Schema }

func (Place) Mixin() []ent.Mixin {
	return []ent.Mixin{entcapture.Mixin(envelope.Options{Payload: envelope.BeforeAndAfter})}
}

func (Place) Fields() []ent.Field {
	return []ent.Field{
		field.String("name"),
		field.Other("spot", geo.Point{}).SchemaType(map[string]string{dialect.MySQL: "point"}),
		field.Bytes("route").SchemaType(map[string]string{dialect.MySQL: "linestring"}).Optional(),
		field.Bytes("shape").SchemaType(map[string]string{dialect.MySQL: "geometry"}).Optional(),
	}
}
