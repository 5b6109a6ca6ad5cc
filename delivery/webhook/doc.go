// Package webhook delivers herald events as HTTP POST requests.
//
// Each event is one POST of its JSON payload, with the event's headers,
// herald-event-id, herald-topic, herald-sequence and herald-ordering-key
// (delivery.Headers) as request headers, to Config.URL or to
// the URL a per-event Config.Target gives (a subscriber's endpoint, with
// its own secret and headers). With a secret the request is signed:
// `herald-signature: sha256=<hex HMAC-SHA256 of the body>` (SchemeHerald,
// the header name configurable) or the Standard Webhooks headers
// (SchemeStandard), which that scheme's libraries verify; Verify and
// Verifier check both for receivers written in Go.
//
// Requests to internal addresses are refused: Config.AllowURL is asked
// before every request, and the client's dialer refuses loopback,
// link-local (the cloud metadata address 169.254.169.254), private and
// other internal addresses after DNS resolution — IPv6 addresses that
// carry an IPv4 one (NAT64, 6to4, Teredo, IPv4-compatible, -mapped and
// -translated) are judged by the IPv4 address they carry — unless
// Config.AllowNetworks lets them through; New refuses a Config.URL whose
// host the guard would refuse every time (an internal IP address,
// localhost) with an envelope.ErrConfiguration naming AllowNetworks.
// Redirects are never followed, so the URL checked is the URL requested.
//
// Every answer's body is read within the delivery's context, a
// 101 Switching Protocols (whose body is the raw connection) included: an
// endpoint that answers and then goes silent fails the event when the
// relay's DeliveryTimeout ends.
//
// Guarantee: Deliver returns nil only for a 2xx answer. A refused URL, a
// transport error, a timeout (the relay's DeliveryTimeout, through the
// context), a redirect or any other status fails the event, and the relay
// tries it again; the error — in the event's last_error — names the
// status and quotes the start of the body, made valid UTF-8 without NUL.
package webhook
