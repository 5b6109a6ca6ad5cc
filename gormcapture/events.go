package gormcapture

import (
	"reflect"
	"slices"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/schema"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/capture"
	"github.com/heraldgo/herald/internal/outbox"
)

// batch is one statement's changes of one model: what Spec.Messages (and
// so ExtendMany) is called with.
type batch struct {
	spec    *capture.Spec
	changes []envelope.Change
}

// emit turns the changes into messages and writes them with one
// multi-row INSERT (split only at the bind-parameter limit) in the
// write's transaction, then records their topics for the wakeup.
func (p *Plugin) emit(db *gorm.DB, batches ...batch) error {
	st := db.Statement
	ctx := st.Context
	var ms []envelope.Message
	for _, b := range batches {
		if len(b.changes) == 0 {
			continue
		}
		slices.SortStableFunc(b.changes, func(x, y envelope.Change) int { return comparePK(x.PK, y.PK) })
		m, err := b.spec.Messages(ctx, b.changes)
		if err != nil {
			return err
		}
		ms = append(ms, m...)
	}
	if len(ms) == 0 {
		return nil
	}
	write := p.writer.Write
	if len(ms) > 1 && p.bindsArrays(st.ConnPool) {
		write = outbox.WriteArrays(p.writer)
	}
	res, err := write(ctx, querier{st.ConnPool, p}, ms)
	if err != nil {
		return err
	}
	return p.signal(ctx, st.ConnPool, res.Topics)
}

// change builds one change of a row.
func change(spec *capture.Spec, table string, op envelope.Operation, pk any, before, after image, changed []string, at time.Time) envelope.Change {
	c := envelope.Change{Model: spec.Label, Table: table, Operation: op, PK: pk, OccurredAt: at}
	if before != nil {
		c.Before = map[string]any(before)
	}
	if after != nil {
		c.After = map[string]any(after)
	}
	if op == envelope.Updated {
		c.Changed = changed
	}
	return c
}

// payloadColumns are the columns a snapshot of op reads: the primary key
// plus, when the mode keeps rows, the spec's payload columns.
func payloadColumns(sch *schema.Schema, spec *capture.Spec, rows bool) []string {
	cols := slices.Clone(keyColumns(sch))
	if rows && spec != nil {
		cols = union(cols, spec.Columns()...)
	}
	return cols
}

func now() time.Time { return time.Now().UTC() }

// bindsArrays reports whether statements on cp go to PostgreSQL through
// pgx's database/sql driver, which binds Go slices as arrays, so that many
// events can be written with one unnest INSERT.
func (p *Plugin) bindsArrays(cp gorm.ConnPool) bool {
	if p.dialect != envelope.Postgres {
		return false
	}
	t, _ := scopeOf(cp)
	if t == nil {
		return false
	}
	db, err := t.GetDBConn()
	if err != nil || db == nil {
		return false
	}
	if v, ok := p.arrays.Load(db); ok {
		return v.(bool)
	}
	ok := reflect.TypeOf(db.Driver()).String() == "*stdlib.Driver" // github.com/jackc/pgx/v5/stdlib
	p.arrays.Store(db, ok)
	return ok
}
