package admin_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/google/uuid"

	"github.com/heraldgo/herald/admin"
	"github.com/heraldgo/herald/relay"
)

// The README's "Operating herald" snippets, compiled here.

func ExampleAdmin() {
	var (
		ctx context.Context
		db  *sql.DB
		r   *relay.Relay
		id  uuid.UUID
	)
	adm, err := admin.New(admin.Config{DB: db, Relay: r}) // or Config{DB: db, Table: "herald_outbox"} without a relay
	if err != nil {
		log.Fatal(err)
	}

	// List dead letters, a page at a time (keyset on the sequence).
	q := admin.Query{State: admin.StateDead, Topics: []string{"billing.*"}, ErrorContains: "503"}
	for {
		page, err := adm.List(ctx, q)
		if err != nil {
			log.Fatal(err)
		}
		for _, e := range page.Events {
			fmt.Println(e.Sequence, e.Topic, e.OrderingKey, e.Attempts, e.LastError)
		}
		if page.Next == 0 {
			break
		}
		q.After = page.Next
	}

	// One event, and what its key holds back behind it.
	d, err := adm.Get(ctx, id)
	if err != nil {
		log.Fatal(err) // errors.Is(err, admin.ErrNotFound) for an unknown id
	}
	fmt.Println(d.State, d.LastError, d.HeldBack, len(d.HeldBackFirst))

	// Retry, or discard (delete: the key's later events are released).
	n, err := adm.Retry(ctx, admin.Query{Topics: []string{"billing.*"}, ErrorContains: "503"})
	fmt.Println("retried", n, err)
	n, err = adm.Discard(ctx, admin.Query{IDs: []uuid.UUID{id}})
	fmt.Println("discarded", n, err)

	// Many: count first, then committed batches with progress. When ctx
	// ends, the batches done stay done and the same call continues.
	all := admin.Query{Topics: []string{"billing.*"}}
	total, err := adm.Count(ctx, all)
	if err != nil {
		log.Fatal(err)
	}
	n, err = adm.RetryBatches(ctx, all, admin.BatchOptions{Size: 1000, Progress: func(done int64) {
		log.Printf("retried %d of %d", done, total)
	}})
	fmt.Println("retried", n, err)

	// Stop every relay of the table leasing a topic, and let it go again.
	if err := adm.Pause(ctx, "billing.invoice", "provider incident #812"); err != nil {
		log.Fatal(err)
	}
	if _, err := adm.Resume(ctx, "billing.invoice"); err != nil {
		log.Fatal(err)
	}

	// Backlog per topic, in one statement.
	topics, err := adm.Backlog(ctx) // Topic, Pending, OldestPendingAge, DeadLettered, Paused
	fmt.Println(topics, err)
}

func ExampleNewHandler() {
	var (
		adm         *admin.Admin
		sessionUser func(*http.Request) (name string, oncall bool, ok bool) // your service's own sign-in
	)
	h, err := admin.NewHandler(adm, admin.HandlerConfig{
		// Required: the handler has no auth of its own. write is true for
		// retry, discard, pause and resume.
		Authorize: func(r *http.Request, write bool) error {
			_, oncall, ok := sessionUser(r)
			switch {
			case !ok:
				return errors.New("sign in first")
			case write && !oncall:
				return errors.New("only the on-call engineer may retry, discard or pause")
			}
			return nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/herald/", http.StripPrefix("/herald", h))
	srv := &http.Server{Addr: "127.0.0.1:8081", Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
