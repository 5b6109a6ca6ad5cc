package entcapture

import (
	"fmt"
	"slices"

	"entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/envelope"
)

// Join rows that an edge setter (AddClubs, RemoveClubs, ClearClubs) writes
// go straight from ent's sqlgraph to the table, past every hook. When the
// join table is a captured edge schema, the owner's capture reads the join
// rows the setter can touch before the write (locked) and after it, and
// captures the difference: rows that appeared as inserted, rows that went
// as deleted. Two statements per edge per write, whatever the number of
// rows.

// edgeWrite is one edge a mutation changes.
type edgeWrite struct {
	e       ThroughEdge
	spec    *envelope.Spec
	others  []any // the other side's ids the setter names; nil when cleared
	cleared bool
	before  map[string]map[string]any
}

// edgeWrites lists the mutation's changes to edges through captured edge
// schemas.
func (s *scope) edgeWrites(w *write) ([]*edgeWrite, error) {
	var out []*edgeWrite
	for _, e := range w.sch.Edges {
		added, removed, cleared := w.g.AddedIDs(e.Name), w.g.RemovedIDs(e.Name), w.g.EdgeCleared(e.Name)
		if len(added) == 0 && len(removed) == 0 && !cleared {
			continue
		}
		h := hookOf(e.Through)
		if h == nil || e.Through.Scan == nil {
			continue
		}
		spec, err := h.spec(e.Through, s.cd, s.writer)
		if err != nil {
			return nil, err
		}
		ew := &edgeWrite{e: e, spec: spec, cleared: cleared}
		if !cleared {
			for _, id := range slices.Concat(added, removed) {
				ew.others = append(ew.others, id)
			}
		}
		out = append(out, ew)
	}
	return out, nil
}

// joinRows reads the join rows of the owners that the edge write can
// touch, keyed by the edge schema's id.
func (s *scope) joinRows(ew *edgeWrite, owners []any, lock bool) (map[string]map[string]any, error) {
	t := ew.e.Through
	cols := []string{t.PK}
	for _, c := range append(ew.spec.Columns(), ew.e.Own, ew.e.Other) {
		if !slices.Contains(cols, c) {
			cols = append(cols, c)
		}
	}
	sel := sql.Dialect(dialectName(s.d)).Select().From(sql.Table(t.Table))
	qc := make([]string, len(cols))
	for i, c := range cols {
		qc[i] = sel.C(c)
	}
	sel.Select(qc...).Where(sql.In(sel.C(ew.e.Own), owners...))
	if !ew.cleared {
		sel.Where(sql.In(sel.C(ew.e.Other), ew.others...))
	}
	if lock && s.d == envelope.Postgres {
		sel.ForUpdate()
	}
	got, err := s.query(sel, cols, t.Scan)
	if err != nil {
		return nil, fmt.Errorf("herald/entcapture: %s: read join rows: %w", t.Name, err)
	}
	out := make(map[string]map[string]any, len(got))
	for _, r := range got {
		out[envelope.KeyText(r[t.PK])] = r
	}
	return out, nil
}

// edgesBefore reads, locked, the join rows the mutation's edge setters
// can touch, before the write.
func (s *scope) edgesBefore(ews []*edgeWrite, owners []any) error {
	if len(owners) == 0 {
		return nil
	}
	for _, ew := range ews {
		rows, err := s.joinRows(ew, owners, true)
		if err != nil {
			return err
		}
		ew.before = rows
	}
	return nil
}

// edgesAfter reads the join rows again after the write and records what
// appeared (inserted) and what went (deleted).
func (s *scope) edgesAfter(ews []*edgeWrite, owners []any) error {
	if len(owners) == 0 {
		return nil
	}
	at := now()
	for _, ew := range ews {
		after, err := s.joinRows(ew, owners, false)
		if err != nil {
			return err
		}
		t := ew.e.Through
		var cs []envelope.Change
		for k, r := range after {
			if _, ok := ew.before[k]; !ok {
				cs = append(cs, envelope.Change{Model: ew.spec.Label, Table: t.Table, Operation: envelope.Inserted, PK: r[t.PK], After: r, OccurredAt: at})
			}
		}
		for k, r := range ew.before {
			if _, ok := after[k]; !ok {
				cs = append(cs, envelope.Change{Model: ew.spec.Label, Table: t.Table, Operation: envelope.Deleted, PK: r[t.PK], Before: r, OccurredAt: at})
			}
		}
		s.add(ew.spec, cs...)
	}
	return nil
}
