//go:build unix

package gormcapture_test

import (
	"syscall"
	"time"
)

// processCPU is the process's CPU time so far (user and system), for the
// benchmarks' Go-time figures; 0 where getrusage is not available.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
