// Package schema declares the schemas of entcapture's developer-experience
// tests. It imports nothing generated: the hooks reach the generated
// client through the methods every generated mutation has.
package schema

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect/sql"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/mixin"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
)

// Note is notes: a schema hook (which runs inside the capture hook)
// enqueues a "note.audit" event through m.Client() for a title starting
// with "audit:".
type Note struct{ ent.Schema }

func (Note) Mixin() []ent.Mixin {
	return []ent.Mixin{entcapture.Mixin(envelope.Options{})}
}

func (Note) Fields() []ent.Field {
	return []ent.Field{field.String("title").Unique()}
}

func (Note) Hooks() []ent.Hook {
	return []ent.Hook{func(next ent.Mutator) ent.Mutator {
		return ent.MutateFunc(func(ctx context.Context, m ent.Mutation) (ent.Value, error) {
			v, _ := m.Field("title")
			if title, _ := v.(string); strings.HasPrefix(title, "audit:") {
				if _, err := entcapture.Enqueue(ctx, clientOf(m), envelope.Message{Topic: "note.audit", Payload: map[string]any{"title": title}}); err != nil {
					return nil, err
				}
			}
			return next.Mutate(ctx, m)
		})
	}}
}

// clientOf returns m.Client() (the generated *ent.Client, an entcapture.Conn).
func clientOf(m ent.Mutation) entcapture.Conn {
	return reflect.ValueOf(m).MethodByName("Client").Call(nil)[0].Interface().(entcapture.Conn)
}

// Doc is docs: entcapture.Mixin, then ent's soft-delete mixin.
type Doc struct{ ent.Schema }

func (Doc) Mixin() []ent.Mixin {
	return []ent.Mixin{entcapture.Mixin(envelope.Options{Payload: envelope.BeforeAndAfter}), SoftDeleteMixin{}}
}

func (Doc) Fields() []ent.Field { return []ent.Field{field.String("title")} }

// Page is pages: ent's soft-delete mixin, then entcapture.Mixin.
type Page struct{ ent.Schema }

func (Page) Mixin() []ent.Mixin {
	return []ent.Mixin{SoftDeleteMixin{}, entcapture.Mixin(envelope.Options{Payload: envelope.BeforeAndAfter})}
}

func (Page) Fields() []ent.Field { return []ent.Field{field.String("title")} }

// SoftDeleteMixin is the soft-delete mixin of ent's documentation
// (entgo.io/docs/interceptors#soft-delete), written against ent's generic
// interfaces instead of the generated package's: an interceptor that
// hides deleted rows, and a hook that turns a delete into an update of
// delete_time.
type SoftDeleteMixin struct{ mixin.Schema }

func (SoftDeleteMixin) Fields() []ent.Field {
	return []ent.Field{field.Time("delete_time").Optional()}
}

type softDeleteKey struct{}

// SkipSoftDelete returns a context that skips the soft-delete interceptor/mutation hooks.
func SkipSoftDelete(parent context.Context) context.Context {
	return context.WithValue(parent, softDeleteKey{}, true)
}

func (d SoftDeleteMixin) Interceptors() []ent.Interceptor {
	return []ent.Interceptor{ent.TraverseFunc(func(ctx context.Context, q ent.Query) error {
		if skip, _ := ctx.Value(softDeleteKey{}).(bool); skip {
			return nil
		}
		// The generated query's Where(...predicate.X), which the
		// generated intercept package wraps as WhereP.
		where := reflect.ValueOf(q).MethodByName("Where")
		if !where.IsValid() {
			return fmt.Errorf("unexpected query type %T", q)
		}
		p := sql.FieldIsNull(d.Fields()[0].Descriptor().Name)
		where.Call([]reflect.Value{reflect.ValueOf(p).Convert(where.Type().In(0).Elem())})
		return nil
	})}
}

func (d SoftDeleteMixin) Hooks() []ent.Hook {
	return []ent.Hook{func(next ent.Mutator) ent.Mutator {
		return ent.MutateFunc(func(ctx context.Context, m ent.Mutation) (ent.Value, error) {
			if !m.Op().Is(ent.OpDeleteOne | ent.OpDelete) {
				return next.Mutate(ctx, m)
			}
			if skip, _ := ctx.Value(softDeleteKey{}).(bool); skip {
				return next.Mutate(ctx, m)
			}
			mx, ok := m.(interface {
				SetOp(ent.Op)
				SetDeleteTime(time.Time)
				WhereP(...func(*sql.Selector))
			})
			if !ok {
				return nil, fmt.Errorf("unexpected mutation type %T", m)
			}
			d.P(mx)
			mx.SetOp(ent.OpUpdate)
			mx.SetDeleteTime(time.Now())
			c := reflect.ValueOf(m).MethodByName("Client").Call(nil)[0].Interface().(interface {
				Mutate(context.Context, ent.Mutation) (ent.Value, error)
			})
			return c.Mutate(ctx, m)
		})
	}}
}

// P adds a storage-level predicate to the queries and mutations.
func (d SoftDeleteMixin) P(w interface{ WhereP(...func(*sql.Selector)) }) {
	w.WhereP(sql.FieldIsNull(d.Fields()[0].Descriptor().Name))
}
