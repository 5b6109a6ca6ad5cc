// Package admin inspects and repairs a herald outbox table: the Go API
// an operator's tools (the HTTP handler of this package, a CLI) sit on.
package admin
