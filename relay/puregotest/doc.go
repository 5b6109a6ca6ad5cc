// Package puregotest proves that herald's relay builds and runs without
// cgo, on a pure-Go SQLite driver (modernc.org/sqlite): many services build
// with CGO_ENABLED=0. It holds only tests, and must never import
// github.com/mattn/go-sqlite3 or anything that does (gorm.io/driver/sqlite):
// the two drivers cannot share one binary.
//
// It runs in the normal `go test ./...` and, to prove the point, with
//
//	CGO_ENABLED=0 go test ./relay/puregotest
package puregotest
