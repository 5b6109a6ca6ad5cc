package gormcapture

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
	"gorm.io/gorm/schema"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capture"
	"github.com/heraldgo/herald/internal/ctxhdr"
	"github.com/heraldgo/herald/internal/fusedsql"
	"github.com/heraldgo/herald/internal/outbox"
)

// fusedUpdate writes a captured UPDATE of any number of rows and its
// events in one statement on PostgreSQL, the events built by the database
// from the rows the UPDATE returns:
//
//	WITH "herald_row"(b0, …, a0, …) AS (
//	    UPDATE t SET … FROM (SELECT … FROM t WHERE <the WHERE> ORDER BY pk FOR UPDATE) AS herald_old
//	    WHERE t.pk = herald_old.… RETURNING herald_old.…, t.…),          -- BeforeAndAfter (updateWithBefore)
//	"herald_event" AS (
//	    INSERT INTO herald_outbox (id, topic, payload, headers, ordering_key, created_at)
//	    SELECT (<uuid v7 prefix> || to_hex(<base> + row_number() OVER (ORDER BY pk)))::uuid, $topic,
//	           ($1::text || b0::text || $2::text || to_json(b1)::text || …)::json, '{}',
//	           $key || a0::text, $at
//	    FROM "herald_row" WHERE <the keys' advisory locks> >= 0 ORDER BY pk)
//	SELECT count(*) FROM "herald_row"
//
// In After and Keys modes the UPDATE is GORM's own with a RETURNING. The
// envelope is rendered in Go once, with a marker for each value of the
// row, and the statement splices in each value's JSON text
// (splicePayload's scheme, as the fused single-row insert): the bytes are
// those herald's Go path writes, in its key order and compact form. The
// statement's count is GORM's RowsAffected.
//
// It replaces three round trips (UPDATE … RETURNING, the rows scanned
// into Go images, one unnest INSERT binding every payload) with one, and
// nothing of the rows crosses the wire. Semantics are the Go path's: the
// events are exactly the rows the UPDATE changed (they come from its
// RETURNING); in BeforeAndAfter the rows are locked, in key order, before
// they are read; the events are inserted in primary-key order (as emit
// sorts them), and their keys' advisory locks (outbox.KeyLocksSQL,
// each bucket once, in bucket order) are taken before the first sequence
// value is drawn. Event ids are UUID v7: the statement's base id (drawn in
// Go) with its random low 61 bits incremented per row (RFC 9562 §6.2,
// method 2: monotonic random), so they are unique and time-ordered as
// uuid.NewV7's.
//
// It applies when no Go callback needs the rows (fusable), the topic does
// not name the key, the UPDATE has no FROM, cascades nothing, and every
// column of the event has a rendering in SQL (renderJSON); otherwise the
// Go path runs. ok reports whether it ran.
func (c *capturePool) fusedUpdate(ctx context.Context, q string, args []any) (n int64, ok bool, err error) {
	st := c.db.Statement
	spec := c.spec
	p := c.p
	if p.dialect == envelope.MySQL {
		return 0, false, nil // no RETURNING: runMySQL
	}
	if spec == nil || !spec.Captures(envelope.Updated) || !fusable(spec) ||
		len(q) < 6 || !strings.EqualFold(q[:6], "UPDATE") || st.Schema == nil {
		return 0, false, nil
	}
	if _, from := st.Clauses["FROM"]; from {
		return 0, false, nil
	}
	if _, set := st.Clauses["SET"]; !set {
		return 0, false, nil
	}
	sch := st.Schema
	pk := keyColumns(sch)
	if len(pk) == 0 || len(p.updateEdges(c.db, sch, st.Table, setColumns(st))) > 0 {
		return 0, false, nil
	}
	if p.dialect == envelope.SQLite {
		return c.fusedUpdateSQLite(ctx, q, args)
	}
	needBefore := spec.NeedsBefore(envelope.Updated)
	afterCols := payloadColumns(sch, spec, spec.NeedsAfter(envelope.Updated))
	var beforeCols []string
	if needBefore {
		beforeCols = payloadColumns(sch, spec, true)
	}
	if err := p.probeColumnTypes(ctx, st, union(slices.Clone(beforeCols), afterCols...)); err != nil {
		return 0, true, err
	}
	v, _ := p.colTypes.Load(st.Table)
	if v == nil {
		return 0, false, nil
	}
	types := v.(*columnTypes)
	pgx := p.bindsArrays(st.ConnPool)

	// The CTE's columns: b<i> = beforeCols[i] as it was, a<i> =
	// afterCols[i] as the UPDATE left it.
	ref := func(prefix string, i int) string { return `"herald_row"."` + prefix + strconv.Itoa(i) + `"` }
	render := func(c, expr string, key bool) (string, bool) {
		f := sch.FieldsByDBName[c]
		dbType := types.get(c)
		if f == nil || dbType == "" {
			return "", false
		}
		return bulkJSON(f, dbType, expr, key, pgx)
	}
	// Markers for the Go-rendered envelope, as fusedInsert's.
	marks := fusedsql.Marks{}
	ch := envelope.Change{Model: spec.Label, Table: st.Table, Operation: envelope.Updated, Changed: changedColumns(st), OccurredAt: c.at}
	keyCh := ch // the change whose key and topic are rendered with sentinels
	pkAt := make([]int, len(pk))
	pkText := make([]string, len(pk))
	pkMarks := make(map[string]any, len(pk))
	keySentinels := make(map[string]any, len(pk))
	for i, k := range pk {
		pkAt[i] = slices.Index(afterCols, k)
		e, ok := render(k, ref("a", pkAt[i]), true)
		if !ok {
			return 0, false, nil
		}
		pkText[i] = ref("a", pkAt[i]) + "::text"
		pkMarks[k] = marks.Mark("pk", strconv.Itoa(i), e)
		keySentinels[k] = "\x00herald:key:" + strconv.Itoa(i) + "\x00"
	}
	if len(pk) == 1 {
		ch.PK, keyCh.PK = pkMarks[pk[0]], keySentinels[pk[0]]
	} else {
		ch.PK, keyCh.PK = pkMarks, keySentinels
	}
	if !markImages(&ch, marks, spec, needBefore, beforeCols, afterCols,
		func(col, expr string) (string, bool) { return render(col, expr, false) },
		func(i int, _ string) string { return ref("b", i) },
		func(i int, _ string) string { return ref("a", i) }) {
		return 0, false, nil
	}
	topic, err := spec.Topic(&keyCh)
	if err != nil || strings.Contains(topic, "\x00") {
		return 0, false, nil // a topic naming the key: built in Go
	}
	key, err := spec.OrderingKey(&keyCh)
	if err != nil {
		return 0, false, nil
	}
	keyParts, ok := splitKey(key, keySentinels, pkText)
	if !ok {
		return 0, false, nil
	}
	payload, err := spec.AppendEnvelope(nil, &ch, nil)
	if err != nil {
		return 0, false, nil
	}
	base, err := uuid.NewV7()
	if err != nil {
		return 0, false, nil
	}

	// The UPDATE, returning the rows' values.
	var upd string
	var vars []any
	if needBefore {
		var built bool
		if upd, vars, built = c.buildUpdateWithBefore(ctx, beforeCols, afterCols); !built {
			return 0, false, nil
		}
	} else {
		upd, vars = q+" RETURNING "+quotedColumns(st, afterCols, true), slices.Clone(args)
	}
	ph := func(v any) string {
		vars = append(vars, v)
		return "$" + strconv.Itoa(len(vars))
	}
	order := bulkOrder(sch, pk, pkAt, types)
	var b strings.Builder
	b.Grow(len(upd) + 600 + 120*len(marks))
	b.WriteString(`WITH "herald_row"(`)
	for i := range beforeCols {
		fmt.Fprintf(&b, `"b%d",`, i)
	}
	for i := range afterCols {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"a%d"`, i)
	}
	b.WriteString(`) AS (`)
	b.WriteString(upd)
	b.WriteString(`), "herald_event" AS (INSERT INTO `)
	b.WriteString(p.writer.Table().Quoted)
	b.WriteString(` (id, topic, payload, headers, ordering_key, created_at) SELECT (`)
	hi, lo := idBase(base)
	b.WriteString(ph(hi))
	b.WriteString(`::text||to_hex(`)
	b.WriteString(ph(lo))
	b.WriteString(`::bigint+row_number() OVER (ORDER BY ` + order + `)))::uuid,`)
	b.WriteString(ph(topic))
	b.WriteString(`::text,`)
	b.WriteString(bulkSplice(payload, marks, ph))
	b.WriteString(`,` + fusedsql.HeadersSQL(ctxhdr.JSON(ctx), ph, "::json") + `,`)
	keySQL := "NULL"
	if key != "" {
		keySQL = keyExpr(keyParts, ph)
	}
	b.WriteString(keySQL)
	b.WriteByte(',')
	b.WriteString(ph(c.at.Truncate(time.Microsecond)))
	b.WriteString(`::timestamptz FROM "herald_row"`)
	if key != "" {
		b.WriteString(` WHERE `)
		b.WriteString(outbox.KeyLocksSQL(p.writer, `SELECT `+keySQL+` FROM "herald_row"`, spec.RowKeyed()))
	}
	b.WriteString(` ORDER BY ` + order + `) SELECT count(*) FROM "herald_row"`)

	// A single statement is atomic; the savepoint is for what the write's
	// chain runs after it (association saves), as on the Go path.
	if err := p.ensureSavepoint(ctx, writeCtxOf(st)); err != nil {
		return 0, true, err
	}
	rows, err := c.ConnPool.QueryContext(ctx, b.String(), vars...)
	if err != nil {
		return 0, true, outbox.Unmigrated(p.writer, err) // the statement inserts the events too
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(&n); err != nil {
			return 0, true, err
		}
	}
	if err := rows.Err(); err != nil {
		return 0, true, err
	}
	if err := rows.Close(); err != nil {
		return 0, true, err
	}
	c.fused = true
	if n > 0 {
		if err := p.signal(ctx, st.ConnPool, []string{topic}); err != nil {
			return 0, true, err
		}
	}
	return n, true, nil
}

// idBase splits a UUID v7 into the hex text of its first 8 bytes and its
// last 8 as an int64 whose top bits are the variant (10) and whose bit 61
// is clear, so that adding a row number below 2^61 keeps the variant.
func idBase(id uuid.UUID) (string, int64) {
	lo := binary.BigEndian.Uint64(id[8:])
	lo = lo&0x1FFF_FFFF_FFFF_FFFF | 0x8000_0000_0000_0000
	return hex.EncodeToString(id[:8]), int64(lo) //nolint:gosec // the bit pattern is the point
}

// keyPart is a piece of an ordering key: a literal, or the SQL text of a
// key column.
type keyPart struct {
	lit string
	sql string
}

// splitKey splits an ordering key rendered with sentinels for the key
// columns into literals and the columns' SQL text; ok is false when the
// key was cut to its hashed form (a sentinel is missing or broken).
func splitKey(key string, sentinels map[string]any, text []string) ([]keyPart, bool) {
	if key == "" {
		return nil, true
	}
	type hit struct{ at, i, n int }
	var hits []hit
	idx := make([]string, len(text))
	for _, s := range sentinels {
		str := s.(string)
		i, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(str, "\x00herald:key:"), "\x00"))
		idx[i] = str
	}
	for i, s := range idx {
		for at := 0; ; {
			j := strings.Index(key[at:], s)
			if j < 0 {
				break
			}
			hits = append(hits, hit{at + j, i, len(s)})
			at += j + len(s)
		}
	}
	sort.Slice(hits, func(a, b int) bool { return hits[a].at < hits[b].at })
	var parts []keyPart
	last := 0
	for _, h := range hits {
		if h.at > last {
			parts = append(parts, keyPart{lit: key[last:h.at]})
		}
		parts = append(parts, keyPart{sql: text[h.i]})
		last = h.at + h.n
	}
	if last < len(key) {
		parts = append(parts, keyPart{lit: key[last:]})
	}
	for _, pt := range parts {
		if strings.Contains(pt.lit, "\x00") {
			return nil, false
		}
	}
	if len(hits) == 0 && utf8.RuneCountInString(key) == envelope.MaxKeyLength && strings.Contains(key, "#") {
		return nil, false // maybe cut by names.LimitKey, sentinels and all
	}
	return parts, true
}

// keyExpr renders the key's SQL: the parts concatenated, made to fit
// envelope.MaxKeyLength as names.LimitKey does (the start, '#', and the
// SHA-256 of the whole key) when it may be longer.
func keyExpr(parts []keyPart, ph func(any) string) string {
	var ps []string
	fixed := true
	for _, pt := range parts {
		if pt.sql != "" {
			ps = append(ps, pt.sql)
			fixed = false
		} else {
			ps = append(ps, ph(pt.lit)+"::text")
		}
	}
	k := "(" + strings.Join(ps, "||") + ")"
	if fixed {
		return k
	}
	keep := envelope.MaxKeyLength - 1 - 64
	return `(CASE WHEN char_length(` + k + `) <= ` + strconv.Itoa(envelope.MaxKeyLength) + ` THEN ` + k +
		` ELSE left(` + k + `, ` + strconv.Itoa(keep) + `)||'#'||encode(sha256(convert_to(` + k + `, 'UTF8')), 'hex') END)`
}

// bulkOrder is the ORDER BY of the events: emit's order (comparePK), by
// the key columns of the CTE's after values. A composite key compares its
// columns in name order; text compares bytewise (KeyText, strings.Compare).
func bulkOrder(sch *schema.Schema, pk []string, pkAt []int, types *columnTypes) string {
	cols := make([]int, len(pk))
	for i := range cols {
		cols[i] = i
	}
	if len(pk) > 1 {
		sort.Slice(cols, func(a, b int) bool { return pk[cols[a]] < pk[cols[b]] })
	}
	var out []string
	for _, i := range cols {
		e := `"herald_row"."a` + strconv.Itoa(pkAt[i]) + `"`
		switch types.get(pk[i]) {
		case "TEXT", "VARCHAR", "BPCHAR":
			e += ` COLLATE "C"`
		}
		out = append(out, e)
	}
	_ = sch
	return strings.Join(out, ",")
}

// bulkJSON is renderJSON for the fused bulk update: JSON null for NULL.
func bulkJSON(f *schema.Field, dbType, col string, key, pgx bool) (string, bool) {
	e, ok := renderJSON(f, dbType, col, key, pgx)
	if !ok {
		return "", false
	}
	return `COALESCE(` + e + `,'null')`, true
}

// markImages sets ch.Before (when needBefore) and ch.After (when spec
// needs after images) of a fused bulk update's envelope to markers, the
// i-th column col's rendered by render(col, beforeExpr(i, col)) or
// render(col, afterExpr(i, col)); false when a column has no rendering
// (the Go path runs instead).
func markImages(ch *envelope.Change, marks fusedsql.Marks, spec *capture.Spec, needBefore bool, beforeCols, afterCols []string,
	render func(col, expr string) (string, bool), beforeExpr, afterExpr func(i int, col string) string) bool {
	image := func(kind string, cols []string, expr func(int, string) string) map[string]any {
		img := make(map[string]any, len(cols))
		for i, col := range cols {
			e, ok := render(col, expr(i, col))
			if !ok {
				return nil
			}
			img[col] = marks.Mark(kind, strconv.Itoa(i), e)
		}
		return img
	}
	if needBefore {
		if ch.Before = image("b", beforeCols, beforeExpr); ch.Before == nil {
			return false
		}
	}
	if spec.NeedsAfter(envelope.Updated) {
		if ch.After = image("a", afterCols, afterExpr); ch.After == nil {
			return false
		}
	}
	return true
}

// bulkSplice is fusedsql.SplicePayload for bulkJSON's expressions, which
// are complete JSON text already.
func bulkSplice(payload []byte, marks map[string]string, ph func(any) string) string {
	parts := fusedsql.Splice(payload, marks,
		func(lit string) string { return ph(lit) + "::text" },
		func(expr string) string { return expr })
	return "(" + strings.Join(parts, "||") + ")::json"
}

// fusedUpdateSQLite is fusedUpdate for SQLite, which has neither
// data-modifying CTEs nor old values in RETURNING. Once the transaction
// holds the write lock (writeLock), the rows' key and, in BeforeAndAfter,
// their values as they were go into a temporary table, in one statement;
// the UPDATE (GORM's SET) runs on exactly those rows; one INSERT … SELECT
// builds the events from the temporary table joined to the updated rows;
// the temporary table is emptied:
//
//	INSERT INTO temp.herald_bulk_N (k, c0, …) SELECT t.id, t.… FROM t WHERE <the WHERE>
//	UPDATE t SET … WHERE t.id IN (SELECT k FROM temp.herald_bulk_N) AND (<the WHERE>)
//	INSERT INTO herald_outbox (…) SELECT …, ('{"model":…' || … || '}'), … FROM temp.herald_bulk_N b JOIN t ON t.id = b.k ORDER BY b.k
//	DELETE FROM temp.herald_bulk_N
//
// Four statements whatever the number of rows, none of whose values
// crosses into Go. It applies to a single integer key that the UPDATE does
// not set, and to columns whose stored values have a rendering in SQLite
// that is jsonform's of what the driver scans (sqliteJSON).
func (c *capturePool) fusedUpdateSQLite(ctx context.Context, q string, args []any) (n int64, ok bool, err error) {
	st := c.db.Statement
	spec := c.spec
	p := c.p
	sch := st.Schema
	pk := keyColumns(sch)
	if len(pk) != 1 || setsKey(changedColumns(st), pk) || setsKey(setColumns(st), pk) || st.TableExpr != nil {
		return 0, false, nil
	}
	if f := sch.FieldsByDBName[pk[0]]; f == nil || !isIntKind(f.FieldType) {
		return 0, false, nil
	}
	needBefore := spec.NeedsBefore(envelope.Updated)
	afterCols := payloadColumns(sch, spec, spec.NeedsAfter(envelope.Updated))
	var beforeCols []string
	if needBefore {
		beforeCols = payloadColumns(sch, spec, true)
	}
	// The write lock first: the probe below is a read, and a deferred
	// SQLite transaction that has read cannot wait for the write lock —
	// SQLite answers SQLITE_BUSY at once, without its busy timeout, when
	// a reader asks for the lock another writer holds (GORM's
	// TestConcurrentMany2ManyAssociation, three first updates of a table
	// at once, failed that way). The UPDATE takes it anyway.
	if err := p.writeLock(ctx, st, c.ConnPool); err != nil {
		return 0, true, err
	}
	if err := p.probeColumnTypes(ctx, st, union(slices.Clone(beforeCols), afterCols...)); err != nil {
		return 0, true, err
	}
	v, _ := p.colTypes.Load(st.Table)
	if v == nil {
		return 0, false, nil
	}
	types := v.(*columnTypes)
	quote := func(col clause.Column) string {
		var b strings.Builder
		st.QuoteTo(&b, col)
		return b.String()
	}
	table, tvars := tableSQL(st)
	if len(tvars) > 0 {
		return 0, false, nil
	}
	tcol := func(col string) string { return table + "." + quote(clause.Column{Name: col}) }
	render := func(col, expr string) (string, bool) {
		f := sch.FieldsByDBName[col]
		if f == nil {
			return "", false
		}
		return sqliteJSON(f, types.get(col), expr)
	}
	marks := fusedsql.Marks{}
	ch := envelope.Change{Model: spec.Label, Table: st.Table, Operation: envelope.Updated, Changed: changedColumns(st), OccurredAt: c.at}
	keyCh := ch
	pkSQL := tcol(pk[0])
	pkJSON, ok := render(pk[0], pkSQL)
	if !ok {
		return 0, false, nil
	}
	ch.PK = marks.Mark("pk", "0", pkJSON)
	keyCh.PK = "\x00herald:key:0\x00"
	if !markImages(&ch, marks, spec, needBefore, beforeCols, afterCols, render,
		func(i int, _ string) string { return `b."c` + strconv.Itoa(i) + `"` },
		func(_ int, col string) string { return tcol(col) }) {
		return 0, false, nil
	}
	topic, err := spec.Topic(&keyCh)
	if err != nil || strings.Contains(topic, "\x00") {
		return 0, false, nil //nolint:nilerr // the Go path runs instead, and reports it
	}
	key, err := spec.OrderingKey(&keyCh)
	if err != nil {
		return 0, false, nil //nolint:nilerr // the Go path runs instead, and reports it
	}
	keyParts, ok := splitKey(key, map[string]any{pk[0]: keyCh.PK}, []string{"CAST(" + pkSQL + " AS TEXT)"})
	if !ok {
		return 0, false, nil
	}
	fixed := 0
	for _, pt := range keyParts {
		fixed += utf8.RuneCountInString(pt.lit)
		if pt.sql != "" {
			fixed += 20 // an int64's decimal text
		}
	}
	if fixed > envelope.MaxKeyLength {
		return 0, false, nil // could need LimitKey's SHA-256, which SQLite lacks
	}
	payload, err := spec.AppendEnvelope(nil, &ch, nil)
	if err != nil {
		return 0, false, nil //nolint:nilerr // the Go path runs instead, and reports it
	}
	base, err := uuid.NewV7()
	if err != nil {
		return 0, false, nil //nolint:nilerr // the Go path runs instead, and reports it
	}

	if err := p.ensureSavepoint(ctx, writeCtxOf(st)); err != nil {
		return 0, true, err
	}
	own := own(c.ConnPool)
	tmp := "temp.herald_bulk_" + strconv.Itoa(len(beforeCols))
	var cdef strings.Builder
	for i := range beforeCols {
		fmt.Fprintf(&cdef, `, "c%d"`, i)
	}
	if _, err := own.ExecContext(ctx, `CREATE TEMP TABLE IF NOT EXISTS `+strings.TrimPrefix(tmp, "temp.")+` (k INTEGER PRIMARY KEY`+cdef.String()+`)`); err != nil {
		return 0, true, fmt.Errorf("herald/gormcapture: bulk update: %w", err)
	}

	// 1. The rows: keys and values as they were.
	sel := &gorm.Statement{DB: c.db, Table: st.Table, TableExpr: st.TableExpr, Schema: sch, Context: ctx, Clauses: map[string]clause.Clause{}}
	if w, ok := st.Clauses["WHERE"]; ok {
		sel.Clauses["WHERE"] = w
	}
	_, _ = sel.WriteString(`INSERT INTO ` + tmp + ` (k` + cdef.String() + `) SELECT `)
	sel.WriteQuoted(clause.Column{Table: clause.CurrentTable, Name: pk[0]})
	for _, col := range beforeCols {
		_ = sel.WriteByte(',')
		sel.WriteQuoted(clause.Column{Table: clause.CurrentTable, Name: col})
	}
	_, _ = sel.WriteString(" FROM ")
	sel.WriteQuoted(clause.Table{Name: clause.CurrentTable})
	if _, where := sel.Clauses["WHERE"]; where {
		_ = sel.WriteByte(' ')
		sel.Build("WHERE")
	}
	if _, err := own.ExecContext(ctx, sel.SQL.String(), sel.Vars...); err != nil {
		return 0, true, err
	}
	// 2. The UPDATE of those rows, with the caller's WHERE too: the same
	// rows under the write lock, and with PrepareStmt the caller's cache
	// holds one statement per statement of the caller's, as without the
	// plugin.
	u := &gorm.Statement{DB: c.db, Table: st.Table, TableExpr: st.TableExpr, Schema: sch, Context: ctx, Clauses: map[string]clause.Clause{}}
	for _, name := range []string{"UPDATE", "SET"} {
		if cl, ok := st.Clauses[name]; ok {
			u.Clauses[name] = cl
		}
	}
	u.Build("UPDATE", "SET")
	_, _ = u.WriteString(" WHERE ")
	u.WriteQuoted(clause.Column{Table: clause.CurrentTable, Name: pk[0]})
	_, _ = u.WriteString(" IN (SELECT k FROM " + tmp + ")")
	if w, ok := st.Clauses["WHERE"]; ok {
		ws := &gorm.Statement{DB: c.db, Table: st.Table, TableExpr: st.TableExpr, Schema: sch, Context: ctx, Clauses: map[string]clause.Clause{"WHERE": w}}
		ws.Build("WHERE")
		if cond := strings.TrimPrefix(ws.SQL.String(), "WHERE "); cond != "" {
			_, _ = u.WriteString(" AND (" + cond + ")")
			u.Vars = append(u.Vars, ws.Vars...) // SQLite's placeholders are positional
		}
	}
	res, err := c.ConnPool.ExecContext(ctx, u.SQL.String(), u.Vars...)
	if err != nil {
		return 0, true, err
	}
	if n, err = res.RowsAffected(); err != nil {
		return 0, true, err
	}
	// 3. The events.
	if n > 0 {
		var vars []any
		ph := func(v any) string {
			vars = append(vars, v)
			return "?"
		}
		hi, lo := idBase(base)
		hiText := hi[:8] + "-" + hi[8:12] + "-" + hi[12:16] + "-"
		var b strings.Builder
		b.WriteString(`INSERT INTO ` + p.writer.Table().Quoted + ` (id, topic, payload, headers, ordering_key, created_at) SELECT `)
		b.WriteString(sqliteV7ID(ph(hiText), func() string { return ph(lo) }, "b.k") + `,`)
		b.WriteString(ph(topic) + `,`)
		b.WriteString(liteSplice(payload, marks, ph))
		b.WriteString(`,` + fusedsql.HeadersSQL(ctxhdr.JSON(ctx), ph, "") + `,`)
		if key == "" {
			b.WriteString("NULL")
		} else {
			var ps []string
			for _, pt := range keyParts {
				if pt.sql != "" {
					ps = append(ps, pt.sql)
				} else {
					ps = append(ps, ph(pt.lit))
				}
			}
			b.WriteString("(" + strings.Join(ps, "||") + ")")
		}
		b.WriteString(`,` + ph(outbox.TimeArg(envelope.SQLite, c.at.Truncate(time.Microsecond))))
		b.WriteString(` FROM ` + tmp + ` AS b JOIN ` + table + ` ON ` + pkSQL + ` = b.k ORDER BY b.k`)
		if _, err := own.ExecContext(ctx, b.String(), vars...); err != nil {
			return 0, true, fmt.Errorf("herald/gormcapture: insert events: %w", outbox.Unmigrated(p.writer, err))
		}
	}
	if _, err := own.ExecContext(ctx, `DELETE FROM `+tmp); err != nil {
		return 0, true, fmt.Errorf("herald/gormcapture: bulk update: %w", err)
	}
	c.fused = true
	if n > 0 {
		if err := p.signal(ctx, st.ConnPool, []string{topic}); err != nil {
			return 0, true, err
		}
	}
	return n, true, nil
}

// sqliteV7ID is the SQLite expression of the event ids of a fused bulk
// update: the text of the first 8 bytes (hiText, "xxxxxxxx-xxxx-7xxx-")
// followed by the hex of lo plus the row's number in order, split 4-12.
// The two row_number()s are one window: the same number. lo is called
// once for each of its two uses (SQLite's "?" placeholders are
// positional: each use binds its own value).
func sqliteV7ID(hiText string, lo func() string, order string) string {
	n := func() string { return lo() + `+row_number() OVER (ORDER BY ` + order + `)` }
	return hiText + `||substr(printf('%016x',` + n() + `),1,4)||'-'||substr(printf('%016x',` + n() + `),5)`
}

func isIntKind(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64
}

// sqliteJSON returns a SQLite expression giving, as text, the JSON form
// jsonform gives the value the driver scans from a column declared
// declType into field f: integers of a column of INTEGER affinity, strings
// of one of TEXT affinity (json_quote escapes as jsonform does, but for
// U+2028 and U+2029). Anything else (floats, times, serializers, Valuers)
// is built in Go. A stored value of another storage class than the
// column's (SQLite stores what it is given) is converted as the driver's
// scan converts it, or the statement fails (json() of a text that is not
// JSON), as the scan would.
func sqliteJSON(f *schema.Field, declType, e string) (string, bool) {
	if f.Serializer != nil {
		return "", false
	}
	t := f.FieldType
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Implements(reflect.TypeFor[driver.Valuer]()) || reflect.PointerTo(t).Implements(reflect.TypeFor[sql.Scanner]()) {
		return "", false
	}
	d := strings.ToUpper(declType)
	switch {
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64 && strings.Contains(d, "INT"):
		return `CASE typeof(` + e + `) WHEN 'integer' THEN CAST(` + e + ` AS TEXT) WHEN 'null' THEN 'null' ELSE json(CAST(` + e + ` AS TEXT)) END`, true
	case t.Kind() == reflect.String && !strings.Contains(d, "INT") &&
		(strings.Contains(d, "CHAR") || strings.Contains(d, "CLOB") || strings.Contains(d, "TEXT")):
		return `CASE WHEN ` + e + ` IS NULL THEN 'null' ELSE replace(replace(json_quote(CAST(` + e + ` AS TEXT)),char(8232),'\u2028'),char(8233),'\u2029') END`, true
	}
	return "", false
}

// liteSplice is bulkSplice for SQLite: text needs no cast.
func liteSplice(payload []byte, marks map[string]string, ph func(any) string) string {
	parts := fusedsql.Splice(payload, marks,
		func(lit string) string { return ph(lit) },
		func(expr string) string { return "(" + expr + ")" })
	return "(" + strings.Join(parts, "||") + ")"
}
