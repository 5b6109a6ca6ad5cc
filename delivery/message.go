package delivery

import (
	"slices"
	"sort"
	"strings"

	"github.com/heraldgo/herald/envelope"
)

// The headers every delivery adds to the event's own. They win over an
// event header of the same name.
const (
	HeaderEventID = "herald-event-id" // the event's id, what receivers de-duplicate on
	HeaderTopic   = "herald-topic"    // the event's topic
)

// Body returns the message body of e: its JSON payload ("null" when the
// event has none).
func Body(e *envelope.Event) []byte {
	if len(e.Payload) == 0 {
		return []byte("null")
	}
	return e.Payload
}

// Headers returns the message headers of e: its own headers plus
// HeaderEventID and HeaderTopic. An event header whose name is one of
// herald's in another case ("Herald-Event-Id") is left out: HTTP header
// names, and many consumers' lookups, ignore case, and the value they find
// must be herald's. The map is new; the caller may keep it.
func Headers(e *envelope.Event) map[string]string {
	h := make(map[string]string, len(e.Headers)+2)
	// herald's own first; then the event's, but none that shadows them.
	h[HeaderEventID] = e.ID.String()
	h[HeaderTopic] = e.Topic
	own := make([]string, 0, len(h))
	for k := range h {
		own = append(own, k)
	}
	for k, v := range e.Headers {
		if !slices.ContainsFunc(own, func(o string) bool { return strings.EqualFold(o, k) }) {
			h[k] = v
		}
	}
	return h
}

// Header is one message header.
type Header struct{ Name, Value string }

// HeaderList returns Headers(e) as a list sorted by name, for transports
// whose headers are a list (Kafka records, AMQP tables built in order).
func HeaderList(e *envelope.Event) []Header {
	h := Headers(e)
	out := make([]Header, 0, len(h))
	for k, v := range h {
		out = append(out, Header{k, v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Key returns the message key of e: its ordering key, or nil for an
// unordered event (a Kafka producer then spreads such events over the
// partitions).
func Key(e *envelope.Event) []byte {
	if e.OrderingKey == "" {
		return nil
	}
	return []byte(e.OrderingKey)
}
