// Package envelope_test here holds the envelope package's tests that need a
// third-party driver the package itself does not import (lib/pq's array
// forms): apart from envelope/, so that a program importing envelope does
// not get lib/pq in its go.sum (go mod tidy keeps checksums for what the
// tests of a program's dependencies import).
package envelope_test

import (
	"testing"

	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }
