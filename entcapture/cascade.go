package entcapture

import (
	"fmt"
	"maps"
	"slices"

	"entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/entcapture/entcapturert"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capture"
)

// maxCascadeDepth bounds the recursion of cascades through
// self-referencing or cyclic foreign keys.
const maxCascadeDepth = 64

// cascade reads, locked and before the delete, the rows of captured
// tables that the database will delete (ON DELETE CASCADE, recursively,
// also through tables that are not captured) or update (ON DELETE SET
// NULL) when the rows of parent are deleted, and records their changes:
// one statement per foreign key per level for the deletes, then one per
// SET NULL foreign key of each schema with deleted rows, whatever the
// number of rows. ent's hooks never see those rows.
//
// Each row gets one change: a row the delete reaches twice (a
// self-referencing tree whose rows the delete names too, a row with two
// foreign keys to deleted rows) is deleted once; a row both nulled and
// deleted is deleted; a row nulled through two foreign keys is one update
// of both columns.
func (s *scope) cascade(parent *entcapturert.Schema, rows []map[string]any) error {
	if len(rows) == 0 || len(parent.Cascades) == 0 {
		return nil
	}
	gone := map[*entcapturert.Schema]map[string]bool{} // rows the delete removes
	mark := func(sch *entcapturert.Schema, r map[string]any) bool {
		m := gone[sch]
		if m == nil {
			m = map[string]bool{}
			gone[sch] = m
		}
		k := keyText(sch, r)
		if m[k] {
			return false
		}
		m[k] = true
		return true
	}
	type level struct {
		sch *entcapturert.Schema
		ids []any
	}
	var order []*entcapturert.Schema // schemas with deleted rows, first seen first
	deleted := map[*entcapturert.Schema][]any{}
	note := func(sch *entcapturert.Schema, ids []any) {
		if _, ok := deleted[sch]; !ok {
			order = append(order, sch)
		}
		deleted[sch] = append(deleted[sch], ids...)
	}
	for _, r := range rows {
		mark(parent, r)
	}
	ids := pks(rows, parent.PK)
	note(parent, ids)
	queue := []level{{parent, ids}}
	for depth := 0; len(queue) > 0; depth++ {
		if depth > maxCascadeDepth {
			return &envelope.Error{Kind: envelope.ErrUnsupported, Where: parent.Name, Msg: fmt.Sprintf("cascade deeper than %d levels", maxCascadeDepth)}
		}
		var next []level
		for _, l := range queue {
			for _, c := range l.sch.Cascades {
				if c.SetNull || c.Child.Scan == nil {
					continue
				}
				spec, err := s.specOf(c.Child)
				if err != nil {
					return err
				}
				if (spec == nil || !spec.Captures(envelope.Deleted)) && len(c.Child.Cascades) == 0 {
					continue
				}
				got, err := s.cascadeRows(c, spec, l.sch, l.ids)
				if err != nil {
					return err
				}
				got = slices.DeleteFunc(got, func(r map[string]any) bool { return !mark(c.Child, r) })
				if len(got) == 0 {
					continue
				}
				if spec != nil {
					at := now()
					cs := make([]envelope.Change, 0, len(got))
					for _, r := range got {
						ch := envelope.Change{Model: spec.Label, Table: c.Child.Table, Operation: envelope.Deleted, PK: rowKey(c.Child, r), OccurredAt: at}
						if spec.Options.Payload != envelope.Keys {
							ch.Before = r
						}
						cs = append(cs, ch)
					}
					s.add(spec, cs...)
				}
				if len(c.Child.Cascades) > 0 && len(c.Child.Key) == 0 {
					ids := pks(got, c.Child.PK)
					note(c.Child, ids)
					next = append(next, level{c.Child, ids})
				}
			}
		}
		queue = next
	}
	// SET NULL, from every schema with deleted rows, for the rows that
	// stay.
	type nulled struct {
		row  map[string]any
		cols map[string]bool
	}
	for _, p := range order {
		updates := map[*entcapturert.Schema]map[string]*nulled{}
		var children []*entcapturert.Schema
		specs := map[*entcapturert.Schema]*capture.Spec{}
		for _, c := range p.Cascades {
			if !c.SetNull || c.Child.Scan == nil {
				continue
			}
			spec, err := s.specOf(c.Child)
			if err != nil {
				return err
			}
			if spec == nil || !spec.Captures(envelope.Updated) {
				continue
			}
			got, err := s.cascadeRows(c, spec, p, deleted[p])
			if err != nil {
				return err
			}
			for _, r := range got {
				k := keyText(c.Child, r)
				if gone[c.Child][k] {
					continue
				}
				m := updates[c.Child]
				if m == nil {
					m = map[string]*nulled{}
					updates[c.Child] = m
					children = append(children, c.Child)
					specs[c.Child] = spec
				}
				n := m[k]
				if n == nil {
					n = &nulled{row: r, cols: map[string]bool{}}
					m[k] = n
				}
				n.cols[c.Column] = true
			}
		}
		for _, child := range children {
			spec := specs[child]
			at := now()
			var cs []envelope.Change
			for _, n := range updates[child] {
				var changed []string
				for _, col := range child.Columns {
					if n.cols[col] {
						changed = append(changed, col)
					}
				}
				ch := envelope.Change{Model: spec.Label, Table: child.Table, Operation: envelope.Updated, PK: rowKey(child, n.row),
					Changed: changed, OccurredAt: at}
				if spec.Options.Payload != envelope.Keys {
					after := maps.Clone(n.row)
					for _, col := range changed {
						after[col] = nil
					}
					ch.Before, ch.After = n.row, after
				}
				cs = append(cs, ch)
			}
			s.add(spec, cs...)
		}
	}
	return nil
}

// cascadeRows reads, locked, the rows of c's child whose foreign key
// holds one of ids (rows of parent): the payload columns when spec
// captures the child, its key otherwise, and the foreign key.
func (s *scope) cascadeRows(c entcapturert.Cascade, spec *capture.Spec, parent *entcapturert.Schema, ids []any) ([]map[string]any, error) {
	child := c.Child
	cols := slices.Clone(child.KeyColumns())
	var more []string
	if spec != nil {
		more = spec.Columns()
	}
	for _, col := range append(more, c.Column) {
		if !slices.Contains(cols, col) {
			cols = append(cols, col)
		}
	}
	sel := sql.Dialect(dialectName(s.d)).Select().From(from(s.g, child))
	qc := make([]string, len(cols))
	for i, col := range cols {
		qc[i] = sel.C(col)
	}
	sel.Select(qc...).Where(inSetP(s.d, quotedTable(s.d, s.g, child), sel, []string{c.Column}, tuplesOf(ids)))
	if locks(s.d) {
		sel.ForUpdate()
	}
	got, err := s.query(sel, cols, child.Scan)
	if err != nil {
		return nil, fmt.Errorf("herald/entcapture: %s: read rows a delete of %s reaches: %w", child.Name, parent.Name, err)
	}
	return got, nil
}
