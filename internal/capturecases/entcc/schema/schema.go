// Package schema declares the conformance models of internal/capturecases
// as ent schemas, mapped to the same tables and columns as GORM's.
//
// ent cannot declare Membership: its primary key is composite, which ent
// allows only for edge schemas (see capturecases.EntUnsupported).
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
)

func capture() []ent.Mixin { return []ent.Mixin{entcapture.Mixin(envelope.Options{})} }

// Reader is readers: id, name, email (sensitive).
type Reader struct{ ent.Schema }

func (Reader) Mixin() []ent.Mixin { return capture() }

func (Reader) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "readers"}}
}

func (Reader) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.String("name"),
		field.String("email").Sensitive(),
	}
}

// Loan is loans: id, status, days, returned, reader_id, note.
type Loan struct{ ent.Schema }

func (Loan) Mixin() []ent.Mixin { return capture() }

func (Loan) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "loans"}}
}

func (Loan) Fields() []ent.Field {
	return []ent.Field{
		field.Int64("id"),
		field.String("status"),
		field.Int("days"),
		field.Bool("returned"),
		field.Int64("reader_id").Optional().Nillable(),
		field.String("note").Optional().Nillable(),
	}
}

// Tag is tags: code (the key, not generated), label.
type Tag struct{ ent.Schema }

func (Tag) Mixin() []ent.Mixin { return capture() }

func (Tag) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "tags"}}
}

func (Tag) Fields() []ent.Field {
	return []ent.Field{
		field.String("id").StorageKey("code"),
		field.String("label"),
	}
}
