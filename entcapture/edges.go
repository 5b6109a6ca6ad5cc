package entcapture

import (
	"fmt"
	"slices"

	"entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/entcapture/entcapturert"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capture"
	"github.com/heraldgo/herald/internal/names"
)

// Join rows that an edge setter (AddClubs, RemoveClubs, ClearClubs) writes
// go straight from ent's sqlgraph to the table, past every hook. When the
// join table is captured (an edge schema, or the join table of a plain
// edge between captured schemas), the owner's capture reads the join rows
// the setter can touch before the write (locked) and after it — for a
// bidirectional edge both ways, since ent writes each row with its
// reverse — and captures the difference: rows that appeared as inserted,
// rows that went as deleted. Two statements per edge per write, whatever
// the number of rows.

// edgeWrite is one edge a mutation changes.
type edgeWrite struct {
	e       entcapturert.ThroughEdge
	spec    *capture.Spec
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
		spec, err := s.specOf(e.Through)
		if err != nil {
			return nil, err
		}
		if spec == nil {
			continue
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
// touch, keyed by the edge schema's key. A bidirectional edge's rows are
// read both ways: ent writes each with its reverse.
func (s *scope) joinRows(ew *edgeWrite, owners []any, lock bool) (map[string]map[string]any, error) {
	t := ew.e.Through
	cols := slices.Clone(t.KeyColumns())
	for _, c := range append(ew.spec.Columns(), ew.e.Own, ew.e.Other) {
		if !slices.Contains(cols, c) {
			cols = append(cols, c)
		}
	}
	sel := sql.Dialect(dialectName(s.d)).Select().From(from(s.g, t))
	qc := make([]string, len(cols))
	for i, c := range cols {
		qc[i] = sel.C(c)
	}
	rowType := quotedTable(s.d, s.g, t)
	side := func(own, other string) []keySet {
		if ew.cleared {
			return []keySet{{[]string{own}, tuplesOf(owners)}}
		}
		return []keySet{{[]string{own}, tuplesOf(owners)}, {[]string{other}, tuplesOf(ew.others)}}
	}
	ors := [][]keySet{side(ew.e.Own, ew.e.Other)}
	if ew.e.Bidi {
		ors = append(ors, side(ew.e.Other, ew.e.Own))
	}
	sel.Select(qc...).Where(inSetsOrP(s.d, rowType, sel, t.KeyColumns(), ors...))
	if lock && locks(s.d) {
		sel.ForUpdate()
	}
	if lock {
		// Read before the write: on SQLite the write lock first.
		if err := s.writeLock(t); err != nil {
			return nil, err
		}
	}
	got, err := s.query(sel, cols, t.Scan)
	if err != nil {
		return nil, fmt.Errorf("herald/entcapture: %s: read join rows: %w", t.Name, err)
	}
	out := make(map[string]map[string]any, len(got))
	for _, r := range got {
		out[keyText(t, r)] = r
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
				cs = append(cs, envelope.Change{Model: ew.spec.Label, Table: t.Table, Operation: envelope.Inserted, PK: rowKey(t, r), After: r, OccurredAt: at})
			}
		}
		for k, r := range ew.before {
			if _, ok := after[k]; !ok {
				cs = append(cs, envelope.Change{Model: ew.spec.Label, Table: t.Table, Operation: envelope.Deleted, PK: rowKey(t, r), Before: r, OccurredAt: at})
			}
		}
		s.add(ew.spec, cs...)
	}
	return nil
}

// An edge setter on the side without the foreign key (user.AddPets,
// ClearPets; a bidirectional one-to-one's other row) updates the foreign
// key of rows of another table, again past every hook. When that table is
// captured, the rows the setter can touch are read before (locked) and
// after the write, and each row whose foreign key changed is captured as
// an update of that column. Two statements per edge per write.

// childWrite is one such edge a mutation changes.
type childWrite struct {
	e       entcapturert.ChildEdge
	spec    *capture.Spec
	ids     []any // the child rows the setter names
	cleared bool
	before  map[string]map[string]any
}

func (s *scope) childWrites(w *write) ([]*childWrite, error) {
	var out []*childWrite
	for _, e := range w.sch.ChildEdges {
		added, removed, cleared := w.g.AddedIDs(e.Name), w.g.RemovedIDs(e.Name), w.g.EdgeCleared(e.Name)
		if len(added) == 0 && len(removed) == 0 && !cleared {
			continue
		}
		spec, err := s.specOf(e.Child)
		if err != nil {
			return nil, err
		}
		if spec == nil || !spec.Captures(envelope.Updated) {
			continue
		}
		cw := &childWrite{e: e, spec: spec, cleared: cleared}
		for _, id := range slices.Concat(added, removed) {
			cw.ids = append(cw.ids, id)
		}
		out = append(out, cw)
	}
	return out, nil
}

// childRows reads the child rows the setter names, and with a clear those
// that point at the owners.
func (s *scope) childRows(cw *childWrite, owners, also []any, lock bool) (map[string]map[string]any, error) {
	c := cw.e.Child
	cols := []string{c.PK}
	for _, col := range append(cw.spec.Columns(), cw.e.Column) {
		if !slices.Contains(cols, col) {
			cols = append(cols, col)
		}
	}
	sel := sql.Dialect(dialectName(s.d)).Select().From(from(s.g, c))
	qc := make([]string, len(cols))
	for i, col := range cols {
		qc[i] = sel.C(col)
	}
	rowType := quotedTable(s.d, s.g, c)
	ors := [][]keySet{{{[]string{c.PK}, tuplesOf(slices.Concat(cw.ids, also))}}}
	if cw.cleared {
		ors = append(ors, []keySet{{[]string{cw.e.Column}, tuplesOf(owners)}})
	}
	sel.Select(qc...).Where(inSetsOrP(s.d, rowType, sel, c.KeyColumns(), ors...))
	if lock && locks(s.d) {
		sel.ForUpdate()
	}
	if lock {
		// Read before the write: on SQLite the write lock first.
		if err := s.writeLock(c); err != nil {
			return nil, err
		}
	}
	got, err := s.query(sel, cols, c.Scan)
	if err != nil {
		return nil, fmt.Errorf("herald/entcapture: %s: read rows an edge setter updates: %w", c.Name, err)
	}
	out := make(map[string]map[string]any, len(got))
	for _, r := range got {
		out[names.KeyText(r[c.PK])] = r
	}
	return out, nil
}

func (s *scope) childrenBefore(cws []*childWrite, owners []any) error {
	for _, cw := range cws {
		rows, err := s.childRows(cw, owners, nil, true)
		if err != nil {
			return err
		}
		cw.before = rows
	}
	return nil
}

func (s *scope) childrenAfter(cws []*childWrite, owners []any) error {
	bs, err := s.childChanges(cws, owners)
	if err != nil {
		return err
	}
	for _, b := range bs {
		s.add(b.spec, b.changes...)
	}
	return nil
}

// childChanges reads the child rows again after the write and returns
// the updates of those whose foreign key changed, by the child's spec.
func (s *scope) childChanges(cws []*childWrite, owners []any) ([]batch, error) {
	var out []batch
	at := now()
	for _, cw := range cws {
		// The rows read before too: a clear moves them out of the
		// owners' reach.
		var also []any
		for _, r := range cw.before {
			also = append(also, r[cw.e.Child.PK])
		}
		after, err := s.childRows(cw, owners, also, false)
		if err != nil {
			return nil, err
		}
		c := cw.e.Child
		var cs []envelope.Change
		for k, a := range after {
			b, ok := cw.before[k]
			if !ok || names.KeyText(b[cw.e.Column]) == names.KeyText(a[cw.e.Column]) && (b[cw.e.Column] == nil) == (a[cw.e.Column] == nil) {
				continue
			}
			ch := envelope.Change{Model: cw.spec.Label, Table: c.Table, Operation: envelope.Updated, PK: a[c.PK],
				Changed: []string{cw.e.Column}, OccurredAt: at}
			if cw.spec.Options.Payload != envelope.Keys {
				ch.Before, ch.After = b, a
			}
			cs = append(cs, ch)
		}
		out = append(out, batch{spec: cw.spec, changes: cs})
	}
	return out, nil
}

// selfChildren orders a self-referencing edge's updates after the
// update of their own rows. ent runs a row's own UPDATE first and then
// the edge's UPDATE of the foreign key of rows of the same table (a
// bidirectional one-to-one's other row, a tree's children), so a row
// both UPDATEs wrote gets the edge's event after its own, its before
// image the row the UPDATE's RETURNING left (rows, by key text) — or
// none when that row already holds the foreign key the edge wrote.
// Without RETURNING the UPDATE's after image is read after both
// statements, and in Keys mode the events hold no row: the edge's change
// folds into the UPDATE's (its column added to changed, in cs). sch is the updated schema; returned are the child
// batches left to add.
func selfChildren(sch *entcapturert.Schema, bs []batch, rows map[string]map[string]any, cs []envelope.Change, returned bool) []batch {
	byKey := map[string]int{}
	for i, c := range cs {
		byKey[names.KeyText(c.PK)] = i
	}
	for bi := range bs {
		kept := bs[bi].changes[:0]
		for _, ch := range bs[bi].changes {
			i, ok := byKey[names.KeyText(ch.PK)]
			if ch.Table != sch.Table || !ok {
				kept = append(kept, ch)
				continue
			}
			col := ch.Changed[0]
			r, ok := rows[names.KeyText(ch.PK)]
			if _, has := r[col]; !returned || !ok || !has || ch.After == nil {
				// No RETURNING, or not of that column (Keys mode): one
				// event of the row, naming both UPDATEs' columns.
				c := &cs[i]
				if !slices.Contains(c.Changed, col) {
					c.Changed = withColumn(sch, c.Changed, col)
				}
				continue
			}
			if v := r[col]; names.KeyText(v) == names.KeyText(ch.After[col]) && (v == nil) == (ch.After[col] == nil) {
				continue // the UPDATE already wrote it
			}
			ch.Before = r
			kept = append(kept, ch)
		}
		bs[bi].changes = kept
	}
	return bs
}

// withColumn adds col to changed, in table order.
func withColumn(sch *entcapturert.Schema, changed []string, col string) []string {
	set := map[string]bool{col: true}
	for _, c := range changed {
		set[c] = true
	}
	out := make([]string, 0, len(set))
	for _, c := range sch.Columns {
		if set[c] {
			out = append(out, c)
		}
	}
	return out
}
