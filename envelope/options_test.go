package envelope_test

import (
	"context"
	"errors"
	"strings"
	"testing"

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
