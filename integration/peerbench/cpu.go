package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/heraldgo/herald/internal/testkit"
)

// clockTick is the unit of /proc/<pid>/stat's utime and stime (USER_HZ,
// 100 on Linux).
const clockTick = 10 * time.Millisecond

// cpuTimes is the CPU time spent so far by this process (herald's relays,
// the bare loop's workers and the peers' clients run in it) and by every
// postgres process on this machine (the server, when the DSN points here).
type cpuTimes struct {
	client, server time.Duration
	servers        int   // postgres processes seen
	busy, total    int64 // the machine's busy and total jiffies, all cores (/proc/stat)
}

func readCPU() cpuTimes {
	t := cpuTimes{client: testkit.ProcessCPU()}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		// cpu  user nice system idle iowait irq softirq steal …
		if line, _, _ := bytes.Cut(b, []byte("\n")); bytes.HasPrefix(line, []byte("cpu ")) {
			for i, f := range bytes.Fields(line)[1:] {
				v, _ := strconv.ParseInt(string(f), 10, 64)
				if i >= 8 { // guest time is counted in user already
					break
				}
				t.total += v
				if i != 3 && i != 4 { // idle, iowait
					t.busy += v
				}
			}
		}
	}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the process ended
		}
		// pid (comm) state ppid … utime is field 14, stime 15; comm may hold spaces.
		open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
		if open < 0 || end < open || string(b[open+1:end]) != "postgres" {
			continue
		}
		f := bytes.Fields(b[end+1:])
		if len(f) < 13 {
			continue
		}
		ut, err1 := strconv.ParseInt(string(f[11]), 10, 64)
		st, err2 := strconv.ParseInt(string(f[12]), 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		t.server += time.Duration(ut+st) * clockTick
		t.servers++
	}
	return t
}

// cpuNote says how much CPU a drain of n events took from start to end
// (readCPU before and after), per 1,000 events: this process's and the
// postgres processes'; and how busy the machine's cores were meanwhile.
// Backends that ended during the drain are not counted; the drains keep
// their connections open throughout.
func cpuNote(n int, start, end cpuTimes) string {
	per := func(d time.Duration) float64 { return d.Seconds() * 1000 / float64(n) * 1000 }
	note := fmt.Sprintf("CPU %.2f ms client", per(end.client-start.client))
	if end.servers > 0 {
		note += fmt.Sprintf(", %.2f server", per(end.server-start.server))
	}
	if total := end.total - start.total; total > 0 {
		note += fmt.Sprintf(", cores %.0f%% busy", 100*float64(end.busy-start.busy)/float64(total))
	}
	return note
}
