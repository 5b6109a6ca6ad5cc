BEGIN;
INSERT INTO herald_pgbench.plain_rows (name, status, amount, version) VALUES ('n', 'new', 1, 0) RETURNING id;
COMMIT;
