package main

import (
	"slices"
	"testing"
)

// A subtest that ran only with the plugin, under a test that passed in
// both runs, is GORM's data-dependent subtest, not a difference; a test
// that failed without the plugin and passes with it is one, and so is a
// subtest that passed without it and is missing with it.
func TestDiff(t *testing.T) {
	base := map[string]string{"T": "pass", "T/a": "pass", "T/a/_#0": "pass", "U": "fail", "V": "pass", "V/x": "pass"}
	r := map[string]string{"T": "pass", "T/a": "pass", "T/a/_#0": "pass", "T/a/_#4": "pass", "U": "pass", "V": "pass", "W/y": "pass"}
	lost, gained, unseen := diff(base, r)
	if !slices.Equal(lost, []string{"V/x"}) || !slices.Equal(gained, []string{"U", "W/y"}) || !slices.Equal(unseen, []string{"T/a/_#4"}) {
		t.Fatalf("lost %v, gained %v, unseen %v", lost, gained, unseen)
	}
}
