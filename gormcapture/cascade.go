package gormcapture

import (
	"context"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"

	"github.com/heraldgo/herald/envelope"
)

// The database's own ON DELETE CASCADE / SET NULL changes rows without any
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
	setNull bool
}

// cascadesFor returns the edges from table that reach a captured model.
func (p *Plugin) cascadesFor(db *gorm.DB, table string) []*cascadeEdge {
	if v, ok := p.cascades.Load(table); ok {
		return v.([]*cascadeEdge)
	}
	all := p.buildCascades(db)
	if _, ok := all[table]; !ok {
		all[table] = nil
	}
	for t, es := range all {
		p.cascades.LoadOrStore(t, es)
	}
	v, _ := p.cascades.Load(table)
	return v.([]*cascadeEdge)
}

func (p *Plugin) buildCascades(db *gorm.DB) map[string][]*cascadeEdge {
	p.mu.Lock()
	known := slices.Clone(p.known)
	p.mu.Unlock()
	p.models.Range(func(k, v any) bool {
		if v.(*model).spec != nil {
			known = append(known, reflect.New(k.(reflect.Type)).Interface())
		}
		return true
	})
	edges := map[string][]*cascadeEdge{}
	seen := map[string]bool{}
	consider := func(c *schema.Constraint) {
		if c == nil || c.Schema == nil || c.ReferenceSchema == nil || len(c.ForeignKeys) == 0 {
			return
		}
		od := strings.ToUpper(strings.Join(strings.Fields(c.OnDelete), " "))
		if od != "CASCADE" && od != "SET NULL" {
			return
		}
		e := &cascadeEdge{child: c.Schema, setNull: od == "SET NULL"}
		for _, f := range c.ForeignKeys {
			e.fk = append(e.fk, f.DBName)
		}
		for _, f := range c.References {
			e.ref = append(e.ref, f.DBName)
		}
		parent := c.ReferenceSchema.Table
		id := parent + "\x00" + c.Schema.Table + "\x00" + strings.Join(e.fk, ",")
		if seen[id] {
			return
		}
		seen[id] = true
		edges[parent] = append(edges[parent], e)
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
	// needs would only cost statements.
	memo := map[string]int{} // 0 unknown, 1 visiting, 2 yes, 3 no
	var reaches func(table string) bool
	reaches = func(table string) bool {
		switch memo[table] {
		case 1, 3:
			return false
		case 2:
			return true
		}
		memo[table] = 1
		ok := false
		for _, e := range edges[table] {
			if p.isCaptured(e.child) || (!e.setNull && reaches(e.child.Table)) {
				ok = true
			}
		}
		memo[table] = 3
		if ok {
			memo[table] = 2
		}
		return ok
	}
	out := map[string][]*cascadeEdge{}
	for parent, es := range edges {
		for _, e := range es {
			if p.isCaptured(e.child) || (!e.setNull && reaches(e.child.Table)) {
				out[parent] = append(out[parent], e)
			}
		}
	}
	return out
}

func (p *Plugin) isCaptured(sch *schema.Schema) bool {
	m := p.modelFor(sch)
	return m.spec != nil
}

// readCascade reads, locked, the rows that deleting parents (rows of
// table) makes the database delete or null, level by level, and returns
// their changes grouped per model.
func (p *Plugin) readCascade(ctx context.Context, db *gorm.DB, q gorm.ConnPool, table string, parents []image, at time.Time) ([]batch, error) {
	type level struct {
		table string
		rows  []image
	}
	queue := []level{{table, parents}}
	deleted := map[string]bool{}
	var order []*schema.Schema
	groups := map[*schema.Schema]*batch{}
	add := func(sch *schema.Schema, spec *envelope.Spec, c envelope.Change) {
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
		for _, e := range p.cascadesFor(db, lv.table) {
			keys := distinctKeys(lv.rows, e.ref)
			if len(keys) == 0 {
				continue
			}
			child := e.child
			spec := p.modelFor(child).spec
			pk := child.PrimaryFieldDBNames
			cols := union(slices.Clone(pk), e.fk...)
			if !e.setNull {
				for _, ce := range p.cascadesFor(db, child.Table) {
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
			if e.setNull {
				if spec == nil || !spec.Captures(envelope.Updated) {
					continue
				}
				for _, r := range rows {
					after := maps.Clone(r)
					for _, f := range e.fk {
						after[f] = nil
					}
					var b, a image
					if spec.NeedsBefore(envelope.Updated) {
						b = r
					}
					if spec.NeedsAfter(envelope.Updated) {
						a = after
					}
					add(child, spec, change(spec, child.Table, envelope.Updated, pkOf(r, pk), b, a, slices.Clone(e.fk), at))
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
				queue = append(queue, level{child.Table, fresh})
			}
		}
	}
	out := make([]batch, 0, len(order))
	for _, s := range order {
		out = append(out, *groups[s])
	}
	return out, nil
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
