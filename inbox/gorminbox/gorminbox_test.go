package gorminbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/driver/sqlite"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/inbox/gorminbox"
	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// CustomerTotal is a captured read model a consumer keeps from order
// events.
type CustomerTotal struct {
	Customer string `gorm:"primaryKey"`
	Orders   int
	Cents    int64
}

func (CustomerTotal) ChangeCapture() envelope.Options {
	return envelope.Options{Namespace: "shop"}
}

func open(t *testing.T, d envelope.Dialect) *gorm.DB {
	cfg := &gorm.Config{Logger: logger.Default.LogMode(logger.Silent)}
	var dial gorm.Dialector
	if d == envelope.Postgres {
		_, dsn := testkit.Postgres(t)
		dial = postgres.Open(dsn)
	} else {
		dial = sqlite.Open(testkit.MattnDSN(testkit.SQLitePath(t)))
	}
	db, err := gorm.Open(dial, cfg)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB, _ := db.DB()
	t.Cleanup(func() { _ = sqlDB.Close() })
	ctx := context.Background()
	if err := envelope.Migrate(ctx, sqlDB, d, ""); err != nil {
		t.Fatal(err)
	}
	if err := inbox.Migrate(ctx, sqlDB, d, ""); err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(&CustomerTotal{}); err != nil {
		t.Fatal(err)
	}
	if err := db.Use(gormcapture.New(gormcapture.Config{Models: []any{&CustomerTotal{}}})); err != nil {
		t.Fatal(err)
	}
	return db
}

type order struct {
	Customer string `json:"customer"`
	Cents    int64  `json:"cents"`
}

// TestConsumeChangePublish: a consumer takes an order event, changes a
// captured GORM model and enqueues an event; the model's change, both
// events and the inbox row commit together, once per message; a failure
// leaves none of them.
func TestConsumeChangePublish(t *testing.T) {
	for _, d := range []envelope.Dialect{envelope.Postgres, envelope.SQLite} {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			db := open(t, d)
			sqlDB, _ := db.DB()
			in, err := inbox.New(ctx, sqlDB, inbox.Config{Consumer: "totals", Dialect: d})
			if err != nil {
				t.Fatal(err)
			}
			consume := func(id string, o order, fail error) (inbox.Outcome, error) {
				return gorminbox.Handle(ctx, in, db, inbox.Message{ID: id}, func(tx *gorm.DB) error {
					var ct CustomerTotal
					if err := tx.Where("customer = ?", o.Customer).Attrs(CustomerTotal{Customer: o.Customer}).FirstOrCreate(&ct).Error; err != nil {
						return err
					}
					if err := tx.Model(&ct).Updates(map[string]any{"orders": ct.Orders + 1, "cents": ct.Cents + o.Cents}).Error; err != nil {
						return err
					}
					if _, err := gormcapture.Enqueue(tx, envelope.Message{Topic: "shop.total.counted", Payload: o}); err != nil {
						return err
					}
					return fail
				})
			}
			for _, c := range []struct {
				id   string
				o    order
				fail error
				want inbox.Outcome
			}{
				{"o1", order{"ann", 500}, nil, inbox.Processed},
				{"o1", order{"ann", 500}, nil, inbox.Duplicate}, // redelivered
				{"o2", order{"ann", 250}, errors.New("boom"), inbox.Processed},
				{"o2", order{"ann", 250}, nil, inbox.Processed}, // the redelivery after the failure
				{"o2", order{"ann", 250}, nil, inbox.Duplicate},
			} {
				out, err := consume(c.id, c.o, c.fail)
				if !errors.Is(err, c.fail) || out != c.want {
					t.Fatalf("%s: %s, %v; want %s, %v", c.id, out, err, c.want, c.fail)
				}
			}
			var ct CustomerTotal
			if err := db.First(&ct, "customer = ?", "ann").Error; err != nil {
				t.Fatal(err)
			}
			if ct.Orders != 2 || ct.Cents != 750 {
				t.Fatalf("read model %+v; want 2 orders, 750 cents", ct)
			}
			// The outbox holds, per processed message, the captured insert
			// or update of the read model and the enqueued event: nothing
			// of the failed attempt.
			var topics []string
			if err := db.Raw(`SELECT topic FROM herald_outbox ORDER BY sequence`).Scan(&topics).Error; err != nil {
				t.Fatal(err)
			}
			want := []string{"shop.customer_total.inserted", "shop.customer_total.updated", "shop.total.counted", "shop.customer_total.updated", "shop.total.counted"}
			if b, w := mustJSON(topics), mustJSON(want); b != w {
				t.Fatalf("outbox topics %s; want %s", b, w)
			}
		})
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestRefusesATransaction(t *testing.T) {
	db := open(t, envelope.SQLite)
	sqlDB, _ := db.DB()
	ctx := context.Background()
	in, err := inbox.New(ctx, sqlDB, inbox.Config{Consumer: "c", Dialect: envelope.SQLite})
	if err != nil {
		t.Fatal(err)
	}
	err = db.Transaction(func(tx *gorm.DB) error {
		_, err := gorminbox.Handle(ctx, in, tx, inbox.Message{ID: "x"}, func(*gorm.DB) error { return nil })
		if !errors.Is(err, envelope.ErrConfiguration) {
			t.Errorf("Handle in a transaction: %v; want ErrConfiguration", err)
		}
		// Within the caller's transaction is the way.
		out, err := gorminbox.Within(ctx, in, tx, inbox.Message{ID: "x"}, func(context.Context) error { return nil })
		if err != nil || out != inbox.Processed {
			t.Errorf("Within: %s, %v", out, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen, _ := in.Seen(ctx, []string{"x"}); !seen["x"] {
		t.Fatal("Within's id did not commit with the caller's transaction")
	}
	if _, err := gorminbox.Within(ctx, in, db, inbox.Message{ID: "y"}, func(context.Context) error { return nil }); !errors.Is(err, envelope.ErrConfiguration) {
		t.Fatalf("Within outside a transaction: %v", err)
	}
}
