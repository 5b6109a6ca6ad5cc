-- The payload column: json vs jsonb on PostgreSQL (BENCHMARKS.md, "Payload column").
-- psql -h 127.0.0.1 -U postgres -d test -f integration/sql/payload_column.sql
\set QUIET on
DROP SCHEMA IF EXISTS zz_jsoncmp CASCADE; CREATE SCHEMA zz_jsoncmp; SET search_path = zz_jsoncmp;
CREATE TABLE src AS SELECT i, ('{"model":"library.Loan","operation":"updated","pk":' || i || ',"changed":["status"],"before":{"id":' || i || ',"status":"lent","fee":"12.50","reader_id":3,"title":"The Name of the Rose","isbn":"978-0-15-144647-6","due_at":"2026-10-20T12:00:00Z","renewals":1,"branch":"central","notes":"returned via drop box"},"after":{"id":' || i || ',"status":"returned","fee":"12.50","reader_id":3,"title":"The Name of the Rose","isbn":"978-0-15-144647-6","due_at":"2026-10-20T12:00:00Z","renewals":1,"branch":"central","notes":"returned via drop box"},"occurred_at":"2026-10-06T12:00:00Z"}')::text AS p FROM generate_series(1, 100000) i;
CREATE UNLOGGED TABLE tj (p json NOT NULL); CREATE UNLOGGED TABLE tb (p jsonb NOT NULL);
\timing on
\echo round 1
INSERT INTO tj SELECT p::json FROM src; INSERT INTO tb SELECT p::jsonb FROM src;
TRUNCATE tj, tb;
\echo round 2
INSERT INTO tb SELECT p::jsonb FROM src; INSERT INTO tj SELECT p::json FROM src;
TRUNCATE tj, tb;
\echo round 3
INSERT INTO tj SELECT p::json FROM src; INSERT INTO tb SELECT p::jsonb FROM src;
\timing off
SELECT 'json bytes', pg_total_relation_size('tj'), 'jsonb bytes', pg_total_relation_size('tb');
SELECT 'read json', count(*) FROM (SELECT p::text FROM tj) x;
\timing on
SELECT length(string_agg(p::text, '')) FROM tj; SELECT length(string_agg(p::text, '')) FROM tb;
SELECT length(string_agg(p::text, '')) FROM tb; SELECT length(string_agg(p::text, '')) FROM tj;
\timing off
DROP SCHEMA zz_jsoncmp CASCADE;
