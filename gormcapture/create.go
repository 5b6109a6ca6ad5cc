package gormcapture

import (
	"context"
	"fmt"
	"reflect"
	"slices"

	"gorm.io/gorm"
	"gorm.io/gorm/callbacks"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capture"
)

// create replaces gorm:create for captured models. gorm:create reads
// RETURNING itself, so a wrapper cannot see which rows were really
// inserted; under ON CONFLICT DO NOTHING (every association save and
// join-row insert uses it) the caller's values do not tell either. This
// executor builds the INSERT exactly as GORM does, adds a RETURNING of
// what the events need (and, for upserts on PostgreSQL, "(xmax = 0)"),
// and copies back into the caller's value only what GORM itself would:
// the fields with database defaults (and any RETURNING the caller asked
// for). Uncaptured models run GORM's own callback.
func (p *Plugin) create(orig func(*gorm.DB)) func(*gorm.DB) {
	return func(db *gorm.DB) {
		if db.Error != nil {
			return
		}
		st := db.Statement
		sch, lent := st.Schema, (*schema.Schema)(nil)
		if sch == nil {
			sch = p.tableModel(st)
			lent = sch
		}
		if sch == nil || db.DryRun || st.SQL.Len() > 0 {
			orig(db)
			return
		}
		m := p.modelFor(sch)
		if m.spec == nil {
			orig(db)
			return
		}
		_, upsert := st.Clauses["ON CONFLICT"]
		if !m.spec.Captures(envelope.Inserted) && (!upsert || !m.spec.Captures(envelope.Updated)) {
			orig(db)
			return
		}
		p.inOwnTx(db, func() {
			spec, err := p.typedSpec(st.Context, st, st.ConnPool, m, st.Table)
			if err != nil {
				fail(db, err)
				return
			}
			if p.dialect == envelope.MySQL {
				if err := p.insertMySQL(db, spec, lent, orig); err != nil {
					fail(db, err)
				}
				return
			}
			if err := p.insert(db, spec, lent); err != nil {
				fail(db, err)
			}
		})
	}
}

// insert captures an INSERT. lent, when not nil, is the schema of the
// captured model a write without one (db.Table(name).Create(map)) writes
// as: GORM's VALUES are built without it, as without the plugin, nothing
// is filled back into the caller's maps but a RETURNING the caller asked
// for, and the statement holds it only while the rows are captured.
func (p *Plugin) insert(db *gorm.DB, spec *capture.Spec, lent *schema.Schema) error {
	st := db.Statement
	sch := st.Schema
	ctx := st.Context
	wc := writeCtxOf(st)
	at := now()

	if lent == nil && !st.Unscoped {
		for _, c := range sch.CreateClauses {
			st.AddClause(c)
		}
	}
	st.AddClauseIfNotExists(clause.Insert{})
	st.AddClause(callbacks.ConvertToCreateValues(st))
	if db.Error != nil {
		return nil // GORM's own error (an empty slice, invalid data) is already on db
	}
	if lent != nil {
		sch, st.Schema = lent, lent
		defer func() { st.Schema = nil }()
	}
	values, _ := st.Clauses["VALUES"].Expression.(clause.Values)
	oc, upsert := clause.OnConflict{}, false
	if c, ok := st.Clauses["ON CONFLICT"]; ok {
		oc, upsert = c.Expression.(clause.OnConflict)
	}
	doUpdate := upsert && !oc.DoNothing && len(oc.DoUpdates) > 0
	wantIns := spec.Captures(envelope.Inserted)
	wantUpd := doUpdate && spec.Captures(envelope.Updated)

	// What to read back: the key, the fields GORM fills in, what the events
	// hold, and the conflict target (to tell updates from inserts).
	pk := keyColumns(sch)
	var fill []string
	for _, f := range sch.FieldsWithDefaultDBValue {
		if f.Readable && lent == nil {
			fill = union(fill, f.DBName)
		}
	}
	if r, ok := st.Clauses["RETURNING"]; ok {
		if rr, _ := r.Expression.(clause.Returning); len(rr.Columns) == 0 || rr.Columns[0].Name == "*" {
			fill = union(fill, sch.DBNames...)
		} else {
			for _, c := range rr.Columns {
				if f := sch.LookUpField(c.Name); f != nil && f.DBName != "" {
					fill = union(fill, f.DBName)
				}
			}
		}
	}
	if !upsert && len(values.Values) == 1 {
		return p.insertSingle(db, spec, values, fill, at, lent)
	}
	ret := union(slices.Clone(pk), fill...)
	if (wantIns && spec.NeedsAfter(envelope.Inserted)) || (wantUpd && spec.NeedsAfter(envelope.Updated)) {
		ret = union(ret, spec.Columns()...)
	}
	var conflictCols []string
	for _, c := range oc.Columns {
		if f := sch.LookUpField(c.Name); f != nil && f.DBName != "" {
			conflictCols = append(conflictCols, f.DBName)
		} else {
			conflictCols = append(conflictCols, c.Name)
		}
	}

	if err := p.ensureSavepoint(ctx, wc); err != nil {
		return err
	}

	// Upserts: which returned rows existed before? PostgreSQL says so in
	// the insert's own RETURNING ((xmax = 0) is true for a new row, and
	// skipped rows are not returned at all); SQLite has no such column, so
	// the conflicting keys are read first, in the same transaction. Before
	// images (BeforeAndAfter) are read first, locked, on both.
	var existing map[string]image
	readFirst := doUpdate && (p.dialect == envelope.SQLite || (wantUpd && spec.NeedsBefore(envelope.Updated)))
	if readFirst && oc.OnConstraint != "" {
		// The conflict target is the constraint, whatever Columns holds
		// (UpdateAll fills in the primary key): read its columns.
		cols, err := p.constraintColumns(ctx, st, oc.OnConstraint)
		if err != nil {
			return err
		}
		conflictCols = cols
	}
	ret = union(ret, conflictCols...)
	if readFirst {
		if len(conflictCols) == 0 {
			return &envelope.Error{Kind: envelope.ErrUnsupported, Where: spec.Label + " upsert",
				Msg: "an ON CONFLICT ... DO UPDATE without a conflict target cannot be captured here: name the conflict columns in clause.OnConflict.Columns"}
		}
		if err := p.writeLock(ctx, st, st.ConnPool); err != nil {
			return err
		}
		keys := literalKeys(conflictKeys(values, conflictCols))
		cols := union(slices.Clone(conflictCols), pk...)
		if wantUpd && spec.NeedsBefore(envelope.Updated) {
			cols = union(cols, spec.Columns()...)
		}
		imgs, err := p.selectByKeys(ctx, db, own(st.ConnPool), target{st.Table, st.TableExpr, sch}, cols, conflictCols, keys, true)
		if err != nil {
			return err
		}
		existing = make(map[string]image, len(imgs))
		for _, img := range imgs {
			existing[keyOf(img, conflictCols)] = img
		}
	}

	flag := -1
	cols := ret
	p.build(st, ret, doUpdate && p.dialect == envelope.Postgres)
	if doUpdate && p.dialect == envelope.Postgres {
		flag = len(ret)
		cols = append(slices.Clone(ret), "")
	}

	rows, err := p.query(ctx, st.ConnPool, st.SQL.String(), st.Vars)
	if err != nil {
		return err
	}
	imgs, flags, err := newScanner(sch, cols).scan(ctx, rows, flag)
	if err != nil {
		return err
	}
	if flag >= 0 {
		for _, img := range imgs {
			delete(img, "")
		}
	}

	p.fillBack(ctx, st, imgs, fill, upsert, values, conflictCols)
	p.insertIDs(st, imgs, lent)
	db.RowsAffected = int64(len(imgs))
	if st.Result != nil {
		st.Result.RowsAffected = db.RowsAffected
	}

	var changed []string
	if wantUpd {
		changed = upsertChanged(st, oc)
	}
	var cs []envelope.Change
	for i, img := range imgs {
		inserted := true
		var before image
		switch {
		case !doUpdate:
		case flag >= 0:
			inserted = flags[i]
			if !inserted && existing != nil {
				before = existing[keyOf(img, conflictCols)]
			}
		default:
			before = existing[keyOf(img, conflictCols)]
			inserted = before == nil
		}
		key := pkOf(img, pk)
		switch {
		case inserted && wantIns:
			var after image
			if spec.NeedsAfter(envelope.Inserted) {
				after = img
			}
			cs = append(cs, change(spec, st.Table, envelope.Inserted, key, nil, after, nil, at))
		case !inserted && wantUpd:
			var after, b image
			if spec.NeedsAfter(envelope.Updated) {
				after = img
			}
			if spec.NeedsBefore(envelope.Updated) {
				b = before
			}
			cs = append(cs, change(spec, st.Table, envelope.Updated, key, b, after, changed, at))
		}
	}
	return p.emit(db, batch{spec, cs})
}

// conflictKeys returns the conflict-target values of each inserted row;
// a row lacking one (a database default) cannot conflict on it.
func conflictKeys(values clause.Values, cols []string) [][]any {
	idx := make([]int, len(cols))
	for i, c := range cols {
		idx[i] = -1
		for j, vc := range values.Columns {
			if vc.Name == c {
				idx[i] = j
			}
		}
		if idx[i] < 0 {
			return nil
		}
	}
	keys := make([][]any, 0, len(values.Values))
	for _, row := range values.Values {
		k := make([]any, len(cols))
		for i, j := range idx {
			k[i] = row[j]
		}
		keys = append(keys, k)
	}
	return keys
}

// constraintColumns returns the columns of the unique or primary-key
// constraint an upsert names with OnConflict.OnConstraint (PostgreSQL; in
// SQLite an ON CONFLICT names no constraint).
func (p *Plugin) constraintColumns(ctx context.Context, st *gorm.Statement, name string) ([]string, error) {
	unsupported := func(msg string) error {
		return &envelope.Error{Kind: envelope.ErrUnsupported, Where: st.Schema.Name + " upsert", Msg: msg}
	}
	if p.dialect != envelope.Postgres {
		return nil, unsupported(fmt.Sprintf("ON CONFLICT ON CONSTRAINT %s: %s has no named conflict targets; name the conflict columns in clause.OnConflict.Columns", name, p.dialect))
	}
	table, _ := tableSQL(st)
	rows, err := own(st.ConnPool).QueryContext(ctx, `SELECT a.attname FROM pg_constraint c
CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
WHERE c.conname = $1 AND c.conrelid = to_regclass($2) AND c.contype IN ('p','u')
ORDER BY k.ord`, name, table)
	if err != nil {
		return nil, fmt.Errorf("herald/gormcapture: read the columns of constraint %s: %w", name, err)
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, fmt.Errorf("herald/gormcapture: read the columns of constraint %s: %w", name, err)
		}
		if st.Schema.FieldsByDBName[c] == nil {
			return nil, unsupported(fmt.Sprintf("ON CONFLICT ON CONSTRAINT %s: column %s is not a field of the model", name, c))
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("herald/gormcapture: read the columns of constraint %s: %w", name, err)
	}
	if len(cols) == 0 {
		return nil, unsupported(fmt.Sprintf("ON CONFLICT ON CONSTRAINT %s: no unique or primary-key constraint of that name on table %s", name, table))
	}
	return cols, nil
}

// literalKeys drops the keys holding a SQL expression — the DEFAULT
// GORM's PostgreSQL dialector puts in place of a zero key when a batch
// mixes rows with and without keys (association saves): such a row gets
// its key from the database, and a read of the conflicting rows cannot
// name it.
func literalKeys(keys [][]any) [][]any {
	out := keys[:0:0]
next:
	for _, k := range keys {
		for _, v := range k {
			if _, ok := v.(clause.Expression); ok {
				continue next
			}
		}
		out = append(out, k)
	}
	return out
}

// upsertChanged names the columns an upsert's DO UPDATE sets, less those
// GORM adds itself (autoUpdateTime).
func upsertChanged(st *gorm.Statement, oc clause.OnConflict) []string {
	out := []string{}
	for _, a := range oc.DoUpdates {
		name := a.Column.Name
		if f := st.Schema.LookUpField(name); f != nil {
			if f.AutoUpdateTime > 0 || isVersionField(f) {
				continue
			}
			if f.DBName != "" {
				name = f.DBName
			}
		}
		out = union(out, name)
	}
	return inTableOrder(st.Schema, out)
}

// fillBack copies what GORM would have scanned from its own RETURNING into
// the caller's value: the fields with database defaults (and any columns
// the caller asked RETURNING for), never the rest, so the caller's struct
// or slice looks exactly as without the plugin.
func (p *Plugin) fillBack(ctx context.Context, st *gorm.Statement, imgs []image, fill []string, upsert bool, values clause.Values, conflictCols []string) {
	if len(fill) == 0 || len(imgs) == 0 {
		return
	}
	sch := st.Schema
	switch d := st.Dest.(type) {
	case map[string]any:
		copyMap(d, imgs[0], fill)
		return
	case *map[string]any:
		if *d == nil {
			*d = map[string]any{}
		}
		copyMap(*d, imgs[0], fill)
		return
	case []map[string]any:
		for i := 0; i < len(d) && i < len(imgs); i++ {
			copyMap(d[i], imgs[i], fill)
		}
		return
	case *[]map[string]any:
		// gorm.Scan appends the returned rows to a *[]map as new maps.
		for _, img := range imgs {
			m := make(map[string]any, len(fill))
			copyMap(m, img, fill)
			*d = append(*d, m)
		}
		return
	}
	rv := st.ReflectValue
	switch rv.Kind() {
	case reflect.Struct:
		setFields(ctx, sch, rv, imgs[0], fill)
	case reflect.Slice, reflect.Array:
		n := rv.Len()
		elems := make([]reflect.Value, n)
		for i := range n {
			e := rv.Index(i)
			for e.Kind() == reflect.Pointer || e.Kind() == reflect.Interface {
				if e.IsNil() {
					break
				}
				e = e.Elem()
			}
			if e.Kind() == reflect.Struct {
				elems[i] = e
			}
		}
		if !upsert {
			// RETURNING lists the rows of INSERT ... VALUES in VALUES order.
			for i := 0; i < n && i < len(imgs); i++ {
				if elems[i].IsValid() {
					setFields(ctx, sch, elems[i], imgs[i], fill)
				}
			}
			return
		}
		// An upsert returns the inserted and updated rows, not the skipped
		// ones: match each to its element by primary key, else by conflict
		// target, else take the next element without a key.
		pk := keyColumns(sch)
		byPK := map[string]int{}
		hasPK := make([]bool, n)
		for i, e := range elems {
			if !e.IsValid() {
				continue
			}
			img := image{}
			full := len(pk) > 0
			for _, c := range pk {
				f := sch.FieldsByDBName[c]
				if f == nil {
					full = false
					break
				}
				v, zero := f.ValueOf(ctx, e)
				if zero {
					full = false
				}
				img[f.DBName] = v
			}
			if full {
				hasPK[i] = true
				byPK[keyOf(img, pk)] = i
			}
		}
		byConflict := map[string]int{}
		if keys := conflictKeys(values, conflictCols); len(keys) == n {
			for i, k := range keys {
				img := image{}
				for j, c := range conflictCols {
					img[c] = k[j]
				}
				byConflict[keyOf(img, conflictCols)] = i
			}
		}
		used := make([]bool, n)
		next := 0
		for _, img := range imgs {
			idx := -1
			if i, ok := byPK[keyOf(img, pk)]; ok && !used[i] {
				idx = i
			} else if i, ok := byConflict[keyOf(img, conflictCols)]; ok && len(conflictCols) > 0 && !used[i] {
				idx = i
			} else {
				for next < n && (used[next] || hasPK[next] || !elems[next].IsValid()) {
					next++
				}
				if next < n {
					idx = next
				}
			}
			if idx >= 0 {
				used[idx] = true
				setFields(ctx, sch, elems[idx], img, fill)
			}
		}
	}
}

// insertIDs gives the caller's maps of a write without a model
// (db.Table(name).Create(map)) what GORM gives them without the plugin:
// on SQLite, "@id" set to the row's generated integer key (GORM's
// LastInsertId); on PostgreSQL nothing.
func (p *Plugin) insertIDs(st *gorm.Statement, imgs []image, lent *schema.Schema) {
	if lent == nil || p.dialect != envelope.SQLite || len(imgs) == 0 {
		return
	}
	pk := keyColumns(lent)
	if len(pk) != 1 {
		return
	}
	set := func(m map[string]any, img image) {
		if id, ok := asInt(img[pk[0]]); ok && m != nil && id > 0 {
			m["@id"] = id
		}
	}
	switch d := st.Dest.(type) {
	case map[string]any:
		set(d, imgs[0])
	case *map[string]any:
		if *d != nil {
			set(*d, imgs[0])
		}
	case []map[string]any:
		for i := 0; i < len(d) && i < len(imgs); i++ {
			set(d[i], imgs[i])
		}
	case *[]map[string]any:
		for i := 0; i < len(*d) && i < len(imgs); i++ {
			set((*d)[i], imgs[i])
		}
	}
}

func copyMap(dst map[string]any, img image, cols []string) {
	if dst == nil {
		return
	}
	for _, c := range cols {
		if v, ok := img[c]; ok {
			dst[c] = v
		}
	}
}

func setFields(ctx context.Context, sch *schema.Schema, elem reflect.Value, img image, cols []string) {
	for _, c := range cols {
		f := sch.FieldsByDBName[c]
		if f == nil {
			continue
		}
		v, ok := img[c]
		if !ok {
			continue
		}
		if v == nil {
			if rv := f.ReflectValueOf(ctx, elem); rv.CanSet() {
				rv.Set(reflect.Zero(rv.Type()))
			}
			continue
		}
		_ = f.Set(ctx, elem, v)
	}
}

// isVersionField reports an optimistic-lock version column
// (gorm.io/plugin/optimisticlock), which GORM bumps itself.
func isVersionField(f *schema.Field) bool {
	t := f.FieldType
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Name() == "Version" && t.PkgPath() == "gorm.io/plugin/optimisticlock"
}

// target names a table to read: a statement's, or a cascade child's.
type target struct {
	table string
	expr  *clause.Expr
	sch   *schema.Schema
}
