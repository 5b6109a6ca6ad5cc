package main

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/heraldgo/herald/internal/testkit"
)

func TestMain(m *testing.M) { testkit.Main(m) }

// TestEntLibrary runs the example and checks what it printed: every
// write's event, in order, the cascaded rows included.
func TestEntLibrary(t *testing.T) {
	var out strings.Builder
	n, err := run(context.Background(), &out)
	if err != nil {
		t.Fatal(err)
	}
	// Delivered in order per key; listed here in sequence order.
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	sort.Slice(lines, func(i, j int) bool { return seq(lines[i]) < seq(lines[j]) })
	var topics []string
	for _, l := range lines {
		topics = append(topics, strings.Fields(l)[1])
	}
	want := []string{
		"library.reader.inserted", "library.loan.inserted", "library.club.inserted", "library.membership.inserted", "mail.send",
		"library.loan.inserted", "library.loan.updated",
		"library.loan.deleted", "library.loan.deleted", "library.membership.deleted", "library.reader.deleted",
	}
	if n != len(want) || strings.Join(topics, " ") != strings.Join(want, " ") {
		t.Fatalf("delivered %d events:\n%s\nwant topics %v", n, out.String(), want)
	}
	if strings.Contains(out.String(), "ann@example.org") {
		t.Fatalf("a sensitive field is in an event:\n%s", out.String())
	}
}

func seq(line string) int {
	n, _ := strconv.Atoi(strings.Fields(line)[0])
	return n
}
