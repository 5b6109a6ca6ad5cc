package main

import (
	"context"
	"testing"

	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestQuickstart keeps the README's first command working.
func TestQuickstart(t *testing.T) {
	if err := run(context.Background()); err != nil {
		t.Fatal(err)
	}
}
