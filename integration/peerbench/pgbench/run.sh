#!/usr/bin/env bash
# Server-side cost of one event's insert, statement by statement: pgbench
# (-M prepared, one client, per-statement latencies with -r) runs one
# transaction per script into tables of a scratch schema, herald_pgbench,
# which it creates with herald's own migrations and drops at the end.
#
#   integration/peerbench/pgbench/run.sh [rounds]   # from the repository's root
#
# DSN: $HERALD_POSTGRES_DSN, else the local test database. The figures are
# in BENCHMARKS.md ("fifteenth pass", the producer taken apart; "sixteenth
# pass", the fused statement before and after its renderings changed).
set -euo pipefail
export PGOPTIONS="-c client_min_messages=warning"
dsn=${HERALD_POSTGRES_DSN:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
rounds=${1:-3}
dir=$(cd "$(dirname "$0")" && pwd)
q() { psql "$dsn" -q -v ON_ERROR_STOP=1 "$@"; }

q -c "DROP SCHEMA IF EXISTS herald_pgbench CASCADE" -c "CREATE SCHEMA herald_pgbench"
tmp=$(mktemp -d)
trap 'q -c "DROP SCHEMA IF EXISTS herald_pgbench CASCADE"; rm -rf "$tmp"' EXIT
# herald's table as migrated (hx); without the four indexes the lease does
# not read (hxlease); with its primary key alone (hxpk); and without each
# of those four alone (hx_no_<index>).
others="tenant_idempotency_key_idx published_idx dead_lettered_idx pending_tenant_idx"
tables="hx hxlease hxpk"
for i in $others; do tables="$tables hx_no_$i"; done
for t in $tables; do
	go run ./cmd/herald-migrate -dialect postgres -dsn "$dsn" -table "herald_pgbench.$t" >/dev/null
done
for i in $others; do
	q -c "DROP INDEX herald_pgbench.herald_pgbench_hxlease_$i" -c "DROP INDEX herald_pgbench.herald_pgbench_hxpk_$i" \
		-c "DROP INDEX herald_pgbench.herald_pgbench_hx_no_${i}_$i"
	sed "s/herald_pgbench\.hx /herald_pgbench.hx_no_$i /" "$dir/hx.sql" >"$tmp/hx_no_$i.sql"
done
for i in pending_idx pending_key_idx pending_unordered_idx; do
	q -c "DROP INDEX herald_pgbench.herald_pgbench_hxpk_$i"
done
q -f "$dir/setup.sql"

for r in $(seq "$rounds"); do
	line="round $r:"
	for s in plain watermill hx hxlease hxpk $(for i in $others; do echo "hx_no_$i"; done) fused fused_jsonb fused_constpay; do
		f=$dir/$s.sql
		[ -e "$f" ] || f=$tmp/$s.sql
		ms=$(pgbench -n -M prepared -c1 -T 3 -r -f "$f" "$dsn" 2>/dev/null |
			awk '$3 ~ /^(INSERT|WITH)$/ { printf "%s%s", sep, $1; sep = "+" }')
		line="$line $s=$ms"
	done
	echo "$line   (ms per statement, round trip included)"
done
