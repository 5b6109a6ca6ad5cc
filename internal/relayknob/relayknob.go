// Package relayknob holds settings of the relay that its judges outside
// the relay package turn — the fault harness's relay processes — and what
// they read back. Nothing here is for applications: the relay's behaviour
// is set by relay.Config.
package relayknob

import "sync/atomic"

// PlanMinBytes, when 0 or more, is the outbox table size from which relays
// built after it is set run the drain's lease prepared, in place of the
// relay's own (8 MB; see relay/plans.go). -1: the relay's own.
var PlanMinBytes atomic.Int64

// PreparedLeases counts the leases every relay of the process ran
// prepared.
var PreparedLeases atomic.Int64

func init() { PlanMinBytes.Store(-1) }
