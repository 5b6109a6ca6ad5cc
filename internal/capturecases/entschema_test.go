package capturecases_test

import "sync"

// entSchemaMu serializes ent's schema migrations: ent v0.14.5's
// Atlas.Create (setupTables) writes to the generated package's global
// table descriptions, so two parallel tests migrating the same generated
// schema race (the race detector saw it in TestWriteBeforeMigrate's
// sqlite and postgres subtests).
var entSchemaMu sync.Mutex

// createEntSchema runs create (a client's Schema.Create) under entSchemaMu.
func createEntSchema(create func() error) error {
	entSchemaMu.Lock()
	defer entSchemaMu.Unlock()
	return create()
}
