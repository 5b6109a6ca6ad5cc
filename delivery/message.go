package delivery

import (
	"sort"
	"strconv"
	"strings"

	"github.com/heraldgo/herald/envelope"
)

// The headers every delivery adds to the event's own. They win over an
// event header of the same name, whatever its case: an event header
// "Herald-Event-Id" is dropped, not sent beside herald's own.
const (
	HeaderEventID     = "herald-event-id"     // the event's id, what receivers de-duplicate on
	HeaderTopic       = "herald-topic"        // the event's topic
	HeaderSequence    = "herald-sequence"     // the event's sequence in decimal, what receivers order a key's events on
	HeaderOrderingKey = "herald-ordering-key" // the event's ordering key; absent for an unordered event
	HeaderTenant      = "herald-tenant"       // the event's tenant (envelope.Event.Tenant); absent for an event without one
)

// reserved reports whether name is one of herald's own headers, in any
// case.
func reserved(name string) bool {
	if len(name) < len("herald-") || !strings.EqualFold(name[:len("herald-")], "herald-") {
		return false
	}
	for _, h := range [...]string{HeaderEventID, HeaderTopic, HeaderSequence, HeaderOrderingKey, HeaderTenant} {
		if strings.EqualFold(name, h) {
			return true
		}
	}
	return false
}

// Body returns the message body of e: its JSON payload ("null" when the
// event has none).
func Body(e *envelope.Event) []byte {
	if len(e.Payload) == 0 {
		return []byte("null")
	}
	return e.Payload
}

// Headers returns the message headers of e: its own headers plus
// HeaderEventID, HeaderTopic, HeaderSequence, for an ordered event
// HeaderOrderingKey and for an event of a tenant HeaderTenant. An event
// header whose name is one of those in any case is left out, so herald's
// values are the only ones sent even by transports whose header names are
// case-insensitive (HTTP). The map is new; the caller may keep it.
func Headers(e *envelope.Event) map[string]string {
	h := make(map[string]string, len(e.Headers)+5)
	for k, v := range e.Headers {
		if !reserved(k) {
			h[k] = v
		}
	}
	h[HeaderEventID] = e.ID.String()
	h[HeaderTopic] = e.Topic
	h[HeaderSequence] = strconv.FormatInt(e.Sequence, 10)
	if e.OrderingKey != "" {
		h[HeaderOrderingKey] = e.OrderingKey
	}
	if e.Tenant != "" {
		h[HeaderTenant] = e.Tenant
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

// The operation suffixes ByAggregate removes: the last part of the
// default captured topic, "{namespace}.{model}.{operation}".
var operationSuffixes = [...]string{
	"." + string(envelope.Inserted),
	"." + string(envelope.Updated),
	"." + string(envelope.Deleted),
}

// ByAggregate is the default destination of every transport: the event's
// topic less a last part naming an operation (".inserted", ".updated",
// ".deleted"), so that a captured row's events — "shop.order.inserted",
// "shop.order.updated", "shop.order.deleted" at the default topic
// template — all go to "shop.order", in sequence order, and a consumer of
// that one destination sees a row's insert before its update. A topic
// that does not end so ("mail.send") is its own destination.
//
// It groups what the default topic template splits. Events of one
// ordering key under topics that differ otherwise — a topic template with
// {operation} elsewhere than at the end, your own messages that share a
// key across topics ("order.placed", "order.shipped") — need a
// destination function that maps them to one destination.
func ByAggregate(e *envelope.Event) string {
	for _, s := range operationSuffixes {
		if base, ok := strings.CutSuffix(e.Topic, s); ok && base != "" {
			return base
		}
	}
	return e.Topic
}

// ByTopic is the event's topic as it is: one destination per topic, as
// transports did before ByAggregate was their default. Events of one key
// under several topics then reach several destinations, with no order
// between them.
func ByTopic(e *envelope.Event) string { return e.Topic }
