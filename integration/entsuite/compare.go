package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// knownEntry is one line of known.txt: a difference the harness expects
// because of a capture defect not fixed yet.
//
//	<dialect> lost   <test>                 -- <defect>
//	<dialect> gained <test>                 -- <defect>
//	<dialect> oracle <test> <kind> <table>  -- <defect>
//
// dialect is sqlite, postgres or * (both); test is the folder and the
// test ("integration:TestSQLite/Upsert", "edgeschema:TestEdgeSchemaBidiWithID").
type knownEntry struct {
	dialect, what, test, kind, table, defect string
	line                                     int
	seen                                     bool
}

func readKnown(p string) ([]*knownEntry, error) {
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*knownEntry
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		l := strings.TrimSpace(sc.Text())
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		spec, defect, ok := strings.Cut(l, " -- ")
		f := strings.Fields(spec)
		if !ok || strings.TrimSpace(defect) == "" || len(f) < 3 {
			return nil, fmt.Errorf("%s:%d: want `<dialect> lost|gained|oracle <test> [<kind> <table>] -- <defect>`", p, n)
		}
		e := &knownEntry{dialect: f[0], what: f[1], test: f[2], defect: strings.TrimSpace(defect), line: n}
		switch {
		case e.dialect != "sqlite" && e.dialect != "postgres" && e.dialect != "mysql" && e.dialect != "*":
			return nil, fmt.Errorf("%s:%d: dialect %q", p, n, e.dialect)
		case (e.what == "lost" || e.what == "gained") && len(f) == 3:
		case e.what == "oracle" && len(f) == 5:
			e.kind, e.table = f[3], f[4]
		default:
			return nil, fmt.Errorf("%s:%d: want `<dialect> lost|gained <test>` or `<dialect> oracle <test> <kind> <table>`", p, n)
		}
		out = append(out, e)
	}
	return out, sc.Err()
}

func matchKnown(known []*knownEntry, dialect, what, test, kind, table string) *knownEntry {
	for _, e := range known {
		if (e.dialect == "*" || e.dialect == dialect) && e.what == what && e.test == test && e.kind == kind && e.table == table {
			e.seen = true
			return e
		}
	}
	return nil
}

func count(res map[string]string, top bool) (pass, fail, skip int) {
	for name, a := range res {
		if top && strings.Contains(name, "/") {
			continue
		}
		switch a {
		case "pass":
			pass++
		case "fail":
			fail++
		case "skip":
			skip++
		}
	}
	return
}

// finding groups: test -> "kind table" -> findings.
func groupFindings(fs map[string][]string) map[string]map[string][]string {
	out := map[string]map[string][]string{}
	for test, list := range fs {
		for _, f := range list {
			kind, rest, _ := strings.Cut(f, " ")
			table, _, _ := strings.Cut(rest, "[")
			if kind == "error" || kind == "unknown-model" {
				table = "-"
			}
			if out[test] == nil {
				out[test] = map[string][]string{}
			}
			k := kind + " " + table
			out[test][k] = append(out[test][k], f)
		}
	}
	return out
}

func (h *harness) compare(runs []*run, known []*knownEntry, total time.Duration) error {
	base := map[string]*run{}
	for _, r := range runs {
		if r.variant == "base" {
			base[r.dialect] = r
		}
	}
	fmt.Printf("\n%-8s %-8s %16s %20s %7s  %s\n", "dialect", "run", "top-level p/f/s", "with subtests p/f/s", "time", "vs baseline")
	bad := false
	var details []string
	ran := map[string]bool{}     // dialect + what, to report stale known entries
	byDefect := map[string]int{} // dialect + defect -> known findings
	for _, r := range runs {
		if r.err != nil {
			bad = true
			fmt.Printf("%-8s %-8s %s\n", r.dialect, r.variant, r.err)
			continue
		}
		p, f, s := count(r.results, true)
		ap, af, as := count(r.results, false)
		verdict := "baseline"
		if r.variant != "base" {
			b := base[r.dialect]
			if b == nil || b.err != nil {
				verdict = "no baseline"
				bad = true
			} else {
				ran[r.dialect+" lost"], ran[r.dialect+" gained"] = true, true
				lost, gained, unseen := diff(b.results, r.results)
				var newLost, newGained, knownDiff []string
				for _, t := range lost {
					if e := matchKnown(known, r.dialect, "lost", t, "", ""); e != nil {
						knownDiff = append(knownDiff, fmt.Sprintf("lost %s (known: %s)", t, e.defect))
					} else {
						newLost = append(newLost, t)
					}
				}
				for _, t := range gained {
					if e := matchKnown(known, r.dialect, "gained", t, "", ""); e != nil {
						knownDiff = append(knownDiff, fmt.Sprintf("gained %s (known: %s)", t, e.defect))
					} else {
						newGained = append(newGained, t)
					}
				}
				verdict = "same"
				if len(lost)+len(gained) > 0 {
					verdict = fmt.Sprintf("%d lost, %d gained (%d known)", len(lost), len(gained), len(knownDiff))
				}
				if len(unseen) > 0 {
					details = append(details, fmt.Sprintf("%s %s: subtests that ran only with capture, their tests passing in both runs (not a difference): %s", r.dialect, r.variant, strings.Join(unseen, " ")))
				}
				for _, k := range knownDiff {
					details = append(details, fmt.Sprintf("%s %s: %s", r.dialect, r.variant, k))
				}
				if len(newLost)+len(newGained) > 0 {
					bad = true
					verdict += " — NEW DIFFERENCES"
					if len(newLost) > 0 {
						details = append(details, fmt.Sprintf("%s %s: NEW: pass without capture, not with it: %s", r.dialect, r.variant, strings.Join(newLost, " ")))
					}
					if len(newGained) > 0 {
						details = append(details, fmt.Sprintf("%s %s: NEW: pass with capture only: %s", r.dialect, r.variant, strings.Join(newGained, " ")))
					}
					if h.verbose {
						details = append(details, failureOutput(r.logs, newLost))
					}
				}
			}
			verdict += fmt.Sprintf("; %d clients on entcapture.Driver", r.report.Clients)
			if r.variant == "oracle" {
				ran[r.dialect+" oracle"] = true
				verdict += fmt.Sprintf(", %d watched; %d transactions/statements judged, %d rows changed, %d events, %d findings", r.report.Watched, r.report.Checks, r.report.Rows, r.report.Events, r.report.Findings)
				if r.report.Events == 0 {
					bad = true
					verdict += " — NOTHING CAPTURED"
				}
				groups := groupFindings(r.findings)
				tests := make([]string, 0, len(groups))
				for t := range groups {
					tests = append(tests, t)
				}
				sort.Strings(tests)
				for _, t := range tests {
					keys := make([]string, 0, len(groups[t]))
					for k := range groups[t] {
						keys = append(keys, k)
					}
					sort.Strings(keys)
					for _, k := range keys {
						kind, table, _ := strings.Cut(k, " ")
						list := groups[t][k]
						if e := matchKnown(known, r.dialect, "oracle", t, kind, table); e != nil {
							byDefect[r.dialect+" "+e.defect] += len(list)
							if !h.verbose {
								continue
							}
							details = append(details, fmt.Sprintf("%s oracle %s: %d × %s %s (known: %s); first: %s", r.dialect, t, len(list), kind, table, e.defect, list[0]))
							continue
						}
						bad = true
						details = append(details, fmt.Sprintf("%s oracle %s: %d × %s %s (NEW); first: %s", r.dialect, t, len(list), kind, table, list[0]))
					}
				}
			}
		}
		fmt.Printf("%-8s %-8s %16s %20s %7s  %s\n", r.dialect, r.variant, fmt.Sprintf("%d/%d/%d", p, f, s), fmt.Sprintf("%d/%d/%d", ap, af, as), r.dur.Round(time.Second), verdict)
	}
	for _, d := range details {
		fmt.Println(d)
	}
	if len(byDefect) > 0 {
		fmt.Println("oracle findings of known defects (known.txt; -v lists each):")
		keys := make([]string, 0, len(byDefect))
		for k := range byDefect {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Printf("  %5d  %s\n", byDefect[k], k)
		}
	}
	for _, e := range known {
		if e.seen {
			continue
		}
		dialects := []string{e.dialect}
		if e.dialect == "*" {
			dialects = []string{"sqlite", "postgres"}
		}
		for _, d := range dialects {
			if ran[d+" "+e.what] && h.ranTest(e.test) {
				fmt.Printf("known.txt:%d no longer seen on %s (remove it?): %s %s %s %s -- %s\n", e.line, d, e.what, e.test, e.kind, e.table, e.defect)
			}
		}
	}
	fmt.Printf("total %s\n", total.Round(time.Second))
	if bad {
		return errors.New("capture is not transparent to ent's suite, or the oracle disagrees with it, beyond known.txt (see above)")
	}
	return nil
}

// ranTest reports whether a known entry's folder was run.
func (h *harness) ranTest(test string) bool {
	name, _, _ := strings.Cut(test, ":")
	for _, f := range h.folders {
		n := f.dir
		if n == "." {
			n = "integration"
		}
		if n == name {
			return true
		}
	}
	return false
}

// diff returns the tests that pass in base but not in r (lost), those
// that pass in r and did not pass in base (gained), but for those that
// never ran in base while their top-level test, and every test above them
// that ran in base, passed there (unseen). Lost and gained list the
// deepest tests (not their parents); unseen the shallowest.
func diff(base, r map[string]string) (lost, gained, unseen []string) {
	for name, a := range base {
		if a == "pass" && r[name] != "pass" {
			lost = append(lost, name)
		}
	}
	for name, a := range r {
		if a != "pass" || base[name] == "pass" {
			continue
		}
		if _, ran := base[name]; !ran && parentsPass(base, name) {
			unseen = append(unseen, name)
			continue
		}
		gained = append(gained, name)
	}
	return leaves(lost), leaves(gained), collapse(unseen)
}

// leaves sorts names and leaves out the tests above another one listed
// (a parent fails when its subtest does): a known entry names the test
// that differs, and a new difference under the same parent is new.
func leaves(names []string) []string {
	sort.Strings(names)
	var out []string
	for i, n := range names {
		if i+1 < len(names) && strings.HasPrefix(names[i+1], n+"/") {
			continue
		}
		out = append(out, n)
	}
	return out
}

func parentsPass(results map[string]string, name string) bool {
	top, _, sub := strings.Cut(name, "/")
	if !sub || results[top] != "pass" {
		return false
	}
	for i := len(top) + 1; i < len(name); i++ {
		if name[i] == '/' {
			if a, ran := results[name[:i]]; ran && a != "pass" {
				return false
			}
		}
	}
	return true
}

// collapse sorts names and leaves out the subtests of a test listed too.
func collapse(names []string) []string {
	sort.Strings(names)
	var out []string
	for _, n := range names {
		if len(out) > 0 && strings.HasPrefix(n, out[len(out)-1]+"/") {
			continue
		}
		out = append(out, n)
	}
	return out
}

// failureOutput returns the output test2json recorded for tests.
func failureOutput(logs []string, tests []string) string {
	want := map[string]bool{}
	for _, t := range tests {
		_, name, _ := strings.Cut(t, ":")
		want[name] = true
	}
	var sb strings.Builder
	for _, log := range logs {
		b, err := os.ReadFile(log)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		sc.Buffer(make([]byte, 1<<20), 1<<26)
		for sc.Scan() {
			var ev struct{ Action, Test, Output string }
			if json.Unmarshal(sc.Bytes(), &ev) == nil && ev.Action == "output" && want[ev.Test] {
				sb.WriteString(ev.Output)
			}
		}
	}
	return sb.String()
}
