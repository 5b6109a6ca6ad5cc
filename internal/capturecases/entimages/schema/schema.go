// Package schema declares the entimages schemas.
package schema

import (
	"context"
	stdsql "database/sql"
	"database/sql/driver"
	"encoding/base64"
	"net/url"
	"reflect"
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/dialect/sql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/edge"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
	"entgo.io/ent/schema/mixin"
	"github.com/google/uuid"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
)

func capture() ent.Mixin {
	return entcapture.Mixin(envelope.Options{Payload: envelope.BeforeAndAfter})
}

// Account is accounts: a UUID id the client generates.
type Account struct{ ent.Schema }

func (Account) Mixin() []ent.Mixin { return []ent.Mixin{capture()} }

func (Account) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "accounts"}}
}

func (Account) Fields() []ent.Field {
	return []ent.Field{
		field.UUID("id", uuid.UUID{}).Default(uuid.New),
		field.String("name"),
	}
}

func (Account) Edges() []ent.Edge {
	return []ent.Edge{edge.To("members", Member.Type)}
}

// Member is members: unique per (tenant, email); account_id is an
// optional UUID edge field that is not Nillable (its Go zero value is the
// nil UUID, its column NULL); region has a database default; seen is a
// timestamptz(3) on PostgreSQL; mixin.Time's create_time and update_time
// carry the nanoseconds of time.Now.
type Member struct{ ent.Schema }

func (Member) Mixin() []ent.Mixin { return []ent.Mixin{mixin.Time{}, capture()} }

func (Member) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "members"}}
}

func (Member) Fields() []ent.Field {
	return []ent.Field{
		field.String("tenant"),
		field.String("email"),
		field.String("name").Optional(),
		field.String("region").Optional().Annotations(entsql.Default("eu")),
		field.UUID("account_id", uuid.UUID{}).Optional(),
		field.Time("seen").Optional().SchemaType(map[string]string{dialect.Postgres: "timestamptz(3)"}),
		field.Strings("tags").Optional(),
		field.String("stamp").Optional(),
	}
}

func (Member) Edges() []ent.Edge {
	return []ent.Edge{edge.From("account", Account.Type).Ref("members").Field("account_id").Unique()}
}

func (Member) Indexes() []ent.Index {
	return []ent.Index{index.Fields("tenant", "email").Unique()}
}

// Visit is visits: like Member's columns whose stored value differs from
// the Go value (a database default, timestamptz(3), mixin.Time), on a
// schema without hooks of its own, whose creates on PostgreSQL are fused
// (one statement writes the row and its event).
type Visit struct{ ent.Schema }

func (Visit) Mixin() []ent.Mixin { return []ent.Mixin{mixin.Time{}, capture()} }

func (Visit) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "visits"}}
}

func (Visit) Fields() []ent.Field {
	return []ent.Field{
		field.String("kind").Optional().Annotations(entsql.Default("walk")),
		field.Time("at").SchemaType(map[string]string{dialect.Postgres: "timestamptz(3)"}),
		// A Duration in a bigint column (stored as nanoseconds) and a
		// time under a Valuer (stored at the column's microseconds).
		field.Int64("took").GoType(time.Duration(0)).Optional(),
		field.Time("gone").GoType(&stdsql.NullTime{}).Optional(),
	}
}

type tenantKey struct{}

type stampKey struct{}

// WithTenant returns ctx under which updates of members are narrowed to
// tenant t by a schema hook (WhereP), as multi-tenant ent services do.
func WithTenant(ctx context.Context, t string) context.Context {
	return context.WithValue(ctx, tenantKey{}, t)
}

// WithStamp returns ctx under which a schema hook sets members.stamp to
// s on every update.
func WithStamp(ctx context.Context, s string) context.Context {
	return context.WithValue(ctx, stampKey{}, s)
}

// member is the part of the generated MemberMutation the hooks use.
type member interface {
	ent.Mutation
	SetStamp(string)
	WhereP(...func(*sql.Selector))
}

func (Member) Hooks() []ent.Hook {
	return []ent.Hook{
		func(next ent.Mutator) ent.Mutator {
			return ent.MutateFunc(func(ctx context.Context, m ent.Mutation) (ent.Value, error) {
				mm, ok := m.(member)
				if ok && m.Op().Is(ent.OpUpdate|ent.OpUpdateOne) {
					if t, ok := ctx.Value(tenantKey{}).(string); ok {
						mm.WhereP(sql.FieldEQ("tenant", t))
					}
					if s, ok := ctx.Value(stampKey{}).(string); ok {
						mm.SetStamp(s)
					}
				}
				return next.Mutate(ctx, m)
			})
		},
	}
}

// Link is links: fields with a ValueScanner, whose columns hold what the
// scanner's Value makes of the Go value (a url.URL's MarshalBinary, a
// base64 text), not the Go value.
type Link struct{ ent.Schema }

func (Link) Mixin() []ent.Mixin { return []ent.Mixin{capture()} }

func (Link) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "links"}}
}

func (Link) Fields() []ent.Field {
	b64 := field.ValueScannerFunc[string, *stdsql.NullString]{
		V: func(s string) (driver.Value, error) { return base64.StdEncoding.EncodeToString([]byte(s)), nil },
		S: func(ns *stdsql.NullString) (string, error) {
			if !ns.Valid {
				return "", nil
			}
			b, err := base64.StdEncoding.DecodeString(ns.String)
			return string(b), err
		},
	}
	return []ent.Field{
		field.String("url").GoType(&url.URL{}).ValueScanner(field.BinaryValueScanner[*url.URL]{}),
		field.String("code").ValueScanner(b64),
		field.String("note").Optional().ValueScanner(b64), // ent v0.14.5 cannot make it Nillable too
		field.String("paren").GoType(Paren("")).Optional(),
	}
}

// Paren is a Go type whose Scan does not give back what its Value
// stored, like the Triple of ent's integration suite: Value wraps the
// text in parentheses, Scan keeps them, so a row read back holds
// "((x))" in Go form while its column holds "(x)".
type Paren string

// Value implements driver.Valuer.
func (p Paren) Value() (driver.Value, error) { return "(" + string(p) + ")", nil }

// Scan implements sql.Scanner.
func (p *Paren) Scan(v any) error {
	switch x := v.(type) {
	case string:
		*p = Paren(x)
	case []byte:
		*p = Paren(x)
	case nil:
		*p = ""
	}
	return nil
}

// Secret is secrets: like ent's encryptfield example, a schema hook seals
// the name before the write and opens it in the entity the write
// returns, so the entity holds the plaintext while the row holds the
// sealed text.
type Secret struct{ ent.Schema }

func (Secret) Mixin() []ent.Mixin { return []ent.Mixin{capture()} }

func (Secret) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "secrets"}}
}

func (Secret) Fields() []ent.Field { return []ent.Field{field.String("name")} }

// Seal is what Secret's hook stores for a name.
func Seal(s string) string { return "sealed:" + base64.StdEncoding.EncodeToString([]byte(s)) }

func (Secret) Hooks() []ent.Hook {
	type named interface {
		Name() (string, bool)
		SetName(string)
	}
	return []ent.Hook{
		func(next ent.Mutator) ent.Mutator {
			return ent.MutateFunc(func(ctx context.Context, m ent.Mutation) (ent.Value, error) {
				nm, ok := m.(named)
				name, set := "", false
				if ok {
					name, set = nm.Name()
				}
				if set {
					nm.SetName(Seal(name))
				}
				v, err := next.Mutate(ctx, m)
				if err == nil && set {
					// Open the entity returned: the caller sees the plaintext.
					if f := reflect.ValueOf(v); f.Kind() == reflect.Pointer && !f.IsNil() {
						if n := f.Elem().FieldByName("Name"); n.IsValid() && n.CanSet() {
							n.SetString(name)
						}
					}
				}
				return v, err
			})
		},
	}
}
