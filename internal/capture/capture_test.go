package capture_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capture"
	"github.com/heraldgo/herald/internal/capturedjson"
)

var loanModel = capture.ModelInfo{
	Name: "Loan", Table: "loans",
	Columns:    []string{"id", "status", "fee", "reader_id", "token"},
	PrimaryKey: []string{"id"},
	Sensitive:  []string{"token"},
}

func TestCompileErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opts envelope.Options
		want string
	}{
		{envelope.Options{Fields: []string{"status", "nope"}}, `Loan Options.Fields: no column "nope"`},
		{envelope.Options{Exclude: []string{"nope"}}, `Loan Options.Exclude: no column "nope"`},
		{envelope.Options{Topic: "{app}"}, "Loan Options.Topic"},
	} {
		_, err := capture.Compile(loanModel, c.opts)
		if !errors.Is(err, envelope.ErrConfiguration) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Compile(%+v) = %v, want ErrConfiguration containing %q", c.opts, err, c.want)
		}
	}
}

var occurred = time.Date(2026, 10, 6, 12, 0, 0, 0, time.UTC)

func loanChange(op envelope.Operation) envelope.Change {
	c := envelope.Change{Model: "library.Loan", Table: "loans", Operation: op, PK: int64(7), OccurredAt: occurred}
	before := map[string]any{"id": int64(7), "status": "lent", "fee": "0.00", "reader_id": int64(3), "token": "s3cret"}
	after := map[string]any{"id": int64(7), "status": "returned", "fee": "0.00", "reader_id": int64(3), "token": "s3cret"}
	switch op {
	case envelope.Inserted:
		c.After = after
	case envelope.Updated:
		c.Before, c.After, c.Changed = before, after, []string{"status"}
	case envelope.Deleted:
		c.Before = before
	}
	return c
}

func TestEnvelopeJSON(t *testing.T) {
	t.Parallel()
	const (
		row1 = `{"id":7,"status":"lent","fee":"0.00","reader_id":3}`
		row2 = `{"id":7,"status":"returned","fee":"0.00","reader_id":3}`
		at   = `"occurred_at":"2026-10-06T12:00:00Z"`
	)
	cases := []struct {
		mode envelope.PayloadMode
		op   envelope.Operation
		want string
	}{
		{envelope.After, envelope.Inserted, `{"model":"library.Loan","operation":"inserted","pk":7,"changed":null,"after":` + row2 + `,` + at + `}`},
		{envelope.After, envelope.Updated, `{"model":"library.Loan","operation":"updated","pk":7,"changed":["status"],"after":` + row2 + `,` + at + `}`},
		{envelope.After, envelope.Deleted, `{"model":"library.Loan","operation":"deleted","pk":7,"changed":null,"before":` + row1 + `,` + at + `}`},
		{envelope.Keys, envelope.Updated, `{"model":"library.Loan","operation":"updated","pk":7,"changed":["status"],` + at + `}`},
		{envelope.Keys, envelope.Deleted, `{"model":"library.Loan","operation":"deleted","pk":7,"changed":null,` + at + `}`},
		{envelope.BeforeAndAfter, envelope.Inserted, `{"model":"library.Loan","operation":"inserted","pk":7,"changed":null,"before":null,"after":` + row2 + `,` + at + `}`},
		{envelope.BeforeAndAfter, envelope.Updated, `{"model":"library.Loan","operation":"updated","pk":7,"changed":["status"],"before":` + row1 + `,"after":` + row2 + `,` + at + `}`},
		{envelope.BeforeAndAfter, envelope.Deleted, `{"model":"library.Loan","operation":"deleted","pk":7,"changed":null,"before":` + row1 + `,"after":null,` + at + `}`},
	}
	for _, c := range cases {
		m := loanModel
		m.DefaultNamespace = "library"
		spec, err := capture.Compile(m, envelope.Options{Payload: c.mode})
		if err != nil {
			t.Fatal(err)
		}
		ms, err := spec.Messages(context.Background(), []envelope.Change{loanChange(c.op)})
		if err != nil {
			t.Fatal(err)
		}
		got := payloadText(t, ms[0].Payload)
		if got != c.want {
			t.Errorf("%v %s:\n got %s\nwant %s", c.mode, c.op, got, c.want)
		}
		if ms[0].Topic != "library.loan."+string(c.op) || ms[0].OrderingKey != "library.Loan:7" {
			t.Errorf("topic %q key %q", ms[0].Topic, ms[0].OrderingKey)
		}
	}
}

// payloadText returns the JSON text of a payload built by Spec.Messages.
func payloadText(t *testing.T, p any) string {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestEnvelopeFieldsAndSensitive(t *testing.T) {
	t.Parallel()
	spec, err := capture.Compile(loanModel, envelope.Options{Fields: []string{"token", "status"}})
	if err != nil {
		t.Fatal(err)
	}
	ms, err := spec.Messages(context.Background(), []envelope.Change{loanChange(envelope.Inserted)})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"Loan","operation":"inserted","pk":7,"changed":null,"after":{"status":"returned","token":"s3cret"},"occurred_at":"2026-10-06T12:00:00Z"}`
	if got := payloadText(t, ms[0].Payload); got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
	if ms[0].Topic != "loan.inserted" || ms[0].OrderingKey != "Loan:7" {
		t.Fatalf("topic %q key %q", ms[0].Topic, ms[0].OrderingKey)
	}
}

func TestEnvelopeCompositeKeyAndFloats(t *testing.T) {
	t.Parallel()
	m := capture.ModelInfo{Name: "Seat", Table: "seats", Columns: []string{"hall", "number", "price"}, PrimaryKey: []string{"hall", "number"}}
	spec, err := capture.Compile(m, envelope.Options{Namespace: "cinema", Payload: envelope.Keys})
	if err != nil {
		t.Fatal(err)
	}
	c := envelope.Change{Operation: envelope.Updated, PK: map[string]any{"number": 12, "hall": "A"}, OccurredAt: occurred,
		After: map[string]any{"price": math.NaN()}}
	ms, err := spec.Messages(context.Background(), []envelope.Change{c})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"cinema.Seat","operation":"updated","pk":{"hall":"A","number":12},"changed":null,"occurred_at":"2026-10-06T12:00:00Z"}`
	if got := payloadText(t, ms[0].Payload); got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
	if ms[0].OrderingKey != "cinema.Seat:A:12" {
		t.Fatalf("key %q", ms[0].OrderingKey)
	}
	// Field mode: NaN in a captured column is the string "NaN".
	spec, _ = capture.Compile(m, envelope.Options{})
	ms, err = spec.Messages(context.Background(), []envelope.Change{c})
	if err != nil {
		t.Fatal(err)
	}
	if got := payloadText(t, ms[0].Payload); !strings.Contains(got, `"after":{"price":"NaN"}`) {
		t.Fatalf("NaN column: %s", got)
	}
}

func TestExtend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	extend := func(_ context.Context, c envelope.Change) (*envelope.Extension, error) {
		return &envelope.Extension{Payload: map[string]any{"recipients": []string{"r1"}, "by": "ann"},
			Headers: map[string]string{"author": "ann"}, Extra: map[string]any{"tenant_id": 4}}, nil
	}
	spec, _ := capture.Compile(loanModel, envelope.Options{Payload: envelope.Keys, Extend: extend})
	ms, err := spec.Messages(ctx, []envelope.Change{loanChange(envelope.Deleted)})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"model":"Loan","operation":"deleted","pk":7,"changed":null,"occurred_at":"2026-10-06T12:00:00Z","by":"ann","recipients":["r1"]}`
	if got := payloadText(t, ms[0].Payload); got != want {
		t.Fatalf("got %s\nwant %s", got, want)
	}
	if ms[0].Headers["author"] != "ann" || ms[0].Extra["tenant_id"] != 4 {
		t.Fatalf("headers %v extra %v", ms[0].Headers, ms[0].Extra)
	}

	collide := func(context.Context, envelope.Change) (*envelope.Extension, error) {
		return &envelope.Extension{Payload: map[string]any{"pk": 1}}, nil
	}
	spec, _ = capture.Compile(loanModel, envelope.Options{Extend: collide})
	_, err = spec.Messages(ctx, []envelope.Change{loanChange(envelope.Inserted)})
	if !errors.Is(err, envelope.ErrValidation) || !strings.Contains(err.Error(), `"pk"`) {
		t.Fatalf("colliding key: %v", err)
	}

	boom := errors.New("boom")
	failing := func(context.Context, envelope.Change) (*envelope.Extension, error) { return nil, boom }
	spec, _ = capture.Compile(loanModel, envelope.Options{Extend: failing})
	_, err = spec.Messages(ctx, []envelope.Change{loanChange(envelope.Inserted)})
	if !errors.Is(err, boom) || !errors.Is(err, envelope.ErrValidation) {
		t.Fatalf("failing Extend: %v", err)
	}

	calls := 0
	many := func(_ context.Context, cs []envelope.Change) ([]*envelope.Extension, error) {
		calls++
		return []*envelope.Extension{{Headers: map[string]string{"n": "1"}}}, nil
	}
	spec, _ = capture.Compile(loanModel, envelope.Options{ExtendMany: many})
	_, err = spec.Messages(ctx, []envelope.Change{loanChange(envelope.Inserted), loanChange(envelope.Inserted)})
	if !errors.Is(err, envelope.ErrValidation) || !strings.Contains(err.Error(), "returned 1 extensions for 2 changes") || calls != 1 {
		t.Fatalf("ExtendMany wrong count: %v (calls %d)", err, calls)
	}
	ms, err = spec.Messages(ctx, []envelope.Change{loanChange(envelope.Inserted)})
	if err != nil || ms[0].Headers["n"] != "1" {
		t.Fatalf("ExtendMany: %v %v", err, ms)
	}
}

func TestKeyFuncs(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 256)
	spec, _ := capture.Compile(loanModel, envelope.Options{OrderingKeyFunc: func(envelope.Change) string { return long }})
	_, err := spec.Messages(context.Background(), []envelope.Change{loanChange(envelope.Inserted)})
	if !errors.Is(err, envelope.ErrValidation) || !strings.Contains(err.Error(), "OrderingKeyFunc") {
		t.Fatalf("long OrderingKeyFunc: %v", err)
	}
	spec, _ = capture.Compile(loanModel, envelope.Options{TopicFunc: func(envelope.Change) string { return "" }})
	_, err = spec.Messages(context.Background(), []envelope.Change{loanChange(envelope.Inserted)})
	if !errors.Is(err, envelope.ErrValidation) || !strings.Contains(err.Error(), "TopicFunc") {
		t.Fatalf("empty TopicFunc: %v", err)
	}
	spec, _ = capture.Compile(loanModel, envelope.Options{Unordered: true, TopicFunc: func(c envelope.Change) string { return "t." + string(c.Operation) }})
	ms, err := spec.Messages(context.Background(), []envelope.Change{loanChange(envelope.Inserted)})
	if err != nil {
		t.Fatal(err)
	}
	if ms[0].OrderingKey != "" || ms[0].Topic != "t.inserted" {
		t.Fatalf("unordered: %v %+v", err, ms)
	}
	// A template key longer than 255 characters is shortened, not rejected.
	m := loanModel
	m.Name = strings.Repeat("VeryLongModelName", 20)
	spec, _ = capture.Compile(m, envelope.Options{})
	if _, err = spec.Messages(context.Background(), []envelope.Change{loanChange(envelope.Inserted)}); !errors.Is(err, envelope.ErrValidation) {
		t.Fatalf("a topic template giving 300+ characters: %v, want ErrValidation", err)
	}
	spec, _ = capture.Compile(m, envelope.Options{Topic: "static"})
	ms, err = spec.Messages(context.Background(), []envelope.Change{loanChange(envelope.Inserted)})
	if err != nil {
		t.Fatal(err)
	}
	if len(ms[0].OrderingKey) != 255 || !strings.Contains(ms[0].OrderingKey, "#") {
		t.Fatalf("long template key: %q", ms[0].OrderingKey)
	}
}

func TestCapturesAndNeeds(t *testing.T) {
	t.Parallel()
	spec, _ := capture.Compile(loanModel, envelope.Options{Operations: []envelope.Operation{envelope.Deleted}, Payload: envelope.BeforeAndAfter})
	if spec.Captures(envelope.Inserted) || !spec.Captures(envelope.Deleted) {
		t.Fatal("Captures")
	}
	if !spec.NeedsBefore(envelope.Updated) || spec.NeedsBefore(envelope.Inserted) || !spec.NeedsAfter(envelope.Updated) || spec.NeedsAfter(envelope.Deleted) {
		t.Fatal("Needs")
	}
	if got := spec.Columns(); strings.Join(got, ",") != "id,status,fee,reader_id" {
		t.Fatalf("Columns() = %v", got)
	}
}

// Spec.Columns is shared by every capture with the spec: appending to it
// (what the capture paths do to add a column they also read) must copy,
// never write into the spec's array, where two concurrent captures would
// overwrite each other's extra column (a data race entcapture's edge
// setters had).
func TestSpecColumnsAppendCopies(t *testing.T) {
	t.Parallel()
	// Exclude fee leaves three columns: appended one by one, the
	// spec's array has room for four.
	for _, opts := range []envelope.Options{{}, {Exclude: []string{"fee"}}, {Fields: []string{"token", "status"}}} {
		spec, err := capture.Compile(loanModel, opts)
		if err != nil {
			t.Fatal(err)
		}
		cols := spec.Columns()
		if cap(cols) != len(cols) {
			t.Errorf("%+v: Columns() has capacity %d for %d columns: an append writes into the spec", opts, cap(cols), len(cols))
		}
		a := append(spec.Columns(), "a")
		b := append(spec.Columns(), "b")
		if a[len(a)-1] != "a" || b[len(b)-1] != "b" {
			t.Errorf("%+v: two appends to Columns() share an array: %v, %v", opts, a, b)
		}
		if got := spec.Columns(); len(got) != len(cols) {
			t.Errorf("%+v: Columns() changed to %v", opts, got)
		}
	}
}

// TestTenantOption: Options.Tenant names a column of the model, is read
// from the row into Change.Tenant, the envelope and Message.Tenant.
func TestTenantOption(t *testing.T) {
	m := capture.ModelInfo{Name: "Doc", Table: "docs", Columns: []string{"id", "org", "title"}, PrimaryKey: []string{"id"}}
	if _, err := capture.Compile(m, envelope.Options{Tenant: "orgid"}); !errors.Is(err, envelope.ErrConfiguration) ||
		!containsAll(err.Error(), "Doc", "Tenant", "orgid") {
		t.Fatalf("missing tenant column: %v", err)
	}
	if _, err := capture.Compile(m, envelope.Options{Tenant: "org", Payload: envelope.Keys}); !errors.Is(err, envelope.ErrConfiguration) {
		t.Fatalf("Tenant with Keys: %v", err)
	}
	if _, err := capture.Compile(m, envelope.Options{Tenant: "org", Exclude: []string{"org"}}); !errors.Is(err, envelope.ErrConfiguration) {
		t.Fatalf("Tenant in Exclude: %v", err)
	}
	s, err := capture.Compile(m, envelope.Options{Tenant: "org", Fields: []string{"title"}})
	if err != nil {
		t.Fatal(err)
	}
	var seen any
	s.Options.Extend = func(_ context.Context, c envelope.Change) (*envelope.Extension, error) {
		seen = c.Tenant
		return nil, nil
	}
	ms, err := s.Messages(context.Background(), []envelope.Change{{Operation: envelope.Inserted, PK: 1, After: map[string]any{"id": 1, "org": "acme", "title": "t"}}})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := ms[0].Payload.(interface{ MarshalJSON() ([]byte, error) }).MarshalJSON()
	if ms[0].Tenant != "acme" || seen != "acme" || !containsAll(string(p), `"tenant":"acme"`, `"org":"acme"`) {
		t.Fatalf("tenant %q, Extend saw %v, payload %s", ms[0].Tenant, seen, p)
	}
	ms, err = s.Messages(context.Background(), []envelope.Change{{Operation: envelope.Deleted, PK: 1, Before: map[string]any{"id": 1, "org": int64(7)}}})
	if err != nil || ms[0].Tenant != "7" {
		t.Fatalf("delete's tenant from before: %v %q", err, ms[0].Tenant)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, x := range subs {
		if !strings.Contains(s, x) {
			return false
		}
	}
	return true
}

// TestDeclaredTypeForms: a column listed in ModelInfo.Types is rendered
// in its type's form, ahead of a scale the same declaration implies
// (numeric(10,2)[] is an array, not a decimal), and marks the spec
// Typed; a type without a form of its own (text) does not.
func TestDeclaredTypeForms(t *testing.T) {
	m := capture.ModelInfo{Name: "Doc", Table: "docs", Columns: []string{"id", "prices", "body", "note"}, PrimaryKey: []string{"id"},
		Scales: map[string]int{"prices": 2},
		Types:  map[string]string{"prices": "numeric(10,2)[]", "body": "jsonb", "note": "text"}}
	s, err := capture.Compile(m, envelope.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Typed() {
		t.Error("Typed() = false, want true")
	}
	c := envelope.Change{Operation: envelope.Inserted, PK: 1, OccurredAt: time.Unix(0, 0),
		After: map[string]any{"id": 1, "prices": "{1.50,NULL}", "body": `{"a": 1}`, "note": "{x}"}}
	b, err := s.AppendEnvelope(nil, &c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := `"after":{"id":1,"prices":["1.50",null],"body":{"a":1},"note":"{x}"}`; !strings.Contains(string(b), want) {
		t.Errorf("%s\nwant it to hold %s", b, want)
	}
	m.Types = map[string]string{"note": "text"}
	if s, err := capture.Compile(m, envelope.Options{}); err != nil || s.Typed() {
		t.Errorf("text only: Typed() = %v (%v), want false", s != nil && s.Typed(), err)
	}
}

// TestMessagesPayloadKinds: a spec whose ordering key is the row's own
// (RowKeyed) gives capturedjson.RowKeyed payloads, which the Writer locks
// shared; any other key, and no key, gives capturedjson.JSON.
func TestMessagesPayloadKinds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opts     envelope.Options
		rowKeyed bool
	}{
		{envelope.Options{}, true},
		{envelope.Options{OrderingKey: envelope.DefaultOrderingKey}, true},
		{envelope.Options{OrderingKey: "{model}"}, false},
		{envelope.Options{OrderingKeyFunc: func(envelope.Change) string { return "k" }}, false},
		{envelope.Options{Unordered: true}, false},
	} {
		s, err := capture.Compile(loanModel, c.opts)
		if err != nil {
			t.Fatal(err)
		}
		ms, err := s.Messages(context.Background(), []envelope.Change{loanChange(envelope.Inserted)})
		if err != nil {
			t.Fatal(err)
		}
		switch p := ms[0].Payload.(type) {
		case capturedjson.RowKeyed:
			if !c.rowKeyed {
				t.Errorf("%+v: RowKeyed payload, want JSON", c.opts)
			}
		case capturedjson.JSON:
			if c.rowKeyed {
				t.Errorf("%+v: JSON payload, want RowKeyed", c.opts)
			}
		default:
			t.Errorf("%+v: payload %T", c.opts, p)
		}
		if s.RowKeyed() != c.rowKeyed {
			t.Errorf("%+v: RowKeyed() = %v", c.opts, s.RowKeyed())
		}
	}
}
