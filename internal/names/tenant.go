package names

import (
	"database/sql/driver"
	"fmt"
)

// TenantText is a tenant column's value as the outbox's tenant column
// holds it: text as it is, a number in decimal, a UUID (any
// fmt.Stringer) as its String; nil (NULL) is "", no tenant.
func TenantText(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case []byte:
		return string(x)
	case *string:
		if x == nil {
			return ""
		}
		return *x
	case fmt.Stringer:
		return x.String()
	case driver.Valuer: // sql.NullString and the like
		if dv, err := x.Value(); err == nil {
			if _, again := dv.(driver.Valuer); !again {
				return TenantText(dv)
			}
		}
	}
	return fmt.Sprint(v)
}
