// Package entdx holds the ent schemas of entcapture's developer-experience
// tests (schema/): a schema hook that enqueues through m.Client(), and
// ent's soft-delete mixin on either side of entcapture.Mixin; and their
// generated client (ent/), generated with entcapturegen.Extension().
package entdx

//go:generate go run entc.go
