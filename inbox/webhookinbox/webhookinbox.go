// Package webhookinbox is an HTTP middleware for receivers of herald's
// webhooks: it verifies the request's signature (HMAC or Standard
// Webhooks, with the webhook package's Verifier) and de-duplicates it
// through an inbox in one step. The wrapped handler runs once per event
// id; a repeat is answered with the first answer's status and the header
// Herald-Inbox: duplicate, without running it.
//
// By default the handler runs in a database transaction (Tx(ctx) gives
// it) that also records the id: a 2xx answer commits both, any other
// answer or a panic rolls both back, so herald's retry runs the handler
// again. With Config.AtMostOnce the id commits first and the handler runs
// after, for effects outside the database: never twice, and a crash (or
// a lost connection) between the two loses that one effect.
package webhookinbox

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/heraldgo/herald/delivery/webhook"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/internal/outbox"
)

// HeaderInbox is set to "duplicate" on the answer to a repeat.
const HeaderInbox = "Herald-Inbox"

// DefaultMaxBody is Config.MaxBody's default: 1 MiB.
const DefaultMaxBody = 1 << 20

// Config configures a Consumer.
type Config struct {
	// Verifier checks each request's signature (its Secret and Scheme
	// must be the delivery's); a request that fails gets 401 and nothing
	// runs. Required unless Unsigned.
	Verifier webhook.Verifier
	// Unsigned accepts requests without checking a signature (a receiver
	// behind its own authentication). Not together with Verifier.Secret.
	Unsigned bool
	// Next handles each new event; required. In transactional mode it
	// does its database work through Tx(r.Context()).
	Next http.Handler
	// AtMostOnce records the id before Next runs (Inbox.HandleOnce)
	// instead of in Next's transaction: for effects outside the database.
	AtMostOnce bool
	// ExtractID gives a request's inbox message; nil = inbox.FromHeaders
	// of its headers (herald-event-id, …). An error is a 400.
	ExtractID func(r *http.Request) (inbox.Message, error)
	// MaxBody bounds a request's body; 0 = DefaultMaxBody. A larger one is
	// a 413.
	MaxBody int64
}

// Consumer is the middleware: an http.Handler.
type Consumer struct {
	in  *inbox.Inbox
	cfg Config
}

func cfgErr(field, format string, args ...any) error {
	return outbox.Configurationf("webhookinbox.Config."+field, format, args...)
}

// New returns the middleware for in around cfg.Next.
func New(in *inbox.Inbox, cfg Config) (*Consumer, error) {
	switch {
	case in == nil:
		return nil, cfgErr("inbox", "nil *inbox.Inbox")
	case cfg.Next == nil:
		return nil, cfgErr("Next", "nil: the handler of new events")
	case cfg.Unsigned && cfg.Verifier.Secret != "":
		return nil, cfgErr("Unsigned", "set together with Verifier.Secret; give one of them")
	case !cfg.Unsigned && cfg.Verifier.Secret == "":
		return nil, cfgErr("Verifier", "no Secret: give the delivery's secret, or set Unsigned to accept unsigned requests")
	case cfg.MaxBody < 0:
		return nil, cfgErr("MaxBody", "negative")
	}
	if cfg.ExtractID == nil {
		cfg.ExtractID = func(r *http.Request) (inbox.Message, error) {
			h := make(map[string]string, len(r.Header))
			for k, v := range r.Header {
				h[k] = v[0]
			}
			return inbox.FromHeaders(h)
		}
	}
	if cfg.MaxBody == 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	return &Consumer{in: in, cfg: cfg}, nil
}

type ctxKey struct{}

// Tx is, inside Next in transactional mode, the transaction that records
// the event's id: do the handler's database work in it. nil otherwise.
func Tx(ctx context.Context) *sql.Tx {
	tx, _ := ctx.Value(ctxKey{}).(*sql.Tx)
	return tx
}

// recorder holds Next's answer until the transaction is decided.
type recorder struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.h }
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
func (r *recorder) WriteHeader(s int) {
	if r.status == 0 {
		r.status = s
	}
}

// ok: a handler that wrote nothing answered 200, as net/http sends it.
func (r *recorder) ok() bool { return r.status == 0 || (r.status >= 200 && r.status < 300) }

func (r *recorder) send(w http.ResponseWriter) {
	for k, v := range r.h {
		w.Header()[k] = v
	}
	if r.status == 0 {
		r.status = http.StatusOK
	}
	w.WriteHeader(r.status)
	_, _ = w.Write(r.body.Bytes())
}

var errNot2xx = errors.New("webhookinbox: the handler answered other than 2xx")

// ServeHTTP implements http.Handler.
func (c *Consumer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, c.cfg.MaxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			http.Error(w, "body too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "reading the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	if !c.cfg.Unsigned {
		if err := c.cfg.Verifier.Verify(r.Header, body); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
	}
	m, err := c.cfg.ExtractID(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rec := &recorder{h: http.Header{}}
	next := func(ctx context.Context) error {
		r2 := r.WithContext(ctx)
		r2.Body = io.NopCloser(bytes.NewReader(body))
		c.cfg.Next.ServeHTTP(rec, r2)
		if !rec.ok() {
			return errNot2xx
		}
		inbox.SetResult(ctx, strconv.Itoa(max(rec.status, http.StatusOK)))
		return nil
	}
	ctx := r.Context()
	var out inbox.Outcome
	if c.cfg.AtMostOnce {
		out, err = c.in.HandleOnce(ctx, m, next)
		if err == nil && out == inbox.Processed {
			// Best effort: a repeat answers this status (else 200).
			_ = c.in.Keep(context.WithoutCancel(ctx), m.ID, strconv.Itoa(max(rec.status, http.StatusOK)))
		}
	} else {
		out, err = inbox.HandleTx(ctx, c.in, m,
			func(ctx context.Context) (*sql.Tx, error) { return c.in.DB().BeginTx(ctx, nil) },
			func(ctx context.Context, tx *sql.Tx) error { return next(context.WithValue(ctx, ctxKey{}, tx)) })
	}
	switch {
	case errors.Is(err, errNot2xx):
		rec.send(w) // rolled back: herald retries
	case err != nil:
		http.Error(w, fmt.Sprintf("herald/webhookinbox: %v", err), http.StatusInternalServerError)
	case out == inbox.Duplicate:
		status := http.StatusOK
		if rd, ok, lerr := c.in.Lookup(ctx, m.ID); lerr == nil && ok && rd.HasResult {
			if s, err := strconv.Atoi(rd.Result); err == nil {
				status = s
			}
		}
		w.Header().Set(HeaderInbox, "duplicate")
		w.WriteHeader(status)
	case out == inbox.Stale:
		w.Header().Set(HeaderInbox, "stale")
		w.WriteHeader(http.StatusOK)
	default:
		rec.send(w)
	}
}
