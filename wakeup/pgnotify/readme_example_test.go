package pgnotify_test

import (
	"context"
	"database/sql"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/relay"
	"github.com/heraldgo/herald/wakeup/pgnotify"
)

// readmeWakeups is the README's Wakeups snippet, compiled here so that it
// stays true.
func readmeWakeups(ctx context.Context, dsn string, db *gorm.DB, sqlDB *sql.DB, d delivery.Delivery) error {
	w, err := pgnotify.New(pgnotify.Config{ConnString: dsn}) // one per process
	if err != nil {
		return err
	}
	defer w.Close()
	err = db.Use(gormcapture.New(gormcapture.Config{Wakeup: w})) // captured writes and Enqueue NOTIFY in their transaction
	if err != nil {
		return err
	}
	r, err := relay.New(sqlDB, d, relay.Config{Wakeup: w}) // the relay LISTENs
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

var _ = readmeWakeups
