//go:build !race

package watermill_test

// raceDetector: this test binary runs under the race detector.
const raceDetector = false
