package inbox

import (
	"context"
	"database/sql"
)

// Handler is what an adapter (kafkainbox, redisinbox, amqpinbox) runs for
// each message M it receives: exactly one of its fields. The adapter
// acknowledges a message to its transport only after Handle returned
// (the id and the effect committed), so a crash before that redelivers it
// and the inbox makes the repeat a Duplicate.
type Handler[M any] struct {
	// Tx runs in a transaction with the id (Inbox.Handle): effectively
	// once.
	Tx func(ctx context.Context, tx *sql.Tx, m M) error
	// Once runs after the id's commit (Inbox.HandleOnce): at most once.
	Once func(ctx context.Context, m M) error
	// Func does it itself with in — gorminbox.Handle, inbox.HandleTx with
	// an ent client — and returns the outcome.
	Func func(ctx context.Context, in *Inbox, id Message, m M) (Outcome, error)
}

// Validate checks that exactly one field is set; where names the option.
func (h Handler[M]) Validate(where string) error {
	n := 0
	for _, set := range []bool{h.Tx != nil, h.Once != nil, h.Func != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return cfgErr(where, "set exactly one of Tx, Once and Func (%d set)", n)
	}
	return nil
}

// Run handles m, whose inbox message is id, the way the set field says.
func (h Handler[M]) Run(ctx context.Context, in *Inbox, id Message, m M) (Outcome, error) {
	switch {
	case h.Tx != nil:
		return in.Handle(ctx, id, func(ctx context.Context, tx *sql.Tx) error { return h.Tx(ctx, tx, m) })
	case h.Once != nil:
		return in.HandleOnce(ctx, id, func(ctx context.Context) error { return h.Once(ctx, m) })
	}
	return h.Func(ctx, in, id, m)
}
