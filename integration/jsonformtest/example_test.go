package jsonform_test

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/shopspring/decimal"

	"github.com/heraldgo/herald/jsonform"
)

// A captured row: every column in its JSON form, keys sorted, the
// decimal's scale kept, NaN written as PostgreSQL spells it, a Duration
// as the nanoseconds its column stores.
func ExampleMarshal() {
	row := map[string]any{
		"id":         int64(7),
		"public_id":  uuid.MustParse("0191d0c2-7d5a-7cc0-9f5e-3c1c1bfa6a11"),
		"fee":        decimal.RequireFromString("12.50"),
		"rating":     math.NaN(),
		"lent_at":    time.Date(2026, 10, 6, 12, 0, 0, 0, time.UTC),
		"loan_days":  21 * 24 * time.Hour,
		"notes":      []byte("ok"),
		"returned":   nil,
		"categories": []string{"sf", "classic"},
	}
	out, err := jsonform.Marshal(row, jsonform.Field)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(out))
	// Output:
	// {"categories":["sf","classic"],"fee":"12.50","id":7,"lent_at":"2026-10-06T12:00:00Z","loan_days":1814400000000000,"notes":"b2s=","public_id":"0191d0c2-7d5a-7cc0-9f5e-3c1c1bfa6a11","rating":"NaN","returned":null}
}

// An enqueued payload is strict: a value without a JSON form is an error
// that names where it is and what it is.
func ExampleMarshalPath() {
	payload := map[string]any{
		"items": []any{
			map[string]any{"sku": "A-1", "price": decimal.New(1999, -2)},
			map[string]any{"sku": "B-2", "price": complex(1, 2)},
		},
	}
	_, err := jsonform.MarshalPath("payload", payload, jsonform.Strict)
	fmt.Println(err)

	var e *jsonform.Error
	if errors.As(err, &e) {
		fmt.Println(e.Path, e.Type, errors.Is(err, jsonform.ErrUnsupported))
	}
	// Output:
	// herald/jsonform: payload.items[1].price: unsupported type complex128
	// payload.items[1].price complex128 true
}

// Append writes into a buffer the caller owns, as the envelope builder does.
func ExampleAppend() {
	buf := []byte(`{"model":"library.Loan","after":`)
	buf, err := jsonform.Append(buf, "after", map[string]any{"status": "returned", "fee": decimal.New(0, -2)}, jsonform.Field)
	if err != nil {
		panic(err)
	}
	buf = append(buf, '}')
	fmt.Println(string(buf))
	// Output:
	// {"model":"library.Loan","after":{"fee":"0.00","status":"returned"}}
}

// The two modes differ for numbers that JSON cannot hold (and for a
// time.Duration: seconds in strict mode, stored nanoseconds in field mode).
func ExampleMode() {
	for _, mode := range []jsonform.Mode{jsonform.Strict, jsonform.Field} {
		out, err := jsonform.Marshal([]float64{1.5, math.Inf(1)}, mode)
		fmt.Printf("%s: %s %v\n", mode, out, err)
	}
	// Output:
	// strict:  herald/jsonform: [1]: +Inf is not a JSON number
	// field: [1.5,"Infinity"] <nil>
}

// Maps whose keys have no string form become sorted lists of pairs.
func ExampleMarshal_pairs() {
	out, _ := jsonform.Marshal(map[int]string{2: "two", 1: "one"}, jsonform.Strict)
	fmt.Println(string(out))
	// Output:
	// [[1,"one"],[2,"two"]]
}

func ExampleAppendString() {
	fmt.Println(string(jsonform.AppendString(nil, "tab\there, \"quoted\", <html>, bad \xff byte")))
	// Output:
	// "tab\there, \"quoted\", <html>, bad \ufffd byte"
}
