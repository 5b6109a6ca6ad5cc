package doccheck

// README.md, "Consuming herald's events": the fragments, compiled.

import (
	"context"
	"database/sql"
	"net/http"
	"time"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/delivery/webhook"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/inbox"
	"github.com/heraldgo/herald/inbox/gorminbox"
	"github.com/heraldgo/herald/inbox/webhookinbox"
)

type CustomerTotal struct {
	Customer string `gorm:"primaryKey"`
	Orders   int
}

func readmeInboxGORM(ctx context.Context, sqlDB *sql.DB, db *gorm.DB, headers map[string]string, customer string) error {
	if err := inbox.Migrate(ctx, sqlDB, envelope.Postgres, ""); err != nil { // herald_inbox, herald_inbox_keys
		return err
	}
	in, err := inbox.New(ctx, sqlDB, inbox.Config{Consumer: "read-model", Dialect: envelope.Postgres})
	if err != nil {
		return err
	}
	m, err := inbox.FromHeaders(headers) // herald-event-id, herald-ordering-key, herald-sequence
	if err != nil {
		return err
	}
	out, err := gorminbox.Handle(ctx, in, db, m, func(tx *gorm.DB) error {
		return tx.Model(&CustomerTotal{}).Where("customer = ?", customer).
			Update("orders", gorm.Expr("orders + 1")).Error // captured: its event commits with the id
	})
	_ = out
	return err
}

func readmeInboxTTL(ctx context.Context, sqlDB *sql.DB) (*inbox.Inbox, error) {
	in, err := inbox.New(ctx, sqlDB, inbox.Config{
		Consumer: "mailer", Dialect: envelope.Postgres, TTL: 8 * 24 * time.Hour,
		RedeliveryWindow: 7*24*time.Hour + inbox.RelayRetrySpan(0, 0, 0), // broker retention + the relay's defaults
	})
	return in, err
}

func readmeInboxWebhook(in *inbox.Inbox, secret string) (http.Handler, error) {
	h, err := webhookinbox.New(in, webhookinbox.Config{
		Verifier: webhook.Verifier{Secret: secret},
		Next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			tx := webhookinbox.Tx(r.Context()) // commits with the event's id on a 2xx answer
			_, err := tx.ExecContext(r.Context(), `UPDATE stock SET reserved = reserved + 1 WHERE sku = $1`, r.URL.Query().Get("sku"))
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
			}
		}),
	})
	return h, err
}

var _ = []any{readmeInboxGORM, readmeInboxTTL, readmeInboxWebhook}
