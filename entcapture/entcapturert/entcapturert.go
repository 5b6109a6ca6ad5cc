// Package entcapturert is imported by code entcapturegen generates; not
// for use by hand.
//
// It holds what the generated glue (ent/entcapture.go and the CreateBulk
// override) calls and declares: the Schema of each captured schema, the
// Glue interface its mutations implement, the registration of schemas,
// the mark of a CreateBulk and the scan helpers. Users write their code
// against package entcapture (Driver, Config, Mixin, Enqueue); the API
// of this package follows entcapturegen and changes with it: after
// upgrading herald, re-run go generate.
//
// The name pairs it with entcapturegen: the generator, and the run time
// (rt) of the code it generates.
package entcapturert

import (
	"context"
	stdsql "database/sql"
	"database/sql/driver"
	"reflect"
	"sync"

	"entgo.io/ent"
	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/entcapture/internal/rtstate"
)

// Schema is what the generated glue tells the capture hook about one
// captured schema: what a generic hook cannot learn from an ent.Mutation
// at run time. entcapturegen.Extension generates one per captured
// schema; it is not meant to be written by hand.
type Schema struct {
	Name    string   // the schema's Go name: "Loan"
	Table   string   // "loans"
	Columns []string // every column, in table order (fields, then foreign keys)
	PK      string   // the id column; "" for a composite key (Key)
	// Key lists the key columns of a schema without a single id: a
	// composite-id edge schema (field.ID("user_id", "group_id")) or the
	// join table of a plain many-to-many edge. nil = PK alone.
	Key []string
	// DB is the database schema the table is in (entsql.Annotation's
	// Schema), which the capture's own statements qualify it with; "" =
	// the connection's default.
	DB        string
	Sensitive []string // columns of .Sensitive() fields
	// Fields maps an ent field name to its column, for the columns an
	// update sets.
	Fields map[string]string
	// Nullable lists the columns of optional fields without a default:
	// NULL when a create does not set them.
	Nullable []string
	// DBDefaults lists the columns of fields with a database default
	// (entsql.Default, DefaultExpr): a create that leaves one unset holds
	// the database's value, which the capture reads back.
	DBDefaults []string
	// Precision maps the columns of time fields whose PostgreSQL column
	// keeps fewer than 6 fractional-second digits (timestamptz(3)) to
	// that number; a create's time finer than its column is read back.
	Precision map[string]int
	// Types maps an ent dialect name ("postgres", "sqlite3", "mysql") to
	// the columns whose SchemaType declares a type with a JSON form of its
	// own (an array, a range, json/jsonb, a geometric type) and that type:
	// their events carry the type's form (the table in jsonform's package doc).
	Types map[string]map[string]string
	// Cascades are the foreign keys of captured tables that reference
	// this one with ON DELETE CASCADE or SET NULL: the rows a delete makes
	// the database delete or update.
	Cascades []Cascade
	// Edges are the schema's many-to-many edges through a captured edge
	// schema or a captured plain join table: the join rows their setters
	// (AddX, RemoveX, ClearX) write.
	Edges []ThroughEdge
	// ChildEdges are the schema's one-to-many (and one-to-one) edges whose
	// foreign key is in a captured table: the rows their setters update.
	ChildEdges []ChildEdge
	// EdgeColumns maps an edge whose foreign key is in this table to that
	// column, for the columns an update sets (SetOwner, ClearOwner).
	EdgeColumns map[string]string
	// Scan reads rows of the given columns as the schema's entity reads
	// them (HeraldScan, for rows reached by a cascade).
	Scan func(rows *stdsql.Rows, cols []string) ([]map[string]any, error)
	// Hooks returns the schema's hooks, among them its capture hook; nil
	// for a schema that is not captured (a parent whose deletes cascade to
	// captured rows, or a join table).
	Hooks func() []ent.Hook
	// JoinOwner is, for the join table of a plain many-to-many edge, the
	// captured schema that declares the edge (edge.To): its Options, as
	// far as they apply to a join row, are the join rows'.
	JoinOwner *Schema
}

// KeyColumns are the columns that identify a row in events.
func (s *Schema) KeyColumns() []string {
	if len(s.Key) > 0 {
		return s.Key
	}
	return []string{s.PK}
}

// ThroughEdge is a many-to-many edge whose join table is a captured edge
// schema.
type ThroughEdge struct {
	Name    string  // the edge: "clubs"
	Through *Schema // the edge schema, or the join table of a plain edge
	Own     string  // its column holding this schema's id
	Other   string  // its column holding the other side's id
	// Bidi marks a bidirectional edge (edge.To("friends", User.Type)):
	// ent writes and deletes each join row with its reverse (other, own).
	Bidi bool
}

// ChildEdge is an edge whose foreign key lives in another captured table
// (or, for a bidirectional one-to-one edge, in this one): its setters
// update that table's rows.
type ChildEdge struct {
	Name   string
	Child  *Schema
	Column string // the foreign-key column in Child's table
}

// Cascade is one foreign key that a delete of its referenced rows makes
// the database follow.
type Cascade struct {
	Child   *Schema // the referencing schema
	Column  string  // its foreign-key column
	SetNull bool    // ON DELETE SET NULL; otherwise CASCADE
}

// Glue is implemented by the generated mutation types of captured
// schemas (entcapturegen.Extension generates the methods): the typed
// access a generic hook lacks. Its methods are for entcapture only.
type Glue interface {
	ent.Mutation
	HeraldSchema() *Schema
	// HeraldDriver is the client's driver (the caller transaction's
	// driver's own driver when in one).
	HeraldDriver() dialect.Driver
	// HeraldTx is the caller's transaction, or nil.
	HeraldTx() dialect.Tx
	// HeraldID is the id of an UpdateOne/DeleteOne (or a done Create).
	HeraldID() (any, bool)
	// HeraldBeforeInsert sets the function a create calls right before
	// its INSERT with its upsert's conflict options (nil: no upsert).
	HeraldBeforeInsert(f func([]sql.ConflictOption))
	// HeraldPredicates are the mutation's Where predicates.
	HeraldPredicates() []func(*sql.Selector)
	// HeraldRow turns an entity returned by the mutation into columns.
	HeraldRow(v ent.Value) (map[string]any, bool)
	// HeraldScan reads rows of the given columns as the schema's entity
	// reads them, one column map per row, NULL as nil.
	HeraldScan(rows *stdsql.Rows, cols []string) ([]map[string]any, error)
	// HeraldOnCommit runs f after the caller's transaction commits;
	// false when the mutation is not in one.
	HeraldOnCommit(f func()) bool
	WhereP(ps ...func(*sql.Selector))
	ExecContext(ctx context.Context, query string, args ...any) (stdsql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*stdsql.Rows, error)
	// HeraldBeforeDelete sets the function the generated DELETE calls
	// right before it runs, after every hook (nil: none): the capture reads
	// the rows the delete will remove with its final predicates there.
	HeraldBeforeDelete(f func(context.Context) error)
	// HeraldDB is the database schema of a captured table (this one, or
	// one its write reaches) in the mutation's SchemaConfig; false when
	// the code has no SchemaConfig (ent's sql/schemaconfig feature).
	HeraldDB(s *Schema) (string, bool)
}

// NullAware returns scan destinations for vals (an entity's scanValues)
// that remember a NULL: a sql.Scanner such as uuid.UUID scans NULL into
// its zero value, which IsNull cannot tell from a stored zero. Generated
// glue calls it.
func NullAware(vals []any) []any {
	out := make([]any, len(vals))
	for i, v := range vals {
		switch sc := v.(type) {
		case *stdsql.NullString, *stdsql.NullInt64, *stdsql.NullInt32, *stdsql.NullInt16, *stdsql.NullFloat64,
			*stdsql.NullBool, *stdsql.NullTime, *stdsql.NullByte, *[]byte, *any:
			out[i] = v // IsNull tells their NULL
		case stdsql.Scanner:
			out[i] = &rtstate.NullScan{Dst: sc, Keep: rtstate.KeepsSource(reflect.TypeOf(sc))}
		default:
			out[i] = v
		}
	}
	return out
}

// IsNull reports whether v, a scan destination filled by rows.Scan, holds
// SQL NULL. Generated glue calls it.
func IsNull(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case *rtstate.NullScan:
		return x.Null
	case *[]byte:
		return x == nil || *x == nil
	case *any:
		return x == nil || *x == nil
	case driver.Valuer:
		dv, err := x.Value()
		return err == nil && dv == nil
	}
	return false
}

// ScannedValue is what the column of a field with a ValueScanner
// (field.ValueScanner, BinaryValueScanner, TextValueScanner) holds: the
// scanner's Value of v — as text for a string field, whose column stores
// the bytes as text — rather than the Go value. v itself when the
// scanner is not installed (ent/runtime not imported) or fails.
// Generated glue calls it.
func ScannedValue[T any](vs interface {
	Value(T) (driver.Value, error)
}, v T, text bool) (out any) {
	if vs == nil {
		return v
	}
	if rv := reflect.ValueOf(v); !rv.IsValid() || (rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Interface) && rv.IsNil() {
		return nil // an unset optional field of a pointer type: NULL (url.URL's MarshalBinary panics on nil)
	}
	defer func() {
		if recover() != nil {
			out = v
		}
	}()
	dv, err := vs.Value(v)
	if err != nil {
		return v
	}
	if b, ok := dv.([]byte); ok && text {
		return string(b)
	}
	return dv
}

// Register records captured schemas, so that an entcapture.Config's
// Options can be checked against their names. The generated code calls
// it from its init.
func Register(schemas ...*Schema) {
	for _, s := range schemas {
		rtstate.Register(s.Name, s.Columns)
	}
}

// WithBulk returns ctx marked as the context of one CreateBulk; the
// generated CreateBulk.Save calls it.
func WithBulk(ctx context.Context) context.Context {
	return context.WithValue(ctx, rtstate.BulkKey{}, &rtstate.Bulk{})
}

// BulkConflict is called by the generated CreateBulk right before its
// INSERT, with the bulk's upsert conflict options: it reads the rows they
// conflict with.
func BulkConflict(ctx context.Context, conflict []sql.ConflictOption) error {
	b, _ := ctx.Value(rtstate.BulkKey{}).(*rtstate.Bulk)
	if b == nil || b.Scope == nil || len(conflict) == 0 {
		return nil
	}
	return b.Scope.BeforeUpsert(conflict)
}

// CascadeHook is the hook the generated code installs on a schema that
// is not captured but whose deletes make the database delete or null rows
// of captured schemas (ON DELETE CASCADE or SET NULL, directly or through
// other uncaptured tables): it captures those rows. It is entcapture's,
// made on first use (after every package's init); without entcapture in
// the program it passes mutations through.
func CascadeHook() ent.Hook {
	var (
		once sync.Once
		h    ent.Hook
	)
	return func(next ent.Mutator) ent.Mutator {
		once.Do(func() {
			if rtstate.NewCascadeHook != nil {
				h = rtstate.NewCascadeHook()
			}
		})
		if h == nil {
			return next
		}
		return h(next)
	}
}
