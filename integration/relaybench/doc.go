// Package relaybench measures the relay on PostgreSQL: how fast relays
// drain a table with a no-op delivery, how fast a bare SQL lease-and-mark
// loop drains the same table (the limit for herald's design: the same
// statements with nothing around them), and how many statements an idle
// relay issues per hour, with and without a wakeup.
//
// The Go benchmarks in this package and the program
// integration/cmd/relaybench use it; BENCHMARKS.md has the figures and the
// commands.
package relaybench
