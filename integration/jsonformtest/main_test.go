package jsonform_test

import (
	"testing"

	"go.uber.org/goleak"
)

// jsonform starts no goroutines; the check keeps it that way. (It uses
// goleak directly rather than internal/testkit, whose server helpers would
// pull database drivers and a Kafka cluster into this std-only package's
// tests.)
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
