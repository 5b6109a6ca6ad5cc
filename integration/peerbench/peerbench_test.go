package main

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"
)

// trackerWith returns a tracker holding one sample per (at, lat) pair.
func trackerWith(samples ...sample) *tracker {
	t := newTracker()
	t.lat = samples
	return t
}

func TestSummaryComparesFirstAndLastMinuteOfLongRuns(t *testing.T) {
	var ss []sample
	for s := range 600 { // a 10-minute run, one event per second
		lat := 50 * time.Millisecond // the middle: excluded from both windows
		switch {
		case s < 60:
			lat = time.Millisecond
		case s >= 540:
			lat = 3 * time.Millisecond
		}
		ss = append(ss, sample{at: time.Duration(s) * time.Second, lat: lat})
	}
	fs := trackerWith(ss...).summary("c", 10*time.Minute)
	if len(fs) != 3 {
		t.Fatalf("figures = %+v, want p50, p99, drift", fs)
	}
	if want := "first minute 1.00/1.00, last minute 3.00/3.00 (n=600); p99 by minute: 1.00 50.00 50.00 50.00 50.00 50.00 50.00 50.00 50.00 3.00"; fs[0].note != want {
		t.Errorf("note = %q, want %q", fs[0].note, want)
	}
	if fs[2].unit != "×" || fs[2].value != 3 || !strings.Contains(fs[2].name, "last minute's p99 ÷ first's") {
		t.Errorf("drift = %+v, want last minute's p99 ÷ first's = 3", fs[2])
	}
	if fs[0].value != 50 || fs[1].value != 50 {
		t.Errorf("whole run p50/p99 = %v/%v, want 50/50", fs[0].value, fs[1].value)
	}
}

func TestSummaryComparesFifthsOfShortRuns(t *testing.T) {
	fs := trackerWith(
		sample{at: time.Second, lat: 2 * time.Millisecond},
		sample{at: 5 * time.Second, lat: 9 * time.Millisecond},
		sample{at: 9 * time.Second, lat: 4 * time.Millisecond},
	).summary("c", 10*time.Second)
	if want := "first fifth 2.00/2.00, last fifth 4.00/4.00 (n=3)"; fs[0].note != want {
		t.Errorf("note = %q, want %q", fs[0].note, want)
	}
	if fs[2].value != 2 {
		t.Errorf("drift = %v, want 2", fs[2].value)
	}
}

// A failing write stops the paced run with its error, instead of leaving
// the pacer blocked on writers that have all given up.
func TestPaceStopsAtTheFirstFailedWrite(t *testing.T) {
	lost := errors.New("server lost")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sent, err := pace(ctx, 1000, time.Hour, func(i int) error {
		if i >= 3 {
			return lost
		}
		return nil
	})
	if !errors.Is(err, lost) {
		t.Fatalf("pace error = %v, want the write's error", err)
	}
	if sent >= 3_600_000 {
		t.Errorf("pace started all %d writes after a failure", sent)
	}
}

func TestStockDSNKeepsTheSessionSettings(t *testing.T) {
	p := &stockCluster{port: 5599}
	u, err := url.Parse(p.dsn("postgres://someone:secret@db.example:6543/test?sslmode=require&jit=off"))
	if err != nil {
		t.Fatal(err)
	}
	if u.Host != "127.0.0.1:5599" || u.Path != "/postgres" || u.User.Username() != "postgres" {
		t.Errorf("dsn = %s, want postgres@127.0.0.1:5599/postgres", u.Redacted())
	}
	if q := u.Query(); q.Get("jit") != "off" || q.Get("sslmode") != "disable" {
		t.Errorf("query = %v, want jit=off kept and sslmode=disable", q)
	}
}

func TestMedianOfAnEvenCountIsTheMeanOfTheMiddleTwo(t *testing.T) {
	if m := median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Errorf("median = %v, want 2.5", m)
	}
	if m := median([]float64{5, 1, 3}); m != 3 {
		t.Errorf("median = %v, want 3", m)
	}
}

// The by-minute table puts each event in the minute of its commit, each
// control commit in the minute it started, and the table's figures of the
// samples at a minute's start and end beside it.
func TestByMinuteAttributesEachEventToItsCommitMinute(t *testing.T) {
	tr := newTracker()
	tr.spans = map[any]*stamps{}
	ms := time.Millisecond
	add := func(id int, commit time.Duration, tx, toLease, toRecv, toMark time.Duration) {
		c := tr.start.Add(commit)
		tr.spans[id] = &stamps{commit: c, lease: c.Add(toLease), recv: c.Add(toLease + toRecv), mark: c.Add(toLease + toRecv + toMark), tx: tx}
	}
	add(1, 10*time.Second, 2*ms, 1*ms, 1*ms, 3*ms)
	add(2, 70*time.Second, 4*ms, 2*ms, 2*ms, 5*ms)
	add(3, 80*time.Second, 6*ms, 3*ms, 4*ms, 7*ms)
	tr.spans[4] = &stamps{commit: tr.start.Add(20 * time.Second)} // never received: left out
	tr.probes = []sample{{at: 5 * time.Second, lat: ms}, {at: 65 * time.Second, lat: 3 * ms}}
	tr.stats = []tableStats{{wal: 0}, {wal: 2 << 20, checkpoints: 1, dead: 10, live: 20, autovacuums: 1, heap: 8 << 20}}
	out := tr.byMinute(2 * time.Minute)
	for _, want := range []string{
		"| 1 | 1 | 2.00 | 2.00 | 2.00 | 1.00 | 1.00 | 3.00 | 1.00 / 1.00 | 2.0 | 1 | 10 | 20 | 1 | 0.0 | 0.0 | 8.0 |\n",
		"| 2 | 2 | 7.00 | 7.00 | 6.00 | 3.00 | 4.00 | 7.00 | 3.00 / 3.00 | | | | | | | | |\n",
		"Last minute's p99 ÷ first's: commit → delivery 3.50, writer's transaction 3.00, control commit 3.00.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("by minute lacks %q:\n%s", want, out)
		}
	}
	if tr.byMinute(time.Minute) != "" {
		t.Error("a run shorter than two minutes has a by-minute table")
	}
}
