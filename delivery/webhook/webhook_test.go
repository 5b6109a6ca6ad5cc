package webhook_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/delivery/webhook"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/deliverytest"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

// request is one request a test server received.
type request struct {
	Path   string
	Header http.Header
	Body   []byte
}

// server records the requests it receives and answers with answer (200
// when nil).
type server struct {
	*httptest.Server
	mu     sync.Mutex
	reqs   []request
	answer func(w http.ResponseWriter, r *http.Request)
}

func newServer(t testing.TB, answer func(w http.ResponseWriter, r *http.Request)) *server {
	s := &server{answer: answer}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, request{Path: r.URL.Path, Header: r.Header.Clone(), Body: b})
		s.mu.Unlock()
		if s.answer != nil {
			s.answer(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *server) requests() []request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]request(nil), s.reqs...)
}

func (s *server) messages(testing.TB) []deliverytest.Message {
	var out []deliverytest.Message
	for _, r := range s.requests() {
		m := deliverytest.Message{Body: r.Body, Headers: map[string]string{}}
		for k, v := range r.Header {
			m.Headers[strings.ToLower(k)] = v[0]
		}
		out = append(out, m)
	}
	return out
}

func newReceiver(t testing.TB) *deliverytest.Receiver {
	s := newServer(t, nil)
	proxy := testkit.NewProxy(t, s.Listener.Addr().String())
	return &deliverytest.Receiver{
		NewDelivery: func(t testing.TB) delivery.Delivery {
			d, err := webhook.New(webhook.Config{URL: "http://" + proxy.Addr() + "/hook", Secret: "s3cret", AllowNetworks: loopback})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Received: s.messages,
		Down:     func(testing.TB) { proxy.SetDown(true) },
		Up:       func(testing.TB) { proxy.SetDown(false) },
		Conns:    proxy.Open,
		Outage:   "TCP proxy cut, refusing connections",
	}
}

// atDefaults is an httptest receiver of a delivery built from its URL
// (and the network the test server listens on) alone; the destination is
// the URL's path: one URL, so one destination.
func atDefaults(t testing.TB, _ []string) *deliverytest.Receiver {
	s := newServer(t, nil)
	return &deliverytest.Receiver{
		NewDelivery: func(t testing.TB) delivery.Delivery {
			d, err := webhook.New(webhook.Config{URL: s.URL + "/events", AllowNetworks: loopback})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Received: func(t testing.TB) []deliverytest.Message {
			var ms []deliverytest.Message
			for _, r := range s.requests() {
				m := deliverytest.Message{Body: r.Body, Headers: map[string]string{}, Destination: r.Path}
				for k, v := range r.Header {
					m.Headers[strings.ToLower(k)] = v[0]
				}
				ms = append(ms, m)
			}
			return ms
		},
	}
}

func TestConformance(t *testing.T) {
	deliverytest.Run(t, deliverytest.Suite{NewReceiver: newReceiver, AtDefaults: atDefaults})
}

func event(topic string) *envelope.Event {
	return &envelope.Event{ID: uuid.Must(uuid.NewV7()), Topic: topic, Payload: []byte(`{"id":7,"title":"Zoë"}`),
		Headers: map[string]string{"traceparent": "00-1"}}
}

func newDelivery(t testing.TB, cfg webhook.Config) *webhook.Delivery {
	t.Helper()
	d, err := webhook.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	return d
}

// hmacHex is the signature computed here, independently of the package.
func hmacHex(key, body []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

func TestHeraldSignature(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	d := newDelivery(t, webhook.Config{URL: s.URL + "/a", Secret: "s3cret", AllowNetworks: loopback,
		Headers: map[string]string{"Authorization": "Bearer t", "traceparent": "overridden by the event"}})
	custom := newDelivery(t, webhook.Config{URL: s.URL + "/b", Secret: "s3cret", SignatureHeader: "X-Webhook-Signature", AllowNetworks: loopback})
	e := event("billing.paid")
	for _, d := range []*webhook.Delivery{d, custom} {
		if err := d.Deliver(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	rs := s.requests()
	want := "sha256=" + hmacHex([]byte("s3cret"), e.Payload)
	if got := rs[0].Header.Get("herald-signature"); got != want {
		t.Fatalf("herald-signature %q, want %q", got, want)
	}
	if got := rs[1].Header.Get("X-Webhook-Signature"); got != want || rs[1].Header.Get("herald-signature") != "" {
		t.Fatalf("custom header: %q (herald-signature %q)", got, rs[1].Header.Get("herald-signature"))
	}
	r := rs[0]
	if !bytes.Equal(r.Body, e.Payload) || r.Header.Get("Content-Type") != "application/json" ||
		r.Header.Get("Authorization") != "Bearer t" || r.Header.Get("traceparent") != "00-1" ||
		r.Header.Get(delivery.HeaderEventID) != e.ID.String() || r.Header.Get(delivery.HeaderTopic) != e.Topic {
		t.Fatalf("request %+v", r)
	}
	if err := webhook.Verify("s3cret", r.Header, r.Body); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if err := webhook.Verify("s3cret", r.Header, append(r.Body, ' ')); !errors.Is(err, webhook.ErrSignature) {
		t.Fatalf("Verify of a changed body: %v", err)
	}
	if err := webhook.Verify("other", r.Header, r.Body); !errors.Is(err, webhook.ErrSignature) {
		t.Fatalf("Verify with another secret: %v", err)
	}
	if err := (webhook.Verifier{Secret: "s3cret", SignatureHeader: "X-Webhook-Signature"}).Verify(rs[1].Header, rs[1].Body); err != nil {
		t.Fatalf("Verifier with a custom header: %v", err)
	}
}

// standardSecret is a Standard Webhooks secret: "whsec_" + base64 key.
var standardKey = []byte("0123456789abcdef0123456789abcdef")
var standardSecret = "whsec_" + base64.StdEncoding.EncodeToString(standardKey)

// verifyStandard is a verifier written here from the scheme's
// specification (standard-webhooks/spec, "Verifying webhooks"), not from
// the package: signed content = id + "." + timestamp + "." + body,
// HMAC-SHA256 with the base64-decoded secret after "whsec_",
// base64-encoded, prefixed "v1,", space-separated list of signatures.
func verifyStandard(secret string, h http.Header, body []byte) error {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return err
	}
	id, ts := h.Get("webhook-id"), h.Get("webhook-timestamp")
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("timestamp %q: %w", ts, err)
	}
	if d := time.Since(time.Unix(sec, 0)); d > 5*time.Minute || d < -5*time.Minute {
		return fmt.Errorf("timestamp %d too far from now", sec)
	}
	m := hmac.New(sha256.New, key)
	fmt.Fprintf(m, "%s.%s.%s", id, ts, body)
	want := base64.StdEncoding.EncodeToString(m.Sum(nil))
	for _, s := range strings.Split(h.Get("webhook-signature"), " ") {
		if v, sig, _ := strings.Cut(s, ","); v == "v1" && sig == want {
			return nil
		}
	}
	return fmt.Errorf("no matching v1 signature in %q", h.Get("webhook-signature"))
}

// nodeModules is where .ci/run installs the npm package standardwebhooks
// (the scheme's reference JavaScript library): HERALD_NODE_MODULES, which
// .ci/run sets, else ~/.cache/herald-npm/node_modules. required is true
// when the variable is set: the package must then be there.
func nodeModules() (dir string, required bool) {
	if d := os.Getenv("HERALD_NODE_MODULES"); d != "" {
		return d, true
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".cache", "herald-npm", "node_modules"), false
}

// verifyWithNode verifies with the npm package standardwebhooks.
func verifyWithNode(t *testing.T, secret string, h http.Header, body []byte) error {
	t.Helper()
	mods, required := nodeModules()
	node, err := exec.LookPath("node")
	if _, serr := os.Stat(filepath.Join(mods, "standardwebhooks")); err != nil || serr != nil {
		if required {
			t.Fatalf("node or the npm package standardwebhooks is missing (%s); .ci/run installs them", mods)
		}
		t.Skipf("node or the npm package standardwebhooks is missing (%s); run .ci/run, or npm install --prefix ~/.cache/herald-npm standardwebhooks@1.1.1", mods)
	}
	in, _ := json.Marshal(map[string]any{"secret": secret, "body": string(body), "headers": map[string]string{
		"webhook-id": h.Get("webhook-id"), "webhook-timestamp": h.Get("webhook-timestamp"), "webhook-signature": h.Get("webhook-signature")}})
	script := `const { Webhook } = require("standardwebhooks");
let s = ""; process.stdin.on("data", d => s += d).on("end", () => {
  const x = JSON.parse(s);
  try { new Webhook(x.secret).verify(x.body, x.headers); console.log("verified"); }
  catch (e) { console.log("refused: " + e.message); process.exit(3); }
});`
	cmd := exec.Command(node, "-e", script)
	cmd.Env = append(os.Environ(), "NODE_PATH="+mods)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%w: %s", err, out)
	}
	return nil
}

func TestStandardWebhooks(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	d := newDelivery(t, webhook.Config{URL: s.URL, Secret: standardSecret, Scheme: webhook.SchemeStandard, AllowNetworks: loopback})
	e := event("billing.paid")
	if err := d.Deliver(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	r := s.requests()[0]
	if r.Header.Get("webhook-id") != e.ID.String() || r.Header.Get("herald-signature") != "" {
		t.Fatalf("headers %v", r.Header)
	}
	if err := verifyStandard(standardSecret, r.Header, r.Body); err != nil {
		t.Fatalf("independent verifier: %v", err)
	}
	if err := (webhook.Verifier{Secret: standardSecret, Scheme: webhook.SchemeStandard}).Verify(r.Header, r.Body); err != nil {
		t.Fatalf("Verifier: %v", err)
	}
	late := webhook.Verifier{Secret: standardSecret, Scheme: webhook.SchemeStandard, Now: func() time.Time { return time.Now().Add(10 * time.Minute) }}
	if err := late.Verify(r.Header, r.Body); !errors.Is(err, webhook.ErrSignature) {
		t.Fatalf("Verifier 10 minutes later: %v", err)
	}
	if err := (webhook.Verifier{Secret: standardSecret, Scheme: webhook.SchemeStandard}).Verify(r.Header, []byte(`{}`)); !errors.Is(err, webhook.ErrSignature) {
		t.Fatalf("Verifier of another body: %v", err)
	}
	if err := verifyWithNode(t, standardSecret, r.Header, r.Body); err != nil {
		t.Fatalf("npm standardwebhooks: %v", err)
	}
	// The reference library must refuse a forgery, or the check above
	// proves nothing.
	forged := r.Header.Clone()
	forged.Set("webhook-id", "another")
	if err := verifyWithNode(t, standardSecret, forged, r.Body); err == nil {
		t.Fatal("npm standardwebhooks accepted a changed webhook-id")
	}
}

func TestRedirectsAreFailures(t *testing.T) {
	t.Parallel()
	target := newServer(t, nil)
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, target.URL+"/moved", code) })
		d := newDelivery(t, webhook.Config{URL: s.URL, AllowNetworks: loopback})
		err := d.Deliver(context.Background(), event("x"))
		var se *webhook.StatusError
		if !errors.As(err, &se) || se.StatusCode != code || !errors.Is(err, delivery.ErrDelivery) || !strings.Contains(err.Error(), "not followed") {
			t.Fatalf("%d: %v", code, err)
		}
	}
	if n := len(target.requests()); n != 0 {
		t.Fatalf("the redirect target received %d requests", n)
	}
}

func TestAllowURL(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	var asked []string
	var mu sync.Mutex
	d := newDelivery(t, webhook.Config{URL: s.URL + "/hook?token=secret", AllowNetworks: loopback,
		AllowURL: func(_ context.Context, u *url.URL) bool {
			mu.Lock()
			defer mu.Unlock()
			asked = append(asked, u.String())
			return false
		}})
	err := d.Deliver(context.Background(), event("x"))
	if !errors.Is(err, webhook.ErrURLRefused) || !errors.Is(err, delivery.ErrDelivery) || strings.Contains(err.Error(), "token=secret") {
		t.Fatalf("refused URL: %v", err)
	}
	if len(s.requests()) != 0 || len(asked) != 1 || asked[0] != s.URL+"/hook?token=secret" {
		t.Fatalf("requests %d, AllowURL asked %v", len(s.requests()), asked)
	}
}

func TestDefaultGuard(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	_, port, _ := strings.Cut(s.Listener.Addr().String(), ":")
	for _, u := range []string{
		s.URL,                                     // 127.0.0.1
		"http://localhost:" + port,                // a name that resolves to loopback
		"http://[::ffff:127.0.0.1]:" + port,       // loopback as an IPv4-mapped IPv6 address
		"http://169.254.169.254/latest/meta-data", // the cloud metadata address
		"http://10.0.0.1:" + port,
		"http://0.0.0.0:" + port,
	} {
		// As Config.URL New refuses it (TestNewRefusesGuardedURL); a
		// Target's URL meets the dial guard.
		d := newDelivery(t, webhook.Config{Target: func(context.Context, *envelope.Event) (webhook.Target, error) {
			return webhook.Target{URL: u}, nil
		}})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := d.Deliver(ctx, event("x"))
		cancel()
		if !errors.Is(err, webhook.ErrURLRefused) {
			t.Errorf("%s: %v, want ErrURLRefused", u, err)
		}
	}
	if n := len(s.requests()); n != 0 {
		t.Fatalf("the guarded server received %d requests", n)
	}
	d := newDelivery(t, webhook.Config{URL: s.URL, AllowNetworks: loopback})
	if err := d.Deliver(context.Background(), event("x")); err != nil {
		t.Fatalf("allowed loopback: %v", err)
	}
	meta := newDelivery(t, webhook.Config{AllowNetworks: loopback, Target: func(context.Context, *envelope.Event) (webhook.Target, error) {
		return webhook.Target{URL: "http://169.254.169.254/"}, nil
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := meta.Deliver(ctx, event("x")); !errors.Is(err, webhook.ErrURLRefused) {
		t.Fatalf("169.254.169.254 with only loopback allowed: %v", err)
	}
}

func TestResponseBodiesAreCut(t *testing.T) {
	t.Parallel()
	huge := bytes.Repeat([]byte("x"), 10<<20)
	hostile := append([]byte("bad \x00 nul, \xff\xfe invalid, "), bytes.Repeat([]byte("é"), 3000)...)
	var endless atomic.Int64
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/huge":
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write(huge)
		case "/hostile":
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write(hostile)
		case "/endless-ok":
			// A 2xx whose body never ends: the delivery reads a bounded
			// amount and returns.
			w.WriteHeader(http.StatusOK)
			chunk := bytes.Repeat([]byte("y"), 32<<10)
			for r.Context().Err() == nil {
				if _, err := w.Write(chunk); err != nil {
					return
				}
				endless.Add(1)
			}
		}
	})
	for path, check := range map[string]func(err error){
		"/huge": func(err error) {
			var se *webhook.StatusError
			if !errors.As(err, &se) || se.StatusCode != http.StatusInternalServerError || len(se.Body) > webhook.MaxErrorBody+len("…") || !strings.HasSuffix(se.Body, "…") {
				t.Errorf("huge: %v", err)
			}
		},
		"/hostile": func(err error) {
			var se *webhook.StatusError
			if !errors.As(err, &se) || se.StatusCode != http.StatusBadRequest {
				t.Fatalf("hostile: %v", err)
			}
			msg := err.Error()
			if strings.ContainsRune(msg, 0) || !utf8.ValidString(msg) || !strings.Contains(msg, "bad \uFFFD nul, \uFFFD invalid, éé") {
				t.Errorf("hostile: %q", msg)
			}
		},
		"/endless-ok": func(err error) {
			if err != nil {
				t.Errorf("endless 2xx body: %v", err)
			}
		},
	} {
		d := newDelivery(t, webhook.Config{URL: s.URL + path, AllowNetworks: loopback})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		check(d.Deliver(ctx, event("x")))
		cancel()
	}
}

// A refusing answer full of NUL and invalid UTF-8 is recorded in
// last_error through a relay on PostgreSQL, then the event is delivered.
func TestHostileAnswerThroughRelay(t *testing.T) {
	t.Parallel()
	env := deliverytest.NewEnv(t)
	var calls atomic.Int32
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte("down \x00\x00 for \xc3\x28 maintenance"))
		}
	})
	d := newDelivery(t, webhook.Config{URL: s.URL, AllowNetworks: loopback})
	es := env.Write(t, envelope.Message{Topic: "billing.paid", Payload: 1})
	env.StartRelay(t, d, deliverytest.RelayConfig())
	id := es[0].ID.String()
	testkit.Eventually(t, 30*time.Second, func() bool { r := env.Row(t, id); return r.Attempts >= 1 && r.LastError != "" }, "a recorded failure")
	row := env.Row(t, id)
	if !strings.Contains(row.LastError, "status 503") || !strings.Contains(row.LastError, "down \uFFFD\uFFFD for \uFFFD( maintenance") {
		t.Fatalf("last_error %q", row.LastError)
	}
	env.WaitPublished(t, 30*time.Second)
	if row := env.Row(t, id); row.Attempts != 2 || !row.Published {
		t.Fatalf("after recovery: %+v", row)
	}
}

func TestTarget(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	target := func(_ context.Context, e *envelope.Event) (webhook.Target, error) {
		switch e.Topic {
		case "a":
			return webhook.Target{URL: s.URL + "/a", Secret: "secret-a", Headers: map[string]string{"X-Subscriber": "A"}}, nil
		case "b":
			return webhook.Target{URL: s.URL + "/b"}, nil
		}
		return webhook.Target{}, errors.New("no subscriber")
	}
	d := newDelivery(t, webhook.Config{Target: target, AllowNetworks: loopback})
	ea, eb := event("a"), event("b")
	for _, e := range []*envelope.Event{ea, eb} {
		if err := d.Deliver(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Deliver(context.Background(), event("c")); err == nil || !strings.Contains(err.Error(), "no subscriber") {
		t.Fatalf("a Target error must fail the event: %v", err)
	}
	rs := s.requests()
	if rs[0].Path != "/a" || rs[0].Header.Get("X-Subscriber") != "A" || rs[0].Header.Get("herald-signature") != "sha256="+hmacHex([]byte("secret-a"), ea.Payload) {
		t.Fatalf("a: %+v", rs[0])
	}
	if rs[1].Path != "/b" || rs[1].Header.Get("herald-signature") != "" {
		t.Fatalf("b: %+v", rs[1])
	}
	// A secret in the Target and in the Config: a configuration error.
	both := newDelivery(t, webhook.Config{Target: target, Secret: "fixed", AllowNetworks: loopback})
	if err := both.Deliver(context.Background(), event("a")); !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "webhook.Target.Secret") {
		t.Fatalf("two secrets: %v", err)
	}
	// The Target's URL is checked by AllowURL too.
	guarded := newDelivery(t, webhook.Config{Target: target, AllowNetworks: loopback, AllowURL: func(_ context.Context, u *url.URL) bool { return u.Path != "/b" }})
	if err := guarded.Deliver(context.Background(), event("b")); !errors.Is(err, webhook.ErrURLRefused) {
		t.Fatalf("AllowURL on a Target URL: %v", err)
	}
	if n := len(s.requests()); n != 2 {
		t.Fatalf("%d requests, want 2", n)
	}
}

func TestTimeoutFromContext(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	d := newDelivery(t, webhook.Config{URL: s.URL, AllowNetworks: loopback})
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := d.Deliver(ctx, event("x")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("%v, want context.DeadlineExceeded", err)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	tf := func(context.Context, *envelope.Event) (webhook.Target, error) { return webhook.Target{}, nil }
	for name, cfg := range map[string]webhook.Config{
		"URL":             {},
		"Target":          {URL: "https://example.com", Target: tf},
		"Scheme":          {URL: "https://example.com", Scheme: 7},
		"SignatureHeader": {URL: "https://example.com", Scheme: webhook.SchemeStandard, SignatureHeader: "x-sig"},
		"Headers":         {URL: "https://example.com", Headers: map[string]string{"bad name": "v"}},
		"Secret":          {URL: "https://example.com", Scheme: webhook.SchemeStandard, Secret: "whsec_not base64!"},
	} {
		_, err := webhook.New(cfg)
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "webhook.Config."+name) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := webhook.New(webhook.Config{URL: "ftp://example.com"}); !errors.Is(err, envelope.ErrConfiguration) {
		t.Errorf("ftp URL: %v", err)
	}
}

// silentServer accepts connections, reads a request's head and answers
// with head, then stays silent until the test ends.
func silentServer(t *testing.T, head string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	done := make(chan struct{})
	t.Cleanup(func() { close(done); _ = ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				defer c.Close()
				buf := make([]byte, 4096)
				var got []byte
				for !bytes.Contains(got, []byte("\r\n\r\n")) {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					got = append(got, buf[:n]...)
				}
				_, _ = io.WriteString(c, head)
				<-done
			})
		}
	}()
	return "http://" + ln.Addr().String() + "/hook"
}

// An answer whose body never comes — a 101 Switching Protocols, which
// hands the raw connection over, or a 200 that promises a body — ends
// with the delivery's context.
func TestSilentAnswerEndsWithContext(t *testing.T) {
	t.Parallel()
	for name, head := range map[string]string{
		"101": "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
		"200": "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n{",
		"500": "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 1000\r\n\r\noops",
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := newDelivery(t, webhook.Config{URL: silentServer(t, head), AllowNetworks: loopback})
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			res := make(chan error, 1)
			go func() { res <- d.Deliver(ctx, event("x")) }()
			select {
			case err := <-res:
				if (err == nil) != (name == "200") {
					t.Fatalf("%v: want an error for a %s (nil for a 2xx: its status is the answer)", err, name)
				}
				t.Logf("%s: %v", name, err)
			case <-time.After(20 * time.Second):
				t.Fatal("Deliver still blocked 20 s after its 300 ms context ended")
			}
		})
	}
}

// An event header that differs from herald's own only in case never
// replaces herald's value.
func TestHeraldHeadersWin(t *testing.T) {
	t.Parallel()
	s := newServer(t, nil)
	d := newDelivery(t, webhook.Config{URL: s.URL, AllowNetworks: loopback})
	const n = 50
	var es []*envelope.Event
	for range n {
		e := event("orders.created")
		e.Headers = map[string]string{"Herald-Event-Id": "forged", "HERALD-TOPIC": "forged", "herald-Event-id": "forged2", "x-a": "1"}
		es = append(es, e)
		if err := d.Deliver(context.Background(), e); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range s.requests() {
		if got := r.Header.Values(delivery.HeaderEventID); len(got) != 1 || got[0] != es[i].ID.String() {
			t.Fatalf("request %d: herald-event-id %q, want only %s", i, got, es[i].ID)
		}
		if got := r.Header.Values(delivery.HeaderTopic); len(got) != 1 || got[0] != "orders.created" {
			t.Fatalf("request %d: herald-topic %q", i, got)
		}
		if r.Header.Get("X-A") != "1" {
			t.Fatalf("request %d: the event's own header x-a is missing", i)
		}
	}
}

// A URL the dial guard would refuse fails New, naming AllowNetworks.
func TestNewRefusesGuardedURL(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"http://127.0.0.1:8080/hook",
		"http://localhost:8080/hook",
		"http://api.localhost/hook",
		"http://[::1]/hook",
		"http://[::ffff:10.1.2.3]/hook",
		"http://10.0.0.1/hook",
		"http://192.168.1.20:9000/",
		"http://169.254.169.254/latest/meta-data",
		"http://0.0.0.0/",
	} {
		_, err := webhook.New(webhook.Config{URL: u})
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "AllowNetworks") {
			t.Errorf("%s: %v, want ErrConfiguration naming AllowNetworks", u, err)
		}
	}
	for _, u := range []string{"http://127.0.0.1:8080/hook", "http://localhost/hook", "http://[::1]/"} {
		if _, err := webhook.New(webhook.Config{URL: u, AllowNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}); err != nil {
			t.Errorf("%s with loopback allowed: %v", u, err)
		}
	}
	// A name is resolved at connection time only: New cannot know.
	if _, err := webhook.New(webhook.Config{URL: "https://hooks.example.com/x"}); err != nil {
		t.Errorf("public name: %v", err)
	}
}
