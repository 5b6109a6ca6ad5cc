// Package schema declares the entshapes schemas.
package schema

import (
	"context"
	"net"

	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/dialect/sql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
)

func capture() []ent.Mixin { return []ent.Mixin{entcapture.Mixin(envelope.Options{})} }

// User has friends through an edge schema (a bidirectional edge: ent
// writes both join rows), peers through a plain bidirectional edge,
// follows users through a plain many-to-many edge,
// carries tags through another, and joins groups through a composite-id
// edge schema.
type User struct{ ent.Schema }

func (User) Mixin() []ent.Mixin { return capture() }

func (User) Fields() []ent.Field { return []ent.Field{field.String("name")} }

func (User) Edges() []ent.Edge {
	return []ent.Edge{
		edge.To("friends", User.Type).Through("friendships", Friendship.Type),
		edge.To("following", User.Type).From("followers"),
		edge.To("peers", User.Type), // bidirectional, without an edge schema
		edge.To("tags", Tag.Type),
		edge.To("groups", Group.Type).Through("joined", Membership.Type),
	}
}

// Friendship is the edge schema of User.friends (ent's edge-schema docs).
type Friendship struct{ ent.Schema }

func (Friendship) Mixin() []ent.Mixin { return capture() }

func (Friendship) Fields() []ent.Field {
	return []ent.Field{
		field.Int("weight").Default(1),
		field.Int("user_id"),
		field.Int("friend_id"),
	}
}

func (Friendship) Edges() []ent.Edge {
	return []ent.Edge{
		edge.To("user", User.Type).Required().Unique().Field("user_id"),
		edge.To("friend", User.Type).Required().Unique().Field("friend_id"),
	}
}

// Tag is the other side of the plain many-to-many edge User.tags.
type Tag struct{ ent.Schema }

func (Tag) Mixin() []ent.Mixin { return capture() }

func (Tag) Fields() []ent.Field { return []ent.Field{field.String("label")} }

func (Tag) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("users", User.Type).Ref("tags"),
		edge.From("memos", Memo.Type).Ref("tags"),
	}
}

// Group is joined by users through Membership.
type Group struct{ ent.Schema }

func (Group) Mixin() []ent.Mixin { return capture() }

func (Group) Fields() []ent.Field { return []ent.Field{field.String("name")} }

func (Group) Edges() []ent.Edge {
	return []ent.Edge{edge.From("users", User.Type).Ref("groups").Through("memberships", Membership.Type)}
}

// Membership is a composite-id edge schema (ent's canonical
// field.ID("user_id", "group_id") example).
type Membership struct{ ent.Schema }

func (Membership) Mixin() []ent.Mixin { return capture() }

func (Membership) Annotations() []schema.Annotation {
	return []schema.Annotation{field.ID("user_id", "group_id")}
}

func (Membership) Fields() []ent.Field {
	return []ent.Field{
		field.String("role").Default("member"),
		field.Int("user_id"),
		field.Int("group_id"),
	}
}

func (Membership) Edges() []ent.Edge {
	return []ent.Edge{
		edge.To("user", User.Type).Required().Unique().Field("user_id"),
		edge.To("group", Group.Type).Required().Unique().Field("group_id"),
	}
}

// Folder is a self-referencing tree whose children go with their parent
// (ON DELETE CASCADE).
type Folder struct{ ent.Schema }

func (Folder) Mixin() []ent.Mixin { return capture() }

func (Folder) Fields() []ent.Field {
	return []ent.Field{field.String("name"), field.Int("parent_id").Optional()}
}

func (Folder) Edges() []ent.Edge {
	return []ent.Edge{
		edge.To("children", Folder.Type).Annotations(entsql.OnDelete(entsql.Cascade)).
			From("parent").Unique().Field("parent_id"),
	}
}

// Node is a self-referencing tree whose children lose their parent (ent's
// default for an optional foreign key: ON DELETE SET NULL).
type Node struct{ ent.Schema }

func (Node) Mixin() []ent.Mixin { return capture() }

func (Node) Fields() []ent.Field {
	return []ent.Field{field.String("name"), field.Int("parent_id").Optional()}
}

func (Node) Edges() []ent.Edge {
	return []ent.Edge{edge.To("children", Node.Type).From("parent").Unique().Field("parent_id")}
}

// Person is referenced twice by Doc.
type Person struct{ ent.Schema }

func (Person) Mixin() []ent.Mixin { return capture() }

func (Person) Fields() []ent.Field { return []ent.Field{field.String("name")} }

func (Person) Edges() []ent.Edge {
	return []ent.Edge{
		edge.To("written", Doc.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
		edge.To("reviewed", Doc.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
	}
}

// Doc has two foreign keys to Person, both ON DELETE CASCADE.
type Doc struct{ ent.Schema }

func (Doc) Mixin() []ent.Mixin { return capture() }

func (Doc) Fields() []ent.Field {
	return []ent.Field{field.String("title"), field.Int("author_id"), field.Int("reviewer_id")}
}

func (Doc) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("author", Person.Type).Ref("written").Unique().Required().Field("author_id"),
		edge.From("reviewer", Person.Type).Ref("reviewed").Unique().Required().Field("reviewer_id"),
	}
}

// Room is not captured; its shelves go with it.
type Room struct{ ent.Schema }

func (Room) Fields() []ent.Field { return []ent.Field{field.String("name")} }

func (Room) Edges() []ent.Edge {
	return []ent.Edge{edge.To("shelves", Shelf.Type).Annotations(entsql.OnDelete(entsql.Cascade))}
}

// Shelf is not captured; its books go with it.
type Shelf struct{ ent.Schema }

func (Shelf) Fields() []ent.Field { return []ent.Field{field.String("name")} }

func (Shelf) Edges() []ent.Edge {
	return []ent.Edge{
		edge.From("room", Room.Type).Ref("shelves").Unique(),
		edge.To("books", Book.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
		edge.To("labels", Label.Type),
	}
}

// Book is captured, and reached only through uncaptured parents.
type Book struct{ ent.Schema }

func (Book) Mixin() []ent.Mixin { return capture() }

func (Book) Fields() []ent.Field {
	return []ent.Field{field.String("title"), field.Int("shelf_id")}
}

func (Book) Edges() []ent.Edge {
	return []ent.Edge{edge.From("shelf", Shelf.Type).Ref("books").Unique().Required().Field("shelf_id")}
}

// Label is captured; its shelf is nulled when the shelf goes (SET NULL).
type Label struct{ ent.Schema }

func (Label) Mixin() []ent.Mixin { return capture() }

func (Label) Fields() []ent.Field { return []ent.Field{field.String("text")} }

func (Label) Edges() []ent.Edge {
	return []ent.Edge{edge.From("shelf", Shelf.Type).Ref("labels").Unique()}
}

// TenantKey is the context key of the tenant Project's hook narrows
// deletes to.
type TenantKey struct{}

// Project has a schema hook, after the capture hook, that narrows every
// delete to the context's tenant; its tasks go with it.
type Project struct{ ent.Schema }

func (Project) Mixin() []ent.Mixin { return capture() }

func (Project) Fields() []ent.Field { return []ent.Field{field.String("tenant"), field.String("name")} }

func (Project) Edges() []ent.Edge {
	return []ent.Edge{edge.To("tasks", Task.Type).Annotations(entsql.OnDelete(entsql.Cascade))}
}

func (Project) Hooks() []ent.Hook {
	return []ent.Hook{func(next ent.Mutator) ent.Mutator {
		return ent.MutateFunc(func(ctx context.Context, m ent.Mutation) (ent.Value, error) {
			if t, ok := ctx.Value(TenantKey{}).(string); ok && m.Op().Is(ent.OpDelete|ent.OpDeleteOne) {
				m.(interface{ WhereP(...func(*sql.Selector)) }).WhereP(sql.FieldEQ("tenant", t))
			}
			return next.Mutate(ctx, m)
		})
	}}
}

// Task goes with its project.
type Task struct{ ent.Schema }

func (Task) Mixin() []ent.Mixin { return capture() }

func (Task) Fields() []ent.Field { return []ent.Field{field.String("name")} }

func (Task) Edges() []ent.Edge {
	return []ent.Edge{edge.From("project", Project.Type).Ref("tasks").Unique()}
}

// Memo lives, with its notes and the join table of its tags, in another
// database schema (the tests name it with ent.AlternateSchema, as
// entsql.Annotation{Schema: …} names it by default).
type Memo struct{ ent.Schema }

func (Memo) Mixin() []ent.Mixin { return capture() }

func (Memo) Fields() []ent.Field { return []ent.Field{field.String("text")} }

func (Memo) Edges() []ent.Edge {
	return []ent.Edge{
		edge.To("notes", MemoNote.Type).Annotations(entsql.OnDelete(entsql.Cascade)),
		edge.To("tags", Tag.Type),
	}
}

// MemoNote goes with its memo.
type MemoNote struct{ ent.Schema }

func (MemoNote) Mixin() []ent.Mixin { return capture() }

func (MemoNote) Fields() []ent.Field { return []ent.Field{field.String("text")} }

func (MemoNote) Edges() []ent.Edge {
	return []ent.Edge{edge.From("memo", Memo.Type).Ref("notes").Unique()}
}

// Device holds a net.IP in a bytes column (ent's own suite's
// field.Bytes(…).GoType(net.IP{}) with the default net.IP("127.0.0.1"):
// nine bytes of text, which no IP form has).
type Device struct{ ent.Schema }

func (Device) Mixin() []ent.Mixin { return capture() }

func (Device) Fields() []ent.Field {
	return []ent.Field{field.Bytes("addr").GoType(net.IP{}).Default(net.IP("127.0.0.1"))}
}

// Site has fields whose column is not their name: URLs (column urls, a
// JSON list that AppendURLs appends to) and headline (StorageKey title).
// ent's mutation names a field by its column.
type Site struct{ ent.Schema }

func (Site) Mixin() []ent.Mixin { return capture() }

func (Site) Fields() []ent.Field {
	return []ent.Field{
		field.Strings("URLs").Optional(),
		field.String("headline").StorageKey("title").Optional(),
	}
}
