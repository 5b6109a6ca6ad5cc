package gormcapture

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"fmt"
	"reflect"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capture"
	"github.com/heraldgo/herald/internal/pgform"
)

// Column types the database has.
//
// A column's JSON form comes from its declared type when that type is an
// array, a range, json/jsonb or a geometric type (pgform.Handles). GORM
// declares a type with the field's `type:` tag or its Go type's
// GormDataType; a field with neither (a string, []byte or named string
// field) on a column that a hand-written migration made jsonb, text[],
// int4range or point would be rendered from its Go value: a JSON string
// holding the column's text. So for the payload columns whose form no
// declaration fixes, the plugin reads the types the table really has from
// the database's catalog and uses them exactly as declared ones:
//
//   - PostgreSQL: pg_attribute and format_type (a domain's base type) of
//     the table as the connection's search_path resolves it (to_regclass);
//   - SQLite: the declared types of pragma_table_info (a column declared
//     json or jsonb is embedded; SQLite has no arrays, ranges or geometry);
//   - MySQL/MariaDB: information_schema.COLUMNS' COLUMN_TYPE (json, the
//     spatial types), and on MariaDB, whose JSON is a LONGTEXT with a
//     json_valid CHECK, that check.
//
// The catalog is read once per table name and plugin, with one statement:
// when the model is registered (Config.Models at db.Use, Plugin.Capture)
// if its table exists then, otherwise in the transaction of its first
// captured write (on SQLite after taking the write lock, which a deferred
// transaction that has read could no longer wait for). A table altered
// afterwards keeps the types first read. A `type:` tag always wins.

// tableTypes are the columns of a table whose database type has a form of
// pgform's, column name -> declared type ("jsonb", "text[]"); on MySQL
// and SQLite the names are lower-cased (their column names are not case
// sensitive).
type tableTypes map[string]string

// declaresType reports whether field f's type is declared by the model: a
// `type:` tag, or a Go type that names its GORM data type (GormDataType:
// datatypes.JSON's "json") rather than one of GORM's generic kinds.
func declaresType(f *schema.Field) bool {
	if f.TagSettings["TYPE"] != "" {
		return true
	}
	switch f.DataType {
	case "", schema.Bool, schema.Int, schema.Uint, schema.Float, schema.String, schema.Time, schema.Bytes:
		return false
	}
	return true
}

// mayHoldText reports whether values of field f may be a database type's
// text (a string, []byte, named string, a Valuer, a list): every type but
// booleans, numbers and times, whose columns have no form of pgform's.
func mayHoldText(f *schema.Field) bool {
	t := valueType(f)
	if t == reflect.TypeFor[time.Time]() {
		return false
	}
	switch t.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return t.Implements(reflect.TypeFor[driver.Valuer]())
	}
	return true
}

// undeclared returns the payload columns of spec whose form no
// declaration of sch fixes and whose values may be text: those whose
// database type the plugin reads.
func undeclared(sch *schema.Schema, spec *capture.Spec) []string {
	var out []string
	for _, c := range spec.Columns() {
		f := sch.FieldsByDBName[c]
		if f == nil || declaresType(f) || !mayHoldText(f) {
			continue
		}
		if _, ok := spec.Model.Types[c]; ok {
			continue
		}
		out = append(out, c)
	}
	return out
}

// typedSpec returns the spec a write of m to table uses: m's own, or,
// when the table's database types give an undeclared payload column a form
// of pgform's, m's options compiled with those types. The types are read
// on q (in the write's transaction) the first time the table is seen.
func (p *Plugin) typedSpec(ctx context.Context, st *gorm.Statement, q gorm.ConnPool, m *model, table string) (*capture.Spec, error) {
	if m.spec == nil || len(m.open) == 0 {
		return m.spec, nil
	}
	if v, ok := m.specs.Load(table); ok {
		return v.(*capture.Spec), nil
	}
	types, ok := p.cachedTypes(table)
	if !ok {
		if p.dialect == envelope.SQLite && st != nil {
			if err := p.writeLock(ctx, st, q); err != nil {
				// No such table, or busy: the write itself fails with its
				// own error (GORM's, as without the plugin).
				return m.spec, nil //nolint:nilerr // the write reports it
			}
		}
		var err error
		if types, ok, err = p.readTypes(ctx, q, table); err != nil {
			return nil, err
		}
		if !ok { // no such table (yet): the write fails or reads again next time
			return m.spec, nil
		}
	}
	spec, err := p.withTypes(m, types)
	if err != nil {
		return nil, err
	}
	v, _ := m.specs.LoadOrStore(table, spec)
	return v.(*capture.Spec), nil
}

// withTypes returns m's spec with the database types of its undeclared
// columns (m's own spec when none has a form of pgform's).
func (p *Plugin) withTypes(m *model, types tableTypes) (*capture.Spec, error) {
	var found map[string]string
	for _, c := range m.open {
		t, ok := types[c]
		if !ok && p.dialect != envelope.Postgres {
			t, ok = types[strings.ToLower(c)]
		}
		if ok && pgform.Handles(t) {
			if found == nil {
				found = map[string]string{}
			}
			found[c] = t
		}
	}
	if found == nil {
		return m.spec, nil
	}
	info := m.spec.Model
	types2 := make(map[string]string, len(info.Types)+len(found))
	for c, t := range info.Types {
		types2[c] = t
	}
	for c, t := range found {
		types2[c] = t
	}
	info.Types = types2
	return capture.Compile(info, m.spec.Options)
}

func (p *Plugin) cachedTypes(table string) (tableTypes, bool) {
	v, ok := p.dbTypes.Load(table)
	if !ok {
		return nil, false
	}
	return v.(tableTypes), true
}

// preloadTypes reads the database types of a registered model's table at
// start-up, when the table exists and a connection is free, so that its
// writes read nothing. Any failure leaves it to the first write.
func (p *Plugin) preloadTypes(db *gorm.DB, m *model, table string) {
	if m == nil || m.spec == nil || len(m.open) == 0 || db == nil || db.ConnPool == nil {
		return
	}
	if _, ok := p.cachedTypes(table); ok {
		return
	}
	cp := own(db.ConnPool)
	if g, ok := cp.(interface{ GetDBConn() (*sql.DB, error) }); ok {
		if sdb, err := g.GetDBConn(); err == nil && sdb != nil {
			// Never wait for a connection: the caller may hold the only one.
			if s := sdb.Stats(); s.MaxOpenConnections > 0 && s.InUse >= s.MaxOpenConnections {
				return
			}
		}
	}
	if _, inTx := cp.(gorm.TxCommitter); inTx {
		return // Capture called on a transaction's DB: read at the first write
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, _, _ = p.readTypes(ctx, cp, table)
}

// readTypes reads table's column types from the catalog, in one
// statement, and caches them; ok is false when the table does not exist
// (nothing is cached).
func (p *Plugin) readTypes(ctx context.Context, q gorm.ConnPool, table string) (tableTypes, bool, error) {
	q = own(q)
	var (
		rows *sql.Rows
		err  error
	)
	switch p.dialect {
	case envelope.Postgres:
		parts := strings.Split(table, ".")
		if len(parts) > 2 {
			return nil, false, nil // not a name to_regclass takes without an error
		}
		for i, s := range parts {
			parts[i] = `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
		}
		rows, err = q.QueryContext(ctx, `SELECT a.attname, CASE WHEN t.typtype = 'd' THEN format_type(t.typbasetype, t.typtypmod) ELSE format_type(a.atttypid, a.atttypmod) END
FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = to_regclass($1::text) AND a.attnum > 0 AND NOT a.attisdropped`, strings.Join(parts, "."))
	case envelope.SQLite:
		schemaName, name := "main", table
		if i := strings.LastIndexByte(table, '.'); i >= 0 {
			schemaName, name = table[:i], table[i+1:]
		}
		rows, err = q.QueryContext(ctx, `SELECT name, type FROM pragma_table_info(?, ?)`, name, schemaName)
	case envelope.MySQL:
		dbName, name := "", table
		if i := strings.LastIndexByte(table, '.'); i >= 0 {
			dbName, name = table[:i], table[i+1:]
		}
		// MariaDB alone runs the /*M! … */ comment: its JSON columns are
		// LONGTEXT with a json_valid CHECK. The names are literals there
		// (MySQL would not count placeholders inside it), and the lookup is
		// by constants: one correlated to the outer row made MariaDB open
		// every table of the server (170 ms against 1.5 ms).
		lit := func(s string) string { return "_utf8mb4 X'" + hex.EncodeToString([]byte(s)) + "'" }
		rows, err = q.QueryContext(ctx, "SELECT c.COLUMN_NAME, CASE WHEN /*M! CONCAT('json_valid(`', c.COLUMN_NAME, '`)') IN"+
			" (SELECT k.CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS k"+
			" WHERE k.CONSTRAINT_SCHEMA = COALESCE(NULLIF("+lit(dbName)+", ''), DATABASE()) AND k.TABLE_NAME = "+lit(name)+") OR */ FALSE"+
			" THEN 'json' ELSE c.COLUMN_TYPE END"+
			" FROM information_schema.COLUMNS c WHERE c.TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND c.TABLE_NAME = ?", dbName, name)
	default:
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("herald/gormcapture: read the column types of %s: %w", table, err)
	}
	defer rows.Close()
	types := tableTypes{}
	n := 0
	for rows.Next() {
		var col, typ sql.NullString
		if err := rows.Scan(&col, &typ); err != nil {
			return nil, false, fmt.Errorf("herald/gormcapture: read the column types of %s: %w", table, err)
		}
		n++
		if !pgform.Handles(typ.String) {
			continue
		}
		name := col.String
		if p.dialect != envelope.Postgres {
			name = strings.ToLower(name)
		}
		types[name] = typ.String
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("herald/gormcapture: read the column types of %s: %w", table, err)
	}
	if n == 0 {
		return nil, false, nil
	}
	v, _ := p.dbTypes.LoadOrStore(table, types)
	return v.(tableTypes), true, nil
}
