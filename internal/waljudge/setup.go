package waljudge

import (
	"context"
	"database/sql"
	"fmt"
)

// Settings are the server settings a judged cluster needs
// (pgcluster.Start takes them).
var Settings = []string{"wal_level = logical", "max_replication_slots = 16", "max_wal_senders = 16"}

// setupSQL installs, in one database, the event trigger that makes every
// table created or altered from now on REPLICA IDENTITY FULL (so an
// UPDATE's and a DELETE's whole old row is in the log, for the before
// images) and writes its primary-key columns into the log (PrefixKey), so
// the judge knows each table's key at each point of the log, also when a
// test drops and re-creates a table with another shape.
const setupSQL = `
CREATE OR REPLACE FUNCTION herald_judge_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $fn$
DECLARE r record; k text;
BEGIN
  FOR r IN SELECT DISTINCT objid, object_identity FROM pg_event_trigger_ddl_commands()
           WHERE object_type = 'table' LOOP
    IF EXISTS (SELECT 1 FROM pg_class WHERE oid = r.objid AND relkind IN ('r', 'p') AND relreplident <> 'f') THEN
      EXECUTE format('ALTER TABLE %s REPLICA IDENTITY FULL', r.object_identity);
    END IF;
    SELECT string_agg(a.attname, ',' ORDER BY array_position(i.indkey::int2[], a.attnum)) INTO k
      FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY (i.indkey)
     WHERE i.indrelid = r.objid AND i.indisprimary;
    PERFORM pg_logical_emit_message(true, '` + PrefixKey + `', r.object_identity || E'\t' || coalesce(k, ''));
  END LOOP;
END $fn$;
DROP EVENT TRIGGER IF EXISTS herald_judge_ddl;
CREATE EVENT TRIGGER herald_judge_ddl ON ddl_command_end EXECUTE FUNCTION herald_judge_ddl();
`

// Setup prepares a database to be judged: the DDL event trigger (see
// setupSQL) and a test_decoding logical replication slot named slot, from
// which Drain reads everything committed after this call. db must be
// connected to that database as a superuser, on a cluster with Settings.
func Setup(ctx context.Context, db *sql.DB, slot string) error {
	if _, err := db.ExecContext(ctx, setupSQL); err != nil {
		return fmt.Errorf("waljudge: install the DDL event trigger: %w", err)
	}
	if _, err := db.ExecContext(ctx, `SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, slot); err != nil {
		return fmt.Errorf("waljudge: create the logical replication slot (wal_level=logical?): %w", err)
	}
	return nil
}

// Drain reads the slot's changes (consuming them) in chunks and hands
// them to the judge in log order. Empty transactions are not skipped: a
// DDL transaction holds only the trigger's PrefixKey messages, and
// test_decoding's skip-empty-xacts would print them without the
// transaction's COMMIT. Call it when the writes have stopped
// (or repeatedly: each call goes on where the last one stopped).
func Drain(ctx context.Context, db *sql.DB, slot string, j *Judge) error {
	var dec Decoder
	for {
		n, err := drainChunk(ctx, db, slot, &dec, j)
		if err != nil || n == 0 {
			return err
		}
	}
}

// drainChunk reads up to 20,000 changes (whole transactions) and returns
// how many rows it read.
func drainChunk(ctx context.Context, db *sql.DB, slot string, dec *Decoder, j *Judge) (int, error) {
	rows, err := db.QueryContext(ctx, `SELECT xid::text::bigint, data FROM pg_logical_slot_get_changes($1, NULL, 20000,
		'include-xids', '1', 'include-timestamp', '0')`, slot)
	if err != nil {
		return 0, fmt.Errorf("waljudge: read the slot: %w", err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var xid int64
		var data string
		if err := rows.Scan(&xid, &data); err != nil {
			return n, err
		}
		n++
		txn, msg, err := dec.Feed(uint32(xid), data)
		if err != nil {
			return n, err
		}
		if msg != nil {
			j.Message(*msg)
		}
		if txn != nil {
			j.Txn(txn)
		}
	}
	return n, rows.Err()
}

// Drop drops the slot (a slot left behind keeps the server's WAL).
func Drop(ctx context.Context, db *sql.DB, slot string) error {
	_, err := db.ExecContext(ctx, `SELECT pg_drop_replication_slot($1) WHERE EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, slot)
	return err
}
