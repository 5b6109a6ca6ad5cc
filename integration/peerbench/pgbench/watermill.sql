BEGIN;
INSERT INTO herald_pgbench.watermill (uuid, payload, metadata, transaction_id) VALUES (gen_random_uuid()::text, '{"id":1,"name":"n","status":"new","amount":1}', '{}', pg_current_xact_id());
COMMIT;
