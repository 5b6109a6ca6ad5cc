// Package glueparse reads what the row-diff oracle needs from
// entcapture's generated glue (entcapture.go): the captured join tables
// of plain many-to-many edges. Standard library only, so that the
// harnesses that read the glue before anything is built
// (integration/entsuite, integration/entexamples) share one parser.
package glueparse

import "regexp"

// joinRE finds, in the glue, the Schema of each captured join table
// (entcapturert.Schema; entcapture.Schema in glue generated before
// herald moved it).
var joinRE = regexp.MustCompile(`(?m)^var heraldJoin\w+Schema = &entcapture(?:rt)?\.Schema\{\n\tName:\s+"([^"]+)",\n\tTable:\s+"([^"]+)",`)

// JoinTables returns the captured join tables of glue (the generated
// entcapture.go), model -> table: their events' model is named as the
// table, and the oracle reads them like the schemas' tables (keyed by
// their composite primary key of the two foreign keys).
func JoinTables(glue []byte) map[string]string {
	out := map[string]string{}
	for _, m := range joinRE.FindAllSubmatch(glue, -1) {
		out[string(m[1])] = string(m[2])
	}
	return out
}
