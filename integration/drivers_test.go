package integration_test

import (
	"context"
	"database/sql"
	"sync"
	"testing"
	"time"

	_ "github.com/lib/pq" // registers "postgres"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/relay"
)

type DriverLoan struct {
	ID     int64
	Status string
}

func (DriverLoan) ChangeCapture() envelope.Options { return envelope.Options{} }

// lib/pq, which README lists as supported: envelope.Migrate, GORM capture
// on it (gorm.io/driver/postgres with DriverName "postgres"), Enqueue, and
// a relay that detects the dialect from the driver and delivers in order.
func TestLibPQ(t *testing.T) {
	t.Parallel()
	_, dsn := testkit.Postgres(t) // its search_path is the test's schema
	sqlDB, err := sql.Open("postgres", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer sqlDB.Close()
	ctx := context.Background()
	if err := envelope.Migrate(ctx, sqlDB, envelope.Postgres, ""); err != nil {
		t.Fatal(err)
	}
	db, err := gorm.Open(postgres.New(postgres.Config{DriverName: "postgres", Conn: sqlDB}), &gorm.Config{Logger: logger.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Use(gormcapture.New(gormcapture.Config{Namespace: "lib", Models: []any{&DriverLoan{}}})); err != nil {
		t.Fatal(err)
	}
	if err := db.AutoMigrate(&DriverLoan{}); err != nil {
		t.Fatal(err)
	}
	loan := DriverLoan{Status: "lent"}
	must(t, "db.Create", db.Create(&loan).Error)
	must(t, "db.Model", db.Model(&loan).Update("status", "returned").Error)
	must(t, "db.Create", db.Create(&[]DriverLoan{{Status: "a"}, {Status: "b"}}).Error)
	must(t, "db.Where", db.Where("status IN ?", []string{"a", "b"}).Delete(&DriverLoan{}).Error)
	_, err = gormcapture.Enqueue(db, envelope.Message{Topic: "mail.send", Payload: map[string]any{"loan": loan.ID}, OrderingKey: "lib.DriverLoan:1"})
	must(t, "err", err)

	var mu sync.Mutex
	var got []string
	r, err := relay.New(sqlDB, delivery.Func(func(_ context.Context, e *envelope.Event) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, e.Topic)
		return nil
	}), relay.Config{MinPollInterval: 5 * time.Millisecond, MaxPollInterval: 20 * time.Millisecond, Logger: quiet})
	must(t, "err", err)
	must(t, "r.Start", r.Start(ctx))
	testkit.Eventually(t, 20*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) >= 7
	}, "7 events delivered through lib/pq")
	must(t, "r.Stop", r.Stop(ctx))
	b, err := r.Backlog(ctx)
	must(t, "err", err)
	if b.Pending != 0 || b.DeadLettered != 0 {
		t.Fatalf("backlog after delivery: %+v (a failed mark or delivery?)", b)
	}
	want := []string{"lib.driver_loan.inserted", "lib.driver_loan.updated", "mail.send"}
	var key1 []string
	for _, topic := range got {
		if topic == want[0] || topic == want[1] || topic == want[2] {
			key1 = append(key1, topic)
		}
	}
	if len(key1) < 3 || key1[0] != want[0] {
		t.Fatalf("delivered %v", got)
	}
}
