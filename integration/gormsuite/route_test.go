package main

import (
	"strings"
	"testing"
)

// Every gorm.Open is routed through heraldOpen and every top-level test
// starts with the WAL judge's marker; helpers, methods and tests without
// a named *testing.T are left alone.
func TestRouteOpen(t *testing.T) {
	src := `package tests_test

import ("testing"; "gorm.io/gorm")

func TestA(t *testing.T) { db, _ := gorm.Open(nil) ; _ = db }
func TestB(tt *testing.T) {
	t := 1
	_ = t
}
func TestC(*testing.T) {}
func TestMain(m *testing.M) {}
func helper(t *testing.T) {}
func BenchmarkD(b *testing.B) {}
`
	out, n, err := routeOpen("x_test.go", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	got := string(out)
	for _, want := range []string{
		"func TestA(t *testing.T) {heraldTest(t); db, _ := heraldOpen(nil) ; _ = db }",
		"func TestB(tt *testing.T) {heraldTest(tt);\n",
		"func TestC(*testing.T) {}",
		"func TestMain(m *testing.M) {}",
		"func helper(t *testing.T) {}",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if n != 1 || strings.Count(got, "heraldTest(") != 2 {
		t.Errorf("%d calls routed, %d markers:\n%s", n, strings.Count(got, "heraldTest("), got)
	}
}
