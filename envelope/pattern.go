package envelope

import (
	"strings"
)

// TopicPattern is a topic name ("library.loan.updated") or a prefix pattern
// ending in '*' ("library.*" matches every topic that starts with
// "library."). The prefix is taken literally: '_' and '%' are ordinary
// characters.
type TopicPattern struct {
	Text   string // the name, or the prefix without its '*'
	Prefix bool   // Text is a prefix
}

// ParseTopicPattern parses p. An empty pattern, or '*' or '?' anywhere but
// at the end, is an ErrConfiguration error naming option.
func ParseTopicPattern(option, p string) (TopicPattern, error) {
	if p == "" {
		return TopicPattern{}, configurationf(option, "empty topic pattern")
	}
	text, prefix := p, false
	if strings.HasSuffix(p, "*") {
		text, prefix = p[:len(p)-1], true
	}
	if i := strings.IndexAny(text, "*?"); i >= 0 {
		return TopicPattern{}, configurationf(option,
			"topic pattern %q has %q at position %d: only a trailing '*' is a wildcard (\"library.*\")", p, text[i], i)
	}
	if len(text) > MaxTopicLength {
		return TopicPattern{}, configurationf(option, "topic pattern %q is longer than %d characters", p, MaxTopicLength)
	}
	return TopicPattern{Text: text, Prefix: prefix}, nil
}

// ParseTopicPatterns parses each pattern; errors name option[i].
func ParseTopicPatterns(option string, ps []string) ([]TopicPattern, error) {
	out := make([]TopicPattern, 0, len(ps))
	for i, p := range ps {
		tp, err := ParseTopicPattern(option+"["+itoa(int64(i))+"]", p)
		if err != nil {
			return nil, err
		}
		out = append(out, tp)
	}
	return out, nil
}

// Match reports whether topic matches the pattern.
func (p TopicPattern) Match(topic string) bool {
	if p.Prefix {
		return strings.HasPrefix(topic, p.Text)
	}
	return topic == p.Text
}

// String returns the pattern as written.
func (p TopicPattern) String() string {
	if p.Prefix {
		return p.Text + "*"
	}
	return p.Text
}
