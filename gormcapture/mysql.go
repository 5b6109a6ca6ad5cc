package gormcapture

import (
	"context"
	"database/sql"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capture"
)

// MySQL and MariaDB (gorm.io/driver/mysql) have no RETURNING that both
// share (MariaDB has it for INSERT and DELETE, MySQL for nothing), so a
// write is captured around GORM's own statement instead of inside it:
//
//   - INSERT: GORM's gorm:create runs unchanged (its LAST_INSERT_ID or,
//     on MariaDB, RETURNING fill-back is GORM's own); the rows are then
//     read back by key with SELECT … FOR UPDATE (they are the transaction's
//     own, already locked). An upsert (ON DUPLICATE KEY UPDATE, which is
//     what GORM's mysql dialector makes of ON CONFLICT) or an INSERT IGNORE
//     first reads, locked, the rows holding any of the statement's unique
//     values (every unique index of the table, as the server sees it): a
//     row found there is updated (its values changed) or skipped (it did
//     not), any other is inserted. InnoDB's locking read of a missing
//     unique value takes a gap (next-key) lock at REPEATABLE READ, so no
//     other transaction can insert it before this write does; the
//     classification is then checked against the server's affected-rows
//     count (1 inserted, 2 updated, 0 unchanged — 1 with CLIENT_FOUND_ROWS)
//     when GORM ran the statement without RETURNING, and a mismatch fails
//     the write rather than emit wrong events.
//   - UPDATE, DELETE: the rows the statement's WHERE selects are read
//     first, FOR UPDATE in key order (the before images, and the keys);
//     the statement runs; an UPDATE's rows are read again by key (the after
//     images). The server's affected-rows count must agree (a DELETE
//     deletes exactly the locked rows; an UPDATE changes at most those),
//     else the write fails.

// insertMySQL captures a create on MySQL/MariaDB around GORM's own
// gorm:create (orig). lent: see insert.
func (p *Plugin) insertMySQL(db *gorm.DB, spec *capture.Spec, lent *schema.Schema, orig func(*gorm.DB)) error {
	st := db.Statement
	ctx := st.Context
	at := now()
	sch := st.Schema
	if lent != nil {
		sch = lent
	}
	ip := &mysqlInsertPool{ConnPool: st.ConnPool, st: st}
	var (
		oc        clause.OnConflict
		upsert    bool
		existing  []image
		uniq      [][]string
		strs      map[string]string
		allCols   []string
		readFirst bool
	)
	ip.before = func(ctx context.Context) error {
		if err := p.ensureSavepoint(ctx, writeCtxOf(st)); err != nil {
			return err
		}
		if c, ok := st.Clauses["ON CONFLICT"]; ok {
			oc, upsert = c.Expression.(clause.OnConflict)
		}
		ignore := false
		if ins, ok := st.Clauses["INSERT"].Expression.(clause.Insert); ok && strings.Contains(strings.ToUpper(ins.Modifier), "IGNORE") {
			ignore = true
		}
		readFirst = upsert || ignore
		if !readFirst {
			return nil
		}
		var err error
		if uniq, strs, err = p.mysqlUniqueKeys(ctx, own(ip.ConnPool), st.Table, sch); err != nil {
			return err
		}
		allCols = readableColumns(sch)
		values, _ := st.Clauses["VALUES"].Expression.(clause.Values)
		w, err := p.uniqueMatch(ctx, own(ip.ConnPool), st.Table, keyColumns(sch), uniq, strs, values, nil, nil)
		if err != nil {
			return err
		}
		existing, err = p.selectWhereExpr(ctx, db, own(ip.ConnPool), target{st.Table, st.TableExpr, sch}, allCols, w, true)
		return err
	}
	st.ConnPool = ip
	orig(db)
	st.ConnPool = ip.ConnPool
	if ip.err != nil {
		return ip.err
	}
	if db.Error != nil || !ip.hit {
		return nil
	}
	if lent != nil {
		st.Schema = lent
		defer func() { st.Schema = nil }()
	}
	values, _ := st.Clauses["VALUES"].Expression.(clause.Values)
	pk := keyColumns(sch)
	wantIns := spec.Captures(envelope.Inserted)
	doUpdate := upsert && !oc.DoNothing && (len(oc.DoUpdates) > 0 || oc.UpdateAll)
	wantUpd := doUpdate && spec.Captures(envelope.Updated)

	// The inserted rows' keys: from VALUES where it names them, else what
	// GORM filled into the caller's value (LAST_INSERT_ID or RETURNING).
	modelKeys := p.createdKeys(st, sch, values, pk)
	if err := p.lastInsertKeys(ctx, own(st.ConnPool), ip.res, sch, pk, modelKeys, !readFirst); err != nil {
		return err
	}
	var after []image
	if !readFirst {
		cols := slices.Clone(pk)
		if wantIns && spec.NeedsAfter(envelope.Inserted) {
			cols = union(cols, spec.Columns()...)
		}
		imgs, err := p.selectByKeys(ctx, db, own(st.ConnPool), target{st.Table, st.TableExpr, sch}, cols, pk, modelKeys, true)
		if err != nil {
			return err
		}
		after = orderByKeys(imgs, pk, modelKeys)
		if wantIns {
			cs := make([]envelope.Change, 0, len(after))
			for _, img := range after {
				var a image
				if spec.NeedsAfter(envelope.Inserted) {
					a = img
				}
				cs = append(cs, change(spec, st.Table, envelope.Inserted, pkOf(img, pk), nil, a, nil, at))
			}
			return p.emit(db, batch{spec, cs})
		}
		return nil
	}

	// Upsert / INSERT IGNORE: the rows holding the statement's unique
	// values now, and the rows found before (their keys, in case the
	// update moved a unique value).
	keys := make([][]any, 0, len(existing))
	for _, e := range existing {
		k := make([]any, len(pk))
		for i, c := range pk {
			k[i] = e[c]
		}
		keys = append(keys, k)
	}
	w, err := p.uniqueMatch(ctx, own(st.ConnPool), st.Table, pk, uniq, strs, values, pk, keys)
	if err != nil {
		return err
	}
	imgs, err := p.selectWhereExpr(ctx, db, own(st.ConnPool), target{st.Table, st.TableExpr, sch}, allCols, w, true)
	if err != nil {
		return err
	}
	before := make(map[string]image, len(existing))
	for _, e := range existing {
		before[keyOf(e, pk)] = e
	}
	seen := map[string]bool{}
	for _, img := range imgs {
		seen[keyOf(img, pk)] = true
	}
	// Rows of VALUES with no unique value (an auto-increment key alone)
	// cannot conflict: inserted, under the key GORM filled in.
	var extra [][]any
	for i, row := range values.Values {
		if rowHasUnique(uniq, values.Columns, row) || i >= len(modelKeys) || modelKeys[i] == nil { // nil: unknown, no event
			continue
		}
		img := image{}
		for j, c := range pk {
			img[c] = modelKeys[i][j]
		}
		if !seen[keyOf(img, pk)] {
			extra = append(extra, modelKeys[i])
		}
	}
	if len(extra) > 0 {
		more, err := p.selectByKeys(ctx, db, own(st.ConnPool), target{st.Table, st.TableExpr, sch}, allCols, pk, extra, true)
		if err != nil {
			return err
		}
		imgs = append(imgs, more...)
	}
	imgs = orderByValues(imgs, uniq, values, pk)
	var changed []string
	if wantUpd {
		changed = upsertChanged(st, oc)
	}
	var ins, upd, same int64
	var cs []envelope.Change
	for _, img := range imgs {
		key := pkOf(img, pk)
		b := before[keyOf(img, pk)]
		switch {
		case b == nil:
			ins++
			if wantIns {
				var a image
				if spec.NeedsAfter(envelope.Inserted) {
					a = project(img, spec, pk)
				}
				cs = append(cs, change(spec, st.Table, envelope.Inserted, key, nil, a, nil, at))
			}
		case sameImage(b, img, allCols):
			same++
		default:
			upd++
			if wantUpd {
				var a, bb image
				if spec.NeedsAfter(envelope.Updated) {
					a = project(img, spec, pk)
				}
				if spec.NeedsBefore(envelope.Updated) {
					bb = project(b, spec, pk)
				}
				cs = append(cs, change(spec, st.Table, envelope.Updated, key, bb, a, changed, at))
			}
		}
	}
	if ip.res != nil {
		if n, err := ip.res.RowsAffected(); err == nil && n != ins+2*upd && n != ins+2*upd+same {
			return &envelope.Error{Kind: envelope.ErrUnsupported, Where: sch.Name + " upsert",
				Msg: fmt.Sprintf("the server reports %d rows affected, but the locked reads around the statement saw %d inserted, %d updated and %d unchanged rows "+
					"(a concurrent writer at READ COMMITTED, which takes no gap locks?): the write is refused rather than captured wrong; run it at REPEATABLE READ", n, ins, upd, same)}
		}
	}
	return p.emit(db, batch{spec, cs})
}

// lastInsertKeys fills the keys createdKeys could not tell (a key field
// GORM does not read back, `->:false`) from the statement's
// LAST_INSERT_ID (the result's, or SELECT LAST_INSERT_ID() on the write's
// connection when GORM read MariaDB's RETURNING itself): the first
// generated value of a multi-row INSERT, the
// others following it by the auto-increment step (1; GORM assumes the
// same). strict: a key still unknown is an error (a plain INSERT, whose
// every row must get its event).
func (p *Plugin) lastInsertKeys(ctx context.Context, q gorm.ConnPool, res sql.Result, sch *schema.Schema, pk []string, keys [][]any, strict bool) error {
	missing := 0
	for _, k := range keys {
		if k == nil {
			missing++
		}
	}
	if missing == 0 {
		return nil
	}
	if len(pk) == 1 {
		var id int64
		if res != nil {
			id, _ = res.LastInsertId()
		} else if err := q.QueryRowContext(ctx, "SELECT LAST_INSERT_ID()").Scan(&id); err != nil {
			// GORM ran it with MariaDB's RETURNING, read by GORM: the
			// connection's LAST_INSERT_ID() is the statement's all the same.
			return fmt.Errorf("herald/gormcapture: read LAST_INSERT_ID(): %w", err)
		}
		if id > 0 {
			for i, k := range keys {
				if k == nil {
					keys[i] = []any{id}
					id++
				}
			}
			return nil
		}
	}
	if !strict {
		return nil
	}
	return &envelope.Error{Kind: envelope.ErrUnsupported, Where: sch.Name + " create",
		Msg: fmt.Sprintf("cannot tell the primary key of %d inserted rows (neither in VALUES, nor filled into the model, nor LAST_INSERT_ID): give the key values", missing)}
}

// mysqlInsertPool runs a hook right before GORM's INSERT reaches the
// server (when its VALUES are built) and keeps its result.
type mysqlInsertPool struct {
	gorm.ConnPool
	st     *gorm.Statement
	before func(context.Context) error
	hit    bool
	err    error
	res    sql.Result
}

func (m *mysqlInsertPool) isStatement(q string) bool {
	return !m.hit && q == m.st.SQL.String()
}

func (m *mysqlInsertPool) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if !m.isStatement(q) {
		return m.ConnPool.ExecContext(ctx, q, args...)
	}
	m.hit = true
	if err := m.before(ctx); err != nil {
		m.err = err
		return nil, err
	}
	res, err := m.ConnPool.ExecContext(ctx, q, args...)
	m.res = res
	return res, err
}

func (m *mysqlInsertPool) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if !m.isStatement(q) {
		return m.ConnPool.QueryContext(ctx, q, args...)
	}
	m.hit = true
	if err := m.before(ctx); err != nil {
		m.err = err
		return nil, err
	}
	return m.ConnPool.QueryContext(ctx, q, args...)
}

// createdKeys returns each VALUES row's primary key: from VALUES when it
// holds every key column as a value, else from the caller's value as
// GORM's create left it. nil entries: unknown.
func (p *Plugin) createdKeys(st *gorm.Statement, sch *schema.Schema, values clause.Values, pk []string) [][]any {
	idx := make([]int, len(pk))
	inValues := true
	for i, c := range pk {
		idx[i] = slices.IndexFunc(values.Columns, func(v clause.Column) bool { return strings.EqualFold(v.Name, c) })
		if idx[i] < 0 {
			inValues = false
		}
	}
	var maps []map[string]any
	switch d := st.Dest.(type) {
	case map[string]any:
		maps = []map[string]any{d}
	case *map[string]any:
		maps = []map[string]any{*d}
	case []map[string]any:
		maps = d
	case *[]map[string]any:
		maps = *d
	}
	var elems []reflect.Value
	if maps == nil {
		rv := reflect.Indirect(st.ReflectValue)
		switch rv.Kind() {
		case reflect.Struct:
			elems = []reflect.Value{rv}
		case reflect.Slice, reflect.Array:
			for i := range rv.Len() {
				e := rv.Index(i)
				for e.Kind() == reflect.Pointer || e.Kind() == reflect.Interface {
					if e.IsNil() {
						break
					}
					e = e.Elem()
				}
				elems = append(elems, e)
			}
		}
	}
	out := make([][]any, len(values.Values))
	for i, row := range values.Values {
		k := make([]any, len(pk))
		ok := inValues
		if ok {
			for j, x := range idx {
				v := row[x]
				if _, expr := v.(clause.Expression); expr || v == nil {
					ok = false
					break
				}
				k[j] = v
			}
		}
		if !ok {
			ok = true
			for j, c := range pk {
				var v any
				switch {
				case maps != nil && i < len(maps) && maps[i] != nil:
					v = maps[i][c]
					if v == nil && len(pk) == 1 {
						v = maps[i]["@id"]
					}
					if v == nil && sch != nil {
						if f := sch.FieldsByDBName[c]; f != nil {
							v = maps[i][f.Name]
						}
					}
				case i < len(elems) && elems[i].Kind() == reflect.Struct && sch != nil:
					if f := sch.FieldsByDBName[c]; f != nil {
						var zero bool
						v, zero = f.ValueOf(st.Context, elems[i])
						if zero {
							v = nil
						}
					}
				}
				if v == nil {
					ok = false
					break
				}
				k[j] = v
			}
		}
		if ok {
			out[i] = k
		}
	}
	return out
}

// mysqlUniqueKeys returns the table's unique keys as the server has them
// (PRIMARY first), the column names as the model spells them, and the
// JSON_TABLE types of their string columns (mysqlStringType, by
// lower-cased name), read with them.
func (p *Plugin) mysqlUniqueKeys(ctx context.Context, q gorm.ConnPool, table string, sch *schema.Schema) ([][]string, map[string]string, error) {
	dbName, name := "", table
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		dbName, name = table[:i], table[i+1:]
	}
	text := `SELECT s.INDEX_NAME, s.COLUMN_NAME, c.CHARACTER_SET_NAME, c.COLLATION_NAME
FROM information_schema.STATISTICS s JOIN information_schema.COLUMNS c
ON c.TABLE_SCHEMA = s.TABLE_SCHEMA AND c.TABLE_NAME = s.TABLE_NAME AND c.COLUMN_NAME = s.COLUMN_NAME
WHERE s.TABLE_SCHEMA = COALESCE(NULLIF(?, ''), DATABASE()) AND s.TABLE_NAME = ? AND s.NON_UNIQUE = 0
ORDER BY s.INDEX_NAME = 'PRIMARY' DESC, s.INDEX_NAME, s.SEQ_IN_INDEX`
	rows, err := q.QueryContext(ctx, text, dbName, name)
	if err != nil {
		return nil, nil, fmt.Errorf("herald/gormcapture: read the unique keys of %s: %w", table, err)
	}
	defer rows.Close()
	var (
		out  [][]string
		last string
	)
	strs := map[string]string{}
	for rows.Next() {
		var idx, col string
		var cs, coll sql.NullString
		if err := rows.Scan(&idx, &col, &cs, &coll); err != nil {
			return nil, nil, fmt.Errorf("herald/gormcapture: read the unique keys of %s: %w", table, err)
		}
		if cs.Valid && coll.Valid {
			strs[strings.ToLower(col)] = mysqlStringType(cs.String, coll.String)
		}
		for _, n := range sch.DBNames {
			if strings.EqualFold(n, col) {
				col = n
			}
		}
		if idx != last || len(out) == 0 {
			out = append(out, nil)
			last = idx
		}
		out[len(out)-1] = append(out[len(out)-1], col)
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("herald/gormcapture: read the unique keys of %s: %w", table, err)
	}
	if len(out) == 0 {
		out = [][]string{keyColumns(sch)}
	}
	return out, strs, nil
}

// uniqueTuples returns, per unique key, the literal non-NULL values of it
// that VALUES holds (a NULL never conflicts; an expression cannot be read).
func uniqueTuples(uniq [][]string, values clause.Values) [][][]any {
	out := make([][][]any, len(uniq))
	for u, cols := range uniq {
		idx := make([]int, len(cols))
		ok := true
		for i, c := range cols {
			idx[i] = slices.IndexFunc(values.Columns, func(v clause.Column) bool { return strings.EqualFold(v.Name, c) })
			if idx[i] < 0 {
				ok = false
			}
		}
		if !ok {
			continue
		}
	rows:
		for _, row := range values.Values {
			k := make([]any, len(cols))
			for i, x := range idx {
				v := row[x]
				if _, expr := v.(clause.Expression); expr || isNullValue(v) {
					continue rows
				}
				k[i] = v
			}
			out[u] = append(out[u], k)
		}
	}
	return out
}

func rowHasUnique(uniq [][]string, cols []clause.Column, row []any) bool {
	t := uniqueTuples(uniq, clause.Values{Columns: cols, Values: [][]any{row}})
	for _, u := range t {
		if len(u) > 0 {
			return true
		}
	}
	return false
}

func isNullValue(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	return rv.Kind() == reflect.Pointer && rv.IsNil()
}

// uniqueMatch is "the row of table holds one of VALUES' unique values, or
// one of keys" (pk): one semi-join on the table's key (key) over the
// UNION of the sets, each one JSON parameter (mysqlKeysOr; strs: the
// string columns' types); nothing matches nothing.
func (p *Plugin) uniqueMatch(ctx context.Context, q gorm.ConnPool, table string, key []string, uniq [][]string, strs map[string]string, values clause.Values, pk []string, keys [][]any) (clause.Expression, error) {
	var sets []keySet
	for u, tuples := range uniqueTuples(uniq, values) {
		sets = append(sets, keySet{uniq[u], tuples})
	}
	sets = append(sets, keySet{pk, keys})
	return p.mysqlKeysOr(ctx, q, table, key, sets, strs)
}

// selectWhereExpr reads the rows of t matching w, ORDER BY its key,
// locked when lock (the key order is the lock order, as selectWhere's).
func (p *Plugin) selectWhereExpr(ctx context.Context, db *gorm.DB, q gorm.ConnPool, t target, cols []string, w clause.Expression, lock bool) ([]image, error) {
	st := &gorm.Statement{DB: db, Table: t.table, TableExpr: t.expr, Schema: t.sch, Context: ctx, Clauses: map[string]clause.Clause{}}
	sc := make([]clause.Column, len(cols))
	for i, c := range cols {
		sc[i] = clause.Column{Table: clause.CurrentTable, Name: c}
	}
	st.AddClause(clause.Select{Columns: sc})
	st.AddClause(clause.From{})
	st.AddClause(clause.Where{Exprs: []clause.Expression{w}})
	ob := clause.OrderBy{}
	for _, c := range keyColumns(t.sch) {
		ob.Columns = append(ob.Columns, clause.OrderByColumn{Column: clause.Column{Table: clause.CurrentTable, Name: c}})
	}
	st.AddClause(ob)
	if lock {
		st.AddClause(clause.Locking{Strength: clause.LockingStrengthUpdate})
	}
	st.Build("SELECT", "FROM", "WHERE", "ORDER BY", "FOR")
	if len(st.Vars) > 60000 {
		return nil, &envelope.Error{Kind: envelope.ErrUnsupported, Where: t.sch.Name + " upsert",
			Msg: fmt.Sprintf("an upsert of %d bind values of unique keys: split it (CreateInBatches)", len(st.Vars))}
	}
	rows, err := q.QueryContext(ctx, st.SQL.String(), st.Vars...)
	if err != nil {
		return nil, fmt.Errorf("herald/gormcapture: read %s rows: %w", t.table, err)
	}
	imgs, _, err := newScanner(t.sch, cols).scan(ctx, rows, -1)
	if err != nil {
		return nil, fmt.Errorf("herald/gormcapture: read %s rows: %w", t.table, err)
	}
	return imgs, nil
}

// readableColumns are every column of sch an image can hold.
func readableColumns(sch *schema.Schema) []string {
	cols := slices.Clone(keyColumns(sch))
	for _, f := range sch.Fields {
		if f.DBName != "" && f.Readable {
			cols = union(cols, f.DBName)
		}
	}
	return cols
}

// project keeps the key and the spec's payload columns of img.
func project(img image, spec *capture.Spec, pk []string) image {
	out := make(image, len(pk)+len(spec.Columns()))
	for _, c := range pk {
		out[c] = img[c]
	}
	for _, c := range spec.Columns() {
		if v, ok := img[c]; ok {
			out[c] = v
		}
	}
	return out
}

// sameImage reports whether a and b hold the same values over cols.
func sameImage(a, b image, cols []string) bool {
	for _, c := range cols {
		if !reflect.DeepEqual(a[c], b[c]) {
			return false
		}
	}
	return true
}

// orderByKeys puts imgs in the order of keys (rows not found are left
// out; rows not asked for go last).
func orderByKeys(imgs []image, pk []string, keys [][]any) []image {
	pos := make(map[string]int, len(keys))
	for i, k := range keys {
		if k == nil {
			continue
		}
		img := image{}
		for j, c := range pk {
			img[c] = k[j]
		}
		if _, ok := pos[keyOf(img, pk)]; !ok {
			pos[keyOf(img, pk)] = i
		}
	}
	at := func(img image) int {
		if i, ok := pos[keyOf(img, pk)]; ok {
			return i
		}
		return len(keys)
	}
	slices.SortStableFunc(imgs, func(a, b image) int { return at(a) - at(b) })
	return imgs
}

// orderByValues puts an upsert's rows in VALUES order (the order
// PostgreSQL's RETURNING gives): each row at the first VALUES row sharing
// one of its unique values, rows matching none last in key order.
func orderByValues(imgs []image, uniq [][]string, values clause.Values, pk []string) []image {
	pos := map[string]int{}
	for u, cols := range uniq {
		one := [][]string{cols}
		for i, row := range values.Values {
			t := uniqueTuples(one, clause.Values{Columns: values.Columns, Values: [][]any{row}})
			if len(t[0]) == 0 {
				continue
			}
			img := image{}
			for j, c := range cols {
				img[c] = t[0][0][j]
			}
			k := fmt.Sprint(u) + "\x01" + keyOf(img, cols)
			if _, ok := pos[k]; !ok {
				pos[k] = i
			}
		}
	}
	at := func(img image) int {
		best := len(values.Values)
		for u, cols := range uniq {
			if i, ok := pos[fmt.Sprint(u)+"\x01"+keyOf(img, cols)]; ok && i < best {
				best = i
			}
		}
		return best
	}
	slices.SortStableFunc(imgs, func(a, b image) int {
		if d := at(a) - at(b); d != 0 {
			return d
		}
		return comparePK(pkOf(a, pk), pkOf(b, pk))
	})
	return imgs
}

// runMySQL is run on MySQL/MariaDB: the rows are read (locked) before the
// statement, and an UPDATE's again by key after it.
func (c *capturePool) runMySQL(ctx context.Context, q string, args []any) (int64, error) {
	if err := c.prepare(ctx, q); err != nil {
		return 0, err
	}
	st := c.db.Statement
	if c.spec == nil {
		res, err := c.ConnPool.ExecContext(ctx, q, args...)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	}
	sch := st.Schema
	pk := keyColumns(sch)
	var cols []string
	if c.update {
		cols = payloadColumns(sch, c.spec, c.spec.NeedsBefore(envelope.Updated))
	} else {
		cols = payloadColumns(sch, c.spec, c.spec.NeedsBefore(envelope.Deleted))
	}
	if err := c.readBefore(ctx, cols); err != nil {
		return 0, err
	}
	res, err := c.ConnPool.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, err
	}
	if (!c.update && n != int64(len(c.before))) || n > int64(len(c.before)) {
		return 0, &envelope.Error{Kind: envelope.ErrUnsupported, Where: c.spec.Label,
			Msg: fmt.Sprintf("the server reports %d rows affected by the statement, but its locked read found %d rows "+
				"(rows that appeared between the read and the write, at READ COMMITTED?): the write is refused rather than captured wrong", n, len(c.before))}
	}
	if !c.update {
		return n, nil
	}
	// The rows' keys after the statement: the key columns it sets to a
	// value, the old values otherwise.
	set, _ := st.Clauses["SET"].Expression.(clause.Set)
	moved := map[string]any{}
	for _, a := range set {
		name := a.Column.Name
		if f := sch.LookUpField(name); f != nil && f.DBName != "" {
			name = f.DBName
		}
		if slices.Contains(pk, name) {
			if _, expr := a.Value.(clause.Expression); expr {
				return 0, &envelope.Error{Kind: envelope.ErrUnsupported, Where: c.spec.Label + " update",
					Msg: fmt.Sprintf("an UPDATE that sets key column %s to an expression cannot be captured on MySQL (no RETURNING): set it to a value", name)}
			}
			moved[name] = a.Value
		}
	}
	keys := make([][]any, len(c.before))
	for i, b := range c.before {
		keys[i] = make([]any, len(pk))
		for j, k := range pk {
			if v, ok := moved[k]; ok {
				keys[i][j] = v
			} else {
				keys[i][j] = b[k]
			}
		}
	}
	after := payloadColumns(sch, c.spec, c.spec.NeedsAfter(envelope.Updated))
	imgs, err := c.p.selectByKeys(ctx, c.db, own(c.ConnPool), target{st.Table, st.TableExpr, sch}, after, pk, keys, false)
	if err != nil {
		return 0, err
	}
	if len(imgs) != len(c.before) {
		return 0, &envelope.Error{Kind: envelope.ErrUnsupported, Where: c.spec.Label + " update",
			Msg: fmt.Sprintf("read %d rows back by key after the UPDATE, %d before it", len(imgs), len(c.before))}
	}
	c.after = orderByKeys(imgs, pk, keys)
	c.paired = true
	return n, nil
}
