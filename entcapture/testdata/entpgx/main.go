// Command entpgx is the smallest ent + pgx service that captures its
// writes: entcapture's size figures (BENCHMARKS.md) are this program's
// package count and binary size, and TestNoCodeGenerator checks that it
// links no package of ent's code generator.
package main

import (
	"context"
	"database/sql"
	"log"
	"os"

	"entgo.io/ent/dialect"
	entsql "entgo.io/ent/dialect/sql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/heraldgo/herald/entcapture"
	"github.com/heraldgo/herald/examples/entlibrary/ent"
	_ "github.com/heraldgo/herald/examples/entlibrary/ent/runtime"
)

func main() {
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	client := ent.NewClient(ent.Driver(entcapture.Driver(entsql.OpenDB(dialect.Postgres, db))))
	defer client.Close()
	n, err := client.Reader.Query().Count(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	log.Println(n, "readers")
}
