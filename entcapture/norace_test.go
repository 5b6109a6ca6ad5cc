//go:build !race

package entcapture_test

// raceEnabled: the race detector slows the Go side of large tests tenfold.
const raceEnabled = false
