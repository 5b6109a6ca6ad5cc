package envelope_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/heraldgo/herald/envelope"
)

// TestMigrateAfterTableDropped: an outbox table dropped without
// MigrateTo(0) — its record in herald_migration left behind — is
// reported as version 0 and created again by Migrate, with every version
// recorded once, and writes work again.
func TestMigrateAfterTableDropped(t *testing.T) {
	t.Parallel()
	migrateDialects(t, func(t *testing.T, d envelope.Dialect, db *sql.DB, _ func() *sql.DB) {
		ctx := context.Background()
		for _, table := range []string{"", "orders_outbox"} {
			name := table
			if name == "" {
				name = envelope.DefaultTable
			}
			if err := envelope.Migrate(ctx, db, d, table); err != nil {
				t.Fatal(err)
			}
			w, err := envelope.NewWriter(d, table)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(ctx, db, []envelope.Message{{Topic: "t", Payload: 1}}); err != nil {
				t.Fatal(err)
			}
			execScript(t, db, `DROP TABLE `+name)
			v, err := envelope.Version(ctx, db, d, table)
			if err != nil || v != 0 {
				t.Fatalf("%s: Version of a dropped table = %d, %v; want 0", name, v, err)
			}
			if err := envelope.Migrate(ctx, db, d, table); err != nil {
				t.Fatalf("%s: Migrate after DROP TABLE: %v", name, err)
			}
			if v := versionOf(t, db, d, table); v != envelope.LatestVersion {
				t.Fatalf("%s: Version after Migrate = %d, want %d", name, v, envelope.LatestVersion)
			}
			if _, err := w.Write(ctx, db, []envelope.Message{{Topic: "t", Payload: 2}}); err != nil {
				t.Fatalf("%s: write after Migrate re-created the table: %v", name, err)
			}
			var rows, recs int
			if err := db.QueryRow(`SELECT count(*) FROM ` + name).Scan(&rows); err != nil || rows != 1 {
				t.Fatalf("%s: %d rows, %v; want the one written after the drop", name, rows, err)
			}
			if err := db.QueryRow(`SELECT count(*) FROM herald_migration WHERE table_name = '` + name + `'`).Scan(&recs); err != nil || recs != envelope.LatestVersion {
				t.Fatalf("%s: herald_migration holds %d versions, %v; want %d", name, recs, err, envelope.LatestVersion)
			}
		}
	})
}

func versionOf(t *testing.T, db *sql.DB, d envelope.Dialect, table string) int {
	t.Helper()
	v, err := envelope.Version(context.Background(), db, d, table)
	if err != nil {
		t.Fatalf("Version: %v", err)
	}
	return v
}
