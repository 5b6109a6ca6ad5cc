package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Scheme is how a Delivery signs its requests.
type Scheme int

const (
	// SchemeHerald (the zero value) sends
	// `herald-signature: sha256=<hex HMAC-SHA256(secret, body)>`, the
	// secret taken as its bytes; the header name is configurable.
	SchemeHerald Scheme = iota
	// SchemeStandard signs as Standard Webhooks (standardwebhooks.com)
	// does, so the scheme's libraries verify it: `webhook-id` (the event
	// id), `webhook-timestamp` (Unix seconds) and
	// `webhook-signature: v1,<base64 HMAC-SHA256(key, id.timestamp.body)>`,
	// the secret given as "whsec_<base64 key>".
	SchemeStandard
)

// The Standard Webhooks headers.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
)

// DefaultTolerance is how far a Standard Webhooks timestamp may be from
// the receiver's clock when Verifier.Tolerance is zero (the scheme's own
// libraries use five minutes too).
const DefaultTolerance = 5 * time.Minute

// ErrSignature marks a request whose signature is missing, malformed or
// wrong, or whose timestamp is out of tolerance.
var ErrSignature = errors.New("herald/webhook: bad signature")

// standardPrefix starts a Standard Webhooks secret.
const standardPrefix = "whsec_"

// decodeSecret returns the HMAC key of secret under scheme.
func decodeSecret(scheme Scheme, secret string) ([]byte, error) {
	if scheme != SchemeStandard {
		return []byte(secret), nil
	}
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, standardPrefix))
	if err != nil || len(key) == 0 {
		return nil, fmt.Errorf("a Standard Webhooks secret is %q followed by the base64 of the key", standardPrefix)
	}
	return key, nil
}

// Sign returns the SchemeHerald signature of body under key:
// "sha256=" and the hex HMAC-SHA256.
func Sign(key, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(body)
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// SignStandard returns the Standard Webhooks signature ("v1,<base64>") of
// a message id, a timestamp (Unix seconds as text) and body under key.
func SignStandard(key []byte, id, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(timestamp))
	m.Write([]byte{'.'})
	m.Write(body)
	return "v1," + base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// Verifier checks the signature of a request a Delivery sent, for
// receivers written in Go.
type Verifier struct {
	// Secret is the secret the delivery signs with (for SchemeStandard,
	// "whsec_…").
	Secret string
	// Scheme is the delivery's scheme; zero = SchemeHerald.
	Scheme Scheme
	// SignatureHeader is the SchemeHerald header; "" = DefaultSignatureHeader.
	SignatureHeader string
	// Tolerance bounds the age (and future skew) of a SchemeStandard
	// timestamp; 0 = DefaultTolerance.
	Tolerance time.Duration
	// Now is the receiver's clock; nil = time.Now.
	Now func() time.Time
}

// Verify checks the signature of a request with header h and body; it
// returns nil or an error matching ErrSignature. body must be the request
// body exactly as received.
func (v Verifier) Verify(h http.Header, body []byte) error {
	key, err := decodeSecret(v.Scheme, v.Secret)
	if err != nil {
		return fmt.Errorf("herald/webhook: Verifier.Secret: %w", err)
	}
	if v.Scheme != SchemeStandard {
		name := v.SignatureHeader
		if name == "" {
			name = DefaultSignatureHeader
		}
		got := h.Get(name)
		if got == "" {
			return fmt.Errorf("%w: no %s header", ErrSignature, name)
		}
		if !hmac.Equal([]byte(got), []byte(Sign(key, body))) {
			return fmt.Errorf("%w: %s does not match the body", ErrSignature, name)
		}
		return nil
	}
	id, ts, sigs := h.Get(HeaderWebhookID), h.Get(HeaderWebhookTimestamp), h.Get(HeaderWebhookSignature)
	if id == "" || ts == "" || sigs == "" {
		return fmt.Errorf("%w: missing %s, %s or %s", ErrSignature, HeaderWebhookID, HeaderWebhookTimestamp, HeaderWebhookSignature)
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: %s %q is not Unix seconds", ErrSignature, HeaderWebhookTimestamp, ts)
	}
	now, tol := time.Now, v.Tolerance
	if v.Now != nil {
		now = v.Now
	}
	if tol == 0 {
		tol = DefaultTolerance
	}
	if skew := now().Unix() - sec; math.Abs(float64(skew)) > tol.Seconds() {
		return fmt.Errorf("%w: timestamp %d is %ds from now, beyond the tolerance of %s", ErrSignature, sec, skew, tol)
	}
	want := SignStandard(key, id, ts, body)
	for _, s := range strings.Fields(sigs) {
		if hmac.Equal([]byte(s), []byte(want)) {
			return nil
		}
	}
	return fmt.Errorf("%w: no v1 signature in %s matches", ErrSignature, HeaderWebhookSignature)
}

// Verify checks a SchemeHerald signature in the default header:
// Verifier{Secret: secret}.Verify(h, body).
func Verify(secret string, h http.Header, body []byte) error {
	return Verifier{Secret: secret}.Verify(h, body)
}
