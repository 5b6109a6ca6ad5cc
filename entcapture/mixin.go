package entcapture

import (
	"entgo.io/ent"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/mixin"

	"github.com/heraldgo/herald/entcapture/internal/annotation"
	"github.com/heraldgo/herald/envelope"
)

// Annotation is the part of a capture declaration that code generation
// sees: which columns the event holds and its templates, so that unknown
// names fail `go generate`. Mixin adds it; it is not meant to be used on its own.
type Annotation struct {
	Captured bool     `json:"captured"` // always true: marks the schema in templates
	Fields   []string `json:"fields,omitempty"`
	Exclude  []string `json:"exclude,omitempty"`
	// The templates, so that an unknown name fails `go generate`.
	Topic       string `json:"topic,omitempty"`
	OrderingKey string `json:"ordering_key,omitempty"`
	// Tenant is Options.Tenant, so that a column the schema lacks fails
	// `go generate`.
	Tenant string `json:"tenant,omitempty"`
}

// Name implements schema.Annotation.
func (Annotation) Name() string { return annotation.Capture }

// Mixin declares change capture on the schemas that use it:
//
//	func (Loan) Mixin() []ent.Mixin {
//		return []ent.Mixin{entcapture.Mixin(envelope.Options{Payload: envelope.BeforeAndAfter})}
//	}
//
// Put it on a shared base mixin and every schema built on that base is
// captured, each under its own name. The schemas' generated code must
// come from a code generation that uses Extension, and the program must
// import the generated ent/runtime package (which installs schema hooks).
func Mixin(opts envelope.Options) ent.Mixin {
	return &captureMixin{opts: opts}
}

type captureMixin struct {
	mixin.Schema
	opts envelope.Options
}

var _ ent.Mixin = (*captureMixin)(nil)

// Hooks implements ent.Mixin: the capture hook.
func (m *captureMixin) Hooks() []ent.Hook {
	h := &hook{opts: m.opts}
	return []ent.Hook{h.wrap}
}

// Annotations implements ent.Mixin.
func (m *captureMixin) Annotations() []schema.Annotation {
	return []schema.Annotation{Annotation{Captured: true, Fields: m.opts.Fields, Exclude: m.opts.Exclude,
		Topic: m.opts.Topic, OrderingKey: m.opts.OrderingKey, Tenant: m.opts.Tenant}}
}
