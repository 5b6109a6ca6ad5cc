//go:build !linux

package inboxcrash

import "os/exec"

// dieWithParent: only Linux has a parent-death signal; elsewhere a child
// outlives a killed test process until its own timeout.
func dieWithParent(*exec.Cmd) {}
