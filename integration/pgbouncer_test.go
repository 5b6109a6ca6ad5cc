package integration_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

// startPgBouncer starts a private PgBouncer in transaction pooling in
// front of the test PostgreSQL server (never the shared server's own
// settings) with two server connections per pool, and returns its port.
func startPgBouncer(t *testing.T) int {
	t.Helper()
	if testing.Short() {
		t.Skip("needs PostgreSQL and pgbouncer; skipped with -short")
	}
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if bin, err = exec.LookPath("/usr/sbin/pgbouncer"); err != nil {
			t.Fatalf("pgbouncer is not installed: apt-get install pgbouncer (.ci/run does), or skip with -short")
		}
	}
	u, err := url.Parse(testkit.PostgresDSN())
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	// Not t.TempDir(): its parent is private to this user, and pgbouncer
	// runs as postgres when the tests run as root.
	dir, err := os.MkdirTemp("", "herald-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	db := strings.TrimPrefix(u.Path, "/")
	ini := fmt.Sprintf(`[databases]
%s = host=%s port=%s dbname=%s user=%s
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = any
pool_mode = transaction
default_pool_size = 2
max_client_conn = 200
logfile = %s
pidfile = %s
`, db, u.Hostname(), u.Port(), db, u.User.Username(), port, filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	cfg := filepath.Join(dir, "pgbouncer.ini")
	if err := os.WriteFile(cfg, []byte(ini), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{cfg}
	if me, err := user.Current(); err == nil && me.Uid == "0" {
		args = []string{"-u", "postgres", cfg} // pgbouncer refuses to run as root
	}
	cmd := exec.Command(bin, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testkit.Eventually(t, 10*time.Second, func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}, "pgbouncer listening on %d (%s)", port, &stderr)
	return port
}

// warnLog counts the relay's WARN and ERROR records and keeps them.
type warnLog struct {
	mu   sync.Mutex
	msgs []string
}

func (l *warnLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *warnLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level < slog.LevelWarn {
		return nil
	}
	s := r.Message
	r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
	l.mu.Lock()
	l.msgs = append(l.msgs, s)
	l.mu.Unlock()
	return nil
}
func (l *warnLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *warnLog) WithGroup(string) slog.Handler      { return l }

// Behind PgBouncer in transaction pooling, herald's writer and relay work
// with pgx's exec, simple_protocol and cache_describe modes: every event
// delivered, in order per key, no error. With pgx's default
// (cache_statement) statements prepared on one server connection go
// missing on another; every error herald returns or logs for it is an
// ErrConfiguration that says what to change.
func TestPgBouncerTransactionPooling(t *testing.T) {
	t.Parallel()
	port := startPgBouncer(t)
	for _, mode := range []string{"exec", "simple_protocol", "cache_describe", "cache_statement"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			direct, _ := testkit.Postgres(t)
			ctx := context.Background()
			var schema string
			if err := direct.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
				t.Fatal(err)
			}
			table := schema + ".herald_outbox" // no search_path through the pooler
			u, _ := url.Parse(testkit.PostgresDSN())
			u.Host = fmt.Sprintf("127.0.0.1:%d", port)
			q := u.Query()
			q.Set("default_query_exec_mode", mode)
			u.RawQuery = q.Encode()
			pool, err := sql.Open("pgx", u.String())
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			pool.SetMaxOpenConns(6) // more client connections than the pool's two server connections
			// Migrate is one transaction: it works through the pooler.
			migrateOn := pool
			if mode == "cache_statement" {
				migrateOn = direct
			}
			if err := envelope.Migrate(ctx, migrateOn, envelope.Postgres, table); err != nil {
				t.Fatal(err)
			}

			logs := &warnLog{}
			var mu sync.Mutex
			got := map[string][]int{}
			r, err := relay.New(pool, delivery.Func(func(_ context.Context, e *envelope.Event) error {
				var n int
				_, _ = fmt.Sscanf(string(e.Payload), "%d", &n)
				mu.Lock()
				got[e.OrderingKey] = append(got[e.OrderingKey], n)
				mu.Unlock()
				return nil
			}), relay.Config{Table: table, MinPollInterval: 5 * time.Millisecond, MaxPollInterval: 50 * time.Millisecond,
				BatchSize: 20, Logger: slog.New(logs)})
			if mode == "cache_statement" && err != nil && strings.Contains(err.Error(), "default_query_exec_mode=exec") {
				t.Logf("cache_statement: relay.New failed, saying what to change: %v", err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Start(ctx); err != nil {
				t.Fatal(err)
			}
			w, err := envelope.NewWriter(envelope.Postgres, table)
			if err != nil {
				t.Fatal(err)
			}
			const writers, txs = 4, 40
			var wg sync.WaitGroup
			var werrs []error
			var written sync.Map
			for g := range writers {
				wg.Go(func() {
					key := fmt.Sprintf("k%d", g)
					for i := range txs {
						tx, err := pool.BeginTx(ctx, nil)
						if err == nil {
							_, err = w.Write(ctx, tx, []envelope.Message{{Topic: "t", OrderingKey: key, Payload: i}})
							if err == nil {
								err = tx.Commit()
							} else {
								_ = tx.Rollback()
							}
						}
						if err != nil {
							mu.Lock()
							werrs = append(werrs, err)
							mu.Unlock()
							continue
						}
						written.Store(fmt.Sprintf("%s/%d", key, i), true)
					}
				})
			}
			wg.Wait()
			nwritten := 0
			written.Range(func(any, any) bool { nwritten++; return true })
			if mode == "cache_statement" && nwritten == 0 {
				t.Fatalf("no write succeeded: %v", werrs[0])
			}
			delivered := func() int {
				mu.Lock()
				defer mu.Unlock()
				n := 0
				for _, s := range got {
					n += len(s)
				}
				return n
			}
			if mode == "cache_statement" {
				// The relay's polls fail now and then; wait until it has
				// delivered everything or logged such a failure.
				testkit.Eventually(t, 60*time.Second, func() bool {
					logs.mu.Lock()
					defer logs.mu.Unlock()
					return delivered() >= nwritten || len(logs.msgs) > 0
				}, "%d written events delivered, or a relay warning", nwritten)
			} else {
				testkit.Eventually(t, 60*time.Second, func() bool { return delivered() >= nwritten },
					"%d written events delivered", nwritten)
			}
			if err := r.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			for key, seq := range got {
				for i := 1; i < len(seq); i++ {
					if seq[i] < seq[i-1] {
						t.Errorf("key %s delivered out of order: %v", key, seq)
						break
					}
				}
			}
			logs.mu.Lock()
			defer logs.mu.Unlock()
			if mode != "cache_statement" {
				if len(werrs) > 0 {
					t.Errorf("%d writes failed, the first: %v", len(werrs), werrs[0])
				}
				if len(logs.msgs) > 0 {
					t.Errorf("the relay logged %d warnings, the first: %s", len(logs.msgs), logs.msgs[0])
				}
				return
			}
			for _, err := range werrs {
				if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), "default_query_exec_mode=exec") {
					t.Errorf("a write failed without saying what to change: %v", err)
				}
			}
			for _, m := range logs.msgs {
				if (strings.Contains(m, "SQLSTATE 26000") || strings.Contains(m, "SQLSTATE 42P05")) && !strings.Contains(m, "default_query_exec_mode=exec") {
					t.Errorf("the relay logged a pooler failure without saying what to change: %s", m)
				}
			}
			t.Logf("cache_statement: %d of %d writes failed, %d delivered, %d relay warnings; first write error: %v; first warning: %s",
				len(werrs), writers*txs, delivered(), len(logs.msgs), first(werrs), first(logs.msgs))
		})
	}
}

func first[T any](s []T) any {
	if len(s) == 0 {
		return nil
	}
	return s[0]
}
