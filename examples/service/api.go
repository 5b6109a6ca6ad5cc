package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"gorm.io/gorm"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/gormcapture"
)

// Order is captured: every insert, update and delete of an order writes
// an event (shop.order.inserted, …) in the same transaction.
type Order struct {
	ID        uint   `json:"id"`
	Customer  string `json:"customer"`
	Item      string `json:"item"`
	Qty       int    `json:"qty"`
	Status    string `json:"status"`
	CreatedAt time.Time
}

// ChangeCapture declares what an order's events carry: the row after the
// write, keyed by the order so its events stay in order.
func (Order) ChangeCapture() envelope.Options {
	return envelope.Options{OrderingKey: "order:{pk}"}
}

// API serves the order endpoints.
type API struct{ db *gorm.DB }

// NewAPI returns the API on a GORM handle with the capture plugin.
func NewAPI(db *gorm.DB) *API { return &API{db: db} }

// Handler routes the endpoints.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders", a.placeOrder)
	mux.HandleFunc("POST /orders/{id}/cancel", a.cancelOrder)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	return mux
}

// Result is the answer of a command: the order and the event recording
// it. A retried command answers the same.
type Result struct {
	OrderID uint   `json:"order_id"`
	EventID string `json:"event_id"`
}

type placeCommand struct {
	Customer string `json:"customer"`
	Item     string `json:"item"`
	Qty      int    `json:"qty"`
}

type cancelCommand struct {
	Reason string `json:"reason"`
}

// Headers the command events carry besides the payload.
const (
	headerRequestID     = "request-id"     // this HTTP request; tells a fresh event from a stored one
	headerRequestDigest = "request-digest" // SHA-256 of the canonical command; tells a retry from a conflict
)

// errRetry rolls back the transaction of a command that was already done.
var errRetry = errors.New("command already done")

// placeOrder creates an order. The order row (captured: shop.order.inserted)
// and the shop.order.placed event — whose idempotency key is the request's
// Idempotency-Key — commit together.
func (a *API) placeOrder(w http.ResponseWriter, r *http.Request) {
	var cmd placeCommand
	if !decode(w, r, &cmd) {
		return
	}
	if cmd.Customer == "" || cmd.Item == "" || cmd.Qty <= 0 {
		httpError(w, http.StatusUnprocessableEntity, "customer, item and a positive qty are required")
		return
	}
	a.command(w, r, cmd, http.StatusCreated, func(tx *gorm.DB) (uint, envelope.Message, func() error, error) {
		o := Order{Customer: cmd.Customer, Item: cmd.Item, Qty: cmd.Qty, Status: "placed"}
		if err := tx.Create(&o).Error; err != nil { // rolled back if this is a retry
			return 0, envelope.Message{}, nil, err
		}
		return o.ID, envelope.Message{
			Topic:       "shop.order.placed",
			OrderingKey: "order:" + strconv.FormatUint(uint64(o.ID), 10),
			Payload:     map[string]any{"order_id": o.ID, "customer": o.Customer, "item": o.Item, "qty": o.Qty},
		}, nil, nil
	})
}

// cancelOrder cancels an order: the update (shop.order.updated, to Kafka)
// and a billing.refund.requested event (to the billing webhook) commit
// together.
func (a *API) cancelOrder(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseUint(r.PathValue("id"), 10, 64)
	if err != nil {
		httpError(w, http.StatusNotFound, "no such order")
		return
	}
	var cmd cancelCommand
	if !decode(w, r, &cmd) {
		return
	}
	a.command(w, r, struct {
		ID uint64 `json:"id"`
		cancelCommand
	}{id, cmd}, http.StatusOK, func(tx *gorm.DB) (uint, envelope.Message, func() error, error) {
		var o Order
		if err := tx.First(&o, id).Error; err != nil {
			return 0, envelope.Message{}, nil, err
		}
		m := envelope.Message{
			Topic:       "billing.refund.requested",
			OrderingKey: "order:" + strconv.FormatUint(uint64(o.ID), 10),
			Payload:     map[string]any{"order_id": o.ID, "customer": o.Customer, "qty": o.Qty, "reason": cmd.Reason},
		}
		// Applied only when this is not a retry: a retried cancel finds
		// the order cancelled, and must answer as the first one did.
		apply := func() error {
			if o.Status == "cancelled" {
				return errConflict("order already cancelled")
			}
			return tx.Model(&o).Update("status", "cancelled").Error
		}
		return o.ID, m, apply, nil
	})
}

type errConflict string

func (e errConflict) Error() string { return string(e) }

// command runs do in a transaction and enqueues the event it returns, with
// the request's Idempotency-Key as the event's idempotency key, then runs
// the apply step do returned (if any). When the key is stored already, the
// event that comes back is the stored one: the transaction is rolled back
// before apply, and the stored answer is returned if the command is the
// same (a retry), or 409 Conflict if it is not.
func (a *API) command(w http.ResponseWriter, r *http.Request, cmd any, okStatus int, do func(tx *gorm.DB) (uint, envelope.Message, func() error, error)) {
	canonical, _ := json.Marshal(cmd)
	sum := sha256.Sum256(canonical)
	digest := hex.EncodeToString(sum[:])
	requestID := newRequestID()
	key := r.Header.Get("Idempotency-Key")

	var res Result
	var stored *envelope.Event
	err := a.db.WithContext(r.Context()).Transaction(func(tx *gorm.DB) error {
		id, m, apply, err := do(tx)
		if err != nil {
			return err
		}
		m.IdempotencyKey = key
		m.Headers = map[string]string{headerRequestID: requestID, headerRequestDigest: digest}
		e, err := gormcapture.Enqueue(tx, m)
		if err != nil {
			return err
		}
		if e.Headers[headerRequestID] != requestID {
			stored = e // the key was used before: undo this attempt
			return errRetry
		}
		if apply != nil {
			if err := apply(); err != nil {
				return err
			}
		}
		res = Result{OrderID: id, EventID: e.ID.String()}
		return nil
	})
	var conflict errConflict
	switch {
	case errors.Is(err, errRetry):
		if stored.Headers[headerRequestDigest] != digest {
			httpError(w, http.StatusConflict, "Idempotency-Key "+strconv.Quote(key)+" was used for another request")
			return
		}
		var p struct {
			OrderID uint `json:"order_id"`
		}
		_ = json.Unmarshal(stored.Payload, &p)
		writeJSON(w, okStatus, Result{OrderID: p.OrderID, EventID: stored.ID.String()})
	case errors.Is(err, gorm.ErrRecordNotFound):
		httpError(w, http.StatusNotFound, "no such order")
	case errors.As(err, &conflict):
		httpError(w, http.StatusConflict, conflict.Error())
	case errors.Is(err, envelope.ErrValidation):
		httpError(w, http.StatusBadRequest, err.Error())
	case err != nil:
		slog.ErrorContext(r.Context(), "command failed", "error", err)
		httpError(w, http.StatusInternalServerError, "internal error")
	default:
		writeJSON(w, okStatus, res)
	}
}

func newRequestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		httpError(w, http.StatusBadRequest, "bad JSON: "+err.Error())
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func httpError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
