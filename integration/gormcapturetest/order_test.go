package gormcapture_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/internal/testkit"
)

// Models of the per-key order tests, one per key shape.
type (
	// OrdRow has the default key, its row's own: "OrdRow:<id>".
	OrdRow struct {
		ID   uint
		Name string
	}
	// OrdShared's key is the template "{label}": one key for every row.
	OrdShared struct {
		ID   uint
		Name string
	}
	// OrdChild's key is its parent's, by OrderingKeyFunc.
	OrdChild struct {
		ID       uint
		ParentID uint
		Name     string
	}
)

func orderEnv(t *testing.T) *env {
	t.Helper()
	e := newEnv(t, envelope.Postgres, nil, gormcapture.Config{}, &OrdRow{}, &OrdShared{}, &OrdChild{})
	must(t, e.plugin.Capture(&OrdRow{}, envelope.Options{}))
	must(t, e.plugin.Capture(&OrdShared{}, envelope.Options{OrderingKey: "{label}"}))
	must(t, e.plugin.Capture(&OrdChild{}, envelope.Options{OrderingKeyFunc: func(c envelope.Change) string {
		img := c.After
		if img == nil {
			img = c.Before
		}
		return fmt.Sprint("parent:", img["parent_id"])
	}}))
	return e
}

// waitingOnLock waits until backend pid waits for a lock (a row's, an
// advisory one) — never by sleeping — and fails the test at once if the
// writer finishes instead.
func waitingOnLock(t *testing.T, e *env, pid int, done <-chan error) {
	t.Helper()
	finished := false
	testkit.Eventually(t, 20*time.Second, func() bool {
		if len(done) > 0 {
			finished = true
			return true
		}
		var n int
		_ = e.sql.QueryRow(`SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted`, pid).Scan(&n)
		return n > 0
	}, "the second writer (backend %d) never waited for the first", pid)
	if finished {
		t.Fatalf("the second writer (backend %d) finished while the first was open: it never waited (%v)", pid, <-done)
	}
}

// sequenceOf returns the sequence of the one event with ordering key key
// whose payload contains mark.
func sequenceOf(t *testing.T, e *env, key, mark string) int64 {
	t.Helper()
	var seqs []int64
	for _, ev := range e.events(t) {
		if ev.OrderingKey != key {
			continue
		}
		b := fmt.Sprint(ev.Payload)
		if strings.Contains(b, mark) {
			seqs = append(seqs, ev.Sequence)
		}
	}
	if len(seqs) != 1 {
		t.Fatalf("%d events of key %q marked %q, want 1: %+v", len(seqs), key, mark, e.events(t))
	}
	return seqs[0]
}

// TestCommitOrderPerKey: on PostgreSQL, for every shape of ordering key,
// two writers of one key are serialized, so sequence order is commit
// order. Each case: T1 writes key k and stays open; T2 writes k and must
// wait (observed in pg_locks); meanwhile a third transaction commits an
// unordered event (sequence s3); T1 commits, then T2. T1's event must have
// the lower sequence, and T2's must be above s3 — T2 drew its sequence
// value after it got the lock, not before it waited.
func TestCommitOrderPerKey(t *testing.T) {
	t.Parallel()
	type step func(tx *gorm.DB, ids map[string]uint, mark string) error
	update := func(model any, name string) step {
		return func(tx *gorm.DB, ids map[string]uint, mark string) error {
			return tx.Model(model).Where("id = ?", ids[name]).Update("name", mark).Error
		}
	}
	enqueue := func(key func(ids map[string]uint) string) step {
		return func(tx *gorm.DB, ids map[string]uint, mark string) error {
			_, err := gormcapture.Enqueue(tx, envelope.Message{Topic: "manual", Payload: map[string]any{"name": mark}, OrderingKey: key(ids)})
			return err
		}
	}
	rowKey := func(ids map[string]uint) string { return fmt.Sprint("OrdRow:", ids["r1"]) }
	cases := []struct {
		name          string
		key           func(ids map[string]uint) string
		first, second step
	}{
		{"template {label}, updates of two rows", func(map[string]uint) string { return "OrdShared" },
			update(&OrdShared{}, "s1"), update(&OrdShared{}, "s2")},
		{"template {label}, creates (one statement each)", func(map[string]uint) string { return "OrdShared" },
			func(tx *gorm.DB, _ map[string]uint, mark string) error {
				return tx.Create(&OrdShared{Name: mark}).Error
			},
			func(tx *gorm.DB, _ map[string]uint, mark string) error {
				return tx.Create(&OrdShared{Name: mark}).Error
			}},
		{"OrderingKeyFunc, one key per parent", func(map[string]uint) string { return "parent:1" },
			update(&OrdChild{}, "c1"), update(&OrdChild{}, "c2")},
		{"captured update, then Enqueue with the row's key", rowKey,
			update(&OrdRow{}, "r1"), enqueue(rowKey)},
		{"Enqueue with a row's key, then its captured update", rowKey,
			enqueue(rowKey), update(&OrdRow{}, "r1")},
		{"bulk captured update, then Enqueue of one of its keys", rowKey,
			func(tx *gorm.DB, _ map[string]uint, mark string) error {
				return tx.Model(&OrdRow{}).Where("id > 0").Update("name", mark).Error
			}, enqueue(rowKey)},
		{"EnqueueMany, then Enqueue of one of its keys", func(map[string]uint) string { return "k2" },
			func(tx *gorm.DB, _ map[string]uint, mark string) error {
				var ms []envelope.Message
				for _, k := range []string{"k1", "k2", "k3"} {
					ms = append(ms, envelope.Message{Topic: "manual", Payload: map[string]any{"name": mark}, OrderingKey: k})
				}
				_, err := gormcapture.EnqueueMany(tx, ms)
				return err
			}, enqueue(func(map[string]uint) string { return "k2" })},
		{"captured create with a chosen key (one statement), then Enqueue with its key", func(map[string]uint) string { return "OrdRow:500" },
			func(tx *gorm.DB, _ map[string]uint, mark string) error {
				return tx.Create(&OrdRow{ID: 500, Name: mark}).Error
			}, enqueue(func(map[string]uint) string { return "OrdRow:500" })},
		{"default row key, two updates of the row (its lock)", rowKey,
			update(&OrdRow{}, "r1"), update(&OrdRow{}, "r1")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := orderEnv(t)
			ids := map[string]uint{}
			for _, n := range []string{"r1", "r2", "r3"} {
				r := &OrdRow{Name: n}
				must(t, e.db.Create(r).Error)
				ids[n] = r.ID
			}
			for _, n := range []string{"s1", "s2"} {
				r := &OrdShared{Name: n}
				must(t, e.db.Create(r).Error)
				ids[n] = r.ID
			}
			for _, n := range []string{"c1", "c2"} {
				r := &OrdChild{ParentID: 1, Name: n}
				must(t, e.db.Create(r).Error)
				ids[n] = r.ID
			}
			key := c.key(ids)

			t1 := e.db.Begin()
			must(t, t1.Error)
			defer t1.Rollback()
			must(t, c.first(t1, ids, "first-writer"))

			pids := make(chan int, 1)
			done := make(chan error, 1)
			go func() {
				done <- e.db.Transaction(func(tx *gorm.DB) error {
					var pid int
					if err := tx.Raw(`SELECT pg_backend_pid()`).Scan(&pid).Error; err != nil {
						return err
					}
					pids <- pid
					return c.second(tx, ids, "second-writer")
				})
			}()
			waitingOnLock(t, e, <-pids, done)
			// A third transaction draws a sequence value and commits
			// while T2 waits.
			probe, err := gormcapture.Enqueue(e.db, envelope.Message{Topic: "probe", Payload: map[string]any{"probe": true}})
			must(t, err)
			must(t, t1.Commit().Error)
			must(t, <-done)

			s1 := sequenceOf(t, e, key, "first-writer")
			s2 := sequenceOf(t, e, key, "second-writer")
			if s1 >= s2 {
				t.Errorf("key %q: the first committer has sequence %d, the second %d: sequence order is not commit order", key, s1, s2)
			}
			if s2 <= probe.Sequence {
				t.Errorf("key %q: the second writer's sequence %d is below %d, drawn while it waited: it drew its sequence before taking the lock", key, s2, probe.Sequence)
			}
		})
	}
}

// TestRowKeysDoNotWait: the default row-keyed writes of different rows
// never wait on each other, even when their keys fall in one lock bucket
// (their locks are shared); nor do writers of different enqueued keys.
func TestRowKeysDoNotWait(t *testing.T) {
	t.Parallel()
	e := orderEnv(t)
	// Two row ids whose keys share a lock bucket.
	var a, b uint
	must(t, e.sql.QueryRow(`SELECT min(i), max(i) FROM (
		SELECT i, (hashtextextended('OrdRow:' || i, 7281) & 1023) AS bucket,
		       count(*) OVER (PARTITION BY (hashtextextended('OrdRow:' || i, 7281) & 1023)) AS n
		FROM generate_series(1, 3000) AS g(i)) s
		WHERE bucket = (SELECT (hashtextextended('OrdRow:' || j, 7281) & 1023) FROM generate_series(1, 3000) AS h(j)
		                GROUP BY 1 HAVING count(*) > 1 ORDER BY 1 LIMIT 1)`).Scan(&a, &b))
	must(t, e.db.Create(&OrdRow{ID: a, Name: "a"}).Error)
	must(t, e.db.Create(&OrdRow{ID: b, Name: "b"}).Error)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	t1 := e.db.WithContext(ctx).Begin()
	must(t, t1.Error)
	defer t1.Rollback()
	must(t, t1.Model(&OrdRow{}).Where("id = ?", a).Update("name", "a2").Error)
	// With t1 open: another row of the same bucket, and a create.
	must(t, e.db.WithContext(ctx).Model(&OrdRow{}).Where("id = ?", b).Update("name", "b2").Error)
	must(t, e.db.WithContext(ctx).Create(&OrdRow{Name: "c"}).Error)
	must(t, t1.Commit().Error)
	if n := e.count(t); n != 5 {
		t.Fatalf("%d events, want 5", n)
	}
}
