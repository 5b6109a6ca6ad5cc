package webhookinbox_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/delivery/webhook"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/inbox/webhookinbox"
	"github.com/heraldgo/herald/internal/inboxcrash"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

func TestMain(m *testing.M) { testkit.Main(m) }

const secret = "s3cret"

func setup(t *testing.T) (*sql.DB, *inbox.Inbox) {
	ctx := context.Background()
	db, _ := testkit.Postgres(t)
	if err := inbox.Migrate(ctx, db, envelope.Postgres, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE effects (id TEXT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	in, err := inbox.New(ctx, db, inbox.Config{Consumer: "hook", Dialect: envelope.Postgres})
	if err != nil {
		t.Fatal(err)
	}
	return db, in
}

func signed(id string, body []byte, sig string) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/hook", bytes.NewReader(body))
	r.Header.Set("herald-event-id", id)
	if sig == "" {
		sig = webhook.Sign([]byte(secret), body)
	}
	r.Header.Set(webhook.DefaultSignatureHeader, sig)
	return r
}

func count(t *testing.T, db *sql.DB) int {
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM effects`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestVerifiesAndDeduplicates: a bad signature is a 401 that runs
// nothing; a new event runs the handler in the id's transaction; a repeat
// gets the first answer's status and Herald-Inbox: duplicate; a non-2xx
// answer rolls back, so the retry runs again.
func TestVerifiesAndDeduplicates(t *testing.T) {
	db, in := setup(t)
	fail := true
	c, err := webhookinbox.New(in, webhookinbox.Config{Verifier: webhook.Verifier{Secret: secret},
		Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, err := webhookinbox.Tx(r.Context()).ExecContext(r.Context(), `INSERT INTO effects (id) VALUES ($1)`, r.Header.Get("herald-event-id")); err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			if r.Header.Get("herald-event-id") == "flaky" && fail {
				fail = false
				http.Error(w, "try again", http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusAccepted)
		})})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"order":1}`)
	for i, s := range []struct {
		r      *http.Request
		status int
		dup    bool
	}{
		{signed("e1", body, "sha256=00"), http.StatusUnauthorized, false},
		{signed("e1", body, ""), http.StatusAccepted, false},
		{signed("e1", body, ""), http.StatusAccepted, true},
		{signed("flaky", body, ""), http.StatusServiceUnavailable, false},
		{signed("flaky", body, ""), http.StatusAccepted, false},
		{signed("flaky", body, ""), http.StatusAccepted, true},
	} {
		w := httptest.NewRecorder()
		c.ServeHTTP(w, s.r)
		if w.Code != s.status || (w.Header().Get(webhookinbox.HeaderInbox) == "duplicate") != s.dup {
			t.Fatalf("request %d: %d %q; want %d, duplicate %v", i, w.Code, w.Header().Get(webhookinbox.HeaderInbox), s.status, s.dup)
		}
	}
	if n := count(t, db); n != 2 {
		t.Fatalf("%d effects; want 2", n)
	}
	for _, cfg := range []webhookinbox.Config{
		{Verifier: webhook.Verifier{Secret: secret}},
		{Next: http.NotFoundHandler()},
		{Next: http.NotFoundHandler(), Unsigned: true, Verifier: webhook.Verifier{Secret: secret}},
	} {
		if _, err := webhookinbox.New(in, cfg); !errors.Is(err, envelope.ErrConfiguration) {
			t.Errorf("%+v: %v; want ErrConfiguration", cfg, err)
		}
	}
}

// TestConcurrentRepeats: the same event posted eight times at once takes
// effect once; every answer is 2xx.
func TestConcurrentRepeats(t *testing.T) {
	for _, once := range []bool{false, true} {
		db, in := setup(t)
		c, err := webhookinbox.New(in, webhookinbox.Config{Verifier: webhook.Verifier{Secret: secret}, AtMostOnce: once,
			Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, err := db.ExecContext(r.Context(), `INSERT INTO effects (id) VALUES ($1)`, "x")
				if tx := webhookinbox.Tx(r.Context()); tx != nil {
					_, err = tx.ExecContext(r.Context(), `INSERT INTO effects (id) VALUES ($1)`, "x")
				}
				if err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
				}
			})})
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		codes := make(chan int, 8)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := httptest.NewRecorder()
				c.ServeHTTP(w, signed("same", []byte(`{}`), ""))
				codes <- w.Code
			}()
		}
		wg.Wait()
		close(codes)
		for code := range codes {
			if code != http.StatusOK {
				t.Fatalf("AtMostOnce %v: answer %d", once, code)
			}
		}
		want := 2 // transactional: the handler's own insert and the one in Tx
		if once {
			want = 1
		}
		if n := count(t, db); n != want {
			t.Fatalf("AtMostOnce %v: %d effects; want %d (one run)", once, n, want)
		}
	}
}

// TestCrash: signed webhooks from a real relay to a receiver process
// SIGKILLed before, inside and after its commit (before its answer), then
// started again on the same port.
// At CI's size by default; the large variant is
// HERALD_CRASH_EVENTS=120 HERALD_CRASH_KILL_EVERY=30 (see inboxcrash).
func TestCrash(t *testing.T) {
	inboxcrash.Run(t, inboxcrash.Parent{
		ChildTest:  "TestCrashChild",
		Concurrent: true, // the relay's requests run at once: a kill ends them all
		Target: func(t *testing.T, _ inboxcrash.Mode) string {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			return l.Addr().String()
		},
		Relay: func(c *relay.Config) {
			// The receiver is down between a kill and its restart.
			c.MaxAttempts, c.RetryBase, c.RetryMax = 10000, 20*time.Millisecond, 200*time.Millisecond
		},
		Delivery: func(t *testing.T, target string) delivery.Delivery {
			d, err := webhook.New(webhook.Config{URL: "http://" + target + "/hook", Secret: secret,
				AllowNetworks: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
	})
}

type killWriter struct {
	http.ResponseWriter
	c *inboxcrash.Child
}

func (k killWriter) WriteHeader(s int) {
	k.c.Die("after") // the id is committed (or refused), the answer not sent
	k.ResponseWriter.WriteHeader(s)
}

// TestCrashChild is TestCrash's receiver process.
func TestCrashChild(t *testing.T) {
	c := inboxcrash.ChildFromEnv(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mw, err := webhookinbox.New(c.Inbox, webhookinbox.Config{Verifier: webhook.Verifier{Secret: secret}, AtMostOnce: !c.Mode.Tx,
		Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id := r.Header.Get("herald-event-id")
			var err error
			if tx := webhookinbox.Tx(r.Context()); tx != nil {
				_, err = tx.ExecContext(r.Context(), `INSERT INTO effects (id) VALUES ($1)`, id)
				c.Die("inside")
			} else {
				c.Die("inside")
				_, err = c.DB.ExecContext(context.WithoutCancel(r.Context()), `INSERT INTO effects (id) VALUES ($1)`, id)
			}
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
			}
		})})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Addr: c.Target, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.Tick(r.Context(), r.Header.Get("herald-event-id"))
		c.Die("before")
		mw.ServeHTTP(killWriter{w, c}, r)
	})}
	shut := make(chan struct{})
	go func() { defer close(shut); c.WaitDone(ctx); _ = srv.Shutdown(context.Background()) }()
	if err := srv.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		t.Fatal(err)
	}
	// ListenAndServe returns as Shutdown begins; Shutdown returns once
	// the connections are closed: wait for it, or the process's leak
	// check finds the server's goroutines still closing them.
	<-shut
}
