// Package rtstate holds what entcapture and entcapturert (the package
// the generated glue imports) share without importing each other: the
// registry of captured schemas, the mark of a CreateBulk's context, the
// NULL-remembering scan destination, and the cascade hook's factory.
package rtstate

import (
	"bytes"
	stdsql "database/sql"
	"database/sql/driver"
	"encoding"
	"encoding/json"
	"reflect"
	"strings"
	"sync"

	"entgo.io/ent"
	"entgo.io/ent/dialect/sql"
)

// Registered holds the names of the captured schemas of the generated
// packages linked into the program (entcapturert.Register).
var Registered struct {
	sync.Mutex
	Names map[string]bool
	Cols  map[string][]string // by name: the schema's columns
}

// Register records one captured schema's name and columns.
func Register(name string, cols []string) {
	Registered.Lock()
	defer Registered.Unlock()
	if Registered.Names == nil {
		Registered.Names = map[string]bool{}
		Registered.Cols = map[string][]string{}
	}
	Registered.Names[name] = true
	Registered.Cols[name] = cols
}

// BulkKey is the context key of a Bulk.
type BulkKey struct{}

// Bulk marks the context of one CreateBulk.Save (the generated code puts
// it there), so that its items, whose hooks run nested, share one scope.
type Bulk struct {
	// Scope is entcapture's capture scope of the bulk, nil until its
	// first item's hook runs.
	Scope interface {
		BeforeUpsert(conflict []sql.ConflictOption) error
	}
}

// NewCascadeHook returns entcapture's hook of a schema that is not
// captured but whose deletes cascade to captured rows; entcapture's init
// sets it (nil when entcapture is not linked into the program, where
// nothing is captured).
var NewCascadeHook func() ent.Hook

// NullScan scans into Dst unless the value is NULL, and remembers which;
// with Keep, it remembers the value the database returned too (Src).
type NullScan struct {
	Dst  stdsql.Scanner
	Null bool
	Keep bool
	Src  any
}

// Scan implements sql.Scanner.
func (n *NullScan) Scan(src any) error {
	n.Null = src == nil
	if n.Keep {
		if b, ok := src.([]byte); ok {
			src = bytes.Clone(b) // the driver reuses its buffer
		}
		n.Src = src
	}
	return n.Dst.Scan(src)
}

var keepsSourceCache sync.Map // reflect.Type -> bool

// KeepsSource reports whether a scan destination of type t (a pointer to
// a field's Go type) is a driver.Valuer whose only JSON form is its
// Value(): a type of the user's (ent's GoType) without MarshalJSON or
// MarshalText, not one of database/sql's, time's, pgx's, nor a decimal.
// Such a column's image is what the database returned for it (entcapture's
// storedForm), not the Value() of what the type's Scan made of it, which
// need not give back the stored value.
func KeepsSource(t reflect.Type) bool {
	if k, ok := keepsSourceCache.Load(t); ok {
		return k.(bool)
	}
	k := false
	if t.Kind() == reflect.Pointer {
		e := t.Elem()
		pkg := e.PkgPath()
		k = pkg != "" && !strings.HasPrefix(pkg, "database/sql") && pkg != "time" && !strings.HasPrefix(pkg, "github.com/jackc/") &&
			t.Implements(valuerType) && !t.Implements(jsonMarshalerType) && !t.Implements(textMarshalerType)
		if _, dec := t.MethodByName("Coefficient"); dec {
			k = false
		}
	}
	keepsSourceCache.Store(t, k)
	return k
}

var (
	valuerType        = reflect.TypeFor[driver.Valuer]()
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)
