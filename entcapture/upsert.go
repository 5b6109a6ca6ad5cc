package entcapture

import (
	"fmt"
	"slices"
	"strings"

	"entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/envelope"
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
	before  map[string]map[string]any
	cols    []string // read by both snapshots
}

// conflictOf renders the options on an INSERT of the schema's columns and
// reads them back: the target columns and the action.
func conflictOf(w *write, d envelope.Dialect, cols []string, opts []sql.ConflictOption) (*upsert, error) {
	unsupported := func(format string, args ...any) error {
		return &envelope.Error{Kind: envelope.ErrUnsupported, Where: w.sch.Name + " upsert", Msg: fmt.Sprintf(format, args...)}
	}
	ins := sql.Dialect(dialectName(d)).Insert(w.sch.Table).Columns(cols...).Values(make([]any, len(cols))...)
	ins.OnConflict(opts...)
	q, _ := ins.Query()
	i := strings.Index(q, " ON CONFLICT")
	if i < 0 {
		return nil, unsupported("cannot read the ON CONFLICT clause of %q", q)
	}
	rest := strings.TrimSpace(q[i+len(" ON CONFLICT"):])
	u := &upsert{}
	if !strings.HasPrefix(rest, "(") {
		return nil, unsupported("herald needs the conflict columns to tell inserted rows from updated ones: name them with OnConflictColumns(...)")
	}
	j := strings.IndexByte(rest, ')')
	for _, c := range strings.Split(rest[1:j], ",") {
		u.target = append(u.target, unquote(strings.TrimSpace(c)))
	}
	rest = strings.TrimSpace(rest[j+1:])
	switch {
	case strings.HasPrefix(rest, "WHERE"):
		return nil, unsupported("a conflict target with WHERE (a partial index) is not supported; name the columns of a full unique index")
	case rest == "DO NOTHING":
		u.nothing = true
	case strings.HasPrefix(rest, "DO UPDATE SET "):
		set := rest[len("DO UPDATE SET "):]
		if k := strings.Index(set, " WHERE "); k >= 0 {
			return nil, unsupported("an update with a WHERE condition may skip conflicting rows herald cannot tell apart; drop UpdateWhere")
		}
		changed := map[string]bool{}
		for _, a := range splitTop(set) {
			lhs, rhs, ok := strings.Cut(a, " = ")
			if !ok {
				return nil, unsupported("cannot read the assignment %q", a)
			}
			col := unquote(strings.TrimSpace(lhs))
			if self := qualifiedSelf(rhs, w.sch.Table, col); self {
				continue
			}
			changed[col] = true
		}
		for _, c := range w.sch.Columns {
			if changed[c] {
				u.update = append(u.update, c)
			}
		}
		u.nothing = len(u.update) == 0
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
		parts[i] = envelope.KeyText(v)
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
			if c, ok := w.sch.Fields[f]; ok && !slices.Contains(cols, c) {
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
	if err := s.writeLock(w.sch); err != nil {
		return err
	}
	rows, err := s.rowsByTarget(w, u, true)
	if err != nil {
		return err
	}
	u.before = rows
	s.upsert = u
	return nil
}

// rowsByTarget reads the rows whose conflict columns hold the creates'
// values, keyed by those values.
func (s *scope) rowsByTarget(w *write, u *upsert, lock bool) (map[string]map[string]any, error) {
	sel := sql.Dialect(dialectName(s.d)).Select().From(from(s.g, w.sch))
	qc := make([]string, len(u.cols))
	for i, c := range u.cols {
		qc[i] = sel.C(c)
	}
	sel.Select(qc...)
	var ps []*sql.Predicate
	for _, it := range s.creates {
		vs, err := targetValues(it.w, u.target)
		if err != nil {
			return nil, err
		}
		if len(u.target) == 1 {
			ps = append(ps, sql.EQ(sel.C(u.target[0]), vs[0]))
			continue
		}
		and := make([]*sql.Predicate, len(vs))
		for i, c := range u.target {
			and[i] = sql.EQ(sel.C(c), vs[i])
		}
		ps = append(ps, sql.And(and...))
	}
	sel.Where(sql.Or(ps...))
	if lock && s.d == envelope.Postgres {
		sel.ForUpdate()
	}
	got, err := s.query(sel, u.cols, w.g.HeraldScan)
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
	}
	return out, nil
}

// afterUpsert reads the rows again by conflict key and classifies each
// create: inserted, updated, or skipped.
func (s *scope) afterUpsert() error {
	u := s.upsert
	w := s.creates[0].w
	after, err := s.rowsByTarget(w, u, false)
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
		a, ok := after[k]
		if !ok {
			continue
		}
		if b, existed := u.before[k]; existed {
			if u.nothing {
				continue
			}
			s.add(w.spec, envelope.Change{Model: w.spec.Label, Table: w.sch.Table, Operation: envelope.Updated,
				PK: w.sch.keyOf(a), Changed: u.update, Before: b, After: a, OccurredAt: at})
			continue
		}
		s.add(w.spec, envelope.Change{Model: w.spec.Label, Table: w.sch.Table, Operation: envelope.Inserted,
			PK: w.sch.keyOf(a), After: a, OccurredAt: at})
	}
	return nil
}
