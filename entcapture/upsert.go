package entcapture

import (
	"context"
	stdsql "database/sql"
	"database/sql/driver"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/names"
)

// An ent upsert reaches the hook as a plain create: its ON CONFLICT
// options live on the builder. The generated code hands them to the scope
// right before the INSERT, which reads the rows the new ones conflict
// with (locked), so that afterwards each new row is classified: its key
// was there — updated (or skipped, under DO NOTHING / Ignore) — or it was
// not — inserted. The rows are then read once more by conflict key: the
// after images, with the ids the database really has (ent maps a bulk
// upsert's returned ids by position, which DO NOTHING shifts).

// upsert is what an upsert's conflict options say, and the rows its
// conflict target found before the INSERT.
type upsert struct {
	target  []string // the conflict columns
	update  []string // columns a conflicting row takes (changed), in table order
	nothing bool     // DO NOTHING, or an update that changes nothing (Ignore)
	// same: an update that sets columns to themselves (ent's Ignore is
	// DO UPDATE SET id = id): unlike DO NOTHING, the database writes each
	// conflicting row, with the values it held, so each gets an updated
	// event with equal images and changed naming the columns set, as
	// gormcapture's event for the same statement.
	same     bool
	sameCols []string
	where    bool // the update has a WHERE (UpdateWhere): conflicting rows it skips
	before   map[string]map[string]any
	cols     []string         // read by both snapshots
	ret      *upsertReturning // through Driver: the statement's own RETURNING classifies the rows
}

// conflictOf renders the options on an INSERT of the schema's columns and
// reads them back: the target columns and the action.
func conflictOf(w *write, d envelope.Dialect, cols []string, opts []sql.ConflictOption) (*upsert, error) {
	unsupported := func(format string, args ...any) error {
		return &envelope.Error{Kind: envelope.ErrUnsupported, Where: w.sch.Name + " upsert", Msg: fmt.Sprintf(format, args...)}
	}
	ins := sql.Dialect(conflictDialect(d)).Insert(w.sch.Table).Columns(cols...).Values(make([]any, len(cols))...)
	ins.OnConflict(opts...)
	q, _ := ins.Query()
	i := strings.Index(q, " ON CONFLICT")
	if i < 0 {
		return nil, unsupported("cannot read the ON CONFLICT clause of %q", q)
	}
	rest := strings.TrimSpace(q[i+len(" ON CONFLICT"):])
	u := &upsert{}
	switch {
	case strings.HasPrefix(rest, "ON CONSTRAINT"):
		return nil, unsupported("a conflict target ON CONSTRAINT is not supported; name the columns of the unique index with OnConflictColumns(...)")
	case strings.HasPrefix(rest, "("):
		j := strings.IndexByte(rest, ')')
		for _, c := range strings.Split(rest[1:j], ",") {
			u.target = append(u.target, unquote(strings.TrimSpace(c)))
		}
		rest = strings.TrimSpace(rest[j+1:])
	}
	switch {
	case strings.HasPrefix(rest, "WHERE"):
		return nil, unsupported("a conflict target with WHERE (a partial index) is not supported; name the columns of a full unique index")
	case rest == "DO NOTHING":
		u.nothing = true
	case strings.HasPrefix(rest, "DO UPDATE SET "):
		set := rest[len("DO UPDATE SET "):]
		if k := strings.Index(set, " WHERE "); k >= 0 {
			set, u.where = set[:k], true
		}
		changed, self := map[string]bool{}, map[string]bool{}
		for _, a := range splitTop(set) {
			lhs, rhs, ok := strings.Cut(a, " = ")
			if !ok {
				return nil, unsupported("cannot read the assignment %q", a)
			}
			col := unquote(strings.TrimSpace(lhs))
			if qualifiedSelf(rhs, w.sch.Table, col) || lastInsertIDSelf(rhs, w.sch.Table, col) {
				self[col] = true
				continue
			}
			changed[col] = true
		}
		for _, c := range w.sch.Columns {
			if changed[c] {
				u.update = append(u.update, c)
			}
			if self[c] {
				u.sameCols = append(u.sameCols, c)
			}
		}
		u.nothing = len(u.update) == 0
		// An assignment of a column to itself (ent's Ignore) writes the
		// row on PostgreSQL and SQLite; MySQL leaves an unchanged row
		// unwritten (affected rows 0), so there it is skipped.
		u.same = u.nothing && !u.where && d != envelope.MySQL
	default:
		return nil, unsupported("cannot read the conflict action %q", rest)
	}
	return u, nil
}

func unquote(s string) string { return strings.Trim(s, "`\"") }

// qualifiedSelf reports whether rhs is table.col: a column set to itself.
func qualifiedSelf(rhs, table, col string) bool {
	r := strings.TrimSpace(rhs)
	t, c, ok := strings.Cut(r, ".")
	return ok && unquote(t) == table && unquote(c) == col
}

// splitTop splits assignments at the commas outside parentheses.
func splitTop(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := range len(s) {
		switch s[i] {
		case '(':
			depth++
		case ')':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, strings.TrimSpace(s[start:i]))
				start = i + 1
			}
		}
	}
	return append(out, strings.TrimSpace(s[start:]))
}

// targetValues returns a create's values of the conflict columns.
func targetValues(w *write, target []string) ([]any, error) {
	vs := make([]any, len(target))
	for i, c := range target {
		var (
			v  any
			ok bool
		)
		if c == w.sch.PK {
			v, ok = w.g.HeraldID()
		} else if f := fieldOf(w.sch, c); f != "" {
			v, ok = w.g.Field(f)
		}
		if !ok {
			return nil, &envelope.Error{Kind: envelope.ErrUnsupported, Where: w.sch.Name + " upsert",
				Msg: fmt.Sprintf("the create does not set conflict column %q, so herald cannot find the row it conflicts with; set it, or name other conflict columns", c)}
		}
		vs[i] = v
	}
	return vs, nil
}

func keyOf(vs []any) string {
	parts := make([]string, len(vs))
	for i, v := range vs {
		parts[i] = names.KeyText(v)
	}
	return strings.Join(parts, "\x00")
}

// beforeUpsert reads, locked, the rows the scope's creates conflict
// with: one statement.
func (s *scope) beforeUpsert(opts []sql.ConflictOption) error {
	if len(s.creates) == 0 {
		return nil
	}
	w := s.creates[0].w
	var cols []string
	for _, it := range s.creates {
		if id, ok := it.w.g.HeraldID(); ok && id != nil && !slices.Contains(cols, w.sch.PK) {
			cols = append(cols, w.sch.PK)
		}
		for _, f := range it.w.g.Fields() {
			if c, ok := columnOf(w.sch, f); ok && !slices.Contains(cols, c) {
				cols = append(cols, c)
			}
		}
	}
	u, err := conflictOf(w, s.d, cols, opts)
	if err != nil {
		return err
	}
	u.cols = w.columns(true)
	for _, c := range u.target {
		if !slices.Contains(u.cols, c) {
			u.cols = append(u.cols, c)
		}
	}
	if _, ok := s.upsertReturns(w); ok {
		u.ret = &upsertReturning{d: s.cd, dialect: s.d, table: w.sch.Table, cols: u.cols, before: w.spec.NeedsBefore(envelope.Updated), scanner: storedScanner(w.g)}
		if s.d == envelope.SQLite {
			if err := s.beforeUpsertSQLite(w, u); err != nil {
				return err
			}
		}
		s.upsert = u
		return nil
	}
	if s.d == envelope.MySQL {
		if err := mysqlUpsertTarget(w, u, s.creates); err != nil { // capture_mysql.go
			return err
		}
	}
	if len(u.target) == 0 || u.where {
		what := "an upsert without conflict columns (OnConflict() with DoNothing or Ignore)"
		if u.where {
			what = "an upsert whose update has a WHERE (UpdateWhere)"
		}
		return &envelope.Error{Kind: envelope.ErrUnsupported, Where: w.sch.Name + " upsert",
			Msg: what + " is classified by its own statement, which herald sees only through entcapture.Driver: open the client on it (in a transaction of a client without Driver, name the conflict columns with OnConflictColumns(...) and drop UpdateWhere)"}
	}
	if err := s.writeLock(w.sch); err != nil {
		return err
	}
	rows, err := s.rowsByTarget(w, u, true, nil)
	if err != nil {
		return err
	}
	u.before = rows
	s.upsert = u
	return nil
}

// rowsByTarget reads the rows whose conflict columns hold the creates'
// values (or whose keys are keys, each a tuple of the schema's key
// columns (KeyColumns: the id, or a composite id's columns): the rows
// that conflicted, whose conflict columns the action may have changed),
// keyed by those values, and by key text under idPrefix+key.
func (s *scope) rowsByTarget(w *write, u *upsert, lock bool, keys [][]any) (map[string]map[string]any, error) {
	sel := sql.Dialect(dialectName(s.d)).Select().From(from(s.g, w.sch))
	qc := make([]string, len(u.cols))
	for i, c := range u.cols {
		qc[i] = sel.C(c)
	}
	sel.Select(qc...)
	rowType := quotedTable(s.d, s.g, w.sch)
	tuples := make([][]any, 0, len(s.creates))
	for _, it := range s.creates {
		vs, err := targetValues(it.w, u.target)
		if err != nil {
			return nil, err
		}
		tuples = append(tuples, vs)
	}
	sel.Where(inSetsOrP(s.d, rowType, sel, w.sch.KeyColumns(), []keySet{{u.target, tuples}}, []keySet{{w.sch.KeyColumns(), keys}}))
	if lock && locks(s.d) {
		sel.ForUpdate()
	}
	got, err := s.query(sel, u.cols, scanStored(w.g))
	if err != nil {
		return nil, fmt.Errorf("herald/entcapture: %s: read upserted rows: %w", w.sch.Name, err)
	}
	out := make(map[string]map[string]any, len(got))
	for _, r := range got {
		vs := make([]any, len(u.target))
		for i, c := range u.target {
			vs[i] = r[c]
		}
		out[keyOf(vs)] = r
		out[idPrefix+keyText(w.sch, r)] = r
	}
	return out, nil
}

// idPrefix keys rowsByTarget's rows by id, apart from their conflict keys
// (which hold a NUL between values, never at the start).
const idPrefix = "\x00id\x00"

// afterUpsert reads the rows again by conflict key and classifies each
// create: inserted, updated, or skipped.
func (s *scope) afterUpsert() error {
	u := s.upsert
	w := s.creates[0].w
	if u.ret != nil {
		return s.upsertReturned(w, u)
	}
	// The conflicting rows by their key: the id, or a composite id's
	// columns (its schema has no PK column).
	var keys [][]any
	seenKey := map[string]bool{}
	for _, b := range u.before {
		if k := keyText(w.sch, b); !seenKey[k] {
			seenKey[k] = true
			key := make([]any, 0, len(w.sch.KeyColumns()))
			for _, c := range w.sch.KeyColumns() {
				key = append(key, b[c])
			}
			keys = append(keys, key)
		}
	}
	after, err := s.rowsByTarget(w, u, false, keys)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	at := now()
	for _, it := range s.creates {
		vs, err := targetValues(it.w, u.target)
		if err != nil {
			return err
		}
		k := keyOf(vs)
		if seen[k] {
			continue // a later row of the same key: skipped, or an error ent already returned
		}
		seen[k] = true
		if b, existed := u.before[k]; existed {
			// The row that conflicted, by id: the action may have set a
			// conflict column.
			a, ok := after[idPrefix+keyText(w.sch, b)]
			if ok && u.same {
				s.addSame(w, u, a, at)
				continue
			}
			if u.nothing || !ok {
				continue
			}
			s.add(w.spec, envelope.Change{Model: w.spec.Label, Table: w.sch.Table, Operation: envelope.Updated,
				PK: rowKey(w.sch, a), Changed: u.update, Before: b, After: a, OccurredAt: at})
			continue
		}
		a, ok := after[k]
		if !ok {
			continue
		}
		s.add(w.spec, envelope.Change{Model: w.spec.Label, Table: w.sch.Table, Operation: envelope.Inserted,
			PK: rowKey(w.sch, a), After: a, OccurredAt: at})
	}
	return nil
}

// upsertReturned turns the rows the upsert's statement returned into
// changes: each inserted row an insert, each updated row an update with
// the row it replaced (rows DO NOTHING skips are not returned; rows an
// Ignore sets to themselves are nothing).
func (s *scope) upsertReturned(w *write, u *upsert) error {
	if !u.ret.done {
		return fmt.Errorf("herald/entcapture: %s: ent's upsert INSERT of %s did not run through entcapture.Driver, so its rows are unknown; the write is rolled back",
			w.sch.Name, w.sch.Table)
	}
	at := now()
	for _, r := range u.ret.rows {
		if s.d == envelope.SQLite {
			r.inserted = r.rowid > u.ret.maxRowid || u.ret.newIDs[r.rowid]
			if !r.inserted && u.ret.before && !u.nothing {
				r.before = u.before[idPrefix+keyText(w.sch, r.after)]
			}
		}
		if r.inserted {
			s.add(w.spec, envelope.Change{Model: w.spec.Label, Table: w.sch.Table, Operation: envelope.Inserted,
				PK: rowKey(w.sch, r.after), After: r.after, OccurredAt: at})
			continue
		}
		if u.same {
			s.addSame(w, u, r.after, at)
			continue
		}
		if u.nothing {
			continue
		}
		s.add(w.spec, envelope.Change{Model: w.spec.Label, Table: w.sch.Table, Operation: envelope.Updated,
			PK: rowKey(w.sch, r.after), Changed: u.update, Before: r.before, After: r.after, OccurredAt: at})
	}
	return nil
}

// addSame adds the updated event of a conflicting row that an upsert
// setting columns to themselves (ent's Ignore) wrote with the values it
// held: its before image is its after image.
func (s *scope) addSame(w *write, u *upsert, after map[string]any, at time.Time) {
	if !w.spec.Captures(envelope.Updated) {
		return
	}
	var before map[string]any
	if w.spec.NeedsBefore(envelope.Updated) {
		before = maps.Clone(after)
	}
	s.add(w.spec, envelope.Change{Model: w.spec.Label, Table: w.sch.Table, Operation: envelope.Updated,
		PK: rowKey(w.sch, after), Changed: slices.Clip(u.sameCols), Before: before, After: after, OccurredAt: at})
}

// On PostgreSQL through Driver, an upsert is classified by its own
// statement, as gormcapture's is: the wrapper adds to ent's INSERT … ON
// CONFLICT … RETURNING the columns the events hold, "(xmax = 0)" (true
// for a row the statement inserted, false for one it updated) and, for
// a DO UPDATE whose events keep before images, the conflicting row as it
// was when the statement locked it: the action's WHERE saves it in a
// transaction-local setting, which the row's RETURNING reads back —
//
//	INSERT INTO "members" (…) VALUES (…) ON CONFLICT ("tenant", "email") DO UPDATE SET …
//	  WHERE set_config('herald.before', jsonb_build_object('id', "members"."id", …)::text, true) IS NOT NULL
//	  RETURNING "id", "id", "tenant", …, (xmax = 0),
//	            (jsonb_populate_record(NULL::"members", NULLIF(current_setting('herald.before', true), '')::jsonb))."id", …
//
// PostgreSQL evaluates an upsert's WHERE and RETURNING row by row, so each
// returned row carries its own before image. A snapshot read before the
// statement cannot serve: a row another transaction inserts and commits
// while the upsert waits on it is invisible to that snapshot, yet the
// upsert updates it (issue: the event said "inserted", without the row it
// replaced). Nothing is read before or after the statement.

// upsertReturning is an upsert's request to the driver wrapper.
type upsertReturning struct {
	d       *CaptureDriver
	table   string
	cols    []string // of the after (and before) images
	before  bool     // read the conflicting rows' before images
	scanner func(cols []string) ([]any, func() (map[string]any, error), error)
	dialect envelope.Dialect

	// SQLite: the table's largest rowid before the statement, read under
	// the write lock (a row the statement inserts gets a larger one), and
	// the explicit integer ids of the creates no row had (an insert with
	// an explicit id below it).
	maxRowid int64
	newIDs   map[int64]bool

	done bool // the statement ran with the RETURNING
	rows []upsertRow
}

type upsertRow struct {
	inserted      bool
	rowid         int64 // SQLite
	before, after map[string]any
}

type upsertKey struct{}

// upsertReturns reports whether the scope's upsert of w can be classified
// by its statement: PostgreSQL, through Driver, glue that scans one row at
// a time.
func (s *scope) upsertReturns(w *write) (scannerGlue, bool) {
	if s.cd == nil || s.d == envelope.MySQL {
		return nil, false
	}
	if _, off := withoutReturning.Load(s.cd); off {
		return nil, false
	}
	sg, ok := w.g.(scannerGlue)
	return sg, ok
}

// upsertOf returns the pending upsert that ctx's INSERT is to run with,
// if any: the fused create's (fallen back to a scope when the upsert's
// conflict options came), or the scope's whose create ctx is the context of.
func (d *CaptureDriver) upsertOf(ctx context.Context) *upsert {
	var cands [2]*scope
	if f, ok := ctx.Value(fuseKey{}).(*fusion); ok && f != nil && f.cd == d {
		cands[0] = f.scope
	}
	cands[1], _ = ctx.Value(upsertKey{}).(*scope)
	for _, s := range cands {
		if s != nil && s.upsert != nil && s.upsert.ret != nil && s.upsert.ret.d == d && !s.upsert.ret.done {
			return s.upsert
		}
	}
	return nil
}

const beforeSetting = `'herald.before'`

// statement returns ent's upsert INSERT with the capture's RETURNING, and
// how many columns ent's own RETURNING has; ok is false for a statement
// that is not the upsert's.
func (r *upsertReturning) statement(query string, nothing bool) (q string, n int, ok bool) {
	rest, ok := strings.CutPrefix(query, "INSERT INTO ")
	if !ok || !strings.Contains(query, " ON CONFLICT ") {
		return "", 0, false
	}
	table, _, _ := strings.Cut(rest, " ")
	if t := table; unquote(t[strings.LastIndexByte(t, '.')+1:]) != r.table {
		return "", 0, false
	}
	// ent's own RETURNING, if any: an upsert of a schema with a composite
	// id (an edge schema's field.ID) returns nothing (ent's Exec).
	i, own := len(query), ""
	if k := strings.LastIndex(query, " RETURNING "); k >= 0 {
		i, own = k, query[k+len(" RETURNING "):]
		n = len(strings.Split(own, ", "))
	}
	var b strings.Builder
	b.Grow(len(query) + 64*len(r.cols))
	head := query[:i]
	before := r.before && !nothing && r.dialect == envelope.Postgres
	if before {
		// An update's own WHERE (UpdateWhere) keeps its say: the before
		// image is saved for the rows it lets through.
		if k := strings.Index(head, " DO UPDATE SET "); k >= 0 {
			if w := strings.LastIndex(head[k:], " WHERE "); w >= 0 {
				head = head[:k+w] + " WHERE (" + head[k+w+len(" WHERE "):] + ") AND"
			} else {
				head += " WHERE"
			}
		} else {
			head += " WHERE"
		}
	}
	b.WriteString(head)
	if before {
		b.WriteString(` set_config(` + beforeSetting + `, (`)
		for k := 0; k < len(r.cols); k += 50 { // jsonb_build_object takes at most 100 arguments
			if k > 0 {
				b.WriteString(` || `)
			}
			b.WriteString(`jsonb_build_object(`)
			for j, c := range r.cols[k:min(k+50, len(r.cols))] {
				if j > 0 {
					b.WriteString(`, `)
				}
				b.WriteString(`'` + strings.ReplaceAll(c, `'`, `''`) + `', ` + table + `.` + names.Quote(c))
			}
			b.WriteString(`)`)
		}
		b.WriteString(`)::text, true) IS NOT NULL`)
	}
	b.WriteString(` RETURNING ` + own)
	for j, c := range r.cols {
		if j > 0 || own != "" {
			b.WriteString(`, `)
		}
		b.WriteString(names.Quote(c))
	}
	if r.dialect == envelope.SQLite {
		b.WriteString(`, rowid`)
	} else {
		b.WriteString(`, (xmax = 0)`)
	}
	if before {
		for _, c := range r.cols {
			b.WriteString(`, (jsonb_populate_record(NULL::` + table + `, NULLIF(current_setting(` + beforeSetting + `, true), '')::jsonb)).` + names.Quote(c))
		}
	}
	return b.String(), n, true
}

// queryUpsert runs ent's upsert INSERT with the capture's RETURNING when
// ctx carries the request for it; handled reports whether it did.
func (d *CaptureDriver) queryUpsert(ctx context.Context, ex dialect.ExecQuerier, query string, args, v any) (handled bool, err error) {
	u := d.upsertOf(ctx)
	if u == nil {
		return false, nil
	}
	rows, ok := v.(*sql.Rows)
	if !ok {
		return false, nil
	}
	ur, ok, err := runUpsert(ctx, ex, u, query, args)
	if ok && err == nil {
		rows.ColumnScanner = ur
	}
	return ok, err
}

// runUpsert runs ent's upsert INSERT with the capture's RETURNING; ok is
// false for a statement that is not the upsert's.
func runUpsert(ctx context.Context, ex dialect.ExecQuerier, u *upsert, query string, args any) (_ *upsertRows, ok bool, _ error) {
	r := u.ret
	q, n, ok := r.statement(query, u.nothing)
	if !ok {
		return nil, false, nil
	}
	r.done = true
	var inner sql.Rows
	if err := ex.Query(ctx, q, args, &inner); err != nil {
		return nil, true, err
	}
	std, ok := inner.ColumnScanner.(*stdsql.Rows)
	if !ok {
		_ = inner.Close()
		return nil, true, fmt.Errorf("herald/entcapture: %s: the driver returned rows of type %T, not *sql.Rows", r.table, inner.ColumnScanner)
	}
	return &upsertRows{Rows: std, n: n, r: r, before: r.before && !u.nothing && r.dialect == envelope.Postgres}, true, nil
}

// execUpsert runs ent's upsert INSERT that returns nothing (ent's Exec:
// a schema with a composite id) with the capture's RETURNING when ctx
// carries the request for it, reads every row it returns, and gives ent
// the statement's result (rows affected: the rows returned, inserted or
// updated); handled reports whether it did.
func (d *CaptureDriver) execUpsert(ctx context.Context, ex dialect.ExecQuerier, query string, args, v any) (handled bool, err error) {
	u := d.upsertOf(ctx)
	if u == nil || strings.Contains(query, " RETURNING ") {
		return false, nil
	}
	res, ok := v.(*stdsql.Result)
	if v != nil && !ok {
		return false, nil
	}
	rows, ok, err := runUpsert(ctx, ex, u, query, args)
	if !ok || err != nil {
		return ok, err
	}
	before := len(u.ret.rows)
	if err := rows.Close(); err != nil { // Close reads every row
		return true, err
	}
	if res != nil {
		*res = driver.RowsAffected(len(u.ret.rows) - before)
	}
	return true, nil
}

// upsertRows are the rows of an upsert run with the capture's RETURNING,
// as ent sees them: its own columns; the capture's are kept for the hook.
type upsertRows struct {
	*stdsql.Rows
	n      int
	r      *upsertReturning
	before bool
}

func (x *upsertRows) Columns() ([]string, error) {
	cs, err := x.Rows.Columns()
	if err != nil {
		return nil, err
	}
	return cs[:min(x.n, len(cs))], nil
}

func (x *upsertRows) ColumnTypes() ([]*stdsql.ColumnType, error) {
	cs, err := x.Rows.ColumnTypes()
	if err != nil {
		return nil, err
	}
	return cs[:min(x.n, len(cs))], nil
}

func (x *upsertRows) NextResultSet() bool { return false }

func (x *upsertRows) Scan(dest ...any) error {
	if len(dest) != x.n {
		return fmt.Errorf("herald/entcapture: %s: scan of %d columns, the upsert returns %d", x.r.table, len(dest), x.n)
	}
	adst, arow, err := x.r.scanner(x.r.cols)
	if err != nil {
		return err
	}
	var (
		inserted bool
		rowid    int64
		flag     any = &inserted
	)
	if x.r.dialect == envelope.SQLite {
		flag = &rowid
	}
	all := append(append(slices.Clip(dest), adst...), flag)
	var brow func() (map[string]any, error)
	if x.before {
		var bdst []any
		if bdst, brow, err = x.r.scanner(x.r.cols); err != nil {
			return err
		}
		all = append(all, bdst...)
	}
	if err := x.Rows.Scan(all...); err != nil {
		return err
	}
	row := upsertRow{inserted: inserted, rowid: rowid}
	if row.after, err = arow(); err != nil {
		return err
	}
	if brow != nil && !inserted {
		if row.before, err = brow(); err != nil {
			return err
		}
	}
	x.r.rows = append(x.r.rows, row)
	return nil
}

// Close reads the rows ent left unread (their events are due all the
// same), then closes.
func (x *upsertRows) Close() error {
	for x.Next() {
		dest := make([]any, x.n)
		for i := range dest {
			dest[i] = new(any)
		}
		if err := x.Scan(dest...); err != nil {
			_ = x.Rows.Close()
			return err
		}
	}
	err := x.Err()
	if cerr := x.Rows.Close(); err == nil {
		err = cerr
	}
	return err
}

// beforeUpsertSQLite prepares, under the write lock, what classifies the
// rows an upsert's statement returns on SQLite, which has no xmax: the
// table's largest rowid (a row the statement inserts gets a larger one,
// unless the create gave its integer id), the creates' explicit integer
// ids that no row had, and, for a DO UPDATE whose events keep before
// images, the rows its conflict columns find (SQLite has one writer: the
// rows cannot change between this read and the statement).
func (s *scope) beforeUpsertSQLite(w *write, u *upsert) error {
	unsupported := func(msg string) error {
		return &envelope.Error{Kind: envelope.ErrUnsupported, Where: w.sch.Name + " upsert", Msg: msg}
	}
	if slices.Contains(u.update, w.sch.PK) {
		return unsupported("on SQLite, an upsert whose update sets the primary key " + w.sch.PK + " cannot be classified; leave the key out of the update")
	}
	needBefore := u.ret.before && !u.nothing
	if needBefore && len(u.target) == 0 {
		return unsupported("on SQLite, an upsert that updates without conflict columns cannot give its events the rows it replaced (Payload BeforeAndAfter): name them with OnConflictColumns(...), or use DoNothing or Ignore")
	}
	if err := s.writeLock(w.sch); err != nil {
		return err
	}
	table := quotedTable(s.d, s.g, w.sch)
	if err := s.queryInts(&u.ret.maxRowid, nil, "SELECT COALESCE(MAX(rowid), 0) FROM "+table); err != nil {
		return fmt.Errorf("herald/entcapture: %s: read the largest rowid: %w", w.sch.Name, err)
	}
	var ids []any
	for _, it := range s.creates {
		if id, ok := it.w.g.HeraldID(); ok {
			if n, ok := asInt(id); ok {
				ids = append(ids, n)
			}
		}
	}
	if len(ids) > 0 {
		var had []int64
		sel := sql.Dialect(dialect.SQLite).Select().From(from(s.g, w.sch))
		sel.Select(sel.C(w.sch.PK))
		keysIn(s.d, quotedTable(s.d, s.g, w.sch), w.sch.PK, ids)(sel)
		q, args := sel.Query()
		if err := s.queryInts(nil, &had, q, args...); err != nil {
			return fmt.Errorf("herald/entcapture: %s: read the upsert's ids: %w", w.sch.Name, err)
		}
		u.ret.newIDs = make(map[int64]bool, len(ids))
		for _, id := range ids {
			u.ret.newIDs[id.(int64)] = true
		}
		for _, id := range had {
			delete(u.ret.newIDs, id)
		}
	}
	if needBefore {
		rows, err := s.rowsByTarget(w, u, false, nil)
		if err != nil {
			return err
		}
		u.before = rows
	}
	return nil
}

// queryInts runs q, whose rows hold one integer: into one the first, into
// all every one.
func (s *scope) queryInts(one *int64, all *[]int64, q string, args ...any) error {
	rows, err := s.g.QueryContext(s.ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var n int64
		if err := rows.Scan(&n); err != nil {
			return err
		}
		if one != nil {
			*one = n
		}
		if all != nil {
			*all = append(*all, n)
		}
	}
	return rows.Err()
}
