package entsnippets

import (
	"entgo.io/ent"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/envelope"
)

// Loan is the schema of entcapture.Mixin's documentation.
type Loan struct{ ent.Schema }

func (Loan) Mixin() []ent.Mixin {
	return []ent.Mixin{entcapture.Mixin(envelope.Options{Payload: envelope.BeforeAndAfter})}
}
