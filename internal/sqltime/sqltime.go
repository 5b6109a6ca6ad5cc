// Package sqltime reads the time columns of herald's tables on every
// dialect: time.Time on PostgreSQL and MySQL, fixed-width UTC text on
// SQLite.
package sqltime

import (
	"fmt"
	"time"
)

// SQLiteFormat is how herald stores times on SQLite: fixed width, UTC, so
// text comparison is time comparison, whichever driver reads it.
const SQLiteFormat = "2006-01-02T15:04:05.000000Z"

// NullTime is a nullable time column value that scans from either dialect's
// storage (time.Time on PostgreSQL, text on SQLite).
type NullTime struct {
	Time  time.Time
	Valid bool
}

// Scan implements sql.Scanner.
func (n *NullTime) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		*n = NullTime{}
		return nil
	case time.Time:
		*n = NullTime{Time: x, Valid: true}
		return nil
	case string:
		return n.parse(x)
	case []byte:
		return n.parse(string(x))
	}
	return fmt.Errorf("herald: cannot scan %T into a time", v)
}

func (n *NullTime) parse(s string) error {
	for _, layout := range []string{SQLiteFormat, time.RFC3339Nano, "2006-01-02 15:04:05.999999999-07:00", "2006-01-02 15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			*n = NullTime{Time: t, Valid: true}
			return nil
		}
	}
	return fmt.Errorf("herald: cannot parse time %q", s)
}

// Ptr returns the time, or nil when NULL.
func (n NullTime) Ptr() *time.Time {
	if !n.Valid {
		return nil
	}
	t := n.Time
	return &t
}
