#!/usr/bin/env bash
# metrics_cost.sh: what one call of stream_seq.metrics() and one scrape of
# doc/examples/prometheus/queries.yaml cost, with many streams, consumers
# and unread rows.
#
#   bench/metrics_cost.sh [STREAMS] [ROWS_PER_STREAM] [CONSUMERS_PER_STREAM] [SLOTS]
#                                  (defaults 100, 100000, 10 and 16)
#
# Starts a throwaway cluster (bench/lib.sh, port 55541) with STREAMS stream
# tables of ROWS_PER_STREAM rows each, and on each CONSUMERS_PER_STREAM
# consumers: one group of SLOTS slots and plain consumers at positions 0,
# 1000, 2000, ... (so every row is unread by the slowest).  The defaults
# make 100 streams, 1,000 consumers (900 plain, 100 groups of 16 slots)
# and 10M unread rows.  As a role that is only a member of pg_monitor,
# psql times (the median of 10 calls in one session, after a first
# one):
#   - metrics() with backlog_cap 0 (no count), 100, 1000 (the default)
#     and 10000, and metrics('stream'), ('consumer'), ('slot');
#   - the four queries of queries.yaml, one scrape;
# first right after the load (the rows' pages not yet all-visible: the
# counts visit the heap), then after VACUUM.  With Debian's
# prometheus-postgres-exporter installed, also the exporter's own
# pg_exporter_last_scrape_duration_seconds of a scrape over loopback.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

STREAMS=${1:-100}
ROWS=${2:-100000}
CONSUMERS=${3:-10}
SLOTS=${4:-16}
CALLS=10

need_packages postgresql-15 postgresql-server-dev-15 make gcc python3-yaml curl
build_install
start_cluster metrics 55541 "
shared_buffers = 512MB
max_wal_size = 4GB
checkpoint_timeout = 30min
autovacuum = off
listen_addresses = '127.0.0.1'
max_locks_per_transaction = 256
stream_seq.max_streams = $((STREAMS + 16))"
echo "host all all 127.0.0.1/32 trust" >>"$CLUSTER_DIR/data/pg_hba.conf"
as_pg $PGBIN/pg_ctl -D "$CLUSTER_DIR/data" reload >/dev/null

psql_q -c "CREATE EXTENSION stream_seq" \
	-c "CREATE ROLE mon LOGIN IN ROLE pg_monitor" >/dev/null

echo "== loading $STREAMS streams of $ROWS rows, $CONSUMERS consumers each (one a group of $SLOTS slots)"
t0=$(date +%s)
for i in $(seq 1 "$STREAMS"); do
	psql_q -c "CREATE TABLE s$i (id bigint, k int, payload text);
		SELECT stream_seq.enable('s$i');" >/dev/null
done
# two loads at a time: the machine may have only 2 cores
seq 1 "$STREAMS" | xargs -P 2 -I{} $PGBIN/psql -X -q -v ON_ERROR_STOP=1 -c \
	"INSERT INTO s{} SELECT g, g % 97, 'payload ' || g FROM generate_series(1, $ROWS) g" >/dev/null
for i in $(seq 1 "$STREAMS"); do
	psql_q -c "
SELECT stream_seq.create_consumer('s$i', 'c' || j, (j - 1) * 1000)
  FROM generate_series(1, $CONSUMERS - 1) j;
SELECT stream_seq.create_group('s$i', 'g', 'k', $SLOTS);" >/dev/null
done
echo "   loaded in $(($(date +%s) - t0)) s: $(psql_q -At -c "SELECT pg_size_pretty(pg_database_size('postgres'))")," \
	"$(psql_q -At -c "SELECT count(*) FROM stream_seq.consumer") consumers," \
	"$(psql_q -At -c "SELECT count(*) FROM stream_seq.consumer_slot") slots"
psql_q -c CHECKPOINT

# the queries of queries.yaml, as the exporter sends them
python3 -c '
import sys, yaml
for q in yaml.safe_load(open(sys.argv[1])).values():
    print(" ".join(q["query"].split()) + ";")
' "$REPO_DIR/doc/examples/prometheus/queries.yaml" >"$CLUSTER_DIR/scrape.sql"

# median time in ms of CALLS runs of the SQL in $1 in one session of role
# mon (as the exporter keeps its connection), after one run to warm the
# session's caches up
latency() {
	{
		echo '\timing on'
		for _ in $(seq 0 "$CALLS"); do printf '%s\n' "$1"; done
	} >"$CLUSTER_DIR/call.sql"
	$PGBIN/psql -X -q -U mon -f "$CLUSTER_DIR/call.sql" -o /dev/null postgres 2>&1 |
		sed -n 's/^Time: \([0-9.]*\) ms.*$/\1/p' | tail -n +2 | sort -g |
		awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'
}

measure() {
	echo "== $1"
	for cap in 0 100 1000 10000; do
		printf '  metrics(NULL, %6d):            %10s ms\n' "$cap" \
			"$(latency "SELECT count(*) FROM stream_seq.metrics(NULL, $cap);")"
	done
	for kind in stream consumer slot; do
		printf '  metrics(%-10s):               %10s ms\n' "'$kind'" \
			"$(latency "SELECT count(*) FROM stream_seq.metrics('$kind');")"
	done
	printf '  one scrape of queries.yaml (4 queries): %10s ms\n' \
		"$(latency "$(cat "$CLUSTER_DIR/scrape.sql")")"
	printf '  rows of metrics(): %s\n' "$(psql_q -At -U mon -c \
		"SELECT string_agg(kind || ' ' || n, ', ') FROM (SELECT kind, count(*) n FROM stream_seq.metrics() GROUP BY kind ORDER BY kind) x")"
	printf '  backlogs capped (default cap): %s of %s consumers\n' \
		"$(psql_q -At -U mon -c "SELECT count(*) FILTER (WHERE backlog_capped = 1) FROM stream_seq.metrics('consumer')")" \
		"$(psql_q -At -U mon -c "SELECT count(*) FROM stream_seq.metrics('consumer')")"
	exporter_scrape
}

exporter_scrape() {
	local bin=/usr/bin/prometheus-postgres-exporter port=59541 pid d
	[ -x $bin ] || { echo "  (prometheus-postgres-exporter not installed: no scrape through it)"; return 0; }
	DATA_SOURCE_NAME="postgresql://mon@127.0.0.1:$PGPORT/postgres?sslmode=disable" \
		$bin --disable-default-metrics --disable-settings-metrics \
		--no-collector.database --no-collector.bgwriter \
		--extend.query-path="$REPO_DIR/doc/examples/prometheus/queries.yaml" \
		--web.listen-address=127.0.0.1:$port >"$CLUSTER_DIR/exporter.log" 2>&1 &
	pid=$!
	for _ in $(seq 1 100); do
		curl -s -o /dev/null "http://127.0.0.1:$port/" && break
		sleep 0.1
	done
	for r in 1 2 3; do
		d=$(curl -s "http://127.0.0.1:$port/metrics" |
			sed -n 's/^pg_exporter_last_scrape_duration_seconds \(.*\)$/\1/p')
		printf '  postgres_exporter scrape %d: %s s (%s stream_seq series)\n' "$r" "$d" \
			"$(curl -s "http://127.0.0.1:$port/metrics" | grep -c '^stream_seq_')"
	done
	kill "$pid"
	wait "$pid" 2>/dev/null || true
}

measure "right after the load (no VACUUM: the counts visit the heap)"
psql_q -c "VACUUM" >/dev/null
measure "after VACUUM"
