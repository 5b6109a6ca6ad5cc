// Package entspatial is a test-only ent schema with MySQL spatial columns
// (schema/): a field.Other whose Go type (geo.Point) binds itself through
// ST_GeomFromText, and a field.Bytes holding the server's own geometry
// bytes; its client (ent/) is generated with entcapturegen.Extension().
package entspatial

//go:generate go run entc.go
