package admin

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/outbox"
)

// HandlerConfig configures NewHandler.
type HandlerConfig struct {
	// Authorize decides every request before it is served: return nil to
	// serve it, an error to refuse it (403, the error's text shown).
	// write is true for the requests that change something (retry,
	// discard, pause, resume: POST), false for those that read. Required:
	// the handler has no authentication of its own.
	Authorize func(r *http.Request, write bool) error
	// Logger records refused requests; nil = the Admin's logger.
	Logger *slog.Logger
}

// Handler serves an Admin over HTTP: a JSON API under api/ and a page at
// the root. Mount it at a path of its own with http.StripPrefix:
//
//	mux.Handle("/herald/", http.StripPrefix("/herald", h))
//
// The JSON API (paths relative to where it is mounted):
//
//	GET  api/events?state=dead&topic=shop.*&key=K&tenant=T&error=TEXT&since=RFC3339&until=RFC3339&after=SEQ&limit=N
//	                             (topic, tenant repeatable; an empty tenant=, the events without a tenant)
//	GET  api/events/{id}
//	GET  api/backlog             (by topic; ?by=tenant: BacklogByTenant)
//	GET  api/paused
//	POST api/retry     body: a Query as JSON ({"ids": [...]} or a filter) → {"count": n}
//	POST api/discard   body: a Query as JSON                              → {"count": n}
//	POST api/pause     body: {"topic": "...", "reason": "..."}
//	POST api/resume    body: {"topic": "..."}
//
// Cross-site request forgery: every POST must be same-origin — a request
// whose Sec-Fetch-Site is not same-origin, or whose Origin is not the
// request's host, is refused — and must prove it comes from herald's own
// page or from a program: the page's forms carry the handler's secret
// token (made when the handler is, never sent to another origin), and
// JSON requests must carry the header X-Herald-Request (any value), which
// a browser sends cross-origin only after a CORS preflight this handler
// never grants. The page and every response send a Content-Security-Policy
// that allows no script but the page's own; payloads and errors are
// rendered escaped as text.
type Handler struct {
	a         *Admin
	authorize func(*http.Request, bool) error
	log       *slog.Logger
	token     string
	mux       *http.ServeMux
}

// RequestHeader is the header a JSON API request that changes something
// must carry (any value): see Handler.
const RequestHeader = "X-Herald-Request"

// NewHandler returns the HTTP handler of a. A missing Authorize is an
// envelope.ErrConfiguration error: the handler has no auth of its own,
// and serving repairs to anyone who can reach the port must be a
// decision (return nil from Authorize), not a default.
func NewHandler(a *Admin, cfg HandlerConfig) (*Handler, error) {
	if a == nil {
		return nil, &envelope.Error{Kind: envelope.ErrConfiguration, Where: "admin.NewHandler", Msg: "nil *Admin"}
	}
	if cfg.Authorize == nil {
		return nil, &envelope.Error{Kind: envelope.ErrConfiguration, Where: "admin.HandlerConfig.Authorize",
			Msg: "required: the handler has no auth of its own; decide who may read (write=false) and who may retry, discard and pause (write=true)"}
	}
	log := cfg.Logger
	if log == nil {
		log = a.log
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("herald/admin: CSRF token: %w", err)
	}
	h := &Handler{a: a, authorize: cfg.Authorize, log: log, token: base64.RawURLEncoding.EncodeToString(b[:]), mux: http.NewServeMux()}
	h.mux.HandleFunc("GET /{$}", h.page)
	h.mux.HandleFunc("POST /retry", h.formAction)
	h.mux.HandleFunc("POST /discard", h.formAction)
	h.mux.HandleFunc("POST /pause", h.formAction)
	h.mux.HandleFunc("POST /resume", h.formAction)
	h.mux.HandleFunc("GET /api/events", h.apiList)
	h.mux.HandleFunc("GET /api/events/{id}", h.apiGet)
	h.mux.HandleFunc("GET /api/backlog", h.apiBacklog)
	h.mux.HandleFunc("GET /api/paused", h.apiPaused)
	h.mux.HandleFunc("POST /api/retry", h.apiRetryDiscard)
	h.mux.HandleFunc("POST /api/discard", h.apiRetryDiscard)
	h.mux.HandleFunc("POST /api/pause", h.apiPause)
	h.mux.HandleFunc("POST /api/resume", h.apiPause)
	return h, nil
}

// ServeHTTP authorizes the request, checks a POST's origin and token, and
// serves it.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	hd := w.Header()
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "same-origin")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	write := r.Method != http.MethodGet && r.Method != http.MethodHead
	if err := h.authorize(r, write); err != nil {
		h.log.WarnContext(r.Context(), "herald/admin: request refused by Authorize", slog.String("method", r.Method),
			slog.String("path", r.URL.Path), slog.Any("error", err))
		h.fail(w, r, http.StatusForbidden, "forbidden: "+err.Error())
		return
	}
	if write {
		if err := h.checkCSRF(r); err != nil {
			h.log.WarnContext(r.Context(), "herald/admin: request refused (cross-site request forgery check)", slog.String("method", r.Method),
				slog.String("path", r.URL.Path), slog.Any("error", err))
			h.fail(w, r, http.StatusForbidden, err.Error())
			return
		}
	}
	h.mux.ServeHTTP(w, r)
}

func isAPI(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/api/") }

// checkCSRF: same origin, and the token (forms) or RequestHeader (API).
func (h *Handler) checkCSRF(r *http.Request) error {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" {
		return fmt.Errorf("cross-site request refused (Sec-Fetch-Site: %s)", s)
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
			return fmt.Errorf("cross-origin request refused (Origin %s, host %s)", o, r.Host)
		}
	}
	if isAPI(r) {
		if r.Header.Get(RequestHeader) == "" {
			return fmt.Errorf("a JSON API request that changes something must carry the %s header", RequestHeader)
		}
		return nil
	}
	r.Body = http.MaxBytesReader(nil, r.Body, 1<<20)
	if subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(h.token)) != 1 {
		return errors.New("missing or wrong form token: reload the page and try again")
	}
	return nil
}

func (h *Handler) fail(w http.ResponseWriter, r *http.Request, code int, msg string) {
	if isAPI(r) {
		writeJSON(w, code, map[string]string{"error": msg})
		return
	}
	http.Error(w, msg, code) // text/plain: nothing in it is markup
}

// failErr answers err: 400 for a bad argument, 404 for an unknown event,
// 500 otherwise.
func (h *Handler) failErr(w http.ResponseWriter, r *http.Request, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, envelope.ErrValidation), errors.Is(err, envelope.ErrConfiguration):
		code = http.StatusBadRequest
	case errors.Is(err, ErrNotFound):
		code = http.StatusNotFound
	}
	if code == http.StatusInternalServerError {
		h.log.ErrorContext(r.Context(), "herald/admin: request failed", slog.String("path", r.URL.Path), slog.Any("error", err))
	}
	h.fail(w, r, code, err.Error())
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}

// queryFrom reads a Query from URL or form values: state, topic
// (repeatable), key, tenant (repeatable), error, since, until (RFC 3339),
// after, limit, id (repeatable). In the JSON API (api) an empty tenant
// value (tenant=) names the events without a tenant, as "" in
// Query.Tenants; in the page's forms, whose tenant field is empty when
// it does not filter, it is left out.
func queryFrom(v url.Values, api bool) (Query, error) {
	q := Query{State: State(v.Get("state")), Topics: nonEmpty(v["topic"]), OrderingKey: v.Get("key"), ErrorContains: v.Get("error"),
		Tenants: nonEmpty(v["tenant"])}
	if api && len(v["tenant"]) > 0 {
		q.Tenants = make([]string, len(v["tenant"]))
		for i, t := range v["tenant"] {
			q.Tenants[i] = strings.TrimSpace(t)
		}
	}
	for _, f := range []struct {
		name string
		dst  *time.Time
	}{{"since", &q.Since}, {"until", &q.Until}} {
		if s := v.Get(f.name); s != "" {
			t, err := time.Parse(time.RFC3339Nano, s)
			if err != nil {
				return q, outbox.Validationf(f.name, "%q is not an RFC 3339 time", s)
			}
			*f.dst = t
		}
	}
	for _, f := range []struct {
		name string
		set  func(int64)
	}{{"after", func(n int64) { q.After = n }}, {"limit", func(n int64) { q.Limit = int(n) }}} {
		if s := v.Get(f.name); s != "" {
			n, err := strconv.ParseInt(s, 10, 32)
			if f.name == "after" {
				n, err = strconv.ParseInt(s, 10, 64)
			}
			if err != nil {
				return q, outbox.Validationf(f.name, "%q is not a whole number", s)
			}
			f.set(n)
		}
	}
	for _, s := range nonEmpty(v["id"]) {
		id, err := uuid.Parse(s)
		if err != nil {
			return q, outbox.Validationf("id", "%q is not an event id (a UUID)", s)
		}
		q.IDs = append(q.IDs, id)
	}
	return q, nil
}

func nonEmpty(ss []string) []string {
	var out []string
	for _, s := range ss {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func (h *Handler) apiList(w http.ResponseWriter, r *http.Request) {
	q, err := queryFrom(r.URL.Query(), true)
	if err == nil {
		var p Page
		if p, err = h.a.List(r.Context(), q); err == nil {
			writeJSON(w, http.StatusOK, p)
			return
		}
	}
	h.failErr(w, r, err)
}

func (h *Handler) apiGet(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(r.PathValue("id"))
	if err != nil {
		h.failErr(w, r, outbox.Validationf("id", "%q is not an event id (a UUID)", r.PathValue("id")))
		return
	}
	d, err := h.a.Get(r.Context(), id)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (h *Handler) apiBacklog(w http.ResponseWriter, r *http.Request) {
	switch by := r.URL.Query().Get("by"); by {
	case "", "topic":
	case "tenant":
		b, err := h.a.BacklogByTenant(r.Context())
		if err != nil {
			h.failErr(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, b)
		return
	default:
		h.failErr(w, r, outbox.Validationf("by", "%q: want topic (the default) or tenant", by))
		return
	}
	b, err := h.a.Backlog(r.Context())
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, b)
}

func (h *Handler) apiPaused(w http.ResponseWriter, r *http.Request) {
	p, err := h.a.Paused(r.Context())
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, p)
}

func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 16<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return outbox.Validationf("request body", "not the JSON expected: %v", err)
	}
	return nil
}

func (h *Handler) apiRetryDiscard(w http.ResponseWriter, r *http.Request) {
	var q Query
	if err := decodeBody(r, &q); err != nil {
		h.failErr(w, r, err)
		return
	}
	op := h.a.Retry
	if strings.HasSuffix(r.URL.Path, "/discard") {
		op = h.a.Discard
	}
	n, err := op(r.Context(), q)
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]int64{"count": n})
}

func (h *Handler) apiPause(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Topic  string `json:"topic"`
		Reason string `json:"reason,omitempty"`
	}
	if err := decodeBody(r, &body); err != nil {
		h.failErr(w, r, err)
		return
	}
	if strings.HasSuffix(r.URL.Path, "/resume") {
		was, err := h.a.Resume(r.Context(), body.Topic)
		if err != nil {
			h.failErr(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"topic": body.Topic, "paused": false, "was_paused": was})
		return
	}
	if err := h.a.Pause(r.Context(), body.Topic, body.Reason); err != nil {
		h.failErr(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"topic": body.Topic, "paused": true})
}

// formAction runs a page's form (retry, discard, pause, resume) and sends
// the browser back to the page with what it did.
func (h *Handler) formAction(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var msg string
	var err error
	switch r.URL.Path {
	case "/retry", "/discard":
		var q Query
		if q, err = queryFrom(r.PostForm, false); err == nil {
			if r.URL.Path == "/retry" {
				var n int64
				n, err = h.a.Retry(ctx, q)
				msg = fmt.Sprintf("Retried %d dead letter(s).", n)
			} else {
				var n int64
				n, err = h.a.Discard(ctx, q)
				msg = fmt.Sprintf("Discarded %d dead letter(s).", n)
			}
		}
	case "/pause":
		topic := r.PostFormValue("topic")
		err = h.a.Pause(ctx, topic, r.PostFormValue("reason"))
		msg = "Paused " + topic + "."
	case "/resume":
		topic := r.PostFormValue("topic")
		_, err = h.a.Resume(ctx, topic)
		msg = "Resumed " + topic + "."
	}
	if err != nil {
		h.failErr(w, r, err)
		return
	}
	back := url.Values{"msg": {msg}}
	for _, k := range []string{"topic_filter", "key_filter", "tenant_filter", "error_filter"} {
		if v := r.PostFormValue(k); v != "" {
			back.Set(strings.TrimSuffix(k, "_filter"), v)
		}
	}
	// Relative, resolved by the browser against the URL it posted to, so
	// it lands where the handler is mounted. (http.Redirect would resolve
	// it against r.URL.Path, which http.StripPrefix has cut.)
	w.Header().Set("Location", "./?"+back.Encode())
	w.WriteHeader(http.StatusSeeOther)
}

// pageData is what the page template shows.
type pageData struct {
	Table, Dialect, Token, Nonce, Msg string
	Backlog                           []TopicBacklog
	Tenants                           []TenantBacklog // shown when an undelivered event has a tenant
	Dead                              []Event
	Next                              int64
	Topic, Key, Tenant, Error         string
	Err                               string
}

func (h *Handler) page(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	v := r.URL.Query()
	d := pageData{Table: h.a.t.Name, Dialect: string(h.a.d), Token: h.token, Msg: v.Get("msg"),
		Topic: v.Get("topic"), Key: v.Get("key"), Tenant: v.Get("tenant"), Error: v.Get("error")}
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	d.Nonce = base64.RawStdEncoding.EncodeToString(nonce[:])
	var err error
	if d.Backlog, err = h.a.Backlog(ctx); err != nil {
		h.failErr(w, r, err)
		return
	}
	if d.Tenants, err = h.a.BacklogByTenant(ctx); err != nil {
		h.failErr(w, r, err)
		return
	}
	if len(d.Tenants) == 1 && d.Tenants[0].Tenant == "" {
		d.Tenants = nil // no tenants: the table would repeat the totals
	}
	q, err := queryFrom(url.Values{"topic": {d.Topic}, "key": {d.Key}, "tenant": {d.Tenant}, "error": {d.Error}, "after": {v.Get("after")}}, false)
	if err == nil {
		var p Page
		if p, err = h.a.List(ctx, q); err == nil {
			d.Dead, d.Next = p.Events, p.Next
		}
	}
	if err != nil {
		if !errors.Is(err, envelope.ErrValidation) {
			h.failErr(w, r, err)
			return
		}
		d.Err = err.Error()
	}
	var buf bytes.Buffer
	if err := pageTemplate.Execute(&buf, d); err != nil {
		h.failErr(w, r, err)
		return
	}
	w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'nonce-"+d.Nonce+"'; style-src 'nonce-"+d.Nonce+
		"'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	_, _ = w.Write(buf.Bytes())
}

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"age": func(d time.Duration) string {
		if d == 0 {
			return "—"
		}
		return d.Round(time.Second).String()
	},
	"when": func(t *time.Time) string {
		if t == nil {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05Z")
	},
	"pretty": func(p json.RawMessage) string {
		var b bytes.Buffer
		if json.Indent(&b, p, "", "  ") != nil {
			return string(p)
		}
		return b.String()
	},
}).Parse(pageHTML))
