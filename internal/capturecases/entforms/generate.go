// Package entforms holds an ent schema whose columns have a JSON form of
// their declared type's (text[] and bigint[] arrays, a range, jsonb, a
// point and a polygon on PostgreSQL; json on SQLite), declared with
// SchemaType. Its client (ent/) is generated with
// entcapturegen.Extension(); capturecases' TestGormAndEntForms uses it.
package entforms

//go:generate go run entc.go
