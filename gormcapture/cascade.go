package gormcapture

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capture"
)

// The database's own ON DELETE CASCADE / SET NULL / SET DEFAULT changes rows without any
// callback. The plugin knows those constraints from the constraint tags of
// the models it was told about (Config.Models, Capture, and captured
// models it has seen), and before a DELETE reads, locked, the rows the
// database is about to delete or null, recursively through cascades, so
// they are captured as deleted / updated in the same transaction.

// cascadeEdge is one ON DELETE constraint: deleting parent rows deletes
// (or nulls the key of) the child rows whose fk columns equal the
// parent's ref columns.
type cascadeEdge struct {
	child   *schema.Schema
	fk, ref []string
	// setNull: the database rewrites the child's key rather than
	// deleting or cascading it: SET NULL, or SET DEFAULT (followed alike:
	// the rows are read again after the write, whatever value it set).
	setNull bool
	action  string // "CASCADE", "SET NULL", "SET DEFAULT"
}

// cascadesFor returns the ON DELETE edges from rows of sch, written in
// table, that reach a captured model. Edges belong to the model type that
// declares them (or is referenced by them), not to a table name: two
// struct types on one table may declare different constraints, and a
// delete follows those of the type it deletes. A write of the model to
// another table (db.Table) follows none: the constraints are the model's
// table's.
func (p *Plugin) cascadesFor(db *gorm.DB, sch *schema.Schema, table string) []*cascadeEdge {
	return p.edgesFor(db, sch, table, false)
}

// updateCascadesFor returns the ON UPDATE edges from rows of sch, written
// in table, that reach a captured model (per model type, as cascadesFor).
func (p *Plugin) updateCascadesFor(db *gorm.DB, sch *schema.Schema, table string) []*cascadeEdge {
	return p.edgesFor(db, sch, table, true)
}

// cascadeKey keys Plugin.cascades: the parent's model type, and whether
// the edges are its ON UPDATE ones (else its ON DELETE ones).
type cascadeKey struct {
	parent   reflect.Type
	onUpdate bool
}

func (p *Plugin) edgesFor(db *gorm.DB, sch *schema.Schema, table string, onUpdate bool) []*cascadeEdge {
	if sch == nil || table != sch.Table {
		return nil
	}
	key := cascadeKey{sch.ModelType, onUpdate}
	if v, ok := p.cascades.Load(key); ok {
		return v.([]*cascadeEdge)
	}
	all := p.buildCascades(db)
	if _, ok := all[key]; !ok {
		all[key] = nil
	}
	for t, es := range all {
		p.cascades.LoadOrStore(t, es)
	}
	v, _ := p.cascades.Load(key)
	return v.([]*cascadeEdge)
}

// buildCascades returns the edges of every constraint the plugin knows,
// under their parent's model type, ON DELETE and ON UPDATE ones apart.
func (p *Plugin) buildCascades(db *gorm.DB) map[cascadeKey][]*cascadeEdge {
	p.mu.Lock()
	known := slices.Clone(p.known)
	p.mu.Unlock()
	p.models.Range(func(k, v any) bool {
		if v.(*model).spec != nil {
			known = append(known, reflect.New(k.(reflect.Type)).Interface())
		}
		return true
	})
	edges := map[cascadeKey][]*cascadeEdge{}
	type edgeID struct {
		key   cascadeKey
		child reflect.Type
		fk    string
	}
	seen := map[edgeID]bool{}
	consider := func(c *schema.Constraint) {
		if c == nil || c.Schema == nil || c.ReferenceSchema == nil || len(c.ForeignKeys) == 0 {
			return
		}
		for _, onUpdate := range []bool{false, true} {
			action, key := c.OnDelete, cascadeKey{c.ReferenceSchema.ModelType, onUpdate}
			if onUpdate {
				action = c.OnUpdate
			}
			action = strings.ToUpper(strings.Join(strings.Fields(action), " "))
			if action != "CASCADE" && action != "SET NULL" && action != "SET DEFAULT" {
				continue
			}
			e := &cascadeEdge{child: c.Schema, setNull: action != "CASCADE", action: action}
			for _, f := range c.ForeignKeys {
				e.fk = append(e.fk, f.DBName)
			}
			for _, f := range c.References {
				e.ref = append(e.ref, f.DBName)
			}
			id := edgeID{key, c.Schema.ModelType, strings.Join(e.fk, ",")}
			if seen[id] {
				continue
			}
			seen[id] = true
			edges[key] = append(edges[key], e)
		}
	}
	seenSchema := map[*schema.Schema]bool{}
	for _, m := range known {
		st := &gorm.Statement{DB: db}
		if err := st.Parse(m); err != nil || seenSchema[st.Schema] {
			continue
		}
		seenSchema[st.Schema] = true
		for _, rel := range st.Schema.Relationships.Relations {
			consider(rel.ParseConstraint())
			if rel.JoinTable != nil {
				for _, r2 := range rel.JoinTable.Relationships.Relations {
					consider(r2.ParseConstraint())
				}
			}
		}
	}
	// Keep only edges that lead to a captured model: reading rows no event
	// needs would only cost statements. A deleted child row cascades
	// further through ON DELETE edges; an updated child's key further
	// through ON UPDATE edges.
	memo := map[cascadeKey]int{} // 0 unknown, 1 visiting, 2 yes, 3 no
	var reaches func(key cascadeKey) bool
	reaches = func(key cascadeKey) bool {
		switch memo[key] {
		case 1, 3:
			return false
		case 2:
			return true
		}
		memo[key] = 1
		ok := false
		for _, e := range edges[key] {
			if p.isCaptured(e.child) || (!e.setNull && reaches(nextKey(key, e))) {
				ok = true
			}
		}
		memo[key] = 3
		if ok {
			memo[key] = 2
		}
		return ok
	}
	out := map[cascadeKey][]*cascadeEdge{}
	for key, es := range edges {
		for _, e := range es {
			if p.isCaptured(e.child) || (!e.setNull && reaches(nextKey(key, e))) {
				out[key] = append(out[key], e)
			}
		}
	}
	return out
}

// nextKey is the key of the edges a cascade along e goes on through.
func nextKey(key cascadeKey, e *cascadeEdge) cascadeKey {
	return cascadeKey{e.child.ModelType, key.onUpdate}
}

func (p *Plugin) isCaptured(sch *schema.Schema) bool {
	m := p.modelFor(sch)
	return m.spec != nil
}

// readCascade reads, locked, the rows that deleting parents (rows of
// sch in table) makes the database delete or null, level by level, and returns
// the changes of the deleted ones grouped per model, and the nulled ones
// as they were: their events are built after the DELETE, from the rows
// read again (finishUpdateCascade), as the database left them.
func (p *Plugin) readCascade(ctx context.Context, db *gorm.DB, q gorm.ConnPool, sch *schema.Schema, table string, parents []image, at time.Time) ([]batch, []updateCascade, error) {
	type level struct {
		sch   *schema.Schema
		table string
		rows  []image
	}
	queue := []level{{sch, table, parents}}
	var nulled []updateCascade
	deleted := map[string]bool{}
	var order []*schema.Schema
	groups := map[*schema.Schema]*batch{}
	add := func(sch *schema.Schema, spec *capture.Spec, c envelope.Change) {
		b := groups[sch]
		if b == nil {
			b = &batch{spec: spec}
			groups[sch] = b
			order = append(order, sch)
		}
		b.changes = append(b.changes, c)
	}
	for len(queue) > 0 {
		lv := queue[0]
		queue = queue[1:]
		for _, e := range p.cascadesFor(db, lv.sch, lv.table) {
			keys := distinctKeys(lv.rows, e.ref)
			if len(keys) == 0 {
				continue
			}
			child := e.child
			spec, err := p.typedSpec(ctx, db.Statement, q, p.modelFor(child), child.Table)
			if err != nil {
				return nil, nil, err
			}
			pk := keyColumns(child)
			cols := union(slices.Clone(pk), e.fk...)
			if !e.setNull {
				for _, ce := range p.cascadesFor(db, child, child.Table) {
					cols = union(cols, ce.ref...)
				}
			}
			if spec != nil {
				cols = union(cols, spec.Columns()...)
			}
			rows, err := p.selectByKeys(ctx, db, q, target{child.Table, nil, child}, cols, e.fk, keys, true)
			if err != nil {
				return nil, nil, err
			}
			if e.setNull {
				if spec != nil && spec.Captures(envelope.Updated) && len(rows) > 0 {
					nulled = append(nulled, updateCascade{e, spec, rows})
				}
				continue
			}
			var fresh []image
			for _, r := range rows {
				id := child.Table + "\x00" + keyOf(r, pk)
				if deleted[id] {
					continue
				}
				deleted[id] = true
				fresh = append(fresh, r)
				if spec != nil && spec.Captures(envelope.Deleted) {
					var b image
					if spec.NeedsBefore(envelope.Deleted) {
						b = r
					}
					add(child, spec, change(spec, child.Table, envelope.Deleted, pkOf(r, pk), b, nil, nil, at))
				}
			}
			if len(fresh) > 0 {
				queue = append(queue, level{child, child.Table, fresh})
			}
		}
	}
	out := make([]batch, 0, len(order))
	for _, s := range order {
		out = append(out, *groups[s])
	}
	return out, nulled, nil
}

// distinctKeys returns the distinct non-NULL tuples of cols in rows.
func distinctKeys(rows []image, cols []string) [][]any {
	seen := map[string]bool{}
	var out [][]any
next:
	for _, r := range rows {
		k := make([]any, len(cols))
		for i, c := range cols {
			v, ok := r[c]
			if !ok || v == nil {
				continue next
			}
			k[i] = v
		}
		id := keyOf(r, cols)
		if seen[id] {
			continue
		}
		seen[id] = true
		out = append(out, k)
	}
	return out
}

// The database's own ON UPDATE CASCADE / SET NULL / SET DEFAULT rewrites the foreign
// keys of child rows when an UPDATE changes the parent columns they
// reference. Before such an UPDATE the plugin reads, locked, the child
// rows referencing the rows it is about to update (level by level, one
// statement per constraint and level, through children whose rewritten
// key is referenced in turn); after it, it reads those child rows again by
// their primary keys (one statement per child table and level) and
// captures as updated, with changed = the foreign-key columns, those whose
// key the database did change.

// updateCascade is one constraint's child rows as they were before the
// UPDATE.
type updateCascade struct {
	edge *cascadeEdge
	spec *capture.Spec // nil: not captured (read to follow the cascade further)
	rows []image
}

// setColumns names every column an UPDATE sets (GORM's own included).
func setColumns(st *gorm.Statement) []string {
	set, _ := st.Clauses["SET"].Expression.(clause.Set)
	out := make([]string, 0, len(set))
	for _, a := range set {
		n := a.Column.Name
		if f := st.Schema.LookUpField(n); f != nil && f.DBName != "" {
			n = f.DBName
		}
		out = append(out, n)
	}
	return out
}

func intersects(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

// updateEdges returns the ON UPDATE edges from rows of sch in table whose
// referenced columns are among set.
func (p *Plugin) updateEdges(db *gorm.DB, sch *schema.Schema, table string, set []string) []*cascadeEdge {
	var out []*cascadeEdge
	for _, e := range p.updateCascadesFor(db, sch, table) {
		if intersects(e.ref, set) {
			out = append(out, e)
		}
	}
	return out
}

// readUpdateCascade reads, locked, the child rows that updating set on
// parents (rows of sch in table, with the referenced columns) makes the
// database rewrite.
func (p *Plugin) readUpdateCascade(ctx context.Context, db *gorm.DB, q gorm.ConnPool, sch *schema.Schema, table string, parents []image, set []string) ([]updateCascade, error) {
	type level struct {
		sch   *schema.Schema
		table string
		rows  []image
		set   []string
	}
	var out []updateCascade
	queue := []level{{sch, table, parents, set}}
	for hops := 0; len(queue) > 0; hops++ {
		lv := queue[0]
		queue = queue[1:]
		if hops > 64 {
			return nil, &envelope.Error{Kind: envelope.ErrUnsupported, Where: "gormcapture",
				Msg: "ON UPDATE cascades deeper than 64 levels (a cycle of constraints?) cannot be captured"}
		}
		for _, e := range p.updateEdges(db, lv.sch, lv.table, lv.set) {
			keys := distinctKeys(lv.rows, e.ref)
			if len(keys) == 0 {
				continue
			}
			child := e.child
			spec, err := p.typedSpec(ctx, db.Statement, q, p.modelFor(child), child.Table)
			if err != nil {
				return nil, err
			}
			if spec != nil && !spec.Captures(envelope.Updated) {
				spec = nil
			}
			pk := keyColumns(child)
			cols := union(slices.Clone(pk), e.fk...)
			var further []*cascadeEdge
			if !e.setNull {
				further = p.updateEdges(db, child, child.Table, e.fk)
				for _, ce := range further {
					cols = union(cols, ce.ref...)
				}
			}
			if spec != nil {
				cols = union(cols, spec.Columns()...)
			}
			rows, err := p.selectByKeys(ctx, db, q, target{child.Table, nil, child}, cols, e.fk, keys, true)
			if err != nil {
				return nil, err
			}
			if len(rows) == 0 {
				continue
			}
			if spec != nil && (len(pk) == 0 || intersects(pk, e.fk)) {
				return nil, &envelope.Error{Kind: envelope.ErrUnsupported, Where: child.Name,
					Msg: fmt.Sprintf("an ON UPDATE %s into primary-key columns (%s) cannot be captured: the rewritten rows cannot be read again by their keys",
						e.action, strings.Join(e.fk, ","))}
			}
			if spec != nil {
				out = append(out, updateCascade{e, spec, rows})
			}
			if len(further) > 0 {
				queue = append(queue, level{child, child.Table, rows, e.fk})
			}
		}
	}
	return out, nil
}

// finishUpdateCascade reads the children again after the UPDATE (or the
// DELETE whose ON DELETE SET NULL nulled them) and returns the changes of
// those whose foreign key the database rewrote, with the rows as it left
// them.
func (p *Plugin) finishUpdateCascade(ctx context.Context, db *gorm.DB, q gorm.ConnPool, ucs []updateCascade, at time.Time) ([]batch, error) {
	var out []batch
	seen := map[string]bool{}
	for _, uc := range ucs {
		child, spec := uc.edge.child, uc.spec
		pk := keyColumns(child)
		keys := distinctKeys(uc.rows, pk)
		cols := payloadColumns(child, spec, spec.NeedsAfter(envelope.Updated))
		cols = union(cols, uc.edge.fk...)
		now, err := p.selectByKeys(ctx, db, q, target{child.Table, nil, child}, cols, pk, keys, false)
		if err != nil {
			return nil, err
		}
		afterBy := make(map[string]image, len(now))
		for _, a := range now {
			afterBy[keyOf(a, pk)] = a
		}
		b := batch{spec: spec}
		for _, before := range uc.rows {
			k := keyOf(before, pk)
			after, ok := afterBy[k]
			if !ok || keyOf(after, uc.edge.fk) == keyOf(before, uc.edge.fk) || seen[child.Table+"\x00"+k] {
				continue // gone, or its key was not changed (the parent's was set to what it was)
			}
			seen[child.Table+"\x00"+k] = true
			var bi, ai image
			if spec.NeedsBefore(envelope.Updated) {
				bi = before
			}
			if spec.NeedsAfter(envelope.Updated) {
				ai = after
			}
			b.changes = append(b.changes, change(spec, child.Table, envelope.Updated, pkOf(before, pk), bi, ai, slices.Clone(uc.edge.fk), at))
		}
		if len(b.changes) > 0 {
			out = append(out, b)
		}
	}
	return out, nil
}
