package doccheck

import (
	"context"
	"database/sql"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/delivery"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
	"github.com/heraldgo/herald/relay"
)

var _ = []any{readmeTenants, Document{}.ChangeCapture}

// Document is a model of a service with tenants (README.md, "Tenants").
type Document struct {
	ID    int64
	OrgID string
	Title string
}

// README.md, "Tenants".
func (Document) ChangeCapture() envelope.Options {
	return envelope.Options{Tenant: "org_id"} // its value: Change.Tenant, the envelope's "tenant", the outbox's tenant column
}

// README.md, "Tenants".
func readmeTenants(ctx context.Context, db *sql.DB, gdb *gorm.DB, d delivery.Delivery, check func(error)) {
	check(gdb.Create(&Document{OrgID: "acme", Title: "Q3"}).Error) // an event of tenant "acme"
	_, err := gormcapture.Enqueue(gdb, envelope.Message{Topic: "billing.invoice", Tenant: "acme", IdempotencyKey: "inv-7", Payload: 7})
	check(err) // "inv-7" is unique within acme; globex may use it too
	acme, err := relay.New(db, d, relay.Config{Name: "acme", Tenants: []string{"acme"}})
	check(err)
	go func() { check(acme.Run(ctx)) }()
}
