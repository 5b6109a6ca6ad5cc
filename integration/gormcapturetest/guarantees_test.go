package gormcapture_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
)

// Commit order: a row's events are written while the write holds the
// row's lock, so per row their sequence order is their commit order.
// 20 goroutines × 100 updates of the same 5 rows, each incrementing a
// version: per row, the events' versions rise with their sequence.
func TestCommitOrder(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	e := newEnv(t, envelope.Postgres, nil, gormcapture.Config{}, &Counter{})
	must(t, e.plugin.Capture(&Counter{}, envelope.Options{}))
	rows := make([]Counter, 5)
	must(t, e.db.Create(&rows).Error)
	must(t, e.db.Exec(`DELETE FROM herald_outbox`).Error)
	sqlDB, _ := e.db.DB()
	sqlDB.SetMaxOpenConns(20)

	const workers, each = 20, 100
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				id := rows[(w+i)%len(rows)].ID
				if err := e.db.Model(&Counter{}).Where("id = ?", id).Update("version", gorm.Expr("version + 1")).Error; err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	evs := e.events(t)
	if len(evs) != workers*each {
		t.Fatalf("%d events, want %d", len(evs), workers*each)
	}
	last := map[float64]float64{}
	for _, ev := range evs {
		after := ev.Payload["after"].(map[string]any)
		id, v := after["id"].(float64), after["version"].(float64)
		if v != last[id]+1 {
			t.Fatalf("row %v: event seq %d has version %v after version %v", id, ev.Sequence, v, last[id])
		}
		last[id] = v
	}
}

type Item struct {
	ID  int64
	Val int
}

// Atomicity: a random mix of creates, updates and deletes, in
// transactions that randomly roll back, with Extends that randomly fail
// (the caller catching the error and going on): the committed events are
// exactly the committed row changes. Replaying them gives the table.
func TestAtomicityProperty(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		for _, mode := range []string{"caller transactions", "no caller transaction"} {
			t.Run(mode, func(t *testing.T) {
				e := newEnv(t, d, nil, gormcapture.Config{}, &Item{})
				rng := rand.New(rand.NewPCG(uint64(len(d)), 42))
				failNext := false
				boom := errors.New("boom")
				must(t, e.plugin.Capture(&Item{}, envelope.Options{Payload: envelope.BeforeAndAfter,
					ExtendMany: func(_ context.Context, cs []envelope.Change) ([]*envelope.Extension, error) {
						if failNext {
							return nil, boom
						}
						return make([]*envelope.Extension, len(cs)), nil
					}}))
				op := func(db *gorm.DB) error {
					failNext = rng.IntN(4) == 0
					switch rng.IntN(4) {
					case 0:
						items := make([]Item, 1+rng.IntN(3))
						for i := range items {
							items[i].Val = rng.IntN(100)
						}
						return db.Create(&items).Error
					case 1:
						return db.Model(&Item{}).Where("val < ?", rng.IntN(100)).Update("val", gorm.Expr("val + 1")).Error
					case 2:
						return db.Where("val > ?", 90+rng.IntN(10)).Delete(&Item{}).Error
					default:
						return db.Model(&Item{ID: int64(1 + rng.IntN(20))}).Updates(map[string]any{"val": rng.IntN(100)}).Error
					}
				}
				for range 60 {
					if mode == "no caller transaction" {
						if err := op(e.db); err != nil && !errors.Is(err, boom) {
							t.Fatal(err)
						}
						continue
					}
					err := e.db.Transaction(func(tx *gorm.DB) error {
						for range 1 + rng.IntN(4) {
							if err := op(tx); err != nil && !errors.Is(err, boom) {
								return err
							}
						}
						if rng.IntN(3) == 0 {
							return errors.New("rollback")
						}
						return nil
					})
					if err != nil && err.Error() != "rollback" {
						t.Fatal(err)
					}
				}
				// Replay the events.
				replay := map[float64]float64{}
				for _, ev := range e.events(t) {
					p := ev.Payload
					id := p["pk"].(float64)
					switch p["operation"] {
					case "inserted":
						if _, ok := replay[id]; ok {
							t.Fatalf("insert of existing row %v", id)
						}
						replay[id] = p["after"].(map[string]any)["val"].(float64)
					case "updated":
						before := p["before"].(map[string]any)["val"].(float64)
						if replay[id] != before {
							t.Fatalf("row %v: before %v, replayed %v", id, before, replay[id])
						}
						replay[id] = p["after"].(map[string]any)["val"].(float64)
					case "deleted":
						if replay[id] != p["before"].(map[string]any)["val"].(float64) {
							t.Fatalf("row %v: deleted before image differs", id)
						}
						delete(replay, id)
					}
				}
				var items []Item
				must(t, e.db.Find(&items).Error)
				table := map[float64]float64{}
				for _, it := range items {
					table[float64(it.ID)] = float64(it.Val)
				}
				if fmt.Sprint(table) != fmt.Sprint(replay) {
					t.Errorf("table %v\nreplay %v", table, replay)
				}
			})
		}
	})
}

// Extend runs once per row, ExtendMany once per statement per model, both
// inside the write's transaction; a wrong count or an envelope key is a
// validation error that undoes the write.
func TestExtend(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, d envelope.Dialect) {
		e := newEnv(t, d, nil, gormcapture.Config{}, &Item{}, &Tag{})
		var calls [][]int64
		ret := func(cs []envelope.Change) []*envelope.Extension {
			out := make([]*envelope.Extension, len(cs))
			for i, c := range cs {
				out[i] = &envelope.Extension{Payload: map[string]any{"n": len(cs)}, Headers: map[string]string{"author": "me"}}
				_ = c
			}
			return out
		}
		wrongCount := false
		must(t, e.plugin.Capture(&Item{}, envelope.Options{ExtendMany: func(ctx context.Context, cs []envelope.Change) ([]*envelope.Extension, error) {
			ids := make([]int64, len(cs))
			for i, c := range cs {
				ids[i] = c.PK.(int64)
			}
			calls = append(calls, ids)
			if wrongCount {
				return ret(cs[1:]), nil
			}
			return ret(cs), nil
		}}))
		perRow := 0
		collide := false
		must(t, e.plugin.Capture(&Tag{}, envelope.Options{Extend: func(ctx context.Context, c envelope.Change) (*envelope.Extension, error) {
			perRow++
			if collide {
				return &envelope.Extension{Payload: map[string]any{"pk": 1}}, nil
			}
			return &envelope.Extension{Payload: map[string]any{"recipients": []string{"x"}}}, nil
		}}))
		items := []Item{{Val: 1}, {Val: 2}, {Val: 3}}
		must(t, e.db.Create(&items).Error)
		must(t, e.db.Model(&Item{}).Where("val > ?", 1).Update("val", 9).Error)
		if fmt.Sprint(calls) != "[[1 2 3] [2 3]]" {
			t.Errorf("ExtendMany calls = %v, want one per statement", calls)
		}
		evs := e.events(t)
		if len(evs) != 5 || evs[0].Payload["n"] != float64(3) || evs[4].Payload["n"] != float64(2) || evs[0].Headers["author"] != "me" {
			t.Errorf("events: %v", dump(evs))
		}
		tags := []Tag{{Code: "a", Label: "A"}, {Code: "b", Label: "B"}}
		must(t, e.db.Create(&tags).Error)
		if perRow != 2 {
			t.Errorf("Extend called %d times, want 2", perRow)
		}
		wrongCount = true
		err := e.db.Create(&Item{Val: 5}).Error
		if !errors.Is(err, envelope.ErrValidation) {
			t.Errorf("wrong count: %v, want ErrValidation", err)
		}
		collide = true
		err = e.db.Create(&Tag{Code: "c", Label: "C"}).Error
		if !errors.Is(err, envelope.ErrValidation) {
			t.Errorf("colliding key: %v, want ErrValidation", err)
		}
		var n int64
		must(t, e.db.Model(&Item{}).Count(&n).Error)
		var m int64
		must(t, e.db.Model(&Tag{}).Count(&m).Error)
		if n != 3 || m != 2 {
			t.Errorf("%d items, %d tags: the failed writes were not undone", n, m)
		}
	})
}
