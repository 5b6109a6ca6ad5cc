-- The row a GORM Create writes (peerbench's PlainRow) and watermill-sql's
-- table for one topic (its DefaultPostgreSQLSchema), beside herald's
-- tables, which run.sh creates with herald's migrations.
CREATE TABLE herald_pgbench.plain_rows (id bigserial PRIMARY KEY, name text, status text, amount bigint, version bigint);
CREATE TABLE herald_pgbench.watermill (
    "offset" BIGSERIAL,
    "uuid" VARCHAR(36) NOT NULL,
    "created_at" TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP,
    "payload" JSON DEFAULT NULL,
    "metadata" JSON DEFAULT NULL,
    "transaction_id" xid8 NOT NULL,
    PRIMARY KEY ("transaction_id", "offset")
);
