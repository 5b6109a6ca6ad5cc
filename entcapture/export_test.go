package entcapture

import (
	"database/sql"

	"entgo.io/ent/dialect"
)

// Prepared reports how many statements d keeps prepared.
func Prepared(d *CaptureDriver) int { return int(d.stmts.n.Load()) }

// DisablePrepared makes d run every statement unprepared, as before
// prepared statements (benchmarks compare the two).
func DisablePrepared(d *CaptureDriver) { d.stmts.n.Store(maxPrepared) }

// WithoutReturning makes captures on d read rows instead of asking the
// wrapper for RETURNING (the path of a client without the wrapper), for
// comparing the two.
func WithoutReturning(d *CaptureDriver) { withoutReturning.Store(d, struct{}{}) }

// SQLTx returns the database/sql transaction under a transaction ent
// hands out on d (benchmarks write beside the capture in it).
func SQLTx(t dialect.Tx) *sql.Tx { return sqlTx(t) }
