package gormcapture

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capture"
)

// Updates and deletes run GORM's own gorm:update / gorm:delete with the
// statement's pool swapped for a capturePool. GORM has built the final
// SQL (its WHERE complete with primary-key conditions, soft-delete
// conditions and the like) by the time it calls ExecContext, so the pool
// sees exactly the statement that will run, and:
//
//   - BeforeAndAfter: reads the rows it will touch as they were, with the
//     same WHERE, ORDER BY the key: on PostgreSQL in a FOR UPDATE subquery
//     of the UPDATE itself (updateWithBefore), on SQLite with a SELECT
//     after taking the write lock;
//   - a real DELETE whose rows the database cascades to: first locks the
//     parent keys, then reads the rows the cascade will delete or null,
//     level by level (one statement per constraint and level);
//   - runs the statement with a RETURNING of what the events hold, reading
//     the rows itself, and hands GORM the true row count, so RETURNING
//     never overwrites the caller's model and RowsAffected stays right.
//
// A statement of N rows thus costs a constant number of statements: the
// optional lock-select, the write, and the event INSERT(s), split only at
// the bind-parameter limit.

type capturePool struct {
	gorm.ConnPool
	p    *Plugin
	db   *gorm.DB
	spec *capture.Spec // nil: the model is not captured (a delete that cascades)
	at   time.Time

	hit           bool
	err           error
	userReturning bool
	update        bool // an UPDATE (the update chain, or a soft delete)
	changed       []string
	before, after []image
	cascaded      []batch
	updCascade    []updateCascade // an UPDATE's ON UPDATE cascades, as read before it
	paired        bool            // before[i] is after[i] as it was (updateWithBefore)
	fused         bool            // the statement wrote its events itself (fusedUpdate)
	lent          *schema.Schema  // the model of a write without one (tableModel)
}

func (p *Plugin) update(orig func(*gorm.DB)) func(*gorm.DB) {
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
		if sch == nil || db.DryRun {
			orig(db)
			return
		}
		m := p.modelFor(sch)
		spec := m.spec
		if spec != nil && !spec.Captures(envelope.Updated) {
			spec = nil
		}
		if spec == nil && len(p.updateCascadesFor(db, sch, st.Table)) == 0 { // SET is not built yet
			orig(db)
			return
		}
		p.inOwnTx(db, func() { p.interceptTyped(db, orig, m, spec, lent) })
	}
}

func (p *Plugin) delete(orig func(*gorm.DB)) func(*gorm.DB) {
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
		if sch == nil || db.DryRun {
			orig(db)
			return
		}
		m := p.modelFor(sch)
		spec := m.spec
		if spec != nil && !spec.Captures(envelope.Deleted) && !spec.Captures(envelope.Updated) {
			spec = nil
		}
		if spec == nil && len(p.cascadesFor(db, sch, st.Table)) == 0 {
			orig(db)
			return
		}
		p.inOwnTx(db, func() { p.interceptTyped(db, orig, m, spec, lent) })
	}
}

// interceptTyped is intercept with spec (m's, or nil) given the
// table's database types (typedSpec), read in the write's transaction.
func (p *Plugin) interceptTyped(db *gorm.DB, orig func(*gorm.DB), m *model, spec *capture.Spec, lent *schema.Schema) {
	if spec != nil {
		st := db.Statement
		typed, err := p.typedSpec(st.Context, st, st.ConnPool, m, st.Table)
		if err != nil {
			fail(db, err)
			return
		}
		spec = typed
	}
	p.intercept(db, orig, spec, lent)
}

// intercept runs GORM's own callback with the statement's pool swapped
// for a capturePool. lent, when not nil, is the schema of the captured
// model a statement without one writes as (tableModel): GORM builds the
// statement without it, exactly as without the plugin, and the capture
// sees it only while it reads and writes the rows (lend).
func (p *Plugin) intercept(db *gorm.DB, orig func(*gorm.DB), spec *capture.Spec, lent *schema.Schema) {
	st := db.Statement
	c := &capturePool{ConnPool: st.ConnPool, p: p, db: db, spec: spec, at: now(), lent: lent}
	st.ConnPool = c
	orig(db)
	st.ConnPool = c.ConnPool
	if c.err != nil {
		fail(db, c.err)
		return
	}
	if db.Error != nil || !c.hit {
		return
	}
	defer c.lend()()
	if err := c.finish(); err != nil {
		fail(db, err)
	}
}

// lend gives the statement the lent schema until the returned func runs.
func (c *capturePool) lend() func() {
	st := c.db.Statement
	if c.lent == nil || st.Schema != nil {
		return func() {}
	}
	st.Schema = c.lent
	return func() { st.Schema = nil }
}

func (c *capturePool) isStatement(q string) bool {
	return !c.hit && q == c.db.Statement.SQL.String()
}

// ExecContext runs the statement GORM built with a RETURNING the pool
// reads itself; any other statement passes through.
func (c *capturePool) ExecContext(ctx context.Context, q string, args ...any) (sql.Result, error) {
	if !c.isStatement(q) {
		return c.ConnPool.ExecContext(ctx, q, args...)
	}
	c.hit = true
	defer c.lend()()
	if n, ok, err := c.fusedUpdate(ctx, q, args); ok || err != nil {
		if err != nil {
			c.err = err
			return nil, err
		}
		return driver.RowsAffected(n), nil
	}
	n, err := c.run(ctx, q, args)
	if err != nil {
		c.err = err
		return nil, err
	}
	return driver.RowsAffected(n), nil
}

// QueryContext: the caller asked for RETURNING (clause.Returning), so GORM
// reads the rows into the caller's value; the pool reads the rows first
// (locked) and, for an update, reads them again by key afterwards.
func (c *capturePool) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if !c.isStatement(q) {
		return c.ConnPool.QueryContext(ctx, q, args...)
	}
	c.hit, c.userReturning = true, true
	moving, err := c.beforeQuery(ctx, q)
	if err != nil {
		c.err = err
		return nil, err
	}
	if moving {
		return c.queryMovingKeys(ctx, q, args)
	}
	return c.ConnPool.QueryContext(ctx, q, args...)
}

// beforeQuery does what QueryContext does before the caller's statement:
// it takes the savepoint, reads cascades and before images. moving: the
// UPDATE sets a primary-key column (queryMovingKeys).
func (c *capturePool) beforeQuery(ctx context.Context, q string) (moving bool, err error) {
	defer c.lend()() // GORM scans the caller's rows without it
	st := c.db.Statement
	if c.spec != nil && c.spec.Captures(envelope.Updated) && len(q) >= 6 && strings.EqualFold(q[:6], "UPDATE") &&
		setsKey(changedColumns(st), keyColumns(st.Schema)) {
		return true, nil
	}
	if err := c.prepare(ctx, q); err != nil {
		return false, err
	}
	if c.update && c.spec != nil {
		cols := payloadColumns(st.Schema, c.spec, c.spec.NeedsBefore(envelope.Updated))
		return false, c.readBefore(ctx, cols)
	} else if !c.update && c.spec != nil && c.spec.Captures(envelope.Deleted) {
		cols := payloadColumns(st.Schema, c.spec, c.spec.NeedsBefore(envelope.Deleted))
		return false, c.readBefore(ctx, cols)
	}
	return false, nil
}

// queryMovingKeys runs an UPDATE with the caller's RETURNING that sets a
// primary-key column. Its rows cannot be read again by their old keys
// afterwards, so the pool runs the UPDATE with its own RETURNING, as
// without clause.Returning (run), and answers the caller with the rows it
// asked for, read by their new keys. Statements: those of run, and the
// SELECT.
func (c *capturePool) queryMovingKeys(ctx context.Context, q string, args []any) (*sql.Rows, error) {
	text, vars, err := c.movedRows(ctx, q, args)
	if err != nil {
		c.err = err
		return nil, err
	}
	rows, err := own(c.ConnPool).QueryContext(ctx, text, vars...)
	if err != nil {
		c.err = fmt.Errorf("herald/gormcapture: read the updated rows: %w", err)
		return nil, c.err
	}
	return rows, nil
}

// movedRows runs queryMovingKeys's UPDATE and returns the SELECT of the
// rows it moved, by their new keys, with the caller's RETURNING columns.
func (c *capturePool) movedRows(ctx context.Context, q string, args []any) (string, []any, error) {
	defer c.lend()()
	st := c.db.Statement
	i := strings.LastIndex(q, " RETURNING ")
	if i < 0 || strings.ContainsAny(q[i:], "?$") {
		return "", nil, &envelope.Error{Kind: envelope.ErrUnsupported, Where: c.spec.Label + " update",
			Msg: "cannot find the RETURNING of an UPDATE that moves rows to new primary keys"}
	}
	c.userReturning = false
	if _, err := c.run(ctx, q[:i], args); err != nil {
		return "", nil, err
	}
	pk := keyColumns(st.Schema)
	keys := make([][]any, len(c.after))
	for j, a := range c.after {
		keys[j] = make([]any, len(pk))
		for k, col := range pk {
			keys[j][k] = a[col]
		}
	}
	var cols []clause.Column
	if r, ok := st.Clauses["RETURNING"].Expression.(clause.Returning); ok {
		cols = r.Columns
	}
	where, ok, err := c.p.keySetIn(ctx, own(c.ConnPool), st.Table, pk, keys)
	if err != nil {
		return "", nil, err
	}
	if !ok {
		if len(keys)*len(pk) > maxBindKeys {
			return "", nil, &envelope.Error{Kind: envelope.ErrUnsupported, Where: c.spec.Label + " update",
				Msg: fmt.Sprintf("an UPDATE with RETURNING that moves %d rows to new primary keys that one JSON parameter cannot carry (bytes, times through an unknown SQLite driver): at most %d at once", len(keys), maxBindKeys/len(pk))}
		}
		where = keysIn(pk, keys)
	}
	sel := &gorm.Statement{DB: c.db, Table: st.Table, TableExpr: st.TableExpr, Schema: st.Schema, Context: ctx, Clauses: map[string]clause.Clause{}}
	sel.AddClause(clause.Select{Columns: cols})
	sel.AddClause(clause.From{})
	sel.AddClause(clause.Where{Exprs: []clause.Expression{where}})
	sel.Build("SELECT", "FROM", "WHERE")
	return sel.SQL.String(), sel.Vars, nil
}

// prepare takes the write's savepoint and, for a real DELETE, reads what
// the database will cascade to.
func (c *capturePool) prepare(ctx context.Context, q string) error {
	st := c.db.Statement
	if err := c.p.ensureSavepoint(ctx, writeCtxOf(st)); err != nil {
		return err
	}
	c.update = len(q) >= 6 && strings.EqualFold(q[:6], "UPDATE")
	if c.update {
		c.changed = changedColumns(st)
		if c.spec != nil && !c.spec.Captures(envelope.Updated) {
			c.spec = nil
		}
		set := setColumns(st)
		if edges := c.p.updateEdges(c.db, st.Schema, st.Table, set); len(edges) > 0 {
			// ON UPDATE cascades: the parents' referenced values, then the
			// children referencing them, locked, before the UPDATE.
			if err := c.p.writeLock(ctx, st, c.ConnPool); err != nil {
				return err
			}
			cols := slices.Clone(keyColumns(st.Schema))
			for _, e := range edges {
				cols = union(cols, e.ref...)
			}
			q2, vars := c.p.selectWhere(c.db, cols, true)
			rows, err := own(c.ConnPool).QueryContext(ctx, q2, vars...)
			if err != nil {
				return fmt.Errorf("herald/gormcapture: lock %s rows: %w", st.Table, err)
			}
			parents, _, err := newScanner(st.Schema, cols).scan(ctx, rows, -1)
			if err != nil {
				return fmt.Errorf("herald/gormcapture: lock %s rows: %w", st.Table, err)
			}
			if c.updCascade, err = c.p.readUpdateCascade(ctx, c.db, own(c.ConnPool), st.Schema, st.Table, parents, set); err != nil {
				return err
			}
		}
		if c.spec != nil && (c.spec.NeedsBefore(envelope.Updated) || c.userReturning) {
			return c.p.writeLock(ctx, st, c.ConnPool)
		}
		return nil
	}
	if c.spec != nil && !c.spec.Captures(envelope.Deleted) {
		c.spec = nil
	}
	edges := c.p.cascadesFor(c.db, st.Schema, st.Table)
	if len(edges) == 0 && (!c.userReturning || c.spec == nil) {
		return nil
	}
	if err := c.p.writeLock(ctx, st, c.ConnPool); err != nil {
		return err
	}
	if len(edges) == 0 {
		return nil
	}
	cols := slices.Clone(keyColumns(st.Schema))
	for _, e := range edges {
		cols = union(cols, e.ref...)
	}
	q2, vars := c.p.selectWhere(c.db, cols, true)
	rows, err := own(c.ConnPool).QueryContext(ctx, q2, vars...)
	if err != nil {
		return fmt.Errorf("herald/gormcapture: lock %s rows: %w", st.Table, err)
	}
	parents, _, err := newScanner(st.Schema, cols).scan(ctx, rows, -1)
	if err != nil {
		return fmt.Errorf("herald/gormcapture: lock %s rows: %w", st.Table, err)
	}
	c.cascaded, c.updCascade, err = c.p.readCascade(ctx, c.db, own(c.ConnPool), st.Schema, st.Table, parents, c.at)
	return err
}

func (c *capturePool) readBefore(ctx context.Context, cols []string) error {
	q, vars := c.p.selectWhere(c.db, cols, true)
	rows, err := own(c.ConnPool).QueryContext(ctx, q, vars...)
	if err != nil {
		return fmt.Errorf("herald/gormcapture: read rows before the write: %w", err)
	}
	c.before, _, err = newScanner(c.db.Statement.Schema, cols).scan(ctx, rows, -1)
	if err != nil {
		return fmt.Errorf("herald/gormcapture: read rows before the write: %w", err)
	}
	return nil
}

func (c *capturePool) run(ctx context.Context, q string, args []any) (int64, error) {
	if c.p.dialect == envelope.MySQL {
		return c.runMySQL(ctx, q, args)
	}
	if err := c.prepare(ctx, q); err != nil {
		return 0, err
	}
	st := c.db.Statement
	var cols []string
	switch {
	case c.spec == nil:
		res, err := c.ConnPool.ExecContext(ctx, q, args...)
		if err != nil {
			return 0, err
		}
		return res.RowsAffected()
	case c.update:
		cols = payloadColumns(st.Schema, c.spec, c.spec.NeedsAfter(envelope.Updated))
		if c.spec.NeedsBefore(envelope.Updated) {
			if n, ok, err := c.updateWithBefore(ctx, payloadColumns(st.Schema, c.spec, true), cols); ok || err != nil {
				return n, err
			}
			if err := c.readBefore(ctx, payloadColumns(st.Schema, c.spec, true)); err != nil {
				return 0, err
			}
		}
	default:
		cols = payloadColumns(st.Schema, c.spec, c.spec.NeedsBefore(envelope.Deleted))
	}
	rows, err := c.ConnPool.QueryContext(ctx, q+" RETURNING "+quotedColumns(st, cols, true), args...)
	if err != nil {
		return 0, err
	}
	imgs, _, err := newScanner(st.Schema, cols).scan(ctx, rows, -1)
	if err != nil {
		return 0, err
	}
	if c.update {
		c.after = imgs
	} else {
		c.before = imgs
	}
	return int64(len(imgs)), nil
}

// updateWithBefore runs the UPDATE and reads the rows as they were in one
// statement on PostgreSQL, instead of a locking SELECT and then the
// UPDATE:
//
//	UPDATE t SET … FROM (SELECT id AS herald_b0, … FROM t WHERE <the WHERE> ORDER BY id FOR UPDATE) AS herald_old
//	WHERE t.id = herald_old.herald_b0 RETURNING herald_old.herald_b0, …, t.id, …
//
// The subquery locks the rows (in key order, like the SELECT it replaces)
// and yields them as they were; the join updates exactly those rows. ok is
// false where this does not apply (SQLite, an UPDATE … FROM).
func (c *capturePool) updateWithBefore(ctx context.Context, before, after []string) (n int64, ok bool, err error) {
	st := c.db.Statement
	q, vars, ok := c.buildUpdateWithBefore(ctx, before, after)
	if !ok {
		return 0, false, nil
	}
	rows, err := c.ConnPool.QueryContext(ctx, q, vars...)
	if err != nil {
		return 0, true, err
	}
	sc := newScanner(st.Schema, append(slices.Clone(before), after...))
	sc.split = len(before)
	c.after, _, err = sc.scan(ctx, rows, -1)
	if err != nil {
		return 0, true, err
	}
	c.before, c.paired = sc.firsts, true
	return int64(len(c.after)), true, nil
}

// buildUpdateWithBefore builds updateWithBefore's statement: its
// RETURNING is the columns before (as they were), then after (as the
// UPDATE left them). ok is false where it does not apply.
func (c *capturePool) buildUpdateWithBefore(ctx context.Context, before, after []string) (string, []any, bool) {
	st := c.db.Statement
	if c.p.dialect != envelope.Postgres {
		return "", nil, false
	}
	if _, from := st.Clauses["FROM"]; from {
		return "", nil, false
	}
	if _, set := st.Clauses["SET"]; !set {
		return "", nil, false
	}
	pk := keyColumns(st.Schema)
	alias := func(i int) string { return "herald_b" + strconv.Itoa(i) }
	u := &gorm.Statement{DB: c.db, Table: st.Table, TableExpr: st.TableExpr, Schema: st.Schema, Context: ctx, Clauses: map[string]clause.Clause{}}
	for _, name := range []string{"UPDATE", "SET", "WHERE"} {
		if cl, ok := st.Clauses[name]; ok {
			u.Clauses[name] = cl
		}
	}
	u.Build("UPDATE", "SET")
	_, _ = u.WriteString(" FROM (SELECT ")
	for i, col := range before {
		if i > 0 {
			_ = u.WriteByte(',')
		}
		u.WriteQuoted(clause.Column{Table: clause.CurrentTable, Name: col})
		_, _ = u.WriteString(" AS ")
		u.WriteQuoted(alias(i))
	}
	_, _ = u.WriteString(" FROM ")
	u.WriteQuoted(clause.Table{Name: clause.CurrentTable})
	if _, where := u.Clauses["WHERE"]; where {
		_ = u.WriteByte(' ')
		u.Build("WHERE")
	}
	_, _ = u.WriteString(" ORDER BY ")
	for i, k := range pk {
		if i > 0 {
			_ = u.WriteByte(',')
		}
		u.WriteQuoted(clause.Column{Table: clause.CurrentTable, Name: k})
	}
	_, _ = u.WriteString(` FOR UPDATE) AS "herald_old" WHERE `)
	for i, k := range pk {
		if i > 0 {
			_, _ = u.WriteString(" AND ")
		}
		u.WriteQuoted(clause.Column{Table: clause.CurrentTable, Name: k})
		_, _ = u.WriteString(` = "herald_old".`)
		u.WriteQuoted(alias(slices.Index(before, k)))
	}
	_, _ = u.WriteString(" RETURNING ")
	for i := range before {
		_, _ = u.WriteString(`"herald_old".`)
		u.WriteQuoted(alias(i))
		_ = u.WriteByte(',')
	}
	_, _ = u.WriteString(quotedColumns(st, after, true))
	return u.SQL.String(), u.Vars, true
}

// finish builds the statement's changes and writes their events.
func (c *capturePool) finish() error {
	if c.fused {
		return nil
	}
	st := c.db.Statement
	ctx := st.Context
	spec := c.spec
	var cs []envelope.Change
	if spec != nil {
		pk := keyColumns(st.Schema)
		if c.update {
			if c.userReturning {
				// The rows GORM read went to the caller; read them again.
				keys := make([][]any, len(c.before))
				for i, b := range c.before {
					keys[i] = make([]any, len(pk))
					for j, k := range pk {
						keys[i][j] = b[k]
					}
				}
				cols := payloadColumns(st.Schema, spec, spec.NeedsAfter(envelope.Updated))
				var err error
				c.after, err = c.p.selectByKeys(ctx, c.db, own(st.ConnPool), target{st.Table, st.TableExpr, st.Schema}, cols, pk, keys, false)
				if err != nil {
					return err
				}
			}
			var beforeBy map[string]image
			if spec.NeedsBefore(envelope.Updated) {
				beforeBy = make(map[string]image, len(c.before))
				for _, b := range c.before {
					beforeBy[keyOf(b, pk)] = b
				}
				if setsKey(c.changed, pk) && len(c.before) == 1 && len(c.after) == 1 {
					beforeBy[keyOf(c.after[0], pk)] = c.before[0]
				}
			}
			// PostgreSQL's UPDATE … FROM (SELECT … FOR UPDATE) returns each
			// row's old values beside its new ones: paired by position, also
			// when keys moved.
			paired := c.paired && len(c.before) == len(c.after)
			cs = make([]envelope.Change, 0, len(c.after))
			for i, a := range c.after {
				var before, after image
				if paired && beforeBy != nil {
					before = c.before[i]
				} else if beforeBy != nil {
					before = beforeBy[keyOf(a, pk)]
					if before == nil {
						return &envelope.Error{Kind: envelope.ErrUnsupported, Where: spec.Label + " update",
							Msg: "an update that moves rows to other primary keys cannot pair their before and after images; set the key of one row at a time"}
					}
				}
				if spec.NeedsAfter(envelope.Updated) {
					after = a
				}
				cs = append(cs, change(spec, st.Table, envelope.Updated, pkOf(a, pk), before, after, c.changed, c.at))
			}
		} else {
			cs = make([]envelope.Change, 0, len(c.before))
			for _, b := range c.before {
				var before image
				if spec.NeedsBefore(envelope.Deleted) {
					before = b
				}
				cs = append(cs, change(spec, st.Table, envelope.Deleted, pkOf(b, pk), before, nil, nil, c.at))
			}
		}
	}
	if len(c.updCascade) > 0 {
		bs, err := c.p.finishUpdateCascade(ctx, c.db, own(st.ConnPool), c.updCascade, c.at)
		if err != nil {
			return err
		}
		c.cascaded = append(c.cascaded, bs...)
	}
	batches := append([]batch{{spec, cs}}, c.cascaded...)
	if spec == nil {
		batches = c.cascaded
	}
	return c.p.emit(c.db, batches...)
}

func setsKey(changed, pk []string) bool {
	for _, c := range changed {
		if slices.Contains(pk, c) {
			return true
		}
	}
	return false
}

// changedColumns names the columns an UPDATE sets that the caller chose:
// its SET less what GORM adds itself (autoUpdateTime, unless the caller
// named the column; an optimistic-lock version).
func changedColumns(st *gorm.Statement) []string {
	set, _ := st.Clauses["SET"].Expression.(clause.Set)
	sch := st.Schema
	explicit := map[string]bool{}
	name := func(k string) string {
		if f := sch.LookUpField(k); f != nil && f.DBName != "" {
			return f.DBName
		}
		return k
	}
	switch d := st.Dest.(type) {
	case map[string]any:
		for k := range d {
			explicit[name(k)] = true
		}
	case *map[string]any:
		for k := range *d {
			explicit[name(k)] = true
		}
	}
	for _, s := range st.Selects {
		if s != "*" {
			explicit[name(s)] = true
		}
	}
	out := make([]string, 0, len(set))
	for _, a := range set {
		n := a.Column.Name
		if f := sch.LookUpField(n); f != nil {
			if f.DBName != "" {
				n = f.DBName
			}
			if (f.AutoUpdateTime > 0 && !explicit[n]) || isVersionField(f) {
				continue
			}
		}
		out = union(out, n)
	}
	return inTableOrder(sch, out)
}

// inTableOrder sorts column names by their position in the table
// (unknown names last, as given), so "changed" does not depend on how the
// caller listed them.
func inTableOrder(sch *schema.Schema, cols []string) []string {
	pos := func(c string) int {
		if i := slices.Index(sch.DBNames, c); i >= 0 {
			return i
		}
		return len(sch.DBNames)
	}
	slices.SortStableFunc(cols, func(a, b string) int { return pos(a) - pos(b) })
	return cols
}
