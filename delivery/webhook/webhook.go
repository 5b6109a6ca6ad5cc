package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
)

// Defaults and limits.
const (
	// DefaultSignatureHeader carries the SchemeHerald signature when
	// Config.SignatureHeader is "".
	DefaultSignatureHeader = "herald-signature"
	// MaxErrorBody is how much of a refusing response's body, at most, an
	// error (and so the event's last_error) quotes, in bytes.
	MaxErrorBody = 2000
	// maxDrain is how much of a 2xx response's body is read so the
	// connection can be reused; a longer body is left and its connection
	// closed.
	maxDrain = 64 << 10
)

// ErrURLRefused marks an event whose URL was refused before any request:
// by Config.AllowURL, or by the dial guard because the host resolves to a
// loopback, link-local, private or otherwise internal address. It wraps
// delivery.ErrDelivery; the event is retried like any failure.
var ErrURLRefused = fmt.Errorf("herald/webhook: URL refused: %w", delivery.ErrDelivery)

// Target is where one event goes, as Config.Target says.
type Target struct {
	URL     string            // http or https
	Secret  string            // signs this event's request; not together with Config.Secret
	Headers map[string]string // added to the request; they win over Config.Headers
}

// Config configures a Delivery. Exactly one of URL and Target is set.
type Config struct {
	// URL receives every event. Not together with Target.
	URL string
	// Target gives each event its URL, secret and headers (a subscriber's
	// endpoint). Not together with URL. An error it returns fails the
	// event.
	Target func(ctx context.Context, e *envelope.Event) (Target, error)

	// Secret signs every request; "" = unsigned (unless the Target gives
	// one). With SchemeStandard it is the Standard Webhooks secret,
	// "whsec_" followed by base64.
	Secret string
	// Scheme is how requests are signed; the zero value is SchemeHerald.
	Scheme Scheme
	// SignatureHeader names the SchemeHerald signature header;
	// "" = DefaultSignatureHeader ("herald-signature"). Another name suits
	// receivers that expect their own (X-Webhook-Signature).
	SignatureHeader string

	// Headers are added to every request. A Target's headers, then the
	// event's own headers, then herald-event-id and herald-topic, then the
	// signature win over them.
	Headers map[string]string

	// AllowURL is called before every request; false refuses the URL: no
	// request is made and the event fails (ErrURLRefused) and is retried.
	// nil = every URL the dial guard lets through. Use it to check a
	// subscriber's URL against what the service allows.
	AllowURL func(ctx context.Context, u *url.URL) bool

	// AllowNetworks are networks the dial guard lets through although they
	// are internal (127.0.0.0/8 for a receiver on the same host, 10.0.0.0/8
	// for a service in the cluster). By default the guard refuses, at
	// connection time and so after DNS resolution, loopback, link-local
	// (169.254.169.254, the cloud metadata address), private (RFC 1918,
	// fc00::/7), shared (100.64.0.0/10), unspecified and multicast
	// addresses, and IPv6 addresses that carry one of them (NAT64, 6to4,
	// Teredo, IPv4-compatible and -translated; see GuardControl).
	AllowNetworks []netip.Prefix

	// Client sends the requests; nil = a client of the delivery's own with
	// the dial guard and no proxy. A given client is used for its transport
	// only: redirects are still never followed, and the dial guard is
	// NOT installed (guard its dialer with GuardControl). The delivery does
	// not close a given client's connections.
	Client *http.Client
}

// Delivery POSTs each event's payload to a webhook. It is a plain
// delivery.Delivery: the relay calls it for up to its Concurrency events
// at once.
type Delivery struct {
	cfg       Config
	url       *url.URL // when cfg.URL is set
	key       []byte   // decoded cfg.Secret
	client    *http.Client
	transport *http.Transport // own, closed by Close
	closeOnce sync.Once
	now       func() time.Time
}

var _ delivery.Delivery = (*Delivery)(nil)

func cfgErr(field, format string, args ...any) error {
	return outbox.Configurationf("webhook.Config."+field, format, args...)
}

// New checks cfg and returns a Delivery.
func New(cfg Config) (*Delivery, error) {
	switch {
	case cfg.URL == "" && cfg.Target == nil:
		return nil, cfgErr("URL", "neither URL nor Target is set; give the endpoint's URL or a Target func")
	case cfg.URL != "" && cfg.Target != nil:
		return nil, cfgErr("Target", "set together with URL; give one of them")
	case cfg.Scheme != SchemeHerald && cfg.Scheme != SchemeStandard:
		return nil, cfgErr("Scheme", "unknown scheme %d", int(cfg.Scheme))
	case cfg.Scheme == SchemeStandard && cfg.SignatureHeader != "":
		return nil, cfgErr("SignatureHeader", "set with SchemeStandard, whose headers are fixed (webhook-id, webhook-timestamp, webhook-signature)")
	case cfg.SignatureHeader != "" && !validHeaderName(cfg.SignatureHeader):
		return nil, cfgErr("SignatureHeader", "%q is not a valid header name", cfg.SignatureHeader)
	}
	for k, v := range cfg.Headers {
		if !validHeaderName(k) || !validHeaderValue(v) {
			return nil, cfgErr("Headers", "%q: %q is not a valid header", k, v)
		}
	}
	d := &Delivery{cfg: cfg, now: time.Now}
	if d.cfg.SignatureHeader == "" {
		d.cfg.SignatureHeader = DefaultSignatureHeader
	}
	if cfg.URL != "" {
		u, err := parseURL(cfg.URL)
		if err != nil {
			return nil, cfgErr("URL", "%v", err)
		}
		d.url = u
		if cfg.Client == nil {
			if err := guardedHost(u, cfg.AllowNetworks); err != nil {
				return nil, cfgErr("AllowNetworks", "%v", err)
			}
		}
	}
	if cfg.Secret != "" {
		key, err := decodeSecret(cfg.Scheme, cfg.Secret)
		if err != nil {
			return nil, cfgErr("Secret", "%v", err)
		}
		d.key = key
	}
	if cfg.Client != nil {
		c := *cfg.Client
		c.CheckRedirect = noRedirects
		d.client = &c
	} else {
		dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: GuardControl(cfg.AllowNetworks)}
		d.transport = &http.Transport{
			Proxy:                 nil, // the guard checks the address dialled: no proxy in between
			DialContext:           dialer.DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          100,
			MaxIdleConnsPerHost:   32, // a relay's Concurrency to one endpoint
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ExpectContinueTimeout: time.Second,
		}
		d.client = &http.Client{Transport: d.transport, CheckRedirect: noRedirects}
	}
	return d, nil
}

// noRedirects makes the client return a 3xx as it is: the URL checked is
// the URL requested, and a redirect is a failure.
func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

func parseURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("bad URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("URL %s: scheme %q, want http or https", redact(u), u.Scheme)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("URL %s has no host", redact(u))
	}
	return u, nil
}

// guardedHost returns an error when the dial guard of the delivery's own
// client would refuse every connection to u: its host is an internal IP
// address, or localhost, outside allow. A name is resolved only when
// dialled, so New cannot judge it; the guard still does.
func guardedHost(u *url.URL, allow []netip.Prefix) error {
	host := u.Hostname()
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip.WithZone("").Unmap()}
	} else if h := strings.ToLower(strings.TrimSuffix(host, ".")); h == "localhost" || strings.HasSuffix(h, ".localhost") {
		// RFC 6761: localhost names resolve to loopback.
		ips = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("::1")}
	}
	for _, ip := range ips {
		if allowed(ip, allow) || !internal(ip) {
			return nil
		}
	}
	if len(ips) == 0 {
		return nil
	}
	return fmt.Errorf("URL %s: %s is an internal address, which the dial guard refuses; allow its network in AllowNetworks (127.0.0.0/8 and ::1/128 for this host, 10.0.0.0/8 for the cluster)", redact(u), host)
}

// redact is u without user info, query and fragment, which may hold
// credentials: what errors (and last_error) show.
func redact(u *url.URL) string {
	return (&url.URL{Scheme: u.Scheme, Host: u.Host, Path: u.Path}).String()
}

// Deliver POSTs e's payload and returns nil for a 2xx answer. A refused
// URL, a transport error, a 3xx (never followed) or any other status
// fails the event; the error of a refusing answer is a *StatusError
// quoting the start of its body.
func (d *Delivery) Deliver(ctx context.Context, e *envelope.Event) error {
	u, key, hs, err := d.target(ctx, e)
	if err != nil {
		return err
	}
	if d.cfg.AllowURL != nil && !d.cfg.AllowURL(ctx, u) {
		return fmt.Errorf("herald/webhook: event %s: %s refused by AllowURL: %w", e.ID, redact(u), ErrURLRefused)
	}
	body := delivery.Body(e)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("herald/webhook: event %s: %w", e.ID, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "herald-webhook")
	for k, v := range d.cfg.Headers {
		req.Header.Set(k, v)
	}
	for k, v := range hs {
		req.Header.Set(k, v)
	}
	for k, v := range delivery.Headers(e) {
		req.Header.Set(k, v)
	}
	if key != nil {
		switch d.cfg.Scheme {
		case SchemeStandard:
			id, ts := e.ID.String(), strconv.FormatInt(d.now().Unix(), 10)
			req.Header.Set(HeaderWebhookID, id)
			req.Header.Set(HeaderWebhookTimestamp, ts)
			req.Header.Set(HeaderWebhookSignature, SignStandard(key, id, ts, body))
		default:
			req.Header.Set(d.cfg.SignatureHeader, Sign(key, body))
		}
	}
	resp, err := d.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its text repeats the URL, query included
		}
		if errors.Is(err, errAddressRefused) {
			return fmt.Errorf("herald/webhook: event %s: POST %s: %w: %w", e.ID, redact(u), ErrURLRefused, err)
		}
		return fmt.Errorf("herald/webhook: event %s: POST %s: %w", e.ID, redact(u), err)
	}
	defer resp.Body.Close()
	// Every read of the body ends with ctx. net/http ends an ordinary
	// body's reads with the request's context, but the body of a
	// 101 Switching Protocols is the raw connection, which nothing
	// closes: an endpoint that switches protocols and then stays silent
	// would hold the delivery (and its batch, and its lease) for ever.
	stop := context.AfterFunc(ctx, func() { _ = resp.Body.Close() })
	defer stop()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxDrain))
		return nil
	}
	var b []byte
	if resp.StatusCode >= 200 {
		// Read a little more than is quoted, to mark the cut. A 1xx
		// (101, the only one net/http returns) has no body to quote.
		b, _ = io.ReadAll(io.LimitReader(resp.Body, MaxErrorBody+1))
	}
	se := &StatusError{EventID: e.ID.String(), URL: redact(u), StatusCode: resp.StatusCode, Body: clean(b, MaxErrorBody)}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		se.Location = clean([]byte(resp.Header.Get("Location")), 500)
	}
	return se
}

// target resolves the URL, signing key and extra headers of e.
func (d *Delivery) target(ctx context.Context, e *envelope.Event) (*url.URL, []byte, map[string]string, error) {
	if d.cfg.Target == nil {
		return d.url, d.key, nil, nil
	}
	t, err := d.cfg.Target(ctx, e)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("herald/webhook: event %s: Target: %w", e.ID, err)
	}
	u, err := parseURL(t.URL)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("herald/webhook: event %s: %w", e.ID,
			outbox.Configurationf("webhook.Target.URL", "%v", err))
	}
	key := d.key
	if t.Secret != "" {
		if d.key != nil {
			return nil, nil, nil, fmt.Errorf("herald/webhook: event %s: %w", e.ID,
				outbox.Configurationf("webhook.Target.Secret", "the Target gives a secret and Config.Secret is set too; keep one of them"))
		}
		if key, err = decodeSecret(d.cfg.Scheme, t.Secret); err != nil {
			return nil, nil, nil, fmt.Errorf("herald/webhook: event %s: %w", e.ID,
				outbox.Configurationf("webhook.Target.Secret", "%v", err))
		}
	}
	for k, v := range t.Headers {
		if !validHeaderName(k) || !validHeaderValue(v) {
			return nil, nil, nil, fmt.Errorf("herald/webhook: event %s: %w", e.ID,
				outbox.Configurationf("webhook.Target.Headers", "%q: %q is not a valid header", k, v))
		}
	}
	return u, key, maps.Clone(t.Headers), nil
}

// Close closes the idle connections of the delivery's own client. Safe to
// call twice.
func (d *Delivery) Close() error {
	d.closeOnce.Do(func() {
		if d.transport != nil {
			d.transport.CloseIdleConnections()
		}
	})
	return nil
}

// StatusError is the error of an answer other than 2xx. It wraps
// delivery.ErrDelivery.
type StatusError struct {
	EventID    string
	URL        string // without user info and query
	StatusCode int
	Location   string // a redirect's target, which is never followed
	Body       string // the start of the body, valid UTF-8 without NUL
}

func (e *StatusError) Error() string {
	s := fmt.Sprintf("herald/webhook: event %s: POST %s: status %d %s", e.EventID, e.URL, e.StatusCode, http.StatusText(e.StatusCode))
	if e.Location != "" {
		s += " (redirect to " + e.Location + ", not followed)"
	}
	if e.Body != "" {
		s += ": " + e.Body
	}
	return s
}

// Unwrap returns delivery.ErrDelivery.
func (e *StatusError) Unwrap() error { return delivery.ErrDelivery }

// clean makes b safe to store as text: invalid UTF-8 and NUL (which
// PostgreSQL's text and jsonb refuse) become U+FFFD, and it is cut to at
// most n bytes on a rune boundary, "…" marking the cut.
func clean(b []byte, n int) string {
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

// errAddressRefused is what the dial guard's Control returns.
var errAddressRefused = errors.New("address refused by the dial guard")

// GuardControl returns a net.Dialer Control function that refuses to
// connect to loopback, link-local, private (RFC 1918, fc00::/7), shared
// (100.64.0.0/10), unspecified (0.0.0.0/8, ::) and multicast addresses,
// unless they lie in one of allow. An IPv6 address that carries an IPv4
// address — NAT64 (64:ff9b::/96), 6to4 (2002::/16), Teredo (2001::/32),
// IPv4-compatible (::a.b.c.d), IPv4-mapped and IPv4-translated
// (::ffff:0:a.b.c.d) — is judged by the IPv4 address it carries (either
// may be in allow), and the local-use NAT64 prefix 64:ff9b:1::/48, whose
// IPv4 address sits where its operator chose, is refused unless allowed.
// It runs after DNS resolution, on the address actually
// dialled, so a hostname that resolves (or re-resolves) to an internal
// address is refused too. The delivery's own client uses it; install it
// in a Client you give to keep the guard.
func GuardControl(allow []netip.Prefix) func(network, address string, c syscall.RawConn) error {
	return func(network, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("%w: cannot parse %q", errAddressRefused, address)
		}
		ip := ap.Addr().Unmap()
		if allowed(ip, allow) {
			return nil
		}
		if internal(ip) {
			return fmt.Errorf("%w: %s is an internal address (allow its network in webhook.Config.AllowNetworks)", errAddressRefused, describe(ip))
		}
		return nil
	}
}

var sharedSpace = netip.MustParsePrefix("100.64.0.0/10")

// validHeaderName reports whether s is an HTTP token (RFC 9110 §5.1).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether s may be sent as a header value: no
// control characters but tab (bytes from 0x80, UTF-8, are allowed).
func validHeaderValue(s string) bool {
	for i := range len(s) {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
