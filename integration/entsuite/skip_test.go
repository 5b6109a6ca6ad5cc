package main

import "testing"

// TestSkipPattern: the tests that panicked are skipped, and nothing else.
func TestSkipPattern(t *testing.T) {
	for _, c := range []struct {
		tests []string
		want  string
	}{
		{[]string{"TestSQLite/Types"}, "^TestSQLite$/^(Types)$"},
		{[]string{"TestPostgres/12/Types", "TestPostgres/12/Upsert"}, "^TestPostgres$/^12$/^(Types|Upsert)$"},
		{[]string{"TestRuntimeHooks"}, "^(TestRuntimeHooks)$"},
		{[]string{"TestA/x", "TestB/y"}, "^(TestA|TestB)$"},
	} {
		if got := skipPattern(c.tests); got != c.want {
			t.Errorf("skipPattern(%q) = %q, want %q", c.tests, got, c.want)
		}
	}
}

// TestDiffLeaves: a lost subtest is listed, not its parents, so that a
// known entry for one subtest does not hide another.
func TestDiffLeaves(t *testing.T) {
	base := map[string]string{"T": "pass", "T/12": "pass", "T/12/Types": "pass", "T/12/Upsert": "pass", "U": "pass"}
	r := map[string]string{"T": "fail", "T/12": "fail", "T/12/Types": "fail", "T/12/Upsert": "pass", "U": "pass"}
	lost, gained, _ := diff(base, r)
	if len(lost) != 1 || lost[0] != "T/12/Types" || len(gained) != 0 {
		t.Fatalf("lost %q, gained %q; want lost [T/12/Types]", lost, gained)
	}
	r["T/12/Upsert"] = "fail"
	if lost, _, _ = diff(base, r); len(lost) != 2 {
		t.Fatalf("lost %q, want T/12/Types and T/12/Upsert", lost)
	}
}
