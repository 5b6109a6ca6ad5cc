// Package entsnippets compiles the fragments of entcapture's documentation
// (see internal/doccheck); they are never run.
package entsnippets

import (
	"database/sql"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	"entgo.io/ent/entc"
	"entgo.io/ent/entc/gen"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/entcapture/entcapturegen"
	"github.com/heraldgo/herald/examples/entlibrary/ent"
)

// entcapture.Driver's documentation.
func driverDoc(db *sql.DB) *ent.Client {
	client := ent.NewClient(ent.Driver(entcapture.Driver(entsql.OpenDB(dialect.Postgres, db))))
	return client
}

// entcapturegen.Extension's documentation.
func extensionDoc() {
	entc.Generate("./schema", &gen.Config{}, entc.Extensions(entcapturegen.Extension()))
}

var _ = []any{driverDoc, extensionDoc}
