package envelope_test

import (
	"fmt"
	"strings"

	"github.com/heraldgo/herald/envelope"
)

func ExampleOptions_Validate() {
	err := envelope.Options{Topic: "{app}.{model}"}.Validate()
	fmt.Println(err)
	// Output:
	// herald: Options.Topic: template "{app}.{model}" names unknown {app} (known: {namespace} {model} {label} {table} {operation} {pk})
}

func ExampleParseTopicPattern() {
	p, _ := envelope.ParseTopicPattern("Topics", "library.*")
	fmt.Println(p.Match("library.loan.updated"), p.Match("billing.invoice.paid"))
	_, err := envelope.ParseTopicPattern("Topics", "lib*.loan")
	fmt.Println(err)
	// Output:
	// true false
	// herald: Topics: topic pattern "lib*.loan" has '*' at position 3: only a trailing '*' is a wildcard ("library.*")
}

// MigrationSQL is the SQL of one schema version for a migration tool,
// with the statements that record it, so that a later Migrate agrees.
func ExampleMigrationSQL() {
	for v := 1; v <= envelope.LatestVersionFor(envelope.SQLite); v++ {
		script, _ := envelope.MigrationSQL(envelope.SQLite, "", v, false)
		fmt.Println(strings.SplitN(script, "\n", 2)[0])
	}
	// Output:
	// -- herald outbox herald_outbox, version 1: create the outbox table
	// -- herald outbox herald_outbox, version 2: payload and headers as json, not jsonb (the writer's bytes, unchanged)
	// -- herald outbox herald_outbox, version 3: index of pending unordered events (the relay's lease)
	// -- herald outbox herald_outbox, version 4: no topic index (nothing reads it; every insert paid for it), headers default '{}' as json
	// -- herald outbox herald_outbox, version 5: table of paused topics (the relay leases none of their events)
	// -- herald outbox herald_outbox, version 6: tenant column; idempotency keys unique per tenant
}
