// Package schema declares the entforms schema.
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
	"github.com/lib/pq"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
)

// Doc is docs: columns whose declared types have JSON forms of their own.
// On SQLite, which has no arrays, ranges or geometry, those columns are
// text and only body (json) has a form of its type's.
type Doc struct{ ent.Schema }

func (Doc) Mixin() []ent.Mixin {
	return []ent.Mixin{entcapture.Mixin(envelope.Options{Payload: envelope.BeforeAndAfter})}
}

func (Doc) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "docs"}}
}

func (Doc) Fields() []ent.Field {
	text := func(pg string) map[string]string {
		return map[string]string{dialect.Postgres: pg, dialect.SQLite: "text"}
	}
	return []ent.Field{
		field.String("body").SchemaType(map[string]string{dialect.Postgres: "jsonb", dialect.SQLite: "json"}),
		field.Other("tags", pq.StringArray{}).SchemaType(text("text[]")).Optional(),
		field.Other("grid", pq.Int64Array{}).SchemaType(text("bigint[]")).Optional(),
		field.String("matrix").SchemaType(text("int[][]")).Optional(),
		field.String("span").SchemaType(text("int4range")).Optional(),
		field.String("spot").SchemaType(text("point")).Optional(),
		field.String("area").SchemaType(text("polygon")).Optional(),
	}
}
