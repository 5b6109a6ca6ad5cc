package main

import (
	"slices"
	"testing"
)

// A subtest that ran in only one run, under a test that passed in both
// runs, is GORM's data-dependent subtest, not a difference (V/x: ran
// without the plugin only, V passed with it — CI saw
// TestSelectWithUpdate/Toys/_#3/Model so); a test that failed without the
// plugin and passes with it is one, and so is a subtest that passed
// without it and fails with it (TestDiffLost).
func TestDiff(t *testing.T) {
	base := map[string]string{"T": "pass", "T/a": "pass", "T/a/_#0": "pass", "U": "fail", "V": "pass", "V/x": "pass",
		"S": "pass", "S/m": "pass", "F": "pass", "F/m": "fail"}
	r := map[string]string{"T": "pass", "T/a": "pass", "T/a/_#0": "pass", "T/a/_#4": "pass", "U": "pass", "V": "pass", "W/y": "pass",
		// S/m/x did not run without the plugin: it and its own subtests
		// are unseen, not gained (GORM's TestSelectWithUpdate/Manager/Model/ID).
		"S": "pass", "S/m": "pass", "S/m/x": "pass", "S/m/x/c": "pass",
		// F/m ran and failed without the plugin: what passes under it with
		// the plugin is a difference.
		"F": "pass", "F/m/q": "pass"}
	lost, gained, unseen := diff(base, r)
	if len(lost) != 0 || !slices.Equal(gained, []string{"F/m/q", "U", "W/y"}) || !slices.Equal(unseen, []string{"S/m/x", "T/a/_#4", "V/x"}) {
		t.Fatalf("lost %v, gained %v, unseen %v", lost, gained, unseen)
	}
}

// Differences in the database-free tests (GORM's LRU cache) are moved out;
// every other test, and their subtests, stay.
func TestSplitDBFree(t *testing.T) {
	free := map[string]bool{"TestLoadingExpired": true}
	kept, dropped := splitDBFree([]string{"TestLoadingExpired", "TestLoadingExpired/a", "TestCreate", "TestLoadingExpiredToo"}, free)
	if !slices.Equal(kept, []string{"TestCreate", "TestLoadingExpiredToo"}) || !slices.Equal(dropped, []string{"TestLoadingExpired", "TestLoadingExpired/a"}) {
		t.Fatalf("kept %v, dropped %v", kept, dropped)
	}
}

// The database-free file is in GORM's suite and holds the LRU tests.
func TestDBFreeTests(t *testing.T) {
	free, err := dbFreeTests("../../../shared/thirdparty/gorm-tests-v1.31.2/tests")
	if err != nil {
		t.Skipf("GORM's suite is not beside the repository: %v", err)
	}
	if !free["TestLoadingExpired"] || !free["TestLRUWithPurge"] || free["TestCreate"] {
		t.Fatalf("database-free tests: %v", free)
	}
}

// A subtest that passed without the plugin and failed with it, or is
// missing under a parent that failed, is lost.
func TestDiffLost(t *testing.T) {
	base := map[string]string{"A": "pass", "A/x": "pass", "B": "pass", "B/y": "pass"}
	r := map[string]string{"A": "fail", "B": "fail", "B/y": "fail"}
	lost, _, unseen := diff(base, r)
	if !slices.Equal(lost, []string{"A", "B"}) || len(unseen) != 0 {
		t.Fatalf("lost %v, unseen %v", lost, unseen)
	}
}
