// Package oldglue is the shape of the glue an entcapturegen older than
// entcapturert generated: it names entcapture.Schema, and must not build
// (TestOldGlueNamesTheFix).
package oldglue

import "github.com/heraldgo/herald/entcapture"

var heraldReaderSchema = &entcapture.Schema{
	Name:    "Reader",
	Table:   "readers",
	Columns: []string{"id", "name"},
	PK:      "id",
}

func init() {
	entcapture.Register(heraldReaderSchema)
}
