//go:build !linux

package main

import "os"

// isTerminal reports whether f is a character device: a terminal, or
// /dev/null (which answers the question with an end of file, a no).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
