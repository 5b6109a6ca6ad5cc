package envelope

import "github.com/heraldgo/herald/internal/topictemplate"

// Default templates.
const (
	DefaultTopic       = "{namespace}.{model}.{operation}"
	DefaultOrderingKey = "{label}:{pk}"
)

// checkTemplate parses the template s of option; an unknown name or an
// unclosed brace is an ErrConfiguration error naming option.
func checkTemplate(option, s string) error {
	if _, err := topictemplate.Parse(s); err != nil {
		return configurationf(option, "%s", err)
	}
	return nil
}
