package entcapture

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/entcapture/entcapturert"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capture"
	"github.com/heraldgo/herald/internal/ctxhdr"
	"github.com/heraldgo/herald/internal/fusedsql"
	"github.com/heraldgo/herald/internal/names"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/wakeup"
)

// A single-row Create on PostgreSQL through the CaptureDriver is written
// with its event by one statement (see internal/fusedsql):
//
//	WITH "herald_row" AS (INSERT INTO "loans" (…) VALUES (…) RETURNING "id"),
//	     "herald_event" AS (INSERT INTO herald_outbox (…)
//	         SELECT $5, $6, ($7::text || COALESCE(<"herald_row"."id" as JSON text>, 'null') || $8::text || …)::json,
//	                '{}', ($9::text || "herald_row"."id"::text || $10::text), $11
//	         FROM "herald_row" WHERE <the key's advisory lock>)
//	SELECT "id" FROM "herald_row"
//
// One statement is atomic by itself: no savepoint in a caller's
// transaction, no transaction without one. The capture hook renders the
// event before the INSERT, from the entity the create returns as its
// generated createSpec builds it from the mutation (HeraldNew) — the very
// values today's event is built from after the INSERT, so the bytes are
// the same — with a marker for the id the database generates, which the
// statement splices in from the row; it puts the event in the context
// (fuseKey), and the driver (CaptureDriver, or the transaction its Tx
// returns) rewrites ent's INSERT of that context into the statement.
//
// The hook does so only when nothing but ent's INSERT can run under that
// context and the event needs no Go code after the write: a create
// (not a CreateBulk item), no edges, no hook of the schema after the
// capture hook, no Extend, ExtendMany, TopicFunc or OrderingKeyFunc, not
// nested in another captured write's transaction, and (in a caller's
// transaction) a transaction begun on the CaptureDriver. Any other
// statement that comes under the context first (an upsert's, whose
// conflict options the hook learns only right before its INSERT) opens
// the write's savepoint or transaction then, and the write is captured as
// before.

type fuseKey struct{}

// newer is the glue method a fused create needs (generated since
// entcapture v0.x; older glue is captured the other way).
type newer interface {
	HeraldNew() ent.Value
}

// fusion is one fused create in progress.
type fusion struct {
	ctx    context.Context // the hook's, without the fusion
	w      *write
	cd     *CaptureDriver
	cfg    Config
	writer *envelope.Writer
	prefix string   // `INSERT INTO "loans" `
	nargs  int      // the INSERT's arguments: the fields set, and the id
	genPK  bool     // the database generates the id: RETURNING it
	stored []string // columns the event renders from the stored row: RETURNING them
	ev     fusedsql.Event
	done   bool // the fused statement was sent

	// The fallback: today's scope, opened when a statement other than the
	// fused INSERT comes first.
	scope *scope
	it    *created
	tx    *hookTx // the scope's own transaction
	err   error   // opening it failed: no statement runs
}

// lastHooks caches, per schema, whether the capture hook is its last.
var lastHooks sync.Map // *entcapturert.Schema -> bool

func captureIsLast(s *entcapturert.Schema, h *hook) bool {
	if v, ok := lastHooks.Load(s); ok {
		return v.(bool)
	}
	last := false
	if s.Hooks != nil {
		hs := s.Hooks()
		for i := len(hs) - 1; i >= 0; i-- {
			if hs[i] == nil {
				continue
			}
			cm, ok := hs[i](nil).(*captureMutator)
			last = ok && cm.h == h
			break
		}
	}
	lastHooks.Store(s, last)
	return last
}

// fuse returns the fusion of the create w, or nil when it is not fused.
func (h *hook) fuse(ctx context.Context, w *write, cd *CaptureDriver, cfg Config, wr *envelope.Writer) *fusion {
	g, spec, sch := w.g, w.spec, w.sch
	if cd == nil || w.d != envelope.Postgres || w.op != envelope.Inserted || !g.Op().Is(ent.OpCreate) ||
		!spec.Captures(envelope.Inserted) || !fusable(spec) || len(g.AddedEdges()) > 0 || len(g.ClearedEdges()) > 0 {
		return nil
	}
	if t, ok := ctx.Value(txKey{}).(*hookTx); ok && t.d == cd {
		return nil // nested in a captured write's transaction
	}
	if tx := g.HeraldTx(); tx != nil {
		if ct, ok := tx.(captureTx); !ok || ct.d != cd {
			return nil
		}
	}
	n, ok := g.(newer)
	if !ok || !names.IsIdentifier(sch.Table) || !names.IsIdentifier(sch.PK) || !captureIsLast(sch, h) {
		return nil
	}
	row, ok := g.HeraldRow(n.HeraldNew())
	if !ok {
		return nil
	}
	unsetNullable(g, sch, row)
	f := &fusion{ctx: ctx, w: w, cd: cd, cfg: cfg, writer: wr,
		prefix: `INSERT INTO ` + names.Quote(sch.Table) + ` `, nargs: len(g.Fields())}
	at := now()
	c := envelope.Change{Model: spec.Label, Table: sch.Table, Operation: envelope.Inserted, OccurredAt: at}
	if id, ok := g.HeraldID(); ok {
		c.PK = id
		f.nargs++
	} else {
		// The database generates the id: an integer, whose JSON and key
		// text are PostgreSQL's text of it.
		if !isInt(row[sch.PK]) {
			return nil
		}
		f.genPK = true
		c.PK = fusedsql.PKSentinel
	}
	topic, err := spec.Topic(&c)
	if err != nil || strings.Contains(topic, fusedsql.PKSentinel) {
		return nil
	}
	key, err := spec.OrderingKey(&c)
	if err != nil {
		return nil
	}
	k, ok := fusedsql.SplitKey(key, f.genPK)
	if !ok {
		return nil
	}
	marks := fusedsql.Marks{}
	if spec.NeedsAfter(envelope.Inserted) && storedDiffers(g, sch, w.d, row) {
		// The row as stored differs from the entity: those columns are
		// rendered by the statement from its RETURNING, or the create
		// goes the other way (its row read back).
		if f.stored = storedColumns(g, sch, cd, row, marks); f.stored == nil {
			return nil
		}
	}
	if f.genPK {
		c.PK = marks.Mark("pk", sch.PK, fusedsql.JSONB(fusedsql.Row+`.`+names.Quote(sch.PK)))
		row[sch.PK] = c.PK
	} else {
		row[sch.PK] = c.PK
	}
	if spec.NeedsAfter(envelope.Inserted) {
		c.After = row
	}
	payload, err := spec.AppendEnvelope(nil, &c, nil)
	if err != nil || !plainJSON(payload, marks) {
		return nil // today's path reports it
	}
	f.ev = fusedsql.Event{Writer: wr, RowKeyed: spec.RowKeyed(), Topic: topic, Payload: payload,
		Marks: marks, Key: k, GenCol: sch.PK, At: at, Headers: ctxhdr.JSON(ctx)}
	return f
}

// storedColumns marks, in row, the columns whose stored value may differ
// from the entity's — unset columns with a database default, and times
// finer than their column — with the SQL that renders them from the
// statement's row, as jsonform renders the value ent scans from it; nil
// when one has no such rendering (the create is then not fused).
func storedColumns(g entcapturert.Glue, sch *entcapturert.Schema, cd *CaptureDriver, row map[string]any, marks fusedsql.Marks) []string {
	var cols []string
	render := func(c string) bool {
		if !names.IsIdentifier(c) || c == sch.PK {
			return false
		}
		col := fusedsql.Row + `.` + names.Quote(c)
		var expr string
		switch v := row[c].(type) {
		case string:
			expr = fusedsql.String(col)
		case bool, int, int8, int16, int32, int64:
			expr = fusedsql.Number(col)
		case time.Time:
			// pgx scans a timestamptz in time.Local, and jsonform writes
			// RFC 3339 with the fraction's trailing zeros cut and "Z" for
			// UTC: rendered so only when Local is UTC.
			if !cd.arrays || !localIsUTC() || v.IsZero() {
				return false
			}
			expr = fusedsql.Quoted(`rtrim(rtrim(to_char(` + col + ` AT TIME ZONE 'UTC','YYYY-MM-DD"T"HH24:MI:SS.US'),'0'),'.')||'Z'`)
		default:
			return false
		}
		row[c] = marks.Mark("after", c, expr)
		cols = append(cols, c)
		return true
	}
	for _, c := range unsetDefaults(g, sch) {
		if !render(c) {
			return nil
		}
	}
	for _, c := range sch.Columns {
		if t, ok := timeOf(row[c]); ok && finerThan(t, precisionOf(sch, c)) && !render(c) {
			return nil
		}
	}
	if len(cols) == 0 {
		return nil
	}
	return cols
}

// localIsUTC reports whether time.Local is UTC at every instant.
var localIsUTC = sync.OnceValue(func() bool {
	if time.Local.String() == "UTC" {
		return true
	}
	for y := 1970; y <= 2100; y++ {
		for _, m := range []time.Month{time.January, time.April, time.July, time.October} {
			if _, off := time.Date(y, m, 1, 0, 0, 0, 0, time.Local).Zone(); off != 0 {
				return false
			}
		}
	}
	return true
})

// fusable reports whether spec's events may be written by a fused
// insert: no Go callback needs the written row, and no column's form
// comes from its declared type (Spec.Typed).
func fusable(spec *capture.Spec) bool {
	o := spec.Options
	return o.Extend == nil && o.ExtendMany == nil && o.TopicFunc == nil && o.OrderingKeyFunc == nil &&
		!spec.Typed() // a typed column's form is pgform's, in Go
}

// isInt reports whether v is a plain Go integer, whose JSON form is its
// decimal digits, as PostgreSQL prints an integer column.
func isInt(v any) bool {
	switch v.(type) {
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return true
	}
	return false
}

// plainJSON reports whether payload, its markers aside, holds no \u escape
// of NUL or of a surrogate, which the Writer rejects before any statement
// (and the fused statement would not): such a create goes the other way.
func plainJSON(payload []byte, marks fusedsql.Marks) bool {
	s := string(payload)
	for m := range marks {
		s = strings.ReplaceAll(s, m, "0")
	}
	for i := strings.Index(s, `\u`); i >= 0; i = strings.Index(s, `\u`) {
		e := strings.ToLower(s[i+2 : min(len(s), i+4)])
		if e == "00" && strings.HasPrefix(s[i+2:], "0000") || e == "d8" || e == "d9" || e == "da" || e == "db" || e == "dc" || e == "dd" || e == "de" || e == "df" {
			return false
		}
		s = s[i+2:]
	}
	return true
}

// run runs the create with the fusion in its context.
func (f *fusion) run(next ent.Mutator) (ent.Value, error) {
	g := f.w.g
	g.HeraldBeforeInsert(func(conflict []sql.ConflictOption) {
		if len(conflict) == 0 || f.done || f.fallback() != nil || f.scope.upsertErr != nil {
			return
		}
		f.scope.upsertErr = f.scope.beforeUpsert(conflict)
	})
	v, err := next.Mutate(context.WithValue(f.ctx, fuseKey{}, f), g)
	g.HeraldBeforeInsert(nil)
	if s := f.scope; s != nil {
		// Captured as before, in the scope the fallback opened.
		if s.upsertErr != nil {
			err = s.upsertErr
		}
		if err == nil {
			f.it.v = v
			err = s.finishCreates()
		}
		if err == nil {
			err = s.flush()
		}
		return v, s.close(err)
	}
	if err == nil && f.err != nil {
		err = f.err
	}
	if err != nil {
		if f.done { // the fused statement inserts the event: an outbox not migrated shows here
			err = outbox.Unmigrated(f.writer, err)
		}
		return v, err
	}
	if !f.done {
		return v, fmt.Errorf("herald/entcapture: %s: the create's INSERT did not reach entcapture.Driver; its event is not written", f.w.sch.Name)
	}
	if w := f.cfg.Wakeup; w != nil {
		topics := []string{f.ev.Topic}
		s := &scope{ctx: f.ctx, cfg: f.cfg}
		switch ts, ok := w.(wakeup.TxSignaler); {
		case g.HeraldTx() == nil:
			s.signal(w, topics) // committed: the statement was its own transaction
		case ok:
			if err := ts.SignalTx(f.ctx, g, topics); err != nil {
				return v, fmt.Errorf("herald/entcapture: wakeup in transaction: %w", err)
			}
		default:
			g.HeraldOnCommit(func() { s.signal(w, topics) })
		}
	}
	return v, nil
}

// fallback opens the scope today's path runs the create in.
func (f *fusion) fallback() error {
	if f.scope != nil || f.err != nil {
		return f.err
	}
	s, err := open(f.ctx, f.w.g, f.cd, f.writer, f.w.d, f.cfg)
	if err != nil {
		f.err = err
		return err
	}
	if t, ok := s.ctx.Value(txKey{}).(*hookTx); ok && s.own != nil {
		f.tx = t
	}
	f.it = &created{w: f.w}
	s.creates = append(s.creates, f.it)
	f.scope = s
	return nil
}

// fusionOf returns the fusion of ctx for d that has not run yet.
func (d *CaptureDriver) fusionOf(ctx context.Context) *fusion {
	f, _ := ctx.Value(fuseKey{}).(*fusion)
	if f == nil || f.cd != d || f.done {
		return nil
	}
	return f
}

// rewrite returns the statement to send for ent's statement query (args
// []any; exec: sent with Exec) under ctx: the fused statement for the
// create's INSERT; for any other statement, the statement itself, once
// the fallback's scope is open.
func (d *CaptureDriver) rewrite(ctx context.Context, query string, args any, exec bool) (string, any, error) {
	f := d.fusionOf(ctx)
	if f == nil {
		return query, args, nil
	}
	if f.scope != nil || f.err != nil {
		return query, args, f.err
	}
	if as, ok := args.([]any); ok && f.matches(query, as, exec) {
		q, a, err := f.statement(query, as, exec)
		if err != nil {
			f.err = err
			return "", nil, err
		}
		f.done = true
		return q, a, nil
	}
	return query, args, f.fallback()
}

// other is rewrite for a statement that is not ent's (ExecContext,
// QueryContext).
func (d *CaptureDriver) other(ctx context.Context) error {
	if f := d.fusionOf(ctx); f != nil {
		return f.fallback()
	}
	return nil
}

func (f *fusion) matches(query string, args []any, exec bool) bool {
	if len(args) != f.nargs || exec == f.genPK || !strings.HasPrefix(query, f.prefix) || strings.Contains(query, " ON CONFLICT ") {
		return false
	}
	if f.genPK {
		return strings.HasSuffix(query, ` RETURNING `+names.Quote(f.w.sch.PK)) && strings.Count(query, " RETURNING ") == 1
	}
	return !strings.Contains(query, " RETURNING ")
}

func (f *fusion) statement(insert string, args []any, exec bool) (string, []any, error) {
	pk := names.Quote(f.w.sch.PK)
	args = args[:len(args):len(args)]
	ph := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	var b strings.Builder
	b.Grow(len(insert) + 600 + len(f.ev.Payload))
	b.WriteString(`WITH ` + fusedsql.Row + ` AS (`)
	b.WriteString(insert)
	if exec {
		b.WriteString(` RETURNING ` + pk)
	}
	for _, c := range f.stored {
		b.WriteString(`, ` + names.Quote(c))
	}
	b.WriteByte(')')
	if err := f.ev.WriteCTE(&b, ph); err != nil {
		return "", nil, fmt.Errorf("herald/entcapture: event id: %w", err)
	}
	b.WriteString(` SELECT ` + pk + ` FROM ` + fusedsql.Row)
	return b.String(), args, nil
}
