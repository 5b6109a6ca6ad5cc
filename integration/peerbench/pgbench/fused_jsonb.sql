-- The statement of a captured Create as it was until the sixteenth pass
-- (BENCHMARKS.md): every value of the row rendered through to_jsonb, its
-- U+2028 and U+2029 escaped, whatever its type.
BEGIN;
WITH "herald_row" AS (INSERT INTO herald_pgbench.plain_rows (name, status, amount, version) VALUES ('n', 'new', 1, 0) RETURNING id, name, status, amount, version),
"herald_event" AS (INSERT INTO herald_pgbench.hx (id, topic, payload, headers, ordering_key, created_at)
  SELECT gen_random_uuid(), 'captured_row.inserted', ('{"model":"CapturedRow","operation":"create","key":'||COALESCE(replace(replace((to_jsonb("herald_row"."id"))::text,U&'\2028','\u2028'),U&'\2029','\u2029'),'null')||',"after":{"id":'||COALESCE(replace(replace((to_jsonb("herald_row"."id"))::text,U&'\2028','\u2028'),U&'\2029','\u2029'),'null')||',"name":'||COALESCE(replace(replace((to_jsonb("herald_row"."name"))::text,U&'\2028','\u2028'),U&'\2029','\u2029'),'null')||',"status":'||COALESCE(replace(replace((to_jsonb("herald_row"."status"))::text,U&'\2028','\u2028'),U&'\2029','\u2029'),'null')||',"amount":'||COALESCE(replace(replace((to_jsonb("herald_row"."amount"))::text,U&'\2028','\u2028'),U&'\2029','\u2029'),'null')||',"version":'||COALESCE(replace(replace((to_jsonb("herald_row"."version"))::text,U&'\2028','\u2028'),U&'\2029','\u2029'),'null')||'}}')::json, '{}', ('captured_row:'||"herald_row"."id"::text), now() FROM "herald_row"
  WHERE pg_advisory_xact_lock_shared(('herald_pgbench.hx'::regclass::oid::int4), (hashtextextended(('captured_row:'||"herald_row"."id"::text), 7281) & 1023)::int)::text = '')
SELECT id FROM "herald_row";
COMMIT;
