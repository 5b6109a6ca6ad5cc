package entcapture

import (
	"cmp"
	"context"
	stdsql "database/sql"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"entgo.io/ent"
	"entgo.io/ent/dialect"
	"entgo.io/ent/dialect/sql"

	"github.com/heraldgo/herald/entcapture/entcapturert"
	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capture"
	"github.com/heraldgo/herald/internal/names"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/wakeup"
)

// hook is one Mixin's capture hook: it serves every schema that uses the
// mixin, each under its own name.
type hook struct {
	opts  envelope.Options
	specs sync.Map // specKey -> *compiled
	// parent: the hook of a schema that is not captured but whose deletes
	// cascade to captured rows (cascadeHook); it captures those rows only.
	parent bool
}

// cascadeHook is the hook of a schema that is not captured but whose
// deletes make the database delete or null rows of captured schemas (ON
// DELETE CASCADE or SET NULL, directly or through other uncaptured
// tables): it captures those rows. The generated code installs it through
// entcapturert.CascadeHook.
func cascadeHook() ent.Hook {
	h := &hook{parent: true}
	return h.wrap
}

type specKey struct {
	s  *entcapturert.Schema
	cd *CaptureDriver // its Config's Namespace, Table and Options
}

type compiled struct {
	spec *capture.Spec
	err  error
}

func (h *hook) spec(s *entcapturert.Schema, cd *CaptureDriver, w *envelope.Writer) (*capture.Spec, error) {
	k := specKey{s, cd}
	if v, ok := h.specs.Load(k); ok {
		c := v.(*compiled)
		return c.spec, c.err
	}
	c := &compiled{}
	opts, namespace := h.opts, ""
	own := false
	if cd != nil {
		namespace = cd.cfg.Namespace
		if o, ok := cd.cfg.Options[s.Name]; ok {
			opts, own = o, true
		} else if o, ok := cd.cfg.Options[schemaName(s.JoinOwner)]; ok && s.JoinOwner != nil {
			opts = o
		}
	}
	if s.JoinOwner != nil && !own {
		opts = joinOptions(opts)
	}
	c.spec, c.err = compileSpec(s, opts, namespace, w)
	h.specs.Store(k, c)
	return c.spec, c.err
}

func compileSpec(s *entcapturert.Schema, opts envelope.Options, namespace string, w *envelope.Writer) (*capture.Spec, error) {
	if strings.EqualFold(s.Table, unqualified(w.Table().Name)) {
		return nil, outbox.Configurationf(s.Name, "table %s is the outbox table: the outbox cannot capture its own events; drop entcapture.Mixin from schema %s", s.Table, s.Name)
	}
	return capture.Compile(capture.ModelInfo{
		Name:             s.Name,
		Table:            s.Table,
		Columns:          s.Columns,
		PrimaryKey:       s.KeyColumns(),
		Sensitive:        s.Sensitive,
		DefaultNamespace: namespace,
		Types:            s.Types[entDialect(w.Dialect())],
	}, opts)
}

// entDialect is ent's name of the writer's dialect, which entcapturert.Schema.Types
// is keyed by.
func entDialect(d envelope.Dialect) string {
	if d == envelope.SQLite {
		return dialect.SQLite
	}
	return string(d) // "postgres", "mysql": ent's names too
}

func unqualified(t string) string {
	if i := strings.LastIndexByte(t, '.'); i >= 0 {
		return t[i+1:]
	}
	return t
}

// joinOptions are the Options of the join rows of a plain many-to-many
// edge, from those of the schema that declares the edge: what applies to
// any row (payload mode, operations, namespace, ordering, the topic and
// key templates), not what names the owner's columns or takes its
// changes (Fields, Exclude, Extend, ExtendMany, TopicFunc,
// OrderingKeyFunc). Config.Options under the join model's name replace
// them whole.
func joinOptions(o envelope.Options) envelope.Options {
	j := envelope.Options{Payload: o.Payload, Operations: o.Operations, Namespace: o.Namespace,
		Unordered: o.Unordered, Topic: o.Topic, OrderingKey: o.OrderingKey}
	if o.TopicFunc != nil {
		j.Topic = ""
	}
	if o.OrderingKeyFunc != nil {
		j.OrderingKey = ""
	}
	return j
}

func schemaName(s *entcapturert.Schema) string {
	if s == nil {
		return ""
	}
	return s.Name
}

// specOf returns the Spec of a schema a write reaches past its hooks (a
// cascade's child, an edge's join rows); nil when the schema is not
// captured.
func (s *scope) specOf(sch *entcapturert.Schema) (*capture.Spec, error) {
	if sch.Scan == nil {
		return nil, nil
	}
	h := hookOf(sch)
	if sch.JoinOwner != nil {
		h = hookOf(sch.JoinOwner)
	}
	if h == nil {
		return nil, nil
	}
	return h.spec(sch, s.cd, s.writer)
}

// defaultWriters serves mutations in a caller's transaction on a client
// opened without Driver: the default outbox table.
var defaultWriters sync.Map // envelope.Dialect -> *envelope.Writer

func defaultWriter(d envelope.Dialect) (*envelope.Writer, error) {
	if v, ok := defaultWriters.Load(d); ok {
		return v.(*envelope.Writer), nil
	}
	w, err := envelope.NewWriter(d, "")
	if err != nil {
		return nil, err
	}
	v, _ := defaultWriters.LoadOrStore(d, w)
	return v.(*envelope.Writer), nil
}

func opOf(op ent.Op) envelope.Operation {
	switch {
	case op.Is(ent.OpCreate):
		return envelope.Inserted
	case op.Is(ent.OpUpdate | ent.OpUpdateOne):
		return envelope.Updated
	}
	return envelope.Deleted
}

// errNoGlue is returned for a captured schema generated without Extension.
func errNoGlue(m ent.Mutation) error {
	return outbox.Configurationf(m.Type(), "schema %s uses entcapture.Mixin, but its generated code has no entcapture glue: "+
		"generate it with entc.go (starting with //go:build ignore) calling entc.Generate(\"./schema\", &gen.Config{}, entc.Extensions(entcapturegen.Extension())), "+
		"and make generate.go's line //go:generate go run -mod=mod entc.go — ent's default line (go run -mod=mod entgo.io/ent/cmd/ent generate ./schema) "+
		"runs ent's CLI, which never runs extensions — then run go generate", m.Type())
}

// captureMutator is the Mutator the capture hook returns; its type lets
// the capture of a parent schema find a cascaded child's hook, and so its
// Options.
type captureMutator struct {
	h    *hook
	next ent.Mutator
}

func (h *hook) wrap(next ent.Mutator) ent.Mutator { return &captureMutator{h: h, next: next} }

// hookOf finds the capture hook among a schema's hooks.
func hookOf(s *entcapturert.Schema) *hook {
	if s.Hooks == nil {
		return nil
	}
	for _, hk := range s.Hooks() {
		if hk == nil {
			continue
		}
		if cm, ok := hk(nil).(*captureMutator); ok {
			return cm.h
		}
	}
	return nil
}

func (cm *captureMutator) Mutate(ctx context.Context, m ent.Mutation) (ent.Value, error) {
	h, next := cm.h, cm.next
	if ctx.Value(fuseKey{}) != nil {
		// A write under a fused create's context (a hook of a schema
		// before the capture hook): not that create's INSERT.
		ctx = context.WithValue(ctx, fuseKey{}, (*fusion)(nil))
	}
	{
		g, ok := m.(entcapturert.Glue)
		if !ok {
			return nil, errNoGlue(m)
		}
		sch := g.HeraldSchema()
		op := opOf(m.Op())
		if h.parent && (op != envelope.Deleted || len(sch.Cascades) == 0) {
			return next.Mutate(ctx, m)
		}
		drv := g.HeraldDriver()
		cd := captureOf(drv)
		var (
			cfg Config
			w   *envelope.Writer
			d   envelope.Dialect
		)
		if cd != nil {
			if err := cd.init(); err != nil {
				return nil, err
			}
			cfg, w, d = cd.cfg, cd.writer, cd.dialect
		} else {
			var err error
			if d, err = dialectOf(drv.Dialect()); err != nil {
				return nil, err
			}
			if w, err = defaultWriter(d); err != nil {
				return nil, err
			}
		}
		var spec *capture.Spec
		if !h.parent {
			var err error
			if spec, err = h.spec(sch, cd, w); err != nil {
				return nil, err
			}
		}
		// A create may be an upsert that updates.
		// A delete may cascade to captured rows.
		if !h.parent && !spec.Captures(op) && (op != envelope.Inserted || !spec.Captures(envelope.Updated)) &&
			(op != envelope.Deleted || len(sch.Cascades) == 0) && len(sch.Edges) == 0 && len(sch.ChildEdges) == 0 {
			return next.Mutate(ctx, m)
		}
		w2 := &write{g: g, sch: sch, spec: spec, op: op, d: d}

		// A CreateBulk's items run nested, each through this hook, with
		// the bulk's context: the first opens the scope, the others join
		// it, and the first writes every item's events in one INSERT.
		b := bulkOf(ctx)
		if b != nil && m.Op().Is(ent.OpCreate) && b.Scope != nil {
			bs := b.Scope.(*scope)
			return w2.run(bs.ctx, bs, next)
		}
		if b == nil {
			if f := h.fuse(ctx, w2, cd, cfg, w); f != nil {
				return f.run(next)
			}
		}
		s, err := open(ctx, g, cd, w, d, cfg)
		if err != nil {
			return nil, err
		}
		if b != nil && m.Op().Is(ent.OpCreate) {
			b.Scope = s
			defer func() { b.Scope = nil }()
		}
		v, err := w2.run(s.ctx, s, next)
		if err == nil {
			err = s.finishCreates()
		}
		if err == nil {
			err = s.flush()
		}
		return v, s.close(err)
	}
}

// scope is the transaction a captured write and its events run in: the
// hook's own, or a savepoint in the caller's.
type scope struct {
	ctx    context.Context // the write's statements run with it
	g      entcapturert.Glue
	cd     *CaptureDriver // nil: the client was opened without Driver
	writer *envelope.Writer
	d      envelope.Dialect
	cfg    Config

	own       dialect.Tx // the hook's transaction
	savepoint string     // in the caller's transaction
	locked    bool       // SQLite: the write lock is held
	creates   []*created // creates (a CreateBulk's items) not yet turned into changes
	upsert    *upsert    // the creates' upsert, read before the INSERT
	upsertErr error
	batches   []batch
	topics    []string
}

type batch struct {
	spec    *capture.Spec
	changes []envelope.Change
}

var spSeq atomic.Uint64

// open begins the write's scope: a savepoint in the caller's
// transaction, or a transaction of its own through the CaptureDriver.
func open(ctx context.Context, g entcapturert.Glue, cd *CaptureDriver, w *envelope.Writer, d envelope.Dialect, cfg Config) (*scope, error) {
	s := &scope{ctx: ctx, g: g, cd: cd, writer: w, d: d, cfg: cfg}
	if g.HeraldTx() != nil {
		name := "herald_sp" + strconv.FormatUint(spSeq.Add(1), 10)
		if _, err := g.ExecContext(ctx, "SAVEPOINT "+name); err != nil {
			return nil, fmt.Errorf("herald/entcapture: savepoint: %w", err)
		}
		s.savepoint = name
		return s, nil
	}
	if cd == nil {
		return nil, outbox.Configurationf(g.Type(), "a write to captured schema %s outside a transaction cannot commit atomically with its events: "+
			"open the client on entcapture.Driver — ent.NewClient(ent.Driver(entcapture.Driver(drv))) — or run the write in client.Tx "+
			"(ent.Open and enttest.Open add a driver of their own after their options, which replaces an ent.Driver option: "+
			"in tests use enttest.NewClient(t, enttest.WithOptions(ent.Driver(entcapture.Driver(entsql.OpenDB(…))))))", g.Type())
	}
	if t, ok := ctx.Value(txKey{}).(*hookTx); ok && t.d == cd {
		// Nested in another captured write's transaction (a hook that
		// writes): that write owns it.
		name := "herald_sp" + strconv.FormatUint(spSeq.Add(1), 10)
		if _, err := g.ExecContext(ctx, "SAVEPOINT "+name); err != nil {
			return nil, fmt.Errorf("herald/entcapture: savepoint: %w", err)
		}
		s.savepoint = name
		return s, nil
	}
	tx, err := cd.Driver.Tx(ctx)
	if err != nil {
		return nil, fmt.Errorf("herald/entcapture: begin: %w", err)
	}
	s.own = tx
	s.ctx = context.WithValue(ctx, txKey{}, &hookTx{d: cd, tx: tx})
	return s, nil
}

func (s *scope) add(spec *capture.Spec, cs ...envelope.Change) {
	cs = slices.DeleteFunc(cs, func(c envelope.Change) bool { return !spec.Captures(c.Operation) })
	for i := range s.batches {
		if s.batches[i].spec == spec {
			s.batches[i].changes = append(s.batches[i].changes, cs...)
			return
		}
	}
	s.batches = append(s.batches, batch{spec: spec, changes: cs})
}

// mark returns how many changes each batch of the scope holds, for reset.
func (s *scope) mark() []int {
	m := make([]int, len(s.batches))
	for i, b := range s.batches {
		m[i] = len(b.changes)
	}
	return m
}

// reset drops the changes added since mark.
func (s *scope) reset(mark []int) {
	s.batches = s.batches[:len(mark)]
	for i, n := range mark {
		s.batches[i].changes = s.batches[i].changes[:n]
	}
}

// flush writes the scope's events: one multi-row INSERT (split only at
// the bind-parameter limit).
func (s *scope) flush() error {
	var ms []envelope.Message
	for _, b := range s.batches {
		if len(b.changes) == 0 {
			continue
		}
		slices.SortStableFunc(b.changes, func(x, y envelope.Change) int { return comparePK(x.PK, y.PK) })
		m, err := b.spec.Messages(s.ctx, b.changes)
		if err != nil {
			return err
		}
		ms = append(ms, m...)
	}
	s.batches = nil
	if len(ms) == 0 {
		return nil
	}
	write := s.writer.Write
	if len(ms) > 1 && s.cd != nil && s.cd.bindsArrays() {
		write = outbox.WriteArrays(s.writer)
	}
	res, err := write(s.ctx, s.querier(), ms)
	if err != nil {
		return err
	}
	if len(res.Topics) == 0 || s.cfg.Wakeup == nil {
		return nil
	}
	if ts, ok := s.cfg.Wakeup.(wakeup.TxSignaler); ok {
		if err := ts.SignalTx(s.ctx, s.g, res.Topics); err != nil {
			return fmt.Errorf("herald/entcapture: wakeup in transaction: %w", err)
		}
		return nil
	}
	s.topics = append(s.topics, res.Topics...)
	return nil
}

// close ends the scope: on err it undoes the write (rollback, or
// rollback to the savepoint, which leaves the caller's transaction
// usable); otherwise it commits or releases, and arranges the wakeup
// for after the outermost commit.
func (s *scope) close(err error) error {
	ctx := context.WithoutCancel(s.ctx)
	switch {
	case s.savepoint != "":
		if err != nil {
			if _, rerr := s.g.ExecContext(ctx, "ROLLBACK TO SAVEPOINT "+s.savepoint); rerr != nil {
				return fmt.Errorf("%w (and rolling back to the savepoint failed: %w)", err, rerr)
			}
			_, _ = s.g.ExecContext(ctx, "RELEASE SAVEPOINT "+s.savepoint)
			return err
		}
		if _, rerr := s.g.ExecContext(ctx, "RELEASE SAVEPOINT "+s.savepoint); rerr != nil {
			return fmt.Errorf("herald/entcapture: release savepoint: %w", rerr)
		}
		if len(s.topics) > 0 {
			topics, w := s.topics, s.cfg.Wakeup
			if !s.g.HeraldOnCommit(func() { s.signal(w, topics) }) {
				// In a transaction the hook opened for an outer write:
				// that write's commit signals; hand the topics up.
				if t, ok := s.ctx.Value(txKey{}).(*hookTx); ok {
					t.addTopics(topics)
				}
			}
		}
		return nil
	case s.own != nil:
		if err != nil {
			_ = s.own.Rollback()
			return err
		}
		if cerr := s.own.Commit(); cerr != nil {
			return fmt.Errorf("herald/entcapture: commit: %w", cerr)
		}
		if t, ok := s.ctx.Value(txKey{}).(*hookTx); ok {
			s.topics = append(s.topics, t.topics...)
		}
		if len(s.topics) > 0 {
			s.signal(s.cfg.Wakeup, s.topics)
		}
	}
	return err
}

func (t *hookTx) addTopics(topics []string) { t.topics = append(t.topics, topics...) }

func (s *scope) signal(w wakeup.Wakeup, topics []string) {
	if w == nil {
		return
	}
	slices.Sort(topics)
	topics = slices.Compact(topics)
	if err := w.Signal(context.WithoutCancel(s.ctx), topics); err != nil && s.cfg.Logger != nil {
		s.cfg.Logger.Warn("herald/entcapture: wakeup signal failed; relays will poll", "error", err, "topics", topics)
	}
}

// writeLock makes a SQLite transaction a writer before the capture reads
// rows it is about to write, as BEGIN IMMEDIATE would: a no-op UPDATE
// takes the database's write lock (waiting under the busy timeout), so no
// other writer changes those rows between the read and the write. Once
// per scope.
func (s *scope) writeLock(sch *entcapturert.Schema) error {
	if s.d != envelope.SQLite || s.locked {
		return nil
	}
	col := names.Quote(sch.KeyColumns()[0])
	if _, err := s.g.ExecContext(s.ctx, "UPDATE "+quotedTable(s.d, s.g, sch)+" SET "+col+"="+col+" WHERE 0"); err != nil {
		return fmt.Errorf("herald/entcapture: take the write lock: %w", err)
	}
	s.locked = true
	return nil
}

func now() time.Time { return time.Now().UTC() }

func comparePK(a, b any) int {
	if x, ok := asInt(a); ok {
		if y, ok := asInt(b); ok {
			return cmp.Compare(x, y)
		}
	}
	return strings.Compare(names.KeyText(a), names.KeyText(b))
}

func asInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int:
		return int64(x), true
	case int8:
		return int64(x), true
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	case uint:
		return int64(x), true
	case uint8:
		return int64(x), true
	case uint16:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		return int64(x), true
	}
	return 0, false
}

// selectRows reads the rows of the mutation's predicates (and id, for
// UpdateOne), locked FOR UPDATE on PostgreSQL: one statement.
//
// extra predicates narrow a read by ids: those a schema hook after the
// capture hook added to an update (a tenant's WhereP), so that only the
// rows the UPDATE wrote are read back.
func (s *scope) selectRows(w *write, cols []string, id any, byID bool, ids []any, extra ...func(*sql.Selector)) ([]map[string]any, error) {
	sel := sql.Dialect(dialectName(s.d)).Select().From(from(s.g, w.sch))
	qc := make([]string, len(cols))
	for i, c := range cols {
		qc[i] = sel.C(c)
	}
	sel.Select(qc...)
	if ids != nil {
		keysIn(s.d, quotedTable(s.d, s.g, w.sch), w.sch.PK, ids)(sel)
		for _, p := range extra {
			p(sel)
		}
	} else {
		switch {
		case byID && len(w.sch.Key) > 0:
			// A composite-id UpdateOne: ent's UPDATE names the row by its
			// key fields, set on the mutation (which names fields by column).
			for _, c := range w.sch.Key {
				v, ok := w.g.Field(fieldOf(w.sch, c))
				if !ok {
					return nil, fmt.Errorf("herald/entcapture: %s: an UpdateOne without its key field %s", w.sch.Name, c)
				}
				sel.Where(sql.EQ(sel.C(c), v))
			}
		case byID:
			sel.Where(sql.EQ(sel.C(w.sch.PK), id))
		}
		for _, p := range w.g.HeraldPredicates() {
			p(sel)
		}
	}
	if locks(s.d) && ids == nil {
		sel.ForUpdate()
	}
	out, err := s.query(sel, cols, scanStored(w.g))
	if err != nil {
		return nil, fmt.Errorf("herald/entcapture: %s: read rows: %w", w.sch.Name, err)
	}
	return out, nil
}

// selectPinned reads again, by their keys, rows of a schema with a
// composite key.
func (s *scope) selectPinned(w *write, cols []string, rows []map[string]any) ([]map[string]any, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	sel := sql.Dialect(dialectName(s.d)).Select().From(from(s.g, w.sch))
	qc := make([]string, len(cols))
	for i, c := range cols {
		qc[i] = sel.C(c)
	}
	sel.Select(qc...)
	pin(w.sch, s.d, quotedTable(s.d, s.g, w.sch), rows)(sel)
	out, err := s.query(sel, cols, scanStored(w.g))
	if err != nil {
		return nil, fmt.Errorf("herald/entcapture: %s: read rows: %w", w.sch.Name, err)
	}
	return out, nil
}

// query runs a snapshot SELECT in the write's transaction and scans its
// rows as their schema's entity would.
func (s *scope) query(sel *sql.Selector, cols []string, scan func(*stdsql.Rows, []string) ([]map[string]any, error)) ([]map[string]any, error) {
	q, args := sel.Query()
	rows, err := s.g.QueryContext(s.ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out, err := scan(rows, cols)
	if err != nil {
		return nil, err
	}
	return out, rows.Err()
}

func dialectName(d envelope.Dialect) string {
	switch d {
	case envelope.Postgres:
		return dialect.Postgres
	case envelope.MySQL:
		return dialect.MySQL
	}
	return dialect.SQLite
}
