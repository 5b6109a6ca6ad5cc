package admin_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/envelope"
)

// hostile is a payload and an error text that would run script if the page
// rendered them as markup.
const hostile = `<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">`

// authLog is an Authorize that lets everything through and records what it
// was asked.
type authLog struct {
	mu    sync.Mutex
	calls []string
	deny  bool
}

func (a *authLog) authorize(r *http.Request, write bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	w := "read"
	if write {
		w = "write"
	}
	a.calls = append(a.calls, r.Method+" "+r.URL.Path+" "+w)
	if a.deny {
		return errors.New("not on the on-call rota")
	}
	return nil
}

func (e *env) server(t testing.TB, auth *authLog) *httptest.Server {
	t.Helper()
	h, err := admin.NewHandler(e.adm, admin.HandlerConfig{Authorize: auth.authorize})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/herald/", http.StripPrefix("/herald", h))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

func do(t testing.TB, req *http.Request) (int, string) {
	t.Helper()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestHandlerRequiresAuthorize(t *testing.T) {
	e := newEnv(t, envelope.SQLite)
	if _, err := admin.NewHandler(e.adm, admin.HandlerConfig{}); !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "Authorize") {
		t.Fatalf("NewHandler without Authorize: %v; want ErrConfiguration naming it", err)
	}
}

// TestHandlerAPIAndCSRF drives the JSON API and the page's forms over
// HTTP: Authorize is asked with write told apart, refusals are 403, and a
// mutation without the form token, from another origin, or (JSON) without
// the request header, changes nothing.
func TestHandlerAPIAndCSRF(t *testing.T) {
	eachDialect(t, func(t *testing.T, e *env) {
		auth := &authLog{}
		srv := e.server(t, auth)
		base := srv.URL + "/herald/"
		evs := e.enqueue(t, msg("shop.order", "k", map[string]any{"fail": hostile}), msg("shop.order", "", map[string]any{"fail": 2}))
		e.waitDead(t, evs...)
		e.recv.heal()

		get := func(path string) (int, string) {
			req, _ := http.NewRequest(http.MethodGet, base+path, nil)
			return do(t, req)
		}
		code, body := get("api/events?state=dead&topic=shop.*")
		var p admin.Page
		if code != 200 || json.Unmarshal([]byte(body), &p) != nil || len(p.Events) != 2 {
			t.Fatalf("GET api/events: %d %s", code, body)
		}
		code, body = get("api/events/" + evs[0].ID.String())
		if code != 200 || !strings.Contains(body, `"held_back":0`) {
			t.Fatalf("GET api/events/{id}: %d %s", code, body)
		}
		if code, body = get("api/events?state=zombie"); code != 400 || !strings.Contains(body, "admin.Query.State") {
			t.Fatalf("bad state: %d %s; want 400 naming the field", code, body)
		}
		if code, body = get("api/backlog"); code != 200 || !strings.Contains(body, `"dead_lettered":2`) {
			t.Fatalf("GET api/backlog: %d %s", code, body)
		}

		// The page renders the hostile payload and error as text.
		code, body = get("")
		if code != 200 || !strings.Contains(body, "&lt;script&gt;window.__pwned") || strings.Contains(body, "<script>window.__pwned") || strings.Contains(body, "<img src=x") {
			t.Fatalf("page: %d, hostile text not escaped:\n%s", code, body)
		}
		token := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(body)
		if token == nil {
			t.Fatal("no form token on the page")
		}

		form := func(path string, v url.Values, hdr map[string]string) (int, string) {
			req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(v.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			for k, x := range hdr {
				req.Header.Set(k, x)
			}
			return do(t, req)
		}
		one := url.Values{"id": {evs[0].ID.String()}}
		withToken := url.Values{"id": {evs[0].ID.String()}, "csrf": {token[1]}}
		for _, c := range []struct {
			name string
			v    url.Values
			hdr  map[string]string
		}{
			{"no token", one, nil},
			{"wrong token", url.Values{"id": one["id"], "csrf": {"x" + token[1]}}, nil},
			{"cross-site fetch", withToken, map[string]string{"Sec-Fetch-Site": "cross-site"}},
			{"foreign origin", withToken, map[string]string{"Origin": "https://evil.example"}},
		} {
			if code, body := form("retry", c.v, c.hdr); code != 403 {
				t.Fatalf("%s: %d %s; want 403", c.name, code, body)
			}
		}
		if e.state(t, evs[0].ID).State != admin.StateDead {
			t.Fatal("a refused request retried the event")
		}
		req, _ := http.NewRequest(http.MethodPost, base+"retry", strings.NewReader(withToken.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", srv.URL)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		// Back to the page where the handler is mounted (/herald/), not
		// to the root StripPrefix leaves in r.URL.Path.
		if loc, _ := resp.Location(); resp.StatusCode != http.StatusSeeOther || loc == nil || loc.Path != "/herald/" || !strings.Contains(loc.RawQuery, "Retried+1") {
			t.Fatalf("retry with the token: %d, Location %v; want 303 to /herald/", resp.StatusCode, loc)
		}
		waitFor(t, "the event retried through the form delivered", func() bool { return e.recv.delivered(evs[0].ID) })

		api := func(path, body string, hdr map[string]string) (int, string) {
			req, _ := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			for k, x := range hdr {
				req.Header.Set(k, x)
			}
			return do(t, req)
		}
		if code, body := api("api/pause", `{"topic":"shop.order"}`, nil); code != 403 || !strings.Contains(body, admin.RequestHeader) {
			t.Fatalf("API pause without %s: %d %s; want 403", admin.RequestHeader, code, body)
		}
		if code, body := api("api/pause", `{"topic":"shop.order","reason":"incident"}`, map[string]string{admin.RequestHeader: "1"}); code != 200 {
			t.Fatalf("API pause: %d %s", code, body)
		}
		if code, body := api("api/resume", `{"topic":"shop.order"}`, map[string]string{admin.RequestHeader: "1"}); code != 200 || !strings.Contains(body, `"was_paused":true`) {
			t.Fatalf("API resume: %d %s", code, body)
		}
		if code, body := api("api/discard", `{"ids":["`+evs[1].ID.String()+`"]}`, map[string]string{admin.RequestHeader: "1"}); code != 200 || body != "{\"count\":1}\n" {
			t.Fatalf("API discard: %d %q", code, body)
		}
		if code, body := api("api/retry", `{"state":"pending"}`, map[string]string{admin.RequestHeader: "1"}); code != 400 {
			t.Fatalf("API retry of pending events: %d %s; want 400", code, body)
		}

		auth.mu.Lock()
		calls := strings.Join(auth.calls, "\n")
		auth.deny = true
		auth.mu.Unlock()
		for _, want := range []string{"GET /api/events read", "GET / read", "POST /retry write", "POST /api/pause write"} {
			if !strings.Contains(calls, want) {
				t.Fatalf("Authorize was not asked %q:\n%s", want, calls)
			}
		}
		if code, body := get(""); code != 403 || !strings.Contains(body, "not on the on-call rota") {
			t.Fatalf("refused by Authorize: %d %s", code, body)
		}
	})
}
