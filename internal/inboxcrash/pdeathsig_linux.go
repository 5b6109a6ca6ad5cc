package inboxcrash

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the child die when the test process does (a test
// timeout, a Ctrl-C): without it a child whose parent was killed polls
// forever for ids that never come.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
