BEGIN;
INSERT INTO herald_pgbench.hx (id, topic, payload, created_at) VALUES (gen_random_uuid(), 'producer', '{"id":1,"name":"n","status":"new","amount":1}', now());
COMMIT;
