// Package schema is the example's ent schemas: readers borrow loans (an
// edge whose loans the database deletes with their reader), and join
// clubs through memberships (an edge schema). Every schema is captured.
package schema

import (
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
)

// Reader is a library member.
type Reader struct{ ent.Schema }

// Mixin captures every write: the row before and after.
func (Reader) Mixin() []ent.Mixin {
	return []ent.Mixin{entcapture.Mixin(envelope.Options{Payload: envelope.BeforeAndAfter})}
}

// Fields of the Reader.
func (Reader) Fields() []ent.Field {
	return []ent.Field{
		field.String("name"),
		field.String("email").Sensitive(), // left out of events
	}
}

// Edges of the Reader: loans go with their reader (ON DELETE CASCADE).
func (Reader) Edges() []ent.Edge {
	return []ent.Edge{
		edge.To("loans", Loan.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
		edge.To("clubs", Club.Type).Through("memberships", Membership.Type),
		// A club's president: a nullable foreign key, which ent makes ON
		// DELETE SET NULL.
		edge.To("presides", Club.Type),
	}
}

// Loan is a book lent to a reader.
type Loan struct{ ent.Schema }

// Mixin captures every write.
func (Loan) Mixin() []ent.Mixin { return []ent.Mixin{entcapture.Mixin(envelope.Options{})} }

// Fields of the Loan.
func (Loan) Fields() []ent.Field {
	return []ent.Field{
		field.String("book"),
		field.String("status").Default("lent"),
		field.Int("reader_id"),
	}
}

// Edges of the Loan.
func (Loan) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("reader", Reader.Type).Ref("loans").Field("reader_id").Unique().Required(),
	}
}

// Club is a reading club.
type Club struct{ ent.Schema }

// Mixin captures every write.
func (Club) Mixin() []ent.Mixin { return []ent.Mixin{entcapture.Mixin(envelope.Options{})} }

// Fields of the Club.
func (Club) Fields() []ent.Field { return []ent.Field{field.String("name").Unique()} }

// Edges of the Club.
func (Club) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("readers", Reader.Type).Ref("clubs").Through("memberships", Membership.Type),
		edge.From("president", Reader.Type).Ref("presides").Unique(),
	}
}

// Membership is the edge schema joining readers and clubs: its rows are
// captured like any other.
type Membership struct{ ent.Schema }

// Mixin captures every write.
func (Membership) Mixin() []ent.Mixin { return []ent.Mixin{entcapture.Mixin(envelope.Options{})} }

// Fields of the Membership.
func (Membership) Fields() []ent.Field {
	return []ent.Field{
		field.Int("reader_id"),
		field.Int("club_id"),
		field.Time("joined_at").Default(func() time.Time { return time.Date(2026, 10, 6, 12, 0, 0, 0, time.UTC) }),
	}
}

// Edges of the Membership.
func (Membership) Edges() []ent.Edge {
	return []ent.Edge{
		// A membership goes with its reader or its club.
		edge.To("reader", Reader.Type).Field("reader_id").Unique().Required().Annotations(entsql.OnDelete(entsql.Cascade)),
		edge.To("club", Club.Type).Field("club_id").Unique().Required().Annotations(entsql.OnDelete(entsql.Cascade)),
	}
}

// Indexes of the Membership.
func (Membership) Indexes() []ent.Index {
	return []ent.Index{index.Fields("reader_id", "club_id").Unique()}
}
