//go:build ignore

package main

import (
	"log"

	"entgo.io/ent/entc"
	"entgo.io/ent/entc/gen"

	"github.com/heraldgo/herald/entcapture/entcapturegen"
)

func main() {
	err := entc.Generate("./schema", &gen.Config{Target: "./ent", Package: "github.com/heraldgo/herald/entcapture/internal/entspatial/ent"},
		entc.Extensions(entcapturegen.Extension()))
	if err != nil {
		log.Fatal(err)
	}
}
