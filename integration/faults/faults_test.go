package faults

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/internal/relayknob"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

// The relay child's environment.
const (
	envChildDSN      = "HERALD_FAULTS_CHILD_DSN"
	envChildReceiver = "HERALD_FAULTS_CHILD_RECEIVER"
	envChildName     = "HERALD_FAULTS_CHILD_NAME"
	envChildLease    = "HERALD_FAULTS_CHILD_LEASE"
	envChildByLock   = "HERALD_FAULTS_CHILD_LEASE_BY_LOCK"
	envChildBatch    = "HERALD_FAULTS_CHILD_BATCH"
	envChildPrepared = "HERALD_FAULTS_CHILD_PREPARED"
	// EnvFull selects the full run (minutes) instead of the CI-safe subset.
	EnvFull = "HERALD_FAULTS"
)

// Account is captured with the default ordering key (one key per row):
// its version, bumped by every update, is the order of the row's commits.
type Account struct {
	ID      uint
	Token   string
	Version int
}

func (Account) ChangeCapture() envelope.Options { return envelope.Options{} }

// Entry is captured with an ordering key shared by many rows (one per
// group, as an OrderingKeyFunc giving one key per parent would): no row lock
// orders its writers, only herald's per-key ordering.
type Entry struct {
	ID    uint
	Group int
	Token string
}

func (Entry) ChangeCapture() envelope.Options {
	return envelope.Options{OrderingKeyFunc: func(c envelope.Change) string {
		return fmt.Sprintf("entries:%v", c.After["group"])
	}}
}

// Note is captured with one ordering key for every row ("{label}").
type Note struct {
	ID    uint
	Token string
}

func (Note) ChangeCapture() envelope.Options { return envelope.Options{OrderingKey: "{label}"} }

// delivered is what a relay child posts to the receiver for each delivery.
type delivered struct {
	ID      string          `json:"id"`
	Seq     int64           `json:"seq"`
	Key     string          `json:"key"`
	Topic   string          `json:"topic"`
	Relay   string          `json:"relay"`
	Payload json.RawMessage `json:"payload"`
}

// TestFaultRelayChild is a relay process of TestFaults: it relays from the
// database at its DSN (through the test's proxy) to the test's receiver
// until it is killed or told to stop (SIGTERM). It does nothing unless
// started by TestFaults.
func TestFaultRelayChild(t *testing.T) {
	dsn := os.Getenv(envChildDSN)
	if dsn == "" {
		t.Skip("a relay process of TestFaults")
	}
	recv, name := os.Getenv(envChildReceiver), os.Getenv(envChildName)
	lease, err := time.ParseDuration(os.Getenv(envChildLease))
	if err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(4)
	client := &http.Client{}
	d := delivery.Func(func(ctx context.Context, e *envelope.Event) error {
		body, err := json.Marshal(delivered{ID: e.ID.String(), Seq: e.Sequence, Key: e.OrderingKey,
			Topic: e.Topic, Relay: name, Payload: e.Payload})
		if err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, recv, bytes.NewReader(body))
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("receiver: %s", resp.Status)
		}
		return nil
	})
	cfg := relay.Config{
		Name: name, Lease: lease, DeliveryTimeout: lease / 2,
		MaxAttempts: 1000, RetryBase: 20 * time.Millisecond, RetryMax: 500 * time.Millisecond,
		MinPollInterval: 20 * time.Millisecond, MaxPollInterval: 300 * time.Millisecond,
		BatchSize: 50,
	}
	if lease == 0 { // the default-lease run
		cfg.Lease, cfg.DeliveryTimeout = 0, 0
	}
	cfg.LeaseByLock = os.Getenv(envChildByLock) == "1"
	if os.Getenv(envChildPrepared) == "1" {
		// The drain's lease prepared on the harness's small table (from 8
		// MB otherwise); the parent counts the prepared leases reported.
		relayknob.PlanMinBytes.Store(0)
		go func() {
			var last int64
			for range time.Tick(100 * time.Millisecond) {
				if n := relayknob.PreparedLeases.Load(); n != last {
					fmt.Printf("prepared %d\n", n)
					last = n
				}
			}
		}()
	}
	if b, err := strconv.Atoi(os.Getenv(envChildBatch)); err == nil && b > 0 {
		cfg.BatchSize = b
	}
	r, err := relay.New(db, d, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "relay %s: New: %v\n", name, err)
		os.Exit(3)
	}
	ctx, stop := context.WithCancel(context.Background())
	sig := make(chan os.Signal, 1)
	signalNotify(sig)
	go func() { <-sig; stop() }()
	fmt.Println("ready")
	if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "relay %s: Run: %v\n", name, err)
		os.Exit(4)
	}
}

// plan is the size of one run.
type plan struct {
	duration  time.Duration // writers and faults
	writers   int
	txRate    int // transactions per second per writer
	relays    int
	lease     time.Duration // 0 = relay.DefaultLease
	kills     int           // SIGKILLs of relay processes
	crashes   int           // PostgreSQL immediate stops and restarts
	cuts      int           // every connection through the proxy cut
	stops     int           // SIGSTOP for 2 × lease, then SIGCONT
	drainWait time.Duration // how long the drain may take after the last fault
	// byLock runs the relays with LeaseByLock, batch is their BatchSize
	// (0: 50), and the first unordered writers write unordered events
	// alone: a backlog of them is what the relay leases by lock.
	byLock    bool
	batch     int
	unordered int
	// prepared runs the relays' drain lease prepared whatever the table's
	// size (relay/plans.go), and fails the run if none ran so.
	prepared bool
}

// TestFaults runs writers and relay processes against a private PostgreSQL
// behind a fault-injecting proxy, kills and freezes relays, crashes the
// server and cuts connections, then checks against the producers' ledger:
// every committed event delivered, nothing rolled back delivered, per-key
// order kept. The CI-safe subset runs in the normal test command; the full
// run is HERALD_FAULTS=1 (see RELIABILITY.md).
func TestFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a private PostgreSQL cluster; skipped with -short")
	}
	full := os.Getenv(EnvFull) != ""
	plans := map[string]plan{
		"short-lease": {duration: 6 * time.Second, writers: 3, txRate: 40, relays: 3, lease: 2 * time.Second,
			kills: 3, crashes: 1, cuts: 1, stops: 1, drainWait: 3 * time.Minute},
		"lease-by-lock": {duration: 6 * time.Second, writers: 3, txRate: 40, relays: 3, lease: 2 * time.Second,
			kills: 3, crashes: 1, cuts: 1, stops: 1, drainWait: 3 * time.Minute, byLock: true, batch: 10, unordered: 2},
		"prepared": {duration: 6 * time.Second, writers: 3, txRate: 40, relays: 3, lease: 2 * time.Second,
			kills: 3, crashes: 1, cuts: 1, stops: 1, drainWait: 3 * time.Minute, batch: 10, unordered: 2, prepared: true},
	}
	if full {
		plans = map[string]plan{
			"short-lease": {duration: 3 * time.Minute, writers: 6, txRate: 40, relays: 3, lease: 2 * time.Second,
				kills: 24, crashes: 3, cuts: 6, stops: 3, drainWait: 5 * time.Minute},
			"default-lease": {duration: 90 * time.Second, writers: 6, txRate: 40, relays: 3, lease: 0,
				kills: 4, crashes: 1, cuts: 2, stops: 1, drainWait: 6 * time.Minute},
			"lease-by-lock": {duration: 3 * time.Minute, writers: 6, txRate: 40, relays: 3, lease: 2 * time.Second,
				kills: 24, crashes: 3, cuts: 6, stops: 3, drainWait: 5 * time.Minute, byLock: true, batch: 10, unordered: 4},
			"prepared": {duration: 3 * time.Minute, writers: 6, txRate: 40, relays: 3, lease: 2 * time.Second,
				kills: 24, crashes: 3, cuts: 6, stops: 3, drainWait: 5 * time.Minute, batch: 10, unordered: 4, prepared: true},
		}
	}
	names := make([]string, 0, len(plans))
	for n := range plans {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Run(n, func(t *testing.T) { runFaults(t, plans[n]) })
	}
}

// outcome of one writer transaction.
type ledgerBook struct {
	mu         sync.Mutex
	committed  map[string]bool // the writer saw COMMIT succeed
	rolledBack map[string]bool // the writer rolled back on purpose
	ambiguous  map[string]bool // the commit's outcome was not known
	txs        [3]int          // committed, rolled back, ambiguous
}

func (b *ledgerBook) add(tokens []string, kind int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := [3]map[string]bool{b.committed, b.rolledBack, b.ambiguous}[kind]
	for _, tk := range tokens {
		m[tk] = true
	}
	b.txs[kind]++
}

// receiver records every delivery in arrival order.
type receiver struct {
	mu       sync.Mutex
	all      []delivered
	failRate float64
	failed   atomic.Int64
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var d delivered
	if err := json.NewDecoder(r.Body).Decode(&d); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if rand.Float64() < rc.failRate {
		rc.failed.Add(1)
		http.Error(w, "injected failure", http.StatusServiceUnavailable)
		return
	}
	rc.mu.Lock()
	rc.all = append(rc.all, d)
	rc.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (rc *receiver) snapshot() []delivered {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]delivered(nil), rc.all...)
}

// token is the producer's mark of an event: the after image's token for a
// captured write, the payload's for an enqueued message.
func token(p json.RawMessage) (tok string, version int, err error) {
	var v struct {
		Token string `json:"token"`
		After *struct {
			Token   string `json:"token"`
			Version int    `json:"version"`
		} `json:"after"`
	}
	if err := json.Unmarshal(p, &v); err != nil {
		return "", 0, err
	}
	if v.After != nil {
		return v.After.Token, v.After.Version, nil
	}
	return v.Token, 0, nil
}

type child struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	kill bool // killed or stopped by the test
}

func runFaults(t *testing.T, p plan) {
	pg := testkit.NewPrivatePostgres(t, "fsync = on", "synchronous_commit = on", "max_connections = 200")
	pg.CreateDatabase(t, "herald")
	px := testkit.NewProxy(t, pg.Addr())
	direct := pg.DSN("", "herald")
	viaProxy := pg.DSN(px.Addr(), "herald")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	setup, err := sql.Open("pgx", direct)
	if err != nil {
		t.Fatal(err)
	}
	defer setup.Close()
	if err := envelope.Migrate(ctx, setup, envelope.Postgres, ""); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		`CREATE TABLE accounts (id bigserial PRIMARY KEY, token text NOT NULL, version int NOT NULL DEFAULT 0)`,
		`CREATE TABLE entries (id bigserial PRIMARY KEY, "group" int NOT NULL, token text NOT NULL)`,
		`CREATE TABLE notes (id bigserial PRIMARY KEY, token text NOT NULL)`,
		`CREATE TABLE ledger (token text PRIMARY KEY)`,
	} {
		if _, err := setup.ExecContext(ctx, s); err != nil {
			t.Fatal(err)
		}
	}

	rc := &receiver{failRate: 0.03}
	srv := httptest.NewServer(rc)
	defer srv.Close()

	// Relay processes.
	logDir := t.TempDir()
	var preparedLeases atomic.Int64 // the relays' prepared leases, as they report them (p.prepared)
	var (
		cmu      sync.Mutex
		children []*child
		spawned  int
	)
	spawn := func() *child {
		cmu.Lock()
		spawned++
		name := fmt.Sprintf("relay-%d", spawned)
		cmu.Unlock()
		cmd := exec.Command(os.Args[0], "-test.run=^TestFaultRelayChild$", "-test.count=1")
		cmd.Env = append(os.Environ(), envChildDSN+"="+viaProxy, envChildReceiver+"="+srv.URL,
			envChildName+"="+name, envChildLease+"="+p.lease.String(), envChildBatch+"="+strconv.Itoa(p.batch))
		if p.byLock {
			cmd.Env = append(cmd.Env, envChildByLock+"=1")
		}
		if p.prepared {
			cmd.Env = append(cmd.Env, envChildPrepared+"=1")
		}
		logf, err := os.Create(filepath.Join(logDir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = logf
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		c := &child{name: name, cmd: cmd, done: make(chan struct{})}
		ready := make(chan struct{})
		go func() {
			sc := bufio.NewScanner(out)
			var prepared int64 // this process's count, as last reported
			for sc.Scan() {
				if sc.Text() == "ready" {
					close(ready)
				}
				if v, ok := strings.CutPrefix(sc.Text(), "prepared "); ok {
					if n, err := strconv.ParseInt(v, 10, 64); err == nil {
						preparedLeases.Add(n - prepared)
						prepared = n
					}
				}
				fmt.Fprintln(logf, sc.Text())
			}
		}()
		go func() {
			c.err = cmd.Wait()
			_ = logf.Close()
			close(c.done)
		}()
		select {
		case <-ready:
		case <-c.done:
		case <-time.After(2 * time.Minute):
		}
		cmu.Lock()
		children = append(children, c)
		cmu.Unlock()
		return c
	}
	live := func() []*child {
		cmu.Lock()
		defer cmu.Unlock()
		var out []*child
		for _, c := range children {
			select {
			case <-c.done:
			default:
				if !c.kill {
					out = append(out, c)
				}
			}
		}
		return out
	}
	for range p.relays {
		spawn()
	}
	defer func() {
		cmu.Lock()
		cs := append([]*child(nil), children...)
		cmu.Unlock()
		for _, c := range cs {
			_ = c.cmd.Process.Signal(syscall.SIGCONT)
			_ = c.cmd.Process.Signal(syscall.SIGKILL)
			<-c.done
		}
	}()

	// Writers.
	book := &ledgerBook{committed: map[string]bool{}, rolledBack: map[string]bool{}, ambiguous: map[string]bool{}}
	gdb, err := gorm.Open(postgres.Open(viaProxy), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := gdb.Use(gormcapture.New(gormcapture.Config{Namespace: "faults", Models: []any{&Account{}, &Entry{}, &Note{}}})); err != nil {
		t.Fatal(err)
	}
	if sqlDB, err := gdb.DB(); err == nil {
		defer sqlDB.Close()
		sqlDB.SetMaxOpenConns(p.writers + 2)
	}
	errRollback := errors.New("deliberate rollback")
	writing, stopWriting := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var writeErrs atomic.Int64
	for w := range p.writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(time.Now().UnixNano())))
			// A steady rate, as a service writes: the relays' drain rate on
			// a few hot ordering keys is bounded (one event per key per
			// poll), and this suite measures faults, not that bound.
			pace := time.NewTicker(time.Second / time.Duration(p.txRate))
			defer pace.Stop()
			for n := 0; writing.Err() == nil; n++ {
				select {
				case <-pace.C:
				case <-writing.Done():
					return
				}
				var tokens []string
				rollback := rng.IntN(10) == 0
				err := gdb.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
					events := 1 + rng.IntN(3)
					if w < p.unordered {
						events = 20 // a backlog of unordered events: full leases, taken by lock
					}
					for i := range events {
						tk := fmt.Sprintf("w%d-%d-%d", w, n, i)
						op := rng.IntN(18)
						if w < p.unordered {
							op = 12 // an unordered event (below)
						}
						switch {
						case op < 4:
							if err := tx.Create(&Account{Token: tk}).Error; err != nil {
								return err
							}
						case op < 8:
							res := tx.Model(&Account{ID: uint(1 + rng.IntN(8))}).
								Updates(map[string]any{"token": tk, "version": gorm.Expr("version + 1")})
							if res.Error != nil {
								return res.Error
							}
							if res.RowsAffected == 0 {
								continue
							}
						case op < 12:
							if err := tx.Create(&Entry{Group: rng.IntN(4), Token: tk}).Error; err != nil {
								return err
							}
						case op < 17:
							key := "note:" + strconv.Itoa(rng.IntN(3))
							if w < p.unordered {
								key = ""
							}
							if _, err := gormcapture.Enqueue(tx, envelope.Message{Topic: "faults.note",
								OrderingKey: key,
								Payload:     map[string]any{"token": tk}}); err != nil {
								return err
							}
						default: // one in eighteen: one key for every note, the hottest
							if err := tx.Create(&Note{Token: tk}).Error; err != nil {
								return err
							}
						}
						if err := tx.Exec("INSERT INTO ledger (token) VALUES (?)", tk).Error; err != nil {
							return err
						}
						tokens = append(tokens, tk)
					}
					if rollback {
						return errRollback
					}
					return nil
				})
				switch {
				case err == nil:
					book.add(tokens, 0)
				case errors.Is(err, errRollback):
					book.add(tokens, 1)
				default:
					// The connection was cut or the server crashed: the
					// commit may or may not have happened.
					writeErrs.Add(1)
					book.add(tokens, 2)
					select {
					case <-writing.Done():
					case <-time.After(50 * time.Millisecond): // back off before the next transaction
					}
				}
			}
		}()
	}

	// Faults, one at a time, spread over the run.
	type fault int
	const (
		kill fault = iota
		crash
		cut
		freeze
	)
	faultNames := [...]string{kill: "kill", crash: "crash", cut: "cut", freeze: "freeze"}
	var faults []fault
	for range p.kills {
		faults = append(faults, kill)
	}
	for range p.crashes {
		faults = append(faults, crash)
	}
	for range p.cuts {
		faults = append(faults, cut)
	}
	for range p.stops {
		faults = append(faults, freeze)
	}
	rand.Shuffle(len(faults), func(i, j int) { faults[i], faults[j] = faults[j], faults[i] })
	lease := p.lease
	if lease == 0 {
		lease = relay.DefaultLease
	}
	gap := p.duration / time.Duration(len(faults)+1)
	var kills, crashes, stops int
	// The order and time of the faults, logged with the figures: a long
	// drain after the last fault is a live lease of a relay killed late.
	var schedule []string
	faultsStart := time.Now()
	for _, f := range faults {
		jitter := time.Duration(rand.Int64N(int64(gap) / 2))
		time.Sleep(gap/2 + jitter) // the fault schedule, not a wait for a goroutine
		schedule = append(schedule, fmt.Sprintf("%s at %s", faultNames[f], time.Since(faultsStart).Round(100*time.Millisecond)))
		switch f {
		case kill:
			if l := live(); len(l) > 0 {
				c := l[rand.IntN(len(l))]
				cmu.Lock()
				c.kill = true
				cmu.Unlock()
				_ = c.cmd.Process.Signal(syscall.SIGKILL)
				<-c.done
				kills++
				spawn()
			}
		case crash:
			if err := pg.Crash(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Millisecond) // the outage
			if err := pg.Start(); err != nil {
				t.Fatal(err)
			}
			crashes++
		case cut:
			px.Cut()
		case freeze:
			if l := live(); len(l) > 0 {
				c := l[rand.IntN(len(l))]
				_ = c.cmd.Process.Signal(syscall.SIGSTOP)
				time.Sleep(2*lease + 500*time.Millisecond) // the frozen relay's lease runs out
				_ = c.cmd.Process.Signal(syscall.SIGCONT)
				stops++
			}
		}
	}
	time.Sleep(gap)
	stopWriting()
	wg.Wait()
	lastFault := time.Now()
	schedule = append(schedule, fmt.Sprintf("writers stopped at %s", lastFault.Sub(faultsStart).Round(100*time.Millisecond)))

	// The ledger is the truth: what committed.
	ledger := map[string]bool{}
	testkit.Eventually(t, time.Minute, func() bool {
		rows, err := setup.QueryContext(ctx, "SELECT token FROM ledger")
		if err != nil {
			return false
		}
		defer rows.Close()
		clear(ledger)
		for rows.Next() {
			var tk string
			if rows.Scan(&tk) != nil {
				return false
			}
			ledger[tk] = true
		}
		return rows.Err() == nil
	}, "read the ledger")

	// Drain.
	drained := func() (int, bool) {
		seen := map[string]bool{}
		for _, d := range rc.snapshot() {
			if tk, _, err := token(d.Payload); err == nil {
				seen[tk] = true
			}
		}
		missing := 0
		for tk := range ledger {
			if !seen[tk] {
				missing++
			}
		}
		return missing, missing == 0
	}
	if !testkit.WaitFor(p.drainWait, func() bool { _, ok := drained(); return ok }) {
		missing, _ := drained()
		t.Errorf("%d of %d committed events not delivered within %s after the last fault", missing, len(ledger), p.drainWait)
		logPending(ctx, t, setup)
		t.FailNow()
	}
	drain := time.Since(lastFault)
	// Let the relays mark what they delivered, then stop them.
	testkit.Eventually(t, time.Minute, func() bool {
		var n int
		err := setup.QueryRowContext(ctx, "SELECT count(*) FROM herald_outbox WHERE published_at IS NULL").Scan(&n)
		return err == nil && n == 0
	}, "every event marked published")

	// Checks.
	all := rc.snapshot()
	var (
		dups, lateDups, orderViolations, versionViolations, phantom int
		firstSeen                                                   = map[string]bool{}
		delivTokens                                                 = map[string]bool{}
		lastSeq                                                     = map[string]int64{}
		lastVersion                                                 = map[string]int{}
	)
	for _, d := range all {
		tk, ver, err := token(d.Payload)
		if err != nil {
			t.Fatalf("undecodable payload %s: %v", d.Payload, err)
		}
		if !ledger[tk] {
			phantom++
			t.Errorf("delivered %s (token %s, seq %d) that is not in the ledger (rolled back? %v)", d.ID, tk, d.Seq, book.rolledBack[tk])
		}
		if firstSeen[d.ID] {
			dups++
			if d.Key != "" && d.Seq < lastSeq[d.Key] {
				lateDups++
			}
			continue
		}
		firstSeen[d.ID] = true
		delivTokens[tk] = true
		if d.Key == "" {
			continue
		}
		if d.Seq < lastSeq[d.Key] {
			orderViolations++
			if orderViolations <= 5 {
				t.Errorf("key %s: event seq %d first delivered after seq %d (by %s)", d.Key, d.Seq, lastSeq[d.Key], d.Relay)
			}
		}
		lastSeq[d.Key] = max(lastSeq[d.Key], d.Seq)
		if strings.HasPrefix(d.Topic, "faults.account.") && ver > 0 {
			if ver <= lastVersion[d.Key] {
				versionViolations++
				if versionViolations <= 5 {
					t.Errorf("key %s: version %d (seq %d) delivered after version %d", d.Key, ver, d.Seq, lastVersion[d.Key])
				}
			}
			lastVersion[d.Key] = max(lastVersion[d.Key], ver)
		}
	}
	book.mu.Lock()
	lostCommitted := 0
	for tk := range book.committed {
		if !ledger[tk] {
			lostCommitted++
		}
	}
	rolledBackInLedger := 0
	for tk := range book.rolledBack {
		if ledger[tk] {
			rolledBackInLedger++
		}
	}
	ambiguousCommitted := 0
	for tk := range book.ambiguous {
		if ledger[tk] {
			ambiguousCommitted++
		}
	}
	txs := book.txs
	book.mu.Unlock()
	var dead int
	if err := setup.QueryRowContext(ctx, "SELECT count(*) FROM herald_outbox WHERE dead_lettered_at IS NOT NULL").Scan(&dead); err != nil {
		t.Fatal(err)
	}
	// A relay must survive every fault by itself: none may exit unless the
	// test killed it.
	selfExits := 0
	cmu.Lock()
	for _, c := range children {
		select {
		case <-c.done:
			if !c.kill {
				selfExits++
				t.Errorf("%s exited by itself: %v (log in %s)", c.name, c.err, logDir)
			}
		default:
		}
	}
	cmu.Unlock()

	t.Logf("transactions: %d committed, %d rolled back, %d ambiguous (%d of their events committed); %d write errors",
		txs[0], txs[1], txs[2], ambiguousCommitted, writeErrs.Load())
	t.Logf("faults: %d relay kills (%d relays started), %d server crashes, %d connection cuts, %d freezes of 2×lease (lease %s)",
		kills, spawned, crashes, px.Cuts(), stops, lease)
	t.Logf("fault schedule: %s", strings.Join(schedule, ", "))
	t.Logf("events committed %d, deliveries %d, duplicates %d (%d behind a later event of their key), receiver failures injected %d, dead-lettered %d",
		len(ledger), len(all), dups, lateDups, rc.failed.Load(), dead)
	lost := 0
	for tk := range ledger {
		if !delivTokens[tk] {
			lost++
		}
	}
	t.Logf("lost %d, rolled back delivered %d, per-key order violations %d, version order violations %d; drain after the last fault %s",
		lost, phantom, orderViolations, versionViolations, drain.Round(time.Millisecond))
	if p.byLock {
		// A lease by lock writes no lease_until: the mark writes the
		// relay's name alone.
		var byLock, published int
		if err := setup.QueryRowContext(ctx, `SELECT count(*) FILTER (WHERE lease_until IS NULL AND leased_by IS NOT NULL), count(*)
			FROM herald_outbox WHERE published_at IS NOT NULL`).Scan(&byLock, &published); err != nil {
			t.Error(err)
		} else {
			t.Logf("published under a lease by lock: %d of %d events", byLock, published)
			if byLock == 0 {
				t.Error("no event was leased by lock: the run did not exercise LeaseByLock")
			}
		}
	}
	if p.prepared {
		t.Logf("leases run prepared: %d", preparedLeases.Load())
		if preparedLeases.Load() == 0 {
			t.Error("no lease ran prepared: the run did not exercise the drain's prepared lease")
		}
	}
	if lostCommitted > 0 {
		t.Errorf("%d events whose transaction committed are not in the ledger: the database lost a commit", lostCommitted)
	}
	if rolledBackInLedger > 0 {
		t.Errorf("%d events rolled back on purpose are in the ledger", rolledBackInLedger)
	}
	if dead > 0 {
		t.Errorf("%d events dead-lettered", dead)
	}
	if kills < p.kills || crashes < p.crashes {
		t.Errorf("injected %d kills and %d crashes, planned %d and %d", kills, crashes, p.kills, p.crashes)
	}
	if len(ledger) == 0 {
		t.Error("no event committed: the writers never got through")
	}
}

// logPending logs the outbox's unpublished events by ordering key: what a
// drain that did not finish left behind.
func logPending(ctx context.Context, t *testing.T, db *sql.DB) {
	rows, err := db.QueryContext(ctx, `SELECT ordering_key, count(*), max(attempts), count(*) FILTER (WHERE lease_until IS NOT NULL),
		count(*) FILTER (WHERE dead_lettered_at IS NOT NULL), left(max(last_error), 200)
		FROM herald_outbox WHERE published_at IS NULL GROUP BY 1 ORDER BY 2 DESC LIMIT 20`)
	if err != nil {
		t.Logf("pending: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var key, lastErr sql.NullString
		var n, attempts, leased, dead int
		if err := rows.Scan(&key, &n, &attempts, &leased, &dead, &lastErr); err != nil {
			t.Logf("pending: %v", err)
			return
		}
		t.Logf("pending: key %q: %d events, max attempts %d, leased %d, dead %d, last error %q", key.String, n, attempts, leased, dead, lastErr.String)
	}
	if err := rows.Err(); err != nil {
		t.Logf("pending: %v", err)
	}
}
