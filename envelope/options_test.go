package envelope_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
)

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	noop := func(context.Context, envelope.Change) (*envelope.Extension, error) { return nil, nil }
	noopMany := func(context.Context, []envelope.Change) ([]*envelope.Extension, error) { return nil, nil }
	cases := []struct {
		name   string
		opts   envelope.Options
		option string // must appear in the message
	}{
		{"empty operations", envelope.Options{Operations: []envelope.Operation{}}, "Options.Operations"},
		{"unknown operation", envelope.Options{Operations: []envelope.Operation{"created"}}, "Options.Operations[0]"},
		{"operation twice", envelope.Options{Operations: []envelope.Operation{envelope.Inserted, envelope.Inserted}}, "Options.Operations[1]"},
		{"payload mode", envelope.Options{Payload: 7}, "Options.Payload"},
		{"fields and exclude", envelope.Options{Fields: []string{"a"}, Exclude: []string{"b"}}, "Options.Fields"},
		{"field twice", envelope.Options{Fields: []string{"a", "a"}}, "Options.Fields"},
		{"unknown topic name", envelope.Options{Topic: "{app}.{model}"}, "Options.Topic"},
		{"unknown key name", envelope.Options{OrderingKey: "{id}"}, "Options.OrderingKey"},
		{"topic and func", envelope.Options{Topic: "x", TopicFunc: func(envelope.Change) string { return "x" }}, "Options.Topic"},
		{"key and func", envelope.Options{OrderingKey: "x", OrderingKeyFunc: func(envelope.Change) string { return "x" }}, "Options.OrderingKey"},
		{"unordered with key", envelope.Options{Unordered: true, OrderingKey: "{pk}"}, "Options.Unordered"},
		{"extend and many", envelope.Options{Extend: noop, ExtendMany: noopMany}, "Options.Extend"},
	}
	for _, c := range cases {
		err := c.opts.Validate()
		if !errors.Is(err, envelope.ErrConfiguration) {
			t.Errorf("%s: Validate() = %v, want ErrConfiguration", c.name, err)
			continue
		}
		if !strings.Contains(err.Error(), c.option) {
			t.Errorf("%s: %q does not name %s", c.name, err, c.option)
		}
	}
	if err := (envelope.Options{}).Validate(); err != nil {
		t.Fatalf("zero Options: %v", err)
	}
}

var loanModel = envelope.ModelInfo{
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
		_, err := envelope.Compile(loanModel, c.opts)
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
		spec, err := envelope.Compile(m, envelope.Options{Payload: c.mode})
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
	spec, err := envelope.Compile(loanModel, envelope.Options{Fields: []string{"token", "status"}})
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
	m := envelope.ModelInfo{Name: "Seat", Table: "seats", Columns: []string{"hall", "number", "price"}, PrimaryKey: []string{"hall", "number"}}
	spec, err := envelope.Compile(m, envelope.Options{Namespace: "cinema", Payload: envelope.Keys})
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
	spec, _ = envelope.Compile(m, envelope.Options{})
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
	spec, _ := envelope.Compile(loanModel, envelope.Options{Payload: envelope.Keys, Extend: extend})
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
	spec, _ = envelope.Compile(loanModel, envelope.Options{Extend: collide})
	_, err = spec.Messages(ctx, []envelope.Change{loanChange(envelope.Inserted)})
	if !errors.Is(err, envelope.ErrValidation) || !strings.Contains(err.Error(), `"pk"`) {
		t.Fatalf("colliding key: %v", err)
	}

	boom := errors.New("boom")
	failing := func(context.Context, envelope.Change) (*envelope.Extension, error) { return nil, boom }
	spec, _ = envelope.Compile(loanModel, envelope.Options{Extend: failing})
	_, err = spec.Messages(ctx, []envelope.Change{loanChange(envelope.Inserted)})
	if !errors.Is(err, boom) || !errors.Is(err, envelope.ErrValidation) {
		t.Fatalf("failing Extend: %v", err)
	}

	calls := 0
	many := func(_ context.Context, cs []envelope.Change) ([]*envelope.Extension, error) {
		calls++
		return []*envelope.Extension{{Headers: map[string]string{"n": "1"}}}, nil
	}
	spec, _ = envelope.Compile(loanModel, envelope.Options{ExtendMany: many})
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
	spec, _ := envelope.Compile(loanModel, envelope.Options{OrderingKeyFunc: func(envelope.Change) string { return long }})
	_, err := spec.Messages(context.Background(), []envelope.Change{loanChange(envelope.Inserted)})
	if !errors.Is(err, envelope.ErrValidation) || !strings.Contains(err.Error(), "OrderingKeyFunc") {
		t.Fatalf("long OrderingKeyFunc: %v", err)
	}
	spec, _ = envelope.Compile(loanModel, envelope.Options{TopicFunc: func(envelope.Change) string { return "" }})
	_, err = spec.Messages(context.Background(), []envelope.Change{loanChange(envelope.Inserted)})
	if !errors.Is(err, envelope.ErrValidation) || !strings.Contains(err.Error(), "TopicFunc") {
		t.Fatalf("empty TopicFunc: %v", err)
	}
	spec, _ = envelope.Compile(loanModel, envelope.Options{Unordered: true, TopicFunc: func(c envelope.Change) string { return "t." + string(c.Operation) }})
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
	spec, _ = envelope.Compile(m, envelope.Options{})
	if _, err = spec.Messages(context.Background(), []envelope.Change{loanChange(envelope.Inserted)}); !errors.Is(err, envelope.ErrValidation) {
		t.Fatalf("a topic template giving 300+ characters: %v, want ErrValidation", err)
	}
	spec, _ = envelope.Compile(m, envelope.Options{Topic: "static"})
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
	spec, _ := envelope.Compile(loanModel, envelope.Options{Operations: []envelope.Operation{envelope.Deleted}, Payload: envelope.BeforeAndAfter})
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
		spec, err := envelope.Compile(loanModel, opts)
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
