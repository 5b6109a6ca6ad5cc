package gormcapture

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capture"
	"github.com/heraldgo/herald/internal/outbox"
	"github.com/heraldgo/herald/internal/pgform"
	"github.com/heraldgo/herald/wakeup"
)

// Name is the plugin's name in gorm's plugin registry.
const Name = "herald:capture"

// Captured is implemented by a model that declares change capture. It may
// be declared on an embedded base struct: every model built on that base
// is captured, each under its own name.
type Captured interface {
	ChangeCapture() envelope.Options
}

// Config configures the plugin. The zero value is usable.
type Config struct {
	// Table is the outbox table; "" = envelope.DefaultTable.
	Table string

	// Namespace is the {namespace} (and the model label's prefix) of
	// captured models whose Options set none; "" = no namespace.
	Namespace string

	// Models lists models known up front, for two purposes: captured ones
	// (declaring Captured, or registered with Capture before db.Use) are
	// validated when the plugin is installed, and every listed model's
	// constraint tags (constraint:OnDelete:CASCADE / SET NULL / SET
	// DEFAULT, OnUpdate alike) tell the plugin which rows a delete or key
	// update makes the database change, so those rows are captured too. A
	// model that declares Captured is captured even when not listed; list
	// it anyway so a bad declaration fails at db.Use and deletes that
	// reach it through the database are seen. A listed model that serves
	// neither purpose — not captured (without CaptureAll) and declaring no
	// such constraint — is an envelope.ErrConfiguration at db.Use: call
	// Capture for it before db.Use (Capture after db.Use is for models
	// not listed here), or drop it. nil = none.
	Models []any

	// Wakeup, when set, is signalled with the topics of the events a
	// transaction wrote, once after it commits (never after a rollback);
	// a wakeup.TxSignaler (PostgreSQL NOTIFY) is signalled inside the
	// transaction instead. nil = no signals; relays poll.
	Wakeup wakeup.Wakeup

	// CaptureAll, when set, captures every model written through GORM
	// that neither declares Captured nor is registered with Capture, with
	// these options: models declared anywhere (inside a function too),
	// and the join tables GORM generates for many2many fields. Each model
	// is compiled at its first write; options it cannot satisfy (Fields or
	// Exclude naming a column it lacks, no key) make its writes fail with
	// envelope.ErrConfiguration naming it. A model's database cascades
	// are followed once the plugin has seen it (see Models). nil = only
	// declared and registered models are captured.
	CaptureAll *envelope.Options

	// Logger receives warnings: a failed wakeup signal, a write in a
	// transaction the plugin cannot see commit. nil = no logging.
	Logger *slog.Logger
}

// Plugin is the gorm.Plugin that captures writes: install it with db.Use
// right after gorm.Open, before dbresolver and before deriving sessions.
type Plugin struct {
	cfg Config

	mu       sync.Mutex
	dialect  envelope.Dialect
	writer   *envelope.Writer
	namer    schema.Namer
	db       *gorm.DB                          // the first db.Use's: its schema cache sees db.SetupJoinTable
	explicit map[reflect.Type]envelope.Options // from Capture
	known    []any                             // Config.Models and Capture models
	inits    map[any]bool                      // callback managers already set up

	models   sync.Map // reflect.Type -> *model
	cascades sync.Map // table name -> []*cascadeEdge
	pools    sync.Map // *sql.DB -> *pool
	stmts    sync.Map // stmtKey -> *sql.Stmt (SQLite)
	keyless  sync.Map // reflect.Type -> true: warned that CaptureAll skips it
	nstmts   atomic.Int64
	arrays   sync.Map // *sql.DB -> bool: binds Go slices as arrays (pgx)
	colTypes sync.Map // table name -> *columnTypes (PostgreSQL), for fused inserts
	dbTypes  sync.Map // table name -> tableTypes: the catalog's column types with a form of pgform's (dbtypes.go)
	shapes   sync.Map // fusedShapeKey -> *fusedShape (PostgreSQL), for fused inserts
	// fusedStmts caches fused inserts' statements (fusedStmtKey ->
	// *fusedStmt), at most maxFusedStmts of them (nFusedStmts counts).
	fusedStmts  sync.Map
	nFusedStmts atomic.Int64
	tables      sync.Map // table name -> *schema.Schema: the first captured model seen on it (tableModel)
	// table name -> map[string]string: string columns' JSON_TABLE types (MySQL, mysqlkeys.go)
	mysqlStrings sync.Map
	// how the SQLite driver writes a time.Time (keyset.go); nil until
	// probed, then a *sqliteTimeForm
	sqliteTime atomic.Pointer[sqliteTimeForm]

	spSeq         atomic.Uint64
	foreignWarned atomic.Bool
}

var _ gorm.Plugin = (*Plugin)(nil)

// New returns the capture plugin for cfg. Configuration errors (a bad
// table name, a bad declaration) are reported by db.Use.
func New(cfg Config) *Plugin {
	p := &Plugin{cfg: cfg, explicit: map[reflect.Type]envelope.Options{}, inits: map[any]bool{}}
	p.known = append(p.known, cfg.Models...)
	return p
}

// Name implements gorm.Plugin.
func (p *Plugin) Name() string { return Name }

func (p *Plugin) logger() *slog.Logger {
	if p.cfg.Logger != nil {
		return p.cfg.Logger
	}
	return discard
}

var discard = slog.New(slog.DiscardHandler)

// Initialize implements gorm.Plugin. It may run more than once (dbresolver
// re-runs the Initialize of installed plugins on each source it opens) and
// is idempotent: it wraps the connection pool once and registers the
// callbacks once per callback manager. It keeps no reference to db.
func (p *Plugin) Initialize(db *gorm.DB) error {
	d, err := dialectOf(db)
	if err != nil {
		return err
	}
	p.mu.Lock()
	first := p.writer == nil
	if first {
		w, err := envelope.NewWriter(d, p.cfg.Table)
		if err != nil {
			p.mu.Unlock()
			return err
		}
		p.writer, p.dialect = w, d
	} else if p.dialect != d {
		p.mu.Unlock()
		return outbox.Configurationf("gormcapture", "plugin already installed on a %s database, now on %s: use one plugin per dialect", p.dialect, d)
	}
	p.namer = db.NamingStrategy
	if p.db == nil {
		p.db = db
	}
	known := slices.Clone(p.known)
	p.mu.Unlock()

	if first {
		if o := p.cfg.CaptureAll; o != nil {
			if err := o.Validate(); err != nil {
				var e *envelope.Error
				if errors.As(err, &e) {
					e.Where = "Config.CaptureAll " + e.Where
				}
				return err
			}
		}
		for _, m := range known {
			if err := p.register(db, m); err != nil {
				return err
			}
		}
	}

	switch c := db.ConnPool.(type) {
	case *gorm.PreparedStmtDB:
		c.ConnPool = p.wrapPlain(c.ConnPool)
	default:
		db.ConnPool = p.wrapPlain(db.ConnPool)
	}
	if db.Statement != nil {
		db.Statement.ConnPool = db.ConnPool
	}

	cb := db.Callback()
	p.mu.Lock()
	done := p.inits[cb]
	p.inits[cb] = true
	p.mu.Unlock()
	if done {
		return nil
	}
	return p.registerCallbacks(db)
}

func dialectOf(db *gorm.DB) (envelope.Dialect, error) {
	if db.Dialector == nil {
		return "", outbox.Configurationf("gormcapture", "gorm.DB has no dialector")
	}
	switch n := db.Name(); n {
	case "postgres", "pgx":
		return envelope.Postgres, nil
	case "sqlite", "sqlite3":
		return envelope.SQLite, nil
	case "mysql": // MySQL 8.0+ and MariaDB 10.6+ (gorm.io/driver/mysql)
		return envelope.MySQL, nil
	default:
		return "", &envelope.Error{Kind: envelope.ErrUnsupported, Where: "gormcapture", Msg: fmt.Sprintf("dialect %q is not supported (want postgres, sqlite or mysql)", n)}
	}
}

func (p *Plugin) registerCallbacks(db *gorm.DB) error {
	cb := db.Callback()
	enableTx := func(db *gorm.DB) bool { return !db.SkipDefaultTransaction }
	origCreate := cb.Create().Get("gorm:create")
	origUpdate := cb.Update().Get("gorm:update")
	origDelete := cb.Delete().Get("gorm:delete")
	if origCreate == nil || origUpdate == nil || origDelete == nil {
		return &envelope.Error{Kind: envelope.ErrUnsupported, Where: "gormcapture", Msg: "the dialector did not register gorm's default create/update/delete callbacks"}
	}
	steps := []func() error{
		// Re-wrap a pool swapped in by dbresolver (its Before("*") runs
		// first) or a *sql.Conn from db.Connection before GORM begins its
		// default transaction on it.
		func() error {
			return cb.Create().Match(enableTx).Before("gorm:begin_transaction").Register("herald:rewrap", p.rewrap)
		},
		func() error {
			return cb.Update().Match(enableTx).Before("gorm:begin_transaction").Register("herald:rewrap", p.rewrap)
		},
		func() error {
			return cb.Delete().Match(enableTx).Before("gorm:begin_transaction").Register("herald:rewrap", p.rewrap)
		},
		// Open the write's scope (own transaction or savepoint) before any
		// of the chain's SQL. Anchored on callbacks that always exist:
		// gorm:begin_transaction is absent under SkipDefaultTransaction.
		func() error {
			return cb.Create().Before("gorm:before_create").Register("herald:begin", p.begin(envelope.Inserted))
		},
		func() error {
			return cb.Update().Before("gorm:setup_reflect_value").Register("herald:begin", p.begin(envelope.Updated))
		},
		func() error {
			return cb.Delete().Before("gorm:before_delete").Register("herald:begin", p.begin(envelope.Deleted))
		},
		func() error { return cb.Create().Replace("gorm:create", p.create(origCreate)) },
		func() error { return cb.Update().Replace("gorm:update", p.update(origUpdate)) },
		func() error { return cb.Delete().Replace("gorm:delete", p.delete(origDelete)) },
		// Close the scope last, after the model's after-hooks.
		func() error { return cb.Create().After("*").Register("herald:end", p.end) },
		func() error { return cb.Update().After("*").Register("herald:end", p.end) },
		func() error { return cb.Delete().After("*").Register("herald:end", p.end) },
		func() error { return cb.Raw().After("gorm:raw").Register("herald:savepoint", p.rawSavepoint) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return fmt.Errorf("herald/gormcapture: register callbacks: %w", err)
		}
	}
	return nil
}

// rewrap wraps a statement's pool that the plugin does not own yet.
func (p *Plugin) rewrap(db *gorm.DB) {
	if db.Error == nil {
		db.Statement.ConnPool = p.wrap(db.Statement.ConnPool)
	}
}

// Capture registers model for capture with opts, without touching the
// model type; it takes precedence over the model's own ChangeCapture.
// Called after db.Use it validates at once; before, db.Use reports errors.
func (p *Plugin) Capture(model any, opts envelope.Options) error {
	t, err := modelType(model)
	if err != nil {
		return err
	}
	if err := opts.Validate(); err != nil {
		var e *envelope.Error
		if errors.As(err, &e) {
			e.Where = t.Name() + " " + e.Where
		}
		return err
	}
	p.mu.Lock()
	namer, db := p.namer, p.db
	p.mu.Unlock()
	var sch *schema.Schema
	if namer != nil {
		// Parsed in the db's schema cache, where db.SetupJoinTable (called
		// before Capture) has made a join model without primary-key tags
		// keyed by its foreign keys. A model with no key at all is refused
		// here: every write of it would fail.
		stmt := &gorm.Statement{DB: db}
		if err := stmt.Parse(model); err != nil {
			return outbox.Configurationf(t.Name(), "cannot parse model: %v", err)
		}
		if _, err := p.compile(stmt.Schema, opts); err != nil {
			return err
		}
		sch = stmt.Schema
	}
	p.mu.Lock()
	p.explicit[t] = opts
	p.known = append(p.known, model)
	p.mu.Unlock()
	p.models.Delete(t)
	p.cascades.Clear()
	if sch != nil {
		p.tables.LoadOrStore(sch.Table, sch)
		p.preloadTypes(db, p.modelFor(sch), sch.Table)
	}
	return nil
}

func modelType(model any) (reflect.Type, error) {
	t := reflect.TypeOf(model)
	for t != nil && (t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil, outbox.Configurationf("gormcapture", "model %T is not a struct", model)
	}
	return t, nil
}

// register validates one known model when the plugin is installed.
func (p *Plugin) register(db *gorm.DB, model any) error {
	t, err := modelType(model)
	if err != nil {
		return err
	}
	stmt := &gorm.Statement{DB: db}
	if err := stmt.Parse(model); err != nil {
		return outbox.Configurationf(t.Name(), "cannot parse model: %v", err)
	}
	p.mu.Lock()
	_, explicit := p.explicit[t]
	p.mu.Unlock()
	if _, captured := reflect.New(t).Interface().(Captured); !captured && !explicit && p.cfg.CaptureAll == nil && !declaresCascade(stmt.Schema) {
		return outbox.Configurationf("gormcapture.Config.Models", "%s is not captured (no ChangeCapture method, no Capture call before db.Use, no CaptureAll) and declares no ON DELETE/ON UPDATE CASCADE, SET NULL or SET DEFAULT constraint: listing it does nothing; call Capture(&%s{}, opts) before db.Use, or drop it from Models", t.Name(), t.Name())
	}
	if len(keyColumns(stmt.Schema)) == 0 {
		if _, ok := reflect.New(t).Interface().(Captured); ok || explicit {
			// Captured, and no key to key its events by: refused now
			// rather than at every write.
			_, err := p.compile(stmt.Schema, envelope.Options{})
			return err
		}
		return nil // not captured: its constraint tags alone matter
	}
	m := p.modelFor(stmt.Schema)
	if m.err == nil {
		p.preloadTypes(db, m, stmt.Schema.Table)
	}
	return m.err
}

// declaresCascade reports whether a relation of sch (or of its join
// tables) declares a constraint whose ON DELETE or ON UPDATE the plugin
// follows: what makes listing an uncaptured model in Config.Models useful.
func declaresCascade(sch *schema.Schema) bool {
	follows := func(c *schema.Constraint) bool {
		if c == nil {
			return false
		}
		for _, a := range []string{c.OnDelete, c.OnUpdate} {
			switch strings.ToUpper(strings.Join(strings.Fields(a), " ")) {
			case "CASCADE", "SET NULL", "SET DEFAULT":
				return true
			}
		}
		return false
	}
	for _, rel := range sch.Relationships.Relations {
		if follows(rel.ParseConstraint()) {
			return true
		}
		if rel.JoinTable != nil {
			for _, r2 := range rel.JoinTable.Relationships.Relations {
				if follows(r2.ParseConstraint()) {
					return true
				}
			}
		}
	}
	return false
}

// model is what the plugin knows about one model type.
type model struct {
	spec  *capture.Spec // nil: not captured
	err   error         // a bad declaration, reported on every write
	label string
	open  []string // payload columns whose database type is read (undeclared, dbtypes.go)
	specs sync.Map // table name -> *capture.Spec: spec with that table's database types (typedSpec)
}

// modelFor returns the plugin's view of a schema's model, building it the
// first time the type is seen.
func (p *Plugin) modelFor(sch *schema.Schema) *model {
	if v, ok := p.models.Load(sch.ModelType); ok {
		return v.(*model)
	}
	return p.buildModel(sch)
}

func (p *Plugin) buildModel(sch *schema.Schema) *model {
	p.mu.Lock()
	opts, explicit := p.explicit[sch.ModelType]
	p.mu.Unlock()
	if !explicit {
		if c, ok := reflect.New(sch.ModelType).Interface().(Captured); ok {
			opts, explicit = c.ChangeCapture(), true
		}
	}
	if !explicit && p.cfg.CaptureAll != nil && !p.isOutbox(sch.Table) {
		if len(keyColumns(sch)) > 0 {
			opts, explicit = *p.cfg.CaptureAll, true
		} else {
			if _, warned := p.keyless.LoadOrStore(sch.ModelType, true); !warned {
				p.logger().Warn("herald/gormcapture: CaptureAll leaves a model without a primary key uncaptured",
					"model", sch.Name, "table", sch.Table)
			}
			return &model{} // not kept: db.SetupJoinTable may yet make it a keyed join model
		}
	}
	m := &model{}
	if explicit && len(keyColumns(sch)) == 0 {
		// Not kept: db.SetupJoinTable may yet make it a keyed join model.
		_, m.err = p.compile(sch, opts)
		return m
	}
	if explicit {
		m.spec, m.err = p.compile(sch, opts)
		if m.spec != nil {
			m.label = m.spec.Label
			m.open = undeclared(sch, m.spec)
		}
	}
	v, loaded := p.models.LoadOrStore(sch.ModelType, m)
	if !loaded && m.spec != nil {
		// A captured model seen for the first time may be reached by a
		// database cascade: recompute the cascade plans.
		p.cascades.Clear()
		// Its table's writes without a model (db.Table) are its writes,
		// unless a model seen earlier has the table (tableModel).
		p.tables.LoadOrStore(sch.Table, sch)
	}
	return v.(*model)
}

// tableModel returns the schema a statement without a model writes as:
// a write through db.Table(name) with a map, or a map-only write GORM
// itself builds (gorm.G's association updates), to the table of a
// captured model the plugin has seen (Config.Models, Capture, or a first
// write; under CaptureAll any keyed model written before). When two
// captured models share the table, the first seen wins: Config.Models in
// their order, then Capture, then first writes. Only a plain table name
// counts: an alias ("users u"), a schema-qualified name, a subquery or an
// expression with arguments is not captured. nil: none.
func (p *Plugin) tableModel(st *gorm.Statement) *schema.Schema {
	if st.Schema != nil || st.Table == "" || st.DB == nil || st.Dialector == nil {
		return nil
	}
	if e := st.TableExpr; e != nil && (len(e.Vars) > 0 || e.SQL != st.Quote(st.Table)) {
		return nil
	}
	if v, ok := p.tables.Load(st.Table); ok {
		sch := v.(*schema.Schema)
		if m := p.modelFor(sch); m.spec != nil {
			return sch
		}
	}
	return nil
}

func (p *Plugin) compile(sch *schema.Schema, opts envelope.Options) (*capture.Spec, error) {
	key := keyColumns(sch)
	if len(key) == 0 {
		return nil, outbox.Configurationf(sch.Name, "table %s has no primary key to key its events by: tag one with gorm:\"primaryKey\" "+
			"(a many-to-many join model without one is keyed by its foreign-key columns once given to db.SetupJoinTable: call it before db.Use and Capture)", sch.Table)
	}
	info := capture.ModelInfo{
		Name:             sch.Name,
		Table:            sch.Table,
		Columns:          slices.Clone(sch.DBNames),
		PrimaryKey:       slices.Clone(key),
		DefaultNamespace: p.cfg.Namespace,
	}
	for _, f := range sch.Fields {
		if f.DBName != "" && isSensitive(f) {
			info.Sensitive = append(info.Sensitive, f.DBName)
		}
		if scale, ok := declaredScale(f); ok && f.DBName != "" {
			if info.Scales == nil {
				info.Scales = map[string]int{}
			}
			info.Scales[f.DBName] = scale
		}
		if f.DBName != "" && pgform.Handles(string(f.DataType)) {
			if info.Types == nil {
				info.Types = map[string]string{}
			}
			info.Types[f.DBName] = string(f.DataType)
		}
	}
	if p.isOutbox(sch.Table) {
		return nil, outbox.Configurationf(sch.Name, "table %s is the outbox table: the outbox cannot capture its own events", sch.Table)
	}
	return capture.Compile(info, opts)
}

// isOutbox reports whether table is the plugin's outbox table.
func (p *Plugin) isOutbox(table string) bool {
	p.mu.Lock()
	w := p.writer
	p.mu.Unlock()
	return w != nil && strings.EqualFold(unqualified(table), unqualified(w.Table().Name))
}

func unqualified(t string) string {
	if i := strings.LastIndexByte(t, '.'); i >= 0 {
		return t[i+1:]
	}
	return t
}

// keyColumns are the columns that identify a row of sch in events: its
// primary key or, for a many-to-many join model without one given to
// db.SetupJoinTable (GORM's PersonAddress example), the join table's
// foreign-key columns, in table order. nil: the model has no key.
func keyColumns(sch *schema.Schema) []string {
	if len(sch.PrimaryFieldDBNames) > 0 {
		return sch.PrimaryFieldDBNames
	}
	return joinKey(sch)
}

// joinKey recognises a join model by what db.SetupJoinTable leaves: the
// owner's many2many relation has it as JoinTable, and the join model
// holds that relation's belongs-to relations (whose Field is the owner's
// many2many field); the relation's references name the join columns.
func joinKey(sch *schema.Schema) []string {
	for _, rel := range sch.Relationships.Relations {
		if rel.Field == nil || rel.Field.Schema == nil || rel.Field.Schema == sch {
			continue
		}
		owner := rel.Field.Schema.Relationships.Relations[rel.Field.Name]
		if owner == nil || owner.JoinTable != sch {
			continue
		}
		var cols []string
		for _, ref := range owner.References {
			if ref.ForeignKey != nil && sch.FieldsByDBName[ref.ForeignKey.DBName] != nil {
				cols = union(cols, ref.ForeignKey.DBName)
			}
		}
		if len(cols) > 0 {
			return inTableOrder(sch, cols)
		}
	}
	return nil
}

// isSensitive reports a `herald:"sensitive"` tag.
func isSensitive(f *schema.Field) bool {
	for _, s := range strings.Split(f.Tag.Get("herald"), ",") {
		if strings.TrimSpace(s) == "sensitive" {
			return true
		}
	}
	return false
}
