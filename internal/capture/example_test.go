package capture_test

import (
	"context"
	"fmt"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capture"
)

func ExampleCompile() {
	spec, err := capture.Compile(capture.ModelInfo{
		Name: "Loan", Table: "loans",
		Columns:          []string{"id", "status", "fee", "token"},
		PrimaryKey:       []string{"id"},
		Sensitive:        []string{"token"}, // left out unless named in Fields
		DefaultNamespace: "library",
	}, envelope.Options{Payload: envelope.BeforeAndAfter})
	if err != nil {
		panic(err)
	}
	ms, err := spec.Messages(context.Background(), []envelope.Change{{
		Operation: envelope.Updated, PK: 7, Changed: []string{"status"},
		Before:     map[string]any{"id": 7, "status": "lent", "fee": "0.00", "token": "x"},
		After:      map[string]any{"id": 7, "status": "returned", "fee": "0.00", "token": "x"},
		OccurredAt: time.Date(2026, 10, 6, 12, 0, 0, 0, time.UTC),
	}})
	if err != nil {
		panic(err)
	}
	fmt.Println(ms[0].Topic)
	fmt.Println(ms[0].OrderingKey)
	fmt.Printf("%s\n", ms[0].Payload)
	// Output:
	// library.loan.updated
	// library.Loan:7
	// {"model":"library.Loan","operation":"updated","pk":7,"changed":["status"],"before":{"id":7,"status":"lent","fee":"0.00"},"after":{"id":7,"status":"returned","fee":"0.00"},"occurred_at":"2026-10-06T12:00:00Z"}
}
