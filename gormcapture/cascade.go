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

// cascadesFor returns the edges from rows of sch, written in table, that
// reach a captured model. Edges belong to the model type that declares
// them (or is referenced by them), not to a table name: two struct types
// on one table may declare different constraints, and a delete follows
// those of the type it deletes. A write of the model to another table
// (db.Table) follows none: the constraints are the model's table's.
func (p *Plugin) cascadesFor(db *gorm.DB, sch *schema.Schema, table string) []*cascadeEdge {
	if sch == nil || table != sch.Table {
		return nil
	}
	t := sch.ModelType
	if v, ok := p.cascades.Load(t); ok {
		return v.([]*cascadeEdge)
	}
	all := p.buildCascades(db)
	if _, ok := all[t]; !ok {
		all[t] = nil
	}
	for k, es := range all {
		p.cascades.LoadOrStore(k, es)
	}
	v, _ := p.cascades.Load(t)
	return v.([]*cascadeEdge)
}

func (p *Plugin) buildCascades(db *gorm.DB) map[reflect.Type][]*cascadeEdge {
	p.mu.Lock()
	known := slices.Clone(p.known)
	p.mu.Unlock()
	p.models.Range(func(k, v any) bool {
		if v.(*model).spec != nil {
			known = append(known, reflect.New(k.(reflect.Type)).Interface())
		}
		return true
	})
	edges := map[reflect.Type][]*cascadeEdge{}
	type edgeID struct {
		parent, child reflect.Type
		fk            string
	}
	seen := map[edgeID]bool{}
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
		parent := c.ReferenceSchema.ModelType
		id := edgeID{parent, c.Schema.ModelType, strings.Join(e.fk, ",")}
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
	memo := map[reflect.Type]int{} // 0 unknown, 1 visiting, 2 yes, 3 no
	var reaches func(t reflect.Type) bool
	reaches = func(t reflect.Type) bool {
		switch memo[t] {
		case 1, 3:
			return false
		case 2:
			return true
		}
		memo[t] = 1
		ok := false
		for _, e := range edges[t] {
			if p.isCaptured(e.child) || (!e.setNull && reaches(e.child.ModelType)) {
				ok = true
			}
		}
		memo[t] = 3
		if ok {
			memo[t] = 2
		}
		return ok
	}
	out := map[reflect.Type][]*cascadeEdge{}
	for parent, es := range edges {
		for _, e := range es {
			if p.isCaptured(e.child) || (!e.setNull && reaches(e.child.ModelType)) {
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
// sch in table) makes the database delete or null, level by level, and returns
// their changes grouped per model.
func (p *Plugin) readCascade(ctx context.Context, db *gorm.DB, q gorm.ConnPool, sch *schema.Schema, table string, parents []image, at time.Time) ([]batch, error) {
	type level struct {
		sch   *schema.Schema
		table string
		rows  []image
	}
	queue := []level{{sch, table, parents}}
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
		for _, e := range p.cascadesFor(db, lv.sch, lv.table) {
			keys := distinctKeys(lv.rows, e.ref)
			if len(keys) == 0 {
				continue
			}
			child := e.child
			spec := p.modelFor(child).spec
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
				queue = append(queue, level{child, child.Table, fresh})
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
