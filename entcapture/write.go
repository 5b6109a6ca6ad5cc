package entcapture

import (
	"context"
	"database/sql/driver"
	"reflect"
	"slices"
	"strings"
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/entcapture/entcapturert"
	"github.com/heraldgo/herald/entcapture/internal/rtstate"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capture"
	"github.com/heraldgo/herald/internal/names"
	"github.com/heraldgo/herald/internal/outbox"
)

// write is one captured mutation.
type write struct {
	g    entcapturert.Glue
	sch  *entcapturert.Schema
	spec *capture.Spec
	op   envelope.Operation
	d    envelope.Dialect
}

func init() { rtstate.NewCascadeHook = cascadeHook }

// bulk marks the context of one CreateBulk.Save (the generated code puts
// it there with entcapturert.WithBulk), so that its items, whose hooks run
// nested, share one scope.
type bulk = rtstate.Bulk

func bulkOf(ctx context.Context) *bulk {
	b, _ := ctx.Value(rtstate.BulkKey{}).(*bulk)
	return b
}

// columns are what a snapshot of the write reads: the key, plus the
// payload columns when the mode keeps rows.
func (w *write) columns(rows bool) []string {
	cols := slices.Clone(w.sch.KeyColumns())
	if rows {
		for _, c := range w.spec.Columns() {
			if !slices.Contains(cols, c) {
				cols = append(cols, c)
			}
		}
	}
	return cols
}

func (w *write) run(ctx context.Context, s *scope, next ent.Mutator) (ent.Value, error) {
	switch w.op {
	case envelope.Inserted:
		return w.create(ctx, s, next)
	case envelope.Updated:
		return w.update(ctx, s, next)
	}
	return w.delete(ctx, s, next)
}

// create registers the mutation with its scope and runs it: its events
// are built when the scope's creates are done (finishCreates), from the
// entity ent returns, or for an upsert from the rows read around it.
func (w *write) create(ctx context.Context, s *scope, next ent.Mutator) (ent.Value, error) {
	it := &created{w: w}
	s.creates = append(s.creates, it)
	w.g.HeraldBeforeInsert(func(conflict []sql.ConflictOption) {
		it.fields = insertedFields(w)
		if len(conflict) > 0 && s.upsertErr == nil {
			s.upsertErr = s.beforeUpsert(conflict)
		}
	})
	ews, err := s.edgeWrites(w)
	if err != nil {
		return nil, err
	}
	cws, err := s.childWrites(w)
	if err != nil {
		return nil, err
	}
	if err := s.childrenBefore(cws, nil); err != nil {
		return nil, err
	}
	if s.cd != nil {
		ctx = context.WithValue(ctx, upsertKey{}, s) // for an upsert's RETURNING (upsert.go)
	}
	v, err := next.Mutate(ctx, w.g)
	w.g.HeraldBeforeInsert(nil)
	if s.upsertErr != nil {
		return v, s.upsertErr
	}
	if err != nil {
		return v, err
	}
	it.v = v
	if id, ok := w.g.HeraldID(); ok && len(ews)+len(cws) > 0 {
		if err := s.edgesAfter(ews, []any{id}); err != nil {
			return v, err
		}
		if err := s.childrenAfter(cws, []any{id}); err != nil {
			return v, err
		}
	}
	return v, nil
}

// created is one create of a scope.
type created struct {
	w      *write
	v      ent.Value      // what ent returned
	fields map[string]any // the fields the mutation held at the INSERT, by column
}

// insertedFields renders the fields a create's mutation holds right
// before its INSERT (after every hook that runs before the write), by
// column: the values the row gets. The entity the create returns may
// hold others — a hook after the write can change it (ent's
// encryptfield example opens the sealed field it stored) — so they
// replace the entity's. Edge fields are left to the entity (ent sets
// them from the edge).
func insertedFields(w *write) map[string]any {
	n, ok := w.g.(newer)
	if !ok {
		return nil
	}
	row, ok := w.g.HeraldRow(n.HeraldNew())
	if !ok {
		return nil
	}
	edge := map[string]bool{}
	for _, c := range w.sch.EdgeColumns {
		edge[c] = true
	}
	out := map[string]any{}
	for _, c := range w.sch.Fields {
		if _, set := w.g.Field(c); set && !edge[c] {
			if v, ok := row[c]; ok {
				out[c] = v
			}
		}
	}
	return out
}

// BeforeUpsert is beforeUpsert for entcapturert.BulkConflict: the
// generated CreateBulk calls it right before its INSERT, with the bulk's
// upsert conflict options, through the bulk's mark (rtstate.Bulk).
func (s *scope) BeforeUpsert(conflict []sql.ConflictOption) error {
	if len(conflict) == 0 {
		return nil
	}
	return s.beforeUpsert(conflict)
}

// finishCreates turns the scope's creates into changes.
func (s *scope) finishCreates() error {
	if len(s.creates) == 0 {
		return nil
	}
	defer func() { s.creates, s.upsert = nil, nil }()
	if s.upsert != nil {
		return s.afterUpsert()
	}
	at := now()
	rows := make([]map[string]any, len(s.creates))
	for i, it := range s.creates {
		w := it.w
		row, ok := w.g.HeraldRow(it.v)
		if !ok {
			return outbox.Configurationf(w.sch.Name, "create returned %T, not the schema's entity: regenerate the code with entcapturegen.Extension()", it.v)
		}
		for c, v := range it.fields {
			row[c] = v
		}
		unsetNullable(w.g, w.sch, row)
		rows[i] = row
	}
	if err := s.readBack(rows); err != nil {
		return err
	}
	for i, it := range s.creates {
		w, row := it.w, rows[i]
		s.add(w.spec, envelope.Change{Model: w.spec.Label, Table: w.sch.Table, Operation: envelope.Inserted,
			PK: rowKey(w.sch, row), After: row, OccurredAt: at})
	}
	return nil
}

// unsetNullable sets to nil the columns of the optional fields without a
// default that the create leaves unset: NULL in the row.
func unsetNullable(g entcapturert.Glue, sch *entcapturert.Schema, row map[string]any) {
	for _, c := range sch.Nullable {
		if f := fieldOf(sch, c); f != "" {
			if _, set := g.Field(f); !set {
				row[c] = nil
			}
		}
	}
}

// storedDiffers reports whether the database may hold other values than
// a create's entity (row): a column with a database default left unset,
// or on PostgreSQL a time finer than its column keeps (timestamptz keeps
// microseconds; timestamptz(3) milliseconds). Such a create's after image
// is read back from the database.
func storedDiffers(g entcapturert.Glue, sch *entcapturert.Schema, d envelope.Dialect, row map[string]any) bool {
	if len(unsetDefaults(g, sch)) > 0 {
		return true
	}
	if d == envelope.MySQL {
		return mysqlTimeDiffers(row) || mysqlSpatialDiffers(sch, row) // capture_mysql.go
	}
	if d != envelope.Postgres {
		return false
	}
	for c, v := range row {
		if t, ok := timeOf(v); ok && finerThan(t, precisionOf(sch, c)) {
			return true
		}
	}
	return false
}

// timeOf returns the time a column value stores: a time.Time, or the
// time.Time a driver.Valuer (sql.NullTime, a GoType of the user's) gives.
func timeOf(v any) (t time.Time, ok bool) {
	switch x := v.(type) {
	case time.Time:
		return x, true
	case driver.Valuer:
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
			return time.Time{}, false
		}
		defer func() {
			if recover() != nil {
				t, ok = time.Time{}, false
			}
		}()
		dv, err := x.Value()
		if err != nil {
			return time.Time{}, false
		}
		t, ok = dv.(time.Time)
		return t, ok
	}
	return time.Time{}, false
}

// unsetDefaults lists the columns with a database default that the
// create leaves unset.
func unsetDefaults(g entcapturert.Glue, sch *entcapturert.Schema) []string {
	var out []string
	for _, c := range sch.DBDefaults {
		if f := fieldOf(sch, c); f != "" {
			if _, set := g.Field(f); !set {
				out = append(out, c)
			}
		}
	}
	return out
}

func precisionOf(sch *entcapturert.Schema, col string) int {
	if p, ok := sch.Precision[col]; ok {
		return p
	}
	return 6 // PostgreSQL's timestamp and timestamptz keep microseconds
}

// finerThan reports whether t has more fractional-second digits than p.
func finerThan(t time.Time, p int) bool {
	unit := 1
	for range 9 - p {
		unit *= 10
	}
	return t.Nanosecond()%unit != 0
}

// readBack replaces the rows of the creates whose stored row may differ
// from their entity (storedDiffers) by the rows the database holds: one
// SELECT by id per schema, for the whole scope (a CreateBulk's items).
func (s *scope) readBack(rows []map[string]any) error {
	type group struct {
		w    *write
		ids  []any
		keys []map[string]any // the rows, for a composite id
	}
	var groups []*group
	for i, it := range s.creates {
		w := it.w
		if !w.spec.NeedsAfter(envelope.Inserted) || !storedDiffers(w.g, w.sch, s.d, rows[i]) {
			continue
		}
		var g *group
		for _, x := range groups {
			if x.w.sch == w.sch {
				g = x
			}
		}
		if g == nil {
			g = &group{w: w}
			groups = append(groups, g)
		}
		g.ids = append(g.ids, rows[i][w.sch.PK])
		g.keys = append(g.keys, rows[i])
	}
	for _, g := range groups {
		var got []map[string]any
		var err error
		if len(g.w.sch.Key) > 0 {
			got, err = s.selectPinned(g.w, g.w.columns(true), g.keys) // a composite id
		} else {
			got, err = s.selectRows(g.w, g.w.columns(true), nil, false, g.ids)
		}
		if err != nil {
			return err
		}
		byID := make(map[string]map[string]any, len(got))
		for _, r := range got {
			byID[keyText(g.w.sch, r)] = r
		}
		for i, it := range s.creates {
			if it.w.sch != g.w.sch {
				continue
			}
			if r, ok := byID[keyText(g.w.sch, rows[i])]; ok {
				rows[i] = r
			}
		}
	}
	return nil
}

// fieldOf returns the name ent's mutation (Field) gives the field of
// column col — the column itself, see columnOf — or "" when col is no
// field's.
func fieldOf(s *entcapturert.Schema, col string) string {
	for _, c := range s.Fields {
		if c == col {
			return col
		}
	}
	return ""
}

// columnOf returns the column of the field that ent's mutation (Fields,
// AddedFields, ClearedFields) names f. The mutation names a field by its
// constant, whose value is the column — the field's StorageKey — not the
// schema's field name Fields is keyed by: field.JSON("URLs", …) with
// StorageKey("urls") is "urls" to the mutation (and to Field).
func columnOf(s *entcapturert.Schema, f string) (string, bool) {
	for _, c := range s.Fields {
		if c == f {
			return c, true
		}
	}
	c, ok := s.Fields[f]
	return c, ok
}

// changedAfter is changed once ent built the UPDATE: what it listed
// before, the fields set since (by schema hooks after the capture hook),
// and the columns the UPDATE's modifiers set (Modify, AppendX).
func (w *write) changedAfter(before []string) []string {
	set := map[string]bool{}
	for _, c := range before {
		set[c] = true
	}
	for _, c := range w.changed() {
		set[c] = true
	}
	if sg, ok := w.g.(scannerGlue); ok {
		for _, c := range modifierColumns(w, sg.HeraldModifiers()) {
			set[c] = true
		}
	}
	out := []string{}
	for _, c := range w.sch.Columns {
		if set[c] {
			out = append(out, c)
		}
	}
	return out
}

// modifierColumns returns the columns that mods set, read from the SET
// clause they render.
func modifierColumns(w *write, mods []func(*sql.UpdateBuilder)) []string {
	if len(mods) == 0 {
		return nil
	}
	u := sql.Dialect(dialectName(w.d)).Update(w.sch.Table)
	for _, m := range mods {
		m(u)
	}
	q, _ := u.Query()
	_, set, ok := strings.Cut(q, " SET ")
	if !ok || strings.TrimSpace(set) == "" {
		return nil
	}
	var out []string
	for _, a := range splitTop(set) {
		lhs, _, ok := strings.Cut(a, " = ")
		if !ok {
			continue
		}
		lhs = strings.TrimSpace(lhs)
		if i := strings.LastIndexByte(lhs, '.'); i >= 0 {
			lhs = lhs[i+1:]
		}
		out = append(out, unquote(lhs))
	}
	return out
}

// changed lists the columns the mutation sets, in table order.
func (w *write) changed() []string {
	set := map[string]bool{}
	for _, fs := range [][]string{w.g.Fields(), w.g.AddedFields(), w.g.ClearedFields()} {
		for _, f := range fs {
			if c, ok := columnOf(w.sch, f); ok {
				set[c] = true
			}
		}
	}
	for _, es := range [][]string{w.g.AddedEdges(), w.g.ClearedEdges()} {
		for _, e := range es {
			if c, ok := w.sch.EdgeColumns[e]; ok {
				set[c] = true
			}
		}
	}
	out := []string{}
	for _, c := range w.sch.Columns {
		if set[c] {
			out = append(out, c)
		}
	}
	return out
}

// update: on a client opened on Driver, the wrapper runs ent's UPDATE
// with a RETURNING of the after images (returning.go), so nothing is read
// after it; in BeforeAndAfter the rows are read locked first (the before
// images), and the write is pinned to exactly those ids with WhereP. In
// After or Keys mode a bulk update reads first only when it also writes
// captured edges (whose rows are read by owner id); otherwise the UPDATE
// itself locks and returns the rows it writes. Without the wrapper (a
// caller transaction on a plain driver) the rows are read locked first
// and the after images are read by id after the write. UpdateOne in
// After or Keys mode reads nothing first: the UPDATE itself locks its
// row.
func (w *write) update(ctx context.Context, s *scope, next ent.Mutator) (ent.Value, error) {
	rows := w.spec.Options.Payload != envelope.Keys
	needBefore := w.spec.Options.Payload == envelope.BeforeAndAfter
	one := w.g.Op().Is(ent.OpUpdateOne)
	id, _ := w.g.HeraldID()
	ews, err := s.edgeWrites(w)
	if err != nil {
		return nil, err
	}
	cws, err := s.childWrites(w)
	if err != nil {
		return nil, err
	}
	changed := w.changed()
	ret := w.returns(s, changed, rows || !one)
	// Without edges, ent's bulk update is one UPDATE, which the wrapper
	// always sees; with them ent may skip it (no row matched), so the ids
	// are read first and the rows by id if no RETURNING ran.
	noEdges := len(w.g.AddedEdges())+len(w.g.RemovedEdges())+len(w.g.ClearedEdges()) == 0
	var before []map[string]any
	var ids []any
	readFirst := !ret || !noEdges || len(ews)+len(cws) > 0 // no RETURNING alone gives the rows
	if needBefore || (!one && readFirst) {
		if err := s.writeLock(w.sch); err != nil {
			return nil, err
		}
		var err error
		before, err = s.selectRows(w, w.columns(needBefore), id, one, nil)
		if err != nil {
			return nil, err
		}
		ids = pks(before, w.sch.PK)
		if !one {
			w.g.WhereP(pin(w.sch, s.d, quotedTable(s.d, s.g, w.sch), before))
		}
	}
	owners := ids
	if one {
		owners = []any{id}
	}
	if err := s.edgesBefore(ews, owners); err != nil {
		return nil, err
	}
	if err := s.childrenBefore(cws, owners); err != nil {
		return nil, err
	}
	mctx := ctx
	var req *returning
	if ret {
		req = w.returningRequest(s, w.columns(rows))
		mctx = withReturning(ctx, req)
	}
	np := len(w.g.HeraldPredicates())
	v, err := next.Mutate(mctx, w.g)
	if err != nil {
		return v, err
	}
	changed = w.changedAfter(changed)
	// Predicates a schema hook after this one added (a tenant's WhereP)
	// narrow the rows read back by id to those the UPDATE wrote.
	narrow := w.g.HeraldPredicates()[np:]
	if err := s.edgesAfter(ews, owners); err != nil {
		return v, err
	}
	children, err := s.childChanges(cws, owners)
	if err != nil {
		return v, err
	}
	if req != nil && !req.done && owners == nil {
		return v, errNotReturned(w)
	}
	if !w.spec.Captures(envelope.Updated) || (len(changed) == 0 && (req == nil || !req.done)) {
		// An update that sets no column (edges only, or nothing at all):
		// ent sent no UPDATE, and the row did not change.
		addAll(s, children)
		return v, nil
	}
	var after []map[string]any
	switch {
	case req != nil && req.done:
		after = req.rows
	case len(owners) == 0:
		addAll(s, children)
		return v, nil
	case len(w.sch.Key) > 0 && rows:
		// A composite key: read the rows again by their keys.
		if after, err = s.selectPinned(w, w.columns(true), before); err != nil {
			return v, err
		}
	case len(w.sch.Key) > 0:
		after = make([]map[string]any, len(before))
		copy(after, before)
	case rows:
		if after, err = s.selectRows(w, w.columns(true), nil, false, owners, narrow...); err != nil {
			return v, err
		}
	case len(narrow) > 0:
		if after, err = s.selectRows(w, w.columns(false), nil, false, owners, narrow...); err != nil {
			return v, err
		}
	default:
		after = make([]map[string]any, len(owners))
		for i, id := range owners {
			after[i] = map[string]any{w.sch.PK: id}
		}
	}
	byID := map[string]map[string]any{}
	for _, r := range before {
		byID[keyText(w.sch, r)] = r
	}
	cs := make([]envelope.Change, 0, len(after))
	at := now()
	for _, a := range after {
		c := envelope.Change{Model: w.spec.Label, Table: w.sch.Table, Operation: envelope.Updated,
			PK: rowKey(w.sch, a), Changed: changed, OccurredAt: at}
		if rows {
			c.After = a
		}
		if needBefore {
			c.Before = byID[keyText(w.sch, a)]
		}
		cs = append(cs, c)
	}
	returned := req != nil && req.done
	afterByKey := map[string]map[string]any{}
	if returned {
		for _, a := range after {
			afterByKey[names.KeyText(rowKey(w.sch, a))] = a
		}
	}
	children = selfChildren(w.sch, children, afterByKey, cs, returned)
	s.add(w.spec, cs...)
	addAll(s, children)
	return v, nil
}

func addAll(s *scope, bs []batch) {
	for _, b := range bs {
		s.add(b.spec, b.changes...)
	}
}

// delete: on a client opened on Driver and when no row is reached by a
// cascade, the wrapper runs ent's DELETE with a RETURNING of the before
// images (or the ids), and nothing is read. Otherwise the rows are read
// locked right before ent's DELETE runs — in the generated delete, after
// every hook, so with the predicates a hook after this one adds (a
// tenant's WhereP) — the delete is pinned to them, and the rows its
// cascades reach are read with them. A delete that never runs (a later
// hook turns it into an update, or fails) has no events. w.spec is nil
// for a schema that is not captured but whose deletes cascade to
// captured rows.
func (w *write) delete(ctx context.Context, s *scope, next ent.Mutator) (ent.Value, error) {
	rows := w.spec != nil && w.spec.Options.Payload != envelope.Keys
	mark := s.mark()
	if w.spec != nil && len(w.sch.Cascades) == 0 && w.returns(s, nil, true) {
		req := w.returningRequest(s, w.columns(rows))
		v, err := next.Mutate(withReturning(ctx, req), w.g)
		if err != nil {
			return v, err
		}
		if w.notDelete(s, mark) {
			return v, nil
		}
		if !req.done {
			return v, errNotReturned(w)
		}
		w.deleted(s, req.rows, rows)
		return v, nil
	}
	var before []map[string]any
	ran := false
	w.g.HeraldBeforeDelete(func(context.Context) error {
		ran = true
		if err := s.writeLock(w.sch); err != nil {
			return err
		}
		cols := w.sch.KeyColumns()
		if w.spec != nil {
			cols = w.columns(rows)
		}
		var err error
		if before, err = s.selectRows(w, cols, nil, false, nil); err != nil {
			return err
		}
		w.g.WhereP(pin(w.sch, s.d, quotedTable(s.d, s.g, w.sch), before))
		return s.cascade(w.sch, before)
	})
	v, err := next.Mutate(ctx, w.g)
	w.g.HeraldBeforeDelete(nil)
	if err != nil || !ran {
		return v, err
	}
	if w.notDelete(s, mark) {
		return v, nil
	}
	if w.spec != nil {
		w.deleted(s, before, rows)
	}
	return v, nil
}

// notDelete reports whether a hook after the capture hook turned the
// delete into another write — ent's soft-delete mixin (listed after
// entcapture.Mixin) sets the mutation's op to an update and runs it
// through the client, where the capture hook captures it as an update —
// and if so drops what the delete recorded (its cascades' events).
func (w *write) notDelete(s *scope, mark []int) bool {
	if w.g.Op().Is(ent.OpDelete | ent.OpDeleteOne) {
		return false
	}
	s.reset(mark)
	return true
}

// deleted records the deletes of rows (their before images, or ids).
func (w *write) deleted(s *scope, before []map[string]any, rows bool) {
	at := now()
	cs := make([]envelope.Change, 0, len(before))
	for _, b := range before {
		c := envelope.Change{Model: w.spec.Label, Table: w.sch.Table, Operation: envelope.Deleted, PK: rowKey(w.sch, b), OccurredAt: at}
		if rows {
			c.Before = b
		}
		cs = append(cs, c)
	}
	s.add(w.spec, cs...)
}

func pks(rows []map[string]any, pk string) []any {
	out := make([]any, len(rows))
	for i, r := range rows {
		out[i] = r[pk]
	}
	return slices.Clip(out)
}
