package integration_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/relay"
)

// The soak: writers race on a handful of rows through every GORM write
// path, with transactions committed, rolled back (whole or to a nested
// savepoint) and failing, while several relays share the outbox and their
// delivery fails about one time in ten. At the end every committed change
// was delivered at least once, nothing else was, and per ordering key the
// first deliveries follow the sequence and the row's history (its version
// column).
//
// The default size is CI-safe (a few seconds under -race on two cores);
// HERALD_SOAK=1 runs the long size (see README.md).

// SoakItem is the soak's row: Gen is unique per creation (a row deleted
// and created again gets a new one) and Version goes 1, 2, 3, … with each
// update, so (id, gen, version) names one state of the row.
type SoakItem struct {
	ID      int64 `gorm:"primaryKey;autoIncrement:false"`
	Gen     int64 `gorm:"not null"`
	Version int64 `gorm:"not null"`
	Note    string
}

// boomNote makes the capture of an insert or update fail (Extend returns
// errBoom): the write must be undone, even though the caller goes on.
const boomNote = "boom"

var errBoom = errors.New("boom: capture refused")

var soakCapture = envelope.Options{
	Extend: func(_ context.Context, c envelope.Change) (*envelope.Extension, error) {
		if c.After != nil && c.After["note"] == boomNote {
			return nil, errBoom
		}
		return nil, nil
	},
}

const (
	topicInserted = "soak.soak_item.inserted"
	topicUpdated  = "soak.soak_item.updated"
	topicDeleted  = "soak.soak_item.deleted"
	topicManual   = "soak.manual"
	opManual      = envelope.Operation("enqueued")
)

type soakSize struct {
	workers, txs, keys, relays int
	failRate                   float64
	drain                      time.Duration
}

func soakSizeFromEnv() (soakSize, string) {
	if os.Getenv("HERALD_SOAK") == "1" {
		return soakSize{workers: 16, txs: 500, keys: 24, relays: 3, failRate: 0.1, drain: 10 * time.Minute}, "long"
	}
	return soakSize{workers: 6, txs: 60, keys: 8, relays: 3, failRate: 0.1, drain: 60 * time.Second}, "default"
}

// change is one change a transaction made: what its event must say.
type change struct {
	Key          int64
	Op           envelope.Operation // inserted, updated, deleted, or opManual (Enqueue)
	Gen, Version int64
	Note         string // the writing transaction's token (for a delete: the row's last one)
}

func (c change) String() string {
	return fmt.Sprintf("%s id=%d gen=%d v=%d note=%s", c.Op, c.Key, c.Gen, c.Version, c.Note)
}

// ledger collects what the writers committed and what they rolled back.
type ledger struct {
	mu         sync.Mutex
	committed  []change
	rolledBack map[string]bool // tokens of rolled-back transactions and savepoints
	outcomes   map[string]int
	errs       map[string]int
}

func (l *ledger) commit(cs []change, undone ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.committed = append(l.committed, cs...)
	for _, u := range undone {
		l.rolledBack[u] = true
	}
	l.outcomes["committed"]++
}

func (l *ledger) rollback(outcome string, tokens ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, u := range tokens {
		l.rolledBack[u] = true
	}
	l.outcomes[outcome]++
}

func (l *ledger) failed(err error, tokens ...string) {
	msg := err.Error()
	if len(msg) > 120 {
		msg = msg[:120]
	}
	l.mu.Lock()
	l.errs[msg]++
	l.mu.Unlock()
	l.rollback("failed", tokens...)
}

// soakWorker runs random transactions.
type soakWorker struct {
	t    *testing.T
	id   int
	db   *gorm.DB
	rng  *rand.Rand
	gens *atomic.Int64
	keys int
	led  *ledger
}

// expectedTxError tells the failures a racing writer may meet from the
// ones that point at a bug.
func expectedTxError(err error) bool {
	s := err.Error()
	for _, ok := range []string{
		"duplicate key value", "UNIQUE constraint failed", // two writers created one key
		"deadlock detected", "database is locked", "SQLITE_BUSY",
	} {
		if strings.Contains(s, ok) {
			return true
		}
	}
	return false
}

func (w *soakWorker) run(n int) {
	token := fmt.Sprintf("w%d-t%d", w.id, n)
	spToken := token + "/sp"
	var pending []change
	spUndone := false
	rollbackAll := w.rng.Float64() < 0.15
	// On a request-like context, as a service writes.
	ctx := context.WithValue(context.Background(), tenantKey{}, token)
	err := w.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		pending = pending[:0]
		switch k := w.rng.IntN(10); {
		case k < 2:
			return w.bulk(tx, token, &pending)
		default:
			keys := w.pickKeys()
			split := len(keys)
			if k >= 8 { // the last keys in a nested transaction (a savepoint)
				split = w.rng.IntN(len(keys))
			}
			for _, key := range keys[:split] {
				if err := w.single(tx, key, token, &pending); err != nil {
					return err
				}
			}
			if split < len(keys) {
				var inner []change
				undo := w.rng.Float64() < 0.5
				err := tx.Transaction(func(tx2 *gorm.DB) error {
					inner = inner[:0]
					for _, key := range keys[split:] {
						if err := w.single(tx2, key, spToken, &inner); err != nil {
							return err
						}
					}
					if undo {
						return errRollback
					}
					return nil
				})
				switch {
				case errors.Is(err, errRollback):
					spUndone = true
				case err != nil:
					return err
				default:
					pending = append(pending, inner...)
				}
			}
		}
		if rollbackAll {
			return errRollback
		}
		return nil
	})
	switch {
	case err == nil:
		var undone []string
		if spUndone {
			undone = append(undone, spToken)
		}
		w.led.commit(slices.Clone(pending), undone...)
	case errors.Is(err, errRollback):
		w.led.rollback("rolled back", token, spToken)
	default:
		if !expectedTxError(err) {
			w.t.Errorf("worker %d, transaction %s failed unexpectedly: %v", w.id, token, err)
		}
		w.led.failed(err, token, spToken)
	}
}

// pickKeys returns 1 to 3 distinct keys in ascending order: every
// transaction locks rows in key order, so PostgreSQL writers rarely
// deadlock.
func (w *soakWorker) pickKeys() []int64 {
	n := 1 + w.rng.IntN(3)
	set := map[int64]bool{}
	for len(set) < n {
		set[1+w.rng.Int64N(int64(w.keys))] = true
	}
	keys := make([]int64, 0, n)
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

var forUpdate = clause.Locking{Strength: "UPDATE"} // ignored by SQLite, whose transactions here are IMMEDIATE

// single creates, updates or deletes one row, through one of the paths a
// service uses.
func (w *soakWorker) single(tx *gorm.DB, key int64, token string, pending *[]change) error {
	var rows []SoakItem
	if err := tx.Clauses(forUpdate).Where("id = ?", key).Find(&rows).Error; err != nil {
		return err
	}
	if len(rows) == 0 {
		if w.rng.IntN(10) == 0 {
			// A create whose capture fails: the caller catches the error
			// and goes on; the row must not be there (or the create
			// below would hit the key).
			err := tx.Create(&SoakItem{ID: key, Gen: w.gens.Add(1), Version: 1, Note: boomNote}).Error
			if !errors.Is(err, errBoom) {
				return fmt.Errorf("create with a failing capture returned %w, want errBoom", err)
			}
		}
		it := SoakItem{ID: key, Gen: w.gens.Add(1), Version: 1, Note: token}
		if err := tx.Create(&it).Error; err != nil {
			return err
		}
		*pending = append(*pending, change{Key: key, Op: envelope.Inserted, Gen: it.Gen, Version: 1, Note: token})
		return nil
	}
	row := rows[0]
	r := w.rng.IntN(10)
	if r == 0 {
		// An update whose capture fails, caught: the row keeps its version.
		err := tx.Model(&SoakItem{ID: key}).Updates(map[string]any{"version": row.Version + 1, "note": boomNote}).Error
		if !errors.Is(err, errBoom) {
			return fmt.Errorf("update with a failing capture returned %w, want errBoom", err)
		}
	}
	if r < 7 {
		var res *gorm.DB
		switch w.rng.IntN(3) {
		case 0:
			res = tx.Model(&SoakItem{ID: key}).Updates(map[string]any{"version": row.Version + 1, "note": token})
		case 1:
			res = tx.Model(&SoakItem{}).Where("id = ?", key).Updates(map[string]any{"version": gorm.Expr("version + 1"), "note": token})
		default:
			row.Version++
			row.Note = token
			res = tx.Save(&row)
			row.Version--
		}
		if res.Error != nil {
			return res.Error
		}
		if res.RowsAffected != 1 {
			return fmt.Errorf("update of locked row %d: RowsAffected = %d", key, res.RowsAffected)
		}
		*pending = append(*pending, change{Key: key, Op: envelope.Updated, Gen: row.Gen, Version: row.Version + 1, Note: token})
		if w.rng.IntN(3) == 0 {
			_, err := gormcapture.Enqueue(tx, envelope.Message{Topic: topicManual, OrderingKey: fmt.Sprintf("manual:%d", key),
				Payload: map[string]any{"id": key, "gen": row.Gen, "version": row.Version + 1, "note": token}})
			if err != nil {
				return err
			}
			*pending = append(*pending, change{Key: key, Op: opManual, Gen: row.Gen, Version: row.Version + 1, Note: token})
		}
		return nil
	}
	var res *gorm.DB
	if w.rng.IntN(2) == 0 {
		res = tx.Delete(&row)
	} else {
		res = tx.Where("id = ? AND version = ?", key, row.Version).Delete(&SoakItem{})
	}
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected != 1 {
		return fmt.Errorf("delete of locked row %d: RowsAffected = %d", key, res.RowsAffected)
	}
	*pending = append(*pending, change{Key: key, Op: envelope.Deleted, Gen: row.Gen, Version: row.Version, Note: row.Note})
	return nil
}

// bulk updates or deletes the rows of a key range with one statement
// (Where … IN): one event per row.
func (w *soakWorker) bulk(tx *gorm.DB, token string, pending *[]change) error {
	lo := 1 + w.rng.Int64N(int64(w.keys))
	hi := min(int64(w.keys), lo+1+w.rng.Int64N(3))
	var rows []SoakItem
	if err := tx.Clauses(forUpdate).Where("id BETWEEN ? AND ?", lo, hi).Order("id").Find(&rows).Error; err != nil {
		return err
	}
	if len(rows) == 0 {
		return nil
	}
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	var res *gorm.DB
	del := w.rng.IntN(3) == 0
	if del {
		res = tx.Where("id IN ? AND version >= ?", ids, 1).Delete(&SoakItem{})
	} else {
		res = tx.Model(&SoakItem{}).Where("id IN ?", ids).Updates(map[string]any{"version": gorm.Expr("version + 1"), "note": token})
	}
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected != int64(len(rows)) {
		return fmt.Errorf("bulk write of %d locked rows: RowsAffected = %d", len(rows), res.RowsAffected)
	}
	for _, r := range rows {
		if del {
			*pending = append(*pending, change{Key: r.ID, Op: envelope.Deleted, Gen: r.Gen, Version: r.Version, Note: r.Note})
		} else {
			*pending = append(*pending, change{Key: r.ID, Op: envelope.Updated, Gen: r.Gen, Version: r.Version + 1, Note: token})
		}
	}
	return nil
}

// TestSoak is the concurrent soak on each dialect.
//
// It runs with GORM's defaults and with SkipDefaultTransaction and
// PrepareStmt, where the plugin opens each write's transaction itself and
// its savepoints run beside prepared statements.
func TestSoak(t *testing.T) {
	t.Parallel()
	eachGORMConfig(t, testSoak)
}

func testSoak(t *testing.T, d envelope.Dialect, gcfg func(*gorm.Config)) {
	size, name := soakSizeFromEnv()
	start := time.Now()
	s := newStack(t, d, stackOptions{namespace: "soak", models: []any{&SoakItem{}}, gormCfg: gcfg,
		capture: map[any]envelope.Options{&SoakItem{}: soakCapture}})

	sk := newSink()
	var attempts, injected atomic.Int64
	fail := func(context.Context, *envelope.Event) error {
		attempts.Add(1)
		if rand.Float64() < size.failRate {
			injected.Add(1)
			return errors.New("injected delivery failure")
		}
		return nil
	}
	var relays []*relay.Relay
	logs := newLogCounter()
	for i := range size.relays {
		name := fmt.Sprintf("relay-%d", i)
		relays = append(relays, startRelay(t, s.openPool(t), sk.delivery(name, fail), relay.Config{
			Name: name, Wakeup: s.wake, BatchSize: 16, MaxAttempts: 1000, Logger: slog.New(logs),
			RetryBase: 5 * time.Millisecond, RetryMax: 50 * time.Millisecond,
			MinPollInterval: 5 * time.Millisecond, MaxPollInterval: 100 * time.Millisecond,
		}))
	}

	led := &ledger{rolledBack: map[string]bool{}, outcomes: map[string]int{}, errs: map[string]int{}}
	var gens atomic.Int64
	var wg sync.WaitGroup
	for i := range size.workers {
		w := &soakWorker{t: t, id: i, db: s.db, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(i))),
			gens: &gens, keys: size.keys, led: led}
		wg.Go(func() {
			for n := range size.txs {
				w.run(n)
			}
		})
	}
	wg.Wait()
	wrote := time.Since(start)
	left, err := relays[0].Backlog(context.Background())
	must(t, "backlog", err)
	waitDrained(t, relays[0], size.drain)

	uniq, dups := sk.unique()
	perRelay := map[string]int{}
	for _, g := range uniq {
		perRelay[g.Relay]++
	}
	t.Logf("%s size on %s (%s): %d transactions %v, errors %v; %d events, %d deliveries (%d duplicates), %d attempts, %d injected failures; per relay %v; relay logs besides injected failures %v; writes %s (%d events left to deliver), total %s",
		name, d, t.Name(), size.workers*size.txs, led.outcomes, led.errs, len(uniq), len(uniq)+dups, dups, attempts.Load(), injected.Load(), perRelay, logs.snapshot("delivery failed; will retry"),
		wrote.Round(time.Millisecond), left.Pending, time.Since(start).Round(time.Millisecond))

	checkAllDelivered(t, s.gormSQL, uniq)
	checkKeyOrder(t, uniq)
	checkNoRegression(t, sk.deliveries())
	checkSoak(t, s, led, uniq)
}

// checkSoak compares the delivered events with the ledger and with the
// rows' histories.
func checkSoak(t *testing.T, s *stack, led *ledger, uniq []got) {
	t.Helper()
	delivered := make([]change, len(uniq))
	for i, g := range uniq {
		c, err := soakChange(g)
		if err != nil {
			t.Fatalf("event %s seq %d: %v", g.ID, g.Sequence, err)
		}
		delivered[i] = c
		if c.Note == boomNote || led.rolledBack[c.Note] {
			t.Errorf("delivered an event of a rolled-back write (seq %d): %s", g.Sequence, c)
		}
	}

	// Every committed change delivered, nothing else.
	count := map[change]int{}
	for _, c := range led.committed {
		count[c]++
	}
	for _, c := range delivered {
		count[c]--
	}
	var missing, extra []string
	for c, n := range count {
		for ; n > 0; n-- {
			missing = append(missing, c.String())
		}
		for ; n < 0; n++ {
			extra = append(extra, c.String())
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 {
		t.Errorf("%d committed changes never delivered: %s", len(missing), head(missing))
	}
	if len(extra) > 0 {
		t.Errorf("%d delivered events no committed change accounts for: %s", len(extra), head(extra))
	}

	// Per row, the events in delivery order replay its history: created
	// at version 1, updated one version at a time, deleted at its last
	// version, perhaps created again (a new gen).
	type state struct {
		present      bool
		gen, version int64
		note         string
		gens         map[int64]int // gen -> its place in the row's history
	}
	rows := map[int64]*state{}
	stateOf := func(k int64) *state {
		if rows[k] == nil {
			rows[k] = &state{gens: map[int64]int{}}
		}
		return rows[k]
	}
	for _, c := range delivered {
		if c.Op == opManual {
			continue
		}
		st := stateOf(c.Key)
		ok := false
		switch c.Op {
		case envelope.Inserted:
			ok = !st.present && c.Version == 1
			st.gens[c.Gen] = len(st.gens)
			st.present, st.gen, st.version, st.note = true, c.Gen, 1, c.Note
		case envelope.Updated:
			ok = st.present && c.Gen == st.gen && c.Version == st.version+1
			st.version, st.note = c.Version, c.Note
		case envelope.Deleted:
			ok = st.present && c.Gen == st.gen && c.Version == st.version
			st.present = false
		}
		if !ok {
			t.Errorf("row %d: %s delivered out of its history (row was present=%v gen=%d v=%d)", c.Key, c, st.present, st.gen, st.version)
		}
	}
	// Enqueued events of a row's key follow its versions.
	type pos struct{ gen, version int64 }
	lastManual := map[int64]pos{}
	for _, c := range delivered {
		if c.Op != opManual {
			continue
		}
		st := stateOf(c.Key)
		gi, known := st.gens[c.Gen]
		if !known {
			t.Errorf("enqueued %s names a generation the row's events never had", c)
			continue
		}
		p := pos{int64(gi), c.Version}
		if prev, ok := lastManual[c.Key]; ok && (p.gen < prev.gen || (p.gen == prev.gen && p.version <= prev.version)) {
			t.Errorf("manual:%d: %s delivered after the event of generation #%d version %d", c.Key, c, prev.gen, prev.version)
		}
		lastManual[c.Key] = p
	}

	// The rows as they are now are the last state the events told.
	var final []SoakItem
	must(t, "read rows", s.db.Order("id").Find(&final).Error)
	now := map[int64]SoakItem{}
	for _, it := range final {
		now[it.ID] = it
		if it.Note == boomNote {
			t.Errorf("row %d holds the note of a write whose capture failed: %+v", it.ID, it)
		}
	}
	for k, st := range rows {
		it, ok := now[k]
		switch {
		case ok != st.present:
			t.Errorf("row %d: present=%v in the table, but its last event says present=%v", k, ok, st.present)
		case ok && (it.Gen != st.gen || it.Version != st.version || it.Note != st.note):
			t.Errorf("row %d is %+v, its last event says gen=%d v=%d note=%s", k, it, st.gen, st.version, st.note)
		}
	}
	for k := range now {
		if rows[k] == nil {
			t.Errorf("row %d exists but no event of it was delivered", k)
		}
	}
}

// soakChange reads what a delivered soak event says.
func soakChange(g got) (change, error) {
	var p struct {
		PK     int64 `json:"pk"`
		Before *soakImage
		After  *soakImage
		ID     int64
		Gen    int64
		Ver    int64 `json:"version"`
		Note   string
	}
	if err := json.Unmarshal(g.Payload, &p); err != nil {
		return change{}, err
	}
	var c change
	var img *soakImage
	switch g.Topic {
	case topicInserted:
		c.Op, img = envelope.Inserted, p.After
	case topicUpdated:
		c.Op, img = envelope.Updated, p.After
	case topicDeleted:
		c.Op, img = envelope.Deleted, p.Before
	case topicManual:
		c = change{Key: p.ID, Op: opManual, Gen: p.Gen, Version: p.Ver, Note: p.Note}
		if want := fmt.Sprintf("manual:%d", p.ID); g.OrderingKey != want {
			return c, fmt.Errorf("ordering key %q, want %q", g.OrderingKey, want)
		}
		return c, nil
	default:
		return c, fmt.Errorf("unexpected topic %q", g.Topic)
	}
	if img == nil {
		return c, fmt.Errorf("%s event without its row image: %s", c.Op, g.Payload)
	}
	c.Key, c.Gen, c.Version, c.Note = img.ID, img.Gen, img.Version, img.Note
	if img.ID != p.PK {
		return c, fmt.Errorf("pk %d but row id %d", p.PK, img.ID)
	}
	if want := fmt.Sprintf("soak.SoakItem:%d", img.ID); g.OrderingKey != want {
		return c, fmt.Errorf("ordering key %q, want %q", g.OrderingKey, want)
	}
	return c, nil
}

type soakImage struct {
	ID      int64 `json:"id"`
	Gen     int64 `json:"gen"`
	Version int64 `json:"version"`
	Note    string
}

func head(xs []string) string {
	if len(xs) > 10 {
		return strings.Join(xs[:10], "; ") + fmt.Sprintf("; … (%d more)", len(xs)-10)
	}
	return strings.Join(xs, "; ")
}
