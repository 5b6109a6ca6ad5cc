package entcapture

import (
	"bytes"
	"context"
	stdsql "database/sql"
	"database/sql/driver"
	"encoding"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/names"
)

// Schema is what the generated glue tells the capture hook about one
// captured schema: what a generic hook cannot learn from an ent.Mutation
// at run time. Extension generates one per captured schema; it is not
// meant to be written by hand.
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
	// their events carry the type's form (see envelope.ModelInfo.Types).
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

// keyOf is a row's key as events carry it: the id, or a column map for
// a composite key.
func (s *Schema) keyOf(row map[string]any) any {
	if len(s.Key) == 0 {
		return row[s.PK]
	}
	k := make(map[string]any, len(s.Key))
	for _, c := range s.Key {
		k[c] = row[c]
	}
	return k
}

// keyText is a row's key as text, to tell rows apart.
func (s *Schema) keyText(row map[string]any) string {
	if len(s.Key) == 0 {
		return names.KeyText(row[s.PK])
	}
	var b strings.Builder
	for i, c := range s.Key {
		if i > 0 {
			b.WriteByte(0)
		}
		b.WriteString(names.KeyText(row[c]))
	}
	return b.String()
}

// db is the database schema sch's table is in for the write of g: the
// client's SchemaConfig (ent's sql/schemaconfig feature, which
// entsql.Annotation{Schema: …} and ent.AlternateSchema fill) when the
// code has it, otherwise the annotation's.
func db(g Glue, sch *Schema) string {
	if d, ok := g.HeraldDB(sch); ok {
		return d
	}
	return sch.DB
}

// from is sch's table for the capture's statements in the write of g,
// qualified by its database schema.
func from(g Glue, sch *Schema) *sql.SelectTable {
	t := sql.Table(sch.Table)
	if d := db(g, sch); d != "" {
		t.Schema(d)
	}
	return t
}

// quotedTable is sch's table as an identifier of raw SQL, qualified as
// ent's own statements qualify it: on SQLite never (ent writes no schema
// there; an ATTACHed database's tables are found by name, and "schema"
// names no database SQLite knows unless it was attached under that name).
func quotedTable(dl envelope.Dialect, g Glue, sch *Schema) string {
	if d := db(g, sch); d != "" && dl != envelope.SQLite {
		return dl.QuoteIdent(d) + "." + dl.QuoteIdent(sch.Table)
	}
	return dl.QuoteIdent(sch.Table)
}

// pin returns the predicate that narrows a write to rows (their keys),
// one bind parameter for all of them (inSet): the id, or each column of
// a composite key (composite-id edge schemas). rowType is the table as
// the statements name it. On MySQL the pin is marked for the driver
// wrapper, which joins the write to the key set (mysqlPin, pinJoin).
func (s *Schema) pin(d envelope.Dialect, rowType string, rows []map[string]any) func(*sql.Selector) {
	if len(s.Key) == 0 && d != envelope.MySQL {
		return keysIn(d, rowType, s.PK, pks(rows, s.PK))
	}
	cols := s.Key
	if len(cols) == 0 {
		cols = []string{s.PK}
	}
	if d == envelope.MySQL {
		tuples := make([][]any, len(rows))
		for i, r := range rows {
			t := make([]any, len(cols))
			for j, c := range cols {
				t[j] = r[c]
			}
			tuples[i] = t
		}
		return func(sel *sql.Selector) {
			if len(tuples) == 0 {
				sel.Where(sql.False())
				return
			}
			qc := make([]string, len(cols))
			for i, c := range cols {
				qc[i] = sel.C(c)
			}
			sel.Where(mysqlPin(qc, tuples))
		}
	}
	tuples := make([][]any, len(rows))
	for i, r := range rows {
		t := make([]any, len(s.Key))
		for j, c := range s.Key {
			t[j] = r[c]
		}
		tuples[i] = t
	}
	return inSet(d, rowType, s.Key, tuples)
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
// schemas (Extension generates the methods): the typed access a generic
// hook lacks. Its methods are for entcapture only.
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

// scannerGlue is the glue generated since images are scanned one row at
// a time (a RETURNING that ent's own scan shares), and UPDATE modifiers
// are kept for "changed". Older glue lacks it: such writes are captured as
// before (rows read by a snapshot statement).
type scannerGlue interface {
	// HeraldScanner returns the scan destinations of one row of cols and
	// a function that returns the row once scanned, NULL as nil.
	HeraldScanner(cols []string) (dst []any, row func() (map[string]any, error), err error)
	// HeraldModifiers returns the UPDATE's modifiers (Modify, AppendX)
	// after its statement was built.
	HeraldModifiers() []func(*sql.UpdateBuilder)
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
			out[i] = &nullScan{dst: sc, keep: keepsSource(reflect.TypeOf(sc))}
		default:
			out[i] = v
		}
	}
	return out
}

// nullScan scans into dst unless the value is NULL, and remembers which;
// with keep, it remembers the value the database returned too (see
// storedForm).
type nullScan struct {
	dst  stdsql.Scanner
	null bool
	keep bool
	src  any
}

func (n *nullScan) Scan(src any) error {
	n.null = src == nil
	if n.keep {
		if b, ok := src.([]byte); ok {
			src = bytes.Clone(b) // the driver reuses its buffer
		}
		n.src = src
	}
	return n.dst.Scan(src)
}

var keepsSourceCache sync.Map // reflect.Type -> bool

// keepsSource reports whether a scan destination of type t (a pointer to
// a field's Go type) is a driver.Valuer whose only JSON form is its
// Value(): a type of the user's (ent's GoType) without MarshalJSON or
// MarshalText, not one of database/sql's, time's, pgx's, nor a decimal.
// Such a column's image is what the database returned for it (storedForm),
// not the Value() of what the type's Scan made of it, which need not
// give back the stored value.
func keepsSource(t reflect.Type) bool {
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

// storedForm returns the value a column of a keepsSource type holds, src
// as the database returned it, in the kind of v's Value() (a text column
// read as bytes is a string), so that the event holds the row as stored
// and in the form the Go value would take (its Value()). It declines (the
// Go value stays) when v has no Value of a kind src matches.
func storedForm(src, v any) (out any, ok bool) {
	vl, isValuer := v.(driver.Valuer)
	if !isValuer {
		return nil, false
	}
	if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
		return nil, false
	}
	defer func() {
		if recover() != nil {
			out, ok = nil, false
		}
	}()
	dv, err := vl.Value()
	if err != nil {
		return nil, false
	}
	switch dv.(type) {
	case string:
		switch s := src.(type) {
		case string:
			return s, true
		case []byte:
			return string(s), true
		}
	case []byte:
		if b, ok := src.([]byte); ok {
			return b, true
		}
	case int64:
		if n, ok := src.(int64); ok {
			return n, true
		}
	case float64:
		if f, ok := src.(float64); ok {
			return f, true
		}
	case bool:
		if b, ok := src.(bool); ok {
			return b, true
		}
	case time.Time:
		if t, ok := src.(time.Time); ok {
			return t, true
		}
	}
	return nil, false
}

// storedScanner is g's HeraldScanner whose rows hold, for the columns of
// keepsSource types, what the database returned (storedForm); nil when
// the glue has no HeraldScanner (generated by an older entcapture).
func storedScanner(g Glue) func(cols []string) ([]any, func() (map[string]any, error), error) {
	sg, ok := g.(scannerGlue)
	if !ok {
		return nil
	}
	return func(cols []string) ([]any, func() (map[string]any, error), error) {
		dst, row, err := sg.HeraldScanner(cols)
		if err != nil {
			return nil, nil, err
		}
		return dst, func() (map[string]any, error) {
			r, err := row()
			if err != nil {
				return nil, err
			}
			for i, d := range dst {
				if ns, ok := d.(*nullScan); ok && ns.keep && !ns.null && i < len(cols) {
					if v, ok := storedForm(ns.src, r[cols[i]]); ok {
						r[cols[i]] = v
					}
				}
			}
			return r, nil
		}, nil
	}
}

// scanStored is g's HeraldScan through storedScanner.
func scanStored(g Glue) func(*stdsql.Rows, []string) ([]map[string]any, error) {
	sc := storedScanner(g)
	if sc == nil {
		return g.HeraldScan
	}
	return func(rows *stdsql.Rows, cols []string) ([]map[string]any, error) {
		var out []map[string]any
		for rows.Next() {
			dst, row, err := sc(cols)
			if err != nil {
				return nil, err
			}
			if err := rows.Scan(dst...); err != nil {
				return nil, err
			}
			r, err := row()
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		return out, rows.Err()
	}
}

// IsNull reports whether v, a scan destination filled by rows.Scan, holds
// SQL NULL. Generated glue calls it.
func IsNull(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case *nullScan:
		return x.null
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
