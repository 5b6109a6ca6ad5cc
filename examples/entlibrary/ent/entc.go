//go:build ignore

package main

import (
	"log"

	"entgo.io/ent/entc"
	"entgo.io/ent/entc/gen"

	"github.com/heraldgo/herald/entcapture"
)

func main() {
	if err := entc.Generate("./schema", &gen.Config{}, entc.Extensions(entcapture.Extension())); err != nil {
		log.Fatal(err)
	}
}
