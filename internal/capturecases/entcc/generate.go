// Package entcc is the ent side of the capture conformance suite: the
// models of internal/capturecases as ent schemas (schema/), and their
// generated client (ent/), generated with entcapturegen.Extension().
package entcc

//go:generate go run entc.go
