-- The statement of a captured Create (gormcapture's fused insert, its
-- shape as PostgreSQL's log shows it): the row and its event, keyed by the
-- row, under the key's advisory lock, in one statement. Each value of the
-- row is rendered in the cheapest form for its type (an integer's own
-- text, to_json for strings); the envelope's fixed text is written into
-- the statement. ("changed":'||'null keeps pgbench from reading :null as
-- one of its variables; PostgreSQL folds the two constants.)
BEGIN;
WITH "herald_row" AS (INSERT INTO herald_pgbench.plain_rows (name, status, amount, version) VALUES ('n', 'new', 1, 0) RETURNING id, name, status, amount, version),
"herald_event" AS (INSERT INTO herald_pgbench.hx (id, topic, payload, headers, ordering_key, created_at)
  SELECT gen_random_uuid(), 'captured_row.inserted', (E'{"model":"CapturedRow","operation":"inserted","pk":'||COALESCE("herald_row".id::text,'null')||E',"changed":'||'null,"after":{"id":'||COALESCE("herald_row".id::text,'null')||E',"name":'||COALESCE(replace(replace(to_json("herald_row".name)::text,U&'\2028','\u2028'),U&'\2029','\u2029'),'null')||E',"status":'||COALESCE(replace(replace(to_json("herald_row".status)::text,U&'\2028','\u2028'),U&'\2029','\u2029'),'null')||E',"amount":'||COALESCE("herald_row".amount::text,'null')||E',"version":'||COALESCE("herald_row".version::text,'null')||E'},"occurred_at":'||'"2026-12-07T10:14:19.072438589Z"}')::json, '{}', ('captured_row:'||"herald_row"."id"::text), now() FROM "herald_row"
  WHERE pg_advisory_xact_lock_shared(('herald_pgbench.hx'::regclass::oid::int4), (hashtextextended(('captured_row:'||"herald_row"."id"::text), 7281) & 1023)::int)::text = '')
SELECT id FROM "herald_row";
COMMIT;
