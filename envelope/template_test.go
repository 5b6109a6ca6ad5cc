package envelope_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/heraldgo/herald/envelope"
)

// TestTemplateErrors: a bad template is an ErrConfiguration naming the
// option (the parser's own cases are internal/topictemplate's tests).
func TestTemplateErrors(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"{app}.{model}", "{model", "model}", "{}", "{Model}"} {
		err := envelope.Options{Topic: s}.Validate()
		if !errors.Is(err, envelope.ErrConfiguration) {
			t.Errorf("Options{Topic: %q}.Validate() = %v, want ErrConfiguration", s, err)
			continue
		}
		if !strings.Contains(err.Error(), "Options.Topic") {
			t.Errorf("error %q does not name the option", err)
		}
	}
}
