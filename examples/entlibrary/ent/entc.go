//go:build ignore

package main

import (
	"log"

	"entgo.io/ent/entc"
	"entgo.io/ent/entc/gen"

	"github.com/heraldgo/herald/entcapture/entcapturegen"
)

func main() {
	if err := entc.Generate("./schema", &gen.Config{}, entc.Extensions(entcapturegen.Extension())); err != nil {
		log.Fatal(err)
	}
}
