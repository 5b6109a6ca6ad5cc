//go:build unix

package testkit

import (
	"syscall"
	"time"
)

// ProcessCPU is the process's CPU time so far (user and system), for
// benchmarks that report Go's share of a measurement beside its wall
// time; 0 where getrusage is not available.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
