package envelope_test

import (
	"testing"

	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }
