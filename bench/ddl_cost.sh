#!/usr/bin/env bash
# ddl_cost.sh: what the extension's event triggers cost the DDL of an
# application role on tables that are not streams.
#
#   bench/ddl_cost.sh [ITERATIONS] [ROUNDS]        (defaults 300 and 5)
#
# Starts a throwaway cluster (bench/lib.sh, port 55540) with two databases:
# "plain" without the extension and "streams" with it and one stream table
# of another role.  An ordinary role without any privilege on schema
# stream_seq runs, in each database, ITERATIONS times: CREATE TABLE, ALTER
# TABLE ADD COLUMN, CREATE INDEX, ALTER TABLE RENAME, CREATE TABLE ...
# INHERITS, two DROP TABLE (seven commands, each firing the event
# triggers).
# The databases alternate, ROUNDS times; prints the median time per
# iteration in each and their ratio.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

ITERATIONS=${1:-300}
ROUNDS=${2:-5}

need_packages postgresql-15 postgresql-server-dev-15 make gcc
build_install
start_cluster ddl 55540

psql_q -c "CREATE ROLE app LOGIN" -c "CREATE DATABASE plain" -c "CREATE DATABASE streams"
for db in plain streams; do
	psql_q -d $db -c "CREATE SCHEMA app AUTHORIZATION app"
done
psql_q -d streams -c "CREATE EXTENSION stream_seq" \
	-c "CREATE TABLE admin_events (payload text)" \
	-c "SELECT stream_seq.enable('admin_events')" >/dev/null

# one round: ITERATIONS times seven DDL commands, as role app; prints the
# microseconds per iteration
round() {
	psql_q -d "$1" -U app -At -c "
SET search_path = app;
DO \$\$
DECLARE t0 timestamptz := clock_timestamp();
BEGIN
  FOR i IN 1..$ITERATIONS LOOP
    CREATE TABLE t (id int);
    ALTER TABLE t ADD COLUMN payload text;
    CREATE INDEX t_payload ON t (payload);
    ALTER TABLE t RENAME TO u;
    CREATE TABLE c () INHERITS (u);
    DROP TABLE c;
    DROP TABLE u;
  END LOOP;
  RAISE NOTICE 'us %', round(extract(epoch FROM clock_timestamp() - t0) * 1e6 / $ITERATIONS);
END \$\$;" 2>&1 | sed -n 's/^NOTICE:  us //p'
}

round plain >/dev/null		# warm up
round streams >/dev/null
plain=()
streams=()
for r in $(seq 1 "$ROUNDS"); do
	plain+=("$(round plain)")
	streams+=("$(round streams)")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
mp=$(median "${plain[@]}")
ms=$(median "${streams[@]}")
printf 'DDL of an ordinary role, seven commands per iteration, %d iterations, median of %d rounds:\n' \
	"$ITERATIONS" "$ROUNDS"
printf '  without stream_seq: %8.0f us per iteration  (rounds: %s)\n' "$mp" "${plain[*]}"
printf '  with stream_seq:    %8.0f us per iteration  (rounds: %s)\n' "$ms" "${streams[*]}"
awk -v a="$ms" -v b="$mp" 'BEGIN { printf "  ratio with/without: %.3f\n", a / b }'
