package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/heraldgo/herald/envelope"
	"github.com/heraldgo/herald/internal/migrate"
	"github.com/heraldgo/herald/internal/promparse"
	"github.com/heraldgo/herald/internal/testkit"
	"github.com/heraldgo/herald/otelherald/promtext"
)

// TestMetricsScrapeMatchesTheDocs runs `herald relay` until it has
// delivered an event, dead-lettered one and holds one of a paused topic,
// scrapes /metrics, parses it strictly as the Prometheus text format, and
// checks that every metric name and label that docs/prometheus (the scrape
// configuration and the alert rules) and README's "Operating herald" use
// is in the scrape.
func TestMetricsScrapeMatchesTheDocs(t *testing.T) {
	dsn := testkit.ModerncDSN(testkit.SQLitePath(t))
	env := []string{"HERALD_DSN=" + dsn}
	mustRun(t, env, "migrate", "up")
	db, err := migrate.Open(envelope.SQLite, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), "fail.") {
			http.Error(w, "receiver refused", http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer hook.Close()
	mustRun(t, env, "pause", "paused.topic")
	enqueue(t, db, envelope.SQLite, "ok.one", "fail.one", "paused.topic")
	p := startRelay(t, env, "--webhook-url", hook.URL, "--webhook-allow-networks", "127.0.0.0/8",
		"--max-attempts", "1", "--min-poll-interval", "20ms", "--max-poll-interval", "200ms")
	testkit.Eventually(t, time.Minute, func() bool {
		bl := backlogJSON(t, env)
		return bl["fail.one"].DeadLettered == 1 && bl["ok.one"].Pending == 0 && bl["paused.topic"].Pending == 1
	}, "the relay did not deliver and dead-letter: %+v\n%s", backlogJSON(t, env), p.log())

	resp, err := http.Get(p.admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); resp.StatusCode != http.StatusOK || ct != promtext.ContentType {
		t.Fatalf("/metrics: %d, Content-Type %q\n%s", resp.StatusCode, ct, body)
	}
	fams, err := promparse.Parse(string(body))
	if err != nil {
		t.Fatalf("/metrics is not the text format: %v\n%s", err, body)
	}
	names := map[string]bool{}
	labels := map[string]bool{}
	for n, f := range fams {
		names[n] = true
		for _, s := range f.Samples {
			names[s.Name] = true
			for l := range s.Labels {
				labels[l] = true
			}
		}
	}

	var docs, rules strings.Builder
	for _, f := range []string{"../../docs/prometheus/prometheus.yml", "../../docs/prometheus/herald-alerts.yml"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		docs.Write(b)
		rules.Write(b)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, ops, ok := strings.Cut(string(readme), "\n## Operating herald")
	if !ok {
		t.Fatal(`README.md has no "## Operating herald" section`)
	}
	ops, _, _ = strings.Cut(ops, "\n## ")
	docs.WriteString(ops)
	// Labels are checked where PromQL is: the rules and README's
	// Prometheus section.
	if _, prom, ok := strings.Cut(ops, "\n### Prometheus"); ok {
		prom, _, _ = strings.Cut(prom, "\n### ")
		rules.WriteString(prom)
	} else {
		t.Fatal(`README.md's "Operating herald" has no "### Prometheus"`)
	}

	// herald_* words that are not metrics: the tables.
	tables := map[string]bool{"herald_outbox": true, "herald_outbox_paused": true, "herald_migration": true}
	used := map[string]bool{}
	for _, m := range regexp.MustCompile(`\b(?:herald|messaging)_[a-z0-9_]+`).FindAllString(docs.String(), -1) {
		used[m] = true
	}
	if len(used) < 10 {
		t.Fatalf("only %d metric names found in the docs: %v", len(used), used)
	}
	var missing []string
	for n := range used {
		if !names[n] && !labels[n] && !tables[n] {
			missing = append(missing, n)
		}
	}
	// Labels the rules select or group by.
	for _, m := range regexp.MustCompile(`([a-z_]+)\s*(?:!=|=~|!~|=)\s*"`).FindAllStringSubmatch(rules.String(), -1) {
		if l := m[1]; l != "job" && !labels[l] {
			missing = append(missing, "label "+l)
		}
	}
	for _, m := range regexp.MustCompile(`by \(([^)]*)\)`).FindAllStringSubmatch(rules.String(), -1) {
		for _, l := range strings.Split(m[1], ",") {
			if l = strings.TrimSpace(l); l != "le" && !labels[l] {
				missing = append(missing, "label "+l)
			}
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		t.Fatalf("the docs use names the relay does not export: %v\nscrape:\n%s", missing, body)
	}
	p.stop(t)
}
