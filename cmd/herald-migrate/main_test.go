package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/heraldgo/herald/envelope"
)

func TestPrint(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-dialect", "postgres", "-print"}, &out); err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for v := 1; v <= envelope.LatestVersion; v++ {
		s, err := envelope.MigrationSQL(envelope.Postgres, "", v, false)
		if err != nil {
			t.Fatal(err)
		}
		if v > 1 {
			want.WriteString("\n")
		}
		want.WriteString(s)
	}
	if out.String() != want.String() {
		t.Fatalf("-print wrote\n%s\nwant every version's MigrationSQL\n%s", out.String(), want.String())
	}

	out.Reset()
	if err := run(context.Background(), []string{"-dialect", "postgres", "-print", "-down"}, &out); err != nil {
		t.Fatal(err)
	}
	down, err := envelope.MigrationSQL(envelope.Postgres, "", envelope.LatestVersion, true)
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != down || !strings.Contains(out.String(), fmt.Sprintf("version %d:", envelope.LatestVersion)) || !strings.Contains(out.String(), "-- down: back to version") {
		t.Fatalf("-print -down: %s\nwant the latest version's down script\n%s", out.String(), down)
	}
}

func TestApplySQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "app.db")
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-dialect", "sqlite", "-dsn", path}, &out); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(context.Background(), []string{"-dialect", "sqlite", "-dsn", path, "-status"}, &out); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), fmt.Sprintf("version %d (latest %d)\n", envelope.LatestVersion, envelope.LatestVersion); got != want {
		t.Fatalf("-status: %q, want %q", got, want)
	}
}

func TestUsageErrors(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-print"}, &out); err == nil || !strings.Contains(err.Error(), "dialect") {
		t.Fatalf("no -dialect: %v", err)
	}
	if err := run(context.Background(), []string{"-dialect", "sqlite"}, &out); err == nil || !strings.Contains(err.Error(), "-print") {
		t.Fatalf("neither -print nor -dsn: %v", err)
	}
}
