// Package gormcapture_test here holds gormcapture's tests and benchmarks.
// They run the plugin through GORM's SQLite, PostgreSQL and MySQL
// dialectors, dbresolver and shopspring/decimal, none of which gormcapture
// imports: apart from gormcapture/ so that a program importing gormcapture
// gets only its own driver in its go.sum (go mod tidy keeps checksums for
// what the tests of a program's dependencies import). The one test that
// needs gormcapture's unexported code, sqlite_forms_internal_test.go, stays
// beside it.
package gormcapture_test
