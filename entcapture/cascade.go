package entcapture

import (
	"fmt"
	"maps"

	"entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/envelope"
)

// maxCascadeDepth bounds the recursion of cascades through
// self-referencing or cyclic foreign keys.
const maxCascadeDepth = 64

// cascade reads, locked and before the delete, the rows of captured
// tables that the database will delete (ON DELETE CASCADE, recursively)
// or update (ON DELETE SET NULL) when the rows ids of parent are deleted,
// and records their changes: one statement per foreign key per level,
// whatever the number of rows. ent's hooks never see those rows.
func (s *scope) cascade(parent *Schema, ids []any, depth int) error {
	if len(ids) == 0 || len(parent.Cascades) == 0 {
		return nil
	}
	if depth > maxCascadeDepth {
		return &envelope.Error{Kind: envelope.ErrUnsupported, Where: parent.Name, Msg: fmt.Sprintf("cascade deeper than %d levels", maxCascadeDepth)}
	}
	for _, c := range parent.Cascades {
		child := c.Child
		h := hookOf(child)
		if h == nil || child.Scan == nil {
			continue
		}
		spec, err := h.spec(child, s.cd, s.writer)
		if err != nil {
			return err
		}
		op := envelope.Deleted
		if c.SetNull {
			op = envelope.Updated
		}
		if !spec.Captures(op) && (c.SetNull || len(child.Cascades) == 0) {
			continue
		}
		cols := []string{child.PK}
		for _, col := range append(spec.Columns(), c.Column) {
			if col != child.PK && !contains(cols, col) {
				cols = append(cols, col)
			}
		}
		sel := sql.Dialect(dialectName(s.d)).Select().From(sql.Table(child.Table))
		qc := make([]string, len(cols))
		for i, col := range cols {
			qc[i] = sel.C(col)
		}
		sel.Select(qc...).Where(sql.In(sel.C(c.Column), ids...))
		if s.d == envelope.Postgres {
			sel.ForUpdate()
		}
		got, err := s.query(sel, cols, child.Scan)
		if err != nil {
			return fmt.Errorf("herald/entcapture: %s: read rows a delete of %s reaches: %w", child.Name, parent.Name, err)
		}
		if len(got) == 0 {
			continue
		}
		at := now()
		cs := make([]envelope.Change, 0, len(got))
		for _, r := range got {
			ch := envelope.Change{Model: spec.Label, Table: child.Table, Operation: op, PK: r[child.PK], OccurredAt: at}
			if spec.Options.Payload != envelope.Keys {
				ch.Before = r
			}
			if c.SetNull {
				ch.Changed = []string{c.Column}
				if spec.Options.Payload != envelope.Keys {
					after := maps.Clone(r)
					after[c.Column] = nil
					ch.After = after
				}
			}
			cs = append(cs, ch)
		}
		s.add(spec, cs...)
		if !c.SetNull {
			if err := s.cascade(child, pks(got, child.PK), depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
