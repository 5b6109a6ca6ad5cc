package envelope

import (
	"context"
	"sort"
	"sync/atomic"

	"github.com/heraldgo/herald/internal/ctxhdr"
	"github.com/heraldgo/herald/jsonform"
)

func init() { ctxhdr.JSON = headersJSONFromContext }

// ContextHeaders returns headers for the events of a write, taken from the
// write's context: the W3C trace context (traceparent, tracestate) is what
// otelherald.RecordTraceContext installs. It is called once per write with
// the write's ctx and must not keep or change what it is given; nil or an
// empty map adds nothing.
type ContextHeaders func(ctx context.Context) map[string]string

var contextHeaders atomic.Pointer[ContextHeaders]

// SetContextHeaders installs f for every write of the process (Write,
// hence Enqueue and every captured write of gormcapture and entcapture,
// including the writes they fuse into one SQL statement); nil removes it. It returns a function that restores
// the previous one.
//
// A header f returns is added to an event only when the event's message
// does not set it (Message.Headers and Extend's headers win). Headers
// whose name is empty, or whose name or value holds a NUL or invalid
// UTF-8, are dropped rather than failing the write.
//
// The hook is process-wide, as OpenTelemetry's propagator is, so that
// every writer — those gormcapture and entcapture build inside — records
// it without being handed anything; envelope itself imports no
// OpenTelemetry.
func SetContextHeaders(f ContextHeaders) (restore func()) {
	var p *ContextHeaders
	if f != nil {
		p = &f
	}
	old := contextHeaders.Swap(p)
	return func() { contextHeaders.Store(old) }
}

// headersFromContext returns the headers the hook of SetContextHeaders
// gives for ctx, without those it must drop; nil when there is no hook or
// it gives none.
func headersFromContext(ctx context.Context) map[string]string {
	p := contextHeaders.Load()
	if p == nil {
		return nil
	}
	h := (*p)(ctx)
	if len(h) == 0 {
		return nil
	}
	out := make(map[string]string, len(h))
	for k, v := range h {
		if k != "" && checkText(k) == "" && checkText(v) == "" {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// headersJSONFromContext is headersFromContext(ctx) as the JSON object an
// event's headers column holds ("{}" for none), for the statements the
// capture plugins build their events in (through internal/ctxhdr).
func headersJSONFromContext(ctx context.Context) string {
	return string(appendHeadersJSON(nil, headersFromContext(ctx)))
}

// appendHeadersJSON appends h as a JSON object, its names sorted.
func appendHeadersJSON(b []byte, h map[string]string) []byte {
	b = append(b, '{')
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	sort.Strings(names)
	for j, k := range names {
		if j > 0 {
			b = append(b, ',')
		}
		b = jsonform.AppendString(b, k)
		b = append(b, ':')
		b = jsonform.AppendString(b, h[k])
	}
	return append(b, '}')
}

// withContextHeaders returns m's headers with those of ctx it does not
// set; m.Headers itself when there are none to add.
func withContextHeaders(m map[string]string, ctx map[string]string) map[string]string {
	var out map[string]string
	for k, v := range ctx {
		if _, ok := m[k]; ok {
			continue
		}
		if out == nil {
			out = make(map[string]string, len(m)+len(ctx))
			for k, v := range m {
				out[k] = v
			}
		}
		out[k] = v
	}
	if out == nil {
		return m
	}
	return out
}
