-- The statement of a captured Create (gormcapture's fused insert, its
-- shape as PostgreSQL's log shows it): the row and its event, keyed by the
-- row, under the key's advisory lock, in one statement.
-- Here with the payload a constant: what building it in SQL costs.
BEGIN;
WITH "herald_row" AS (INSERT INTO herald_pgbench.plain_rows (name, status, amount, version) VALUES ('n', 'new', 1, 0) RETURNING id, name, status, amount, version),
"herald_event" AS (INSERT INTO herald_pgbench.hx (id, topic, payload, headers, ordering_key, created_at)
  SELECT gen_random_uuid(), 'captured_row.inserted', '{"model":"CapturedRow","operation":"create","key":1,"after":{"id":1,"name":"n","status":"new","amount":1,"version":0}}'::json, '{}', ('captured_row:'||"herald_row"."id"::text), now() FROM "herald_row"
  WHERE pg_advisory_xact_lock_shared(('herald_pgbench.hx'::regclass::oid::int4), (hashtextextended(('captured_row:'||"herald_row"."id"::text), 7281) & 1023)::int)::text = '')
SELECT id FROM "herald_row";
COMMIT;
