package relay

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
)

// TestAsyncCommitOnSQLiteIsUnsupported: AsyncCommit is PostgreSQL's
// synchronous_commit; on SQLite New refuses it, naming the option.
func TestAsyncCommitOnSQLiteIsUnsupported(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.SQLite)
	_, err := New(e.db, &recorder{}, Config{AsyncCommit: true})
	if !errors.Is(err, envelope.ErrUnsupported) || !strings.Contains(err.Error(), "relay.Config.AsyncCommit") {
		t.Fatalf("New(SQLite, AsyncCommit) = %v, want an ErrUnsupported error naming relay.Config.AsyncCommit", err)
	}
}

// settingIn runs stmt with args inside a transaction and returns
// synchronous_commit as that transaction sees it afterwards: the value its
// commit will use.
func settingIn(t *testing.T, e *env, stmt string, args ...any) string {
	t.Helper()
	ctx := context.Background()
	tx, err := e.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback() }()
	func() {
		rows, err := tx.QueryContext(ctx, stmt, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}()
	var v string
	if err := tx.QueryRowContext(ctx, `SHOW synchronous_commit`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestAsyncCommitTurnsOffSynchronousCommitForMarksOnly: with AsyncCommit,
// the transaction of each mark and release commits with
// synchronous_commit off, while the lease's and the renewal's keep the
// server's setting — and the setting does not outlive the statement's
// transaction on the pooled connection.
func TestAsyncCommitTurnsOffSynchronousCommitForMarksOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	for _, async := range []bool{false, true} {
		r := e.newRelay(t, &recorder{}, Config{Name: "probe", AsyncCommit: async, Lease: time.Minute})
		ev := e.enqueue(t, msg("t", "", 1), msg("t", "", 2), msg("t", "", 3))
		seqs := r.seqArg(ev)
		lease := settingIn(t, e, r.sql.lease, append(append([]any{r.cfg.Lease.Microseconds(), r.cfg.Name, nil, r.cfg.BatchSize}, r.fargs...), int64(0))...) // 0: no lease floor
		renew := settingIn(t, e, r.sql.renew, r.cfg.Lease.Microseconds(), seqs, r.cfg.Name, nil)
		markPublished := settingIn(t, e, r.sql.markPublished, nil, r.seqArg(ev[:1]), r.cfg.Name)
		deleted := settingIn(t, e, r.sql.deletePublished, r.seqArg(ev[1:2]), r.cfg.Name)
		failed := settingIn(t, e, r.sql.markFailed, `[{"sequence": `+r.seqArg(ev[2:])[1:len(r.seqArg(ev[2:]))-1]+`, "attempts": 1, "error": "x", "backoff_us": 1000, "dead": false}]`, r.cfg.Name, nil)
		release := settingIn(t, e, r.sql.release, seqs, r.cfg.Name)
		want := "on"
		if async {
			want = "off"
		}
		for name, got := range map[string]string{"mark published": markPublished, "delete on publish": deleted, "mark failed": failed, "release": release} {
			if got != want {
				t.Errorf("AsyncCommit %v: %s commits with synchronous_commit %s, want %s", async, name, got, want)
			}
		}
		if lease != "on" || renew != "on" {
			t.Errorf("AsyncCommit %v: lease commits with synchronous_commit %s, renewal with %s, want on", async, lease, renew)
		}
		if n := e.count(t, "published_at IS NULL AND attempts = 0 AND sequence IN ("+strings.Trim(seqs, "{}")+")"); n != 0 {
			t.Errorf("AsyncCommit %v: %d of the events were neither marked, deleted nor failed", async, n)
		}
		var after string
		if err := e.db.QueryRow(`SHOW synchronous_commit`).Scan(&after); err != nil || after != "on" {
			t.Fatalf("synchronous_commit after the statements = %q, %v; want the server's on", after, err)
		}
	}
}

// TestAsyncCommitDrains: a relay with AsyncCommit delivers and marks every
// event, and a failed one is retried as without it.
func TestAsyncCommitDrains(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envelope.Postgres)
	failed := false
	rec := &recorder{fail: func(ev *envelope.Event) error {
		if ev.Payload != nil && string(ev.Payload) == "7" && !failed {
			failed = true
			return errors.New("first try fails")
		}
		return nil
	}}
	var ms []envelope.Message
	for i := range 50 {
		ms = append(ms, msg("t", "", i))
	}
	e.enqueue(t, ms...)
	r := e.newRelay(t, rec, Config{AsyncCommit: true, BatchSize: 10, Concurrency: 1})
	start(t, r)
	testkit.Eventually(t, 30*time.Second, func() bool { return e.count(t, "published_at IS NULL") == 0 }, "events left unpublished")
	if n := e.count(t, "attempts = 1"); n != 1 || rec.count() != 50 {
		t.Fatalf("%d events with one failed attempt, %d delivered; want 1 and 50", n, rec.count())
	}
}
