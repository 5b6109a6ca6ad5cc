// Package entshapes is a test-only set of ent schemas with the shapes
// entcapture's edge, join-row and cascade tests need (schema/), and their
// client (ent/), generated with entcapturegen.Extension(): a bidirectional
// edge schema, plain many-to-many edges, a composite-id edge schema,
// self-referencing CASCADE and SET NULL trees, two foreign keys to one
// parent, captured rows reached only through uncaptured parents, and a
// schema hook that narrows deletes.
package entshapes

//go:generate go run entc.go
