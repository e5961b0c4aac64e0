#!/usr/bin/env bash
# worker_libraries.sh: the worker libraries (clients/python,
# stream_seq_worker; clients/node, stream-seq-worker) against the
# hand-written loop of doc/examples/group_worker.py, side by side in one
# run, on one throwaway cluster (bench/lib.sh):
#
#   bench/worker_libraries.sh [ROWS] [EVENTS]   default 20000 rows, 200 events
#
# Throughput: ROWS rows (1,000 keys) inserted ahead into "events"; the
# group "shipping" (8 slots), reset to 0, is drained by 1 then 4 workers
# of each kind, each row inserted into shipping_applied by its handler;
# rows/s = ROWS / (time until the last row is applied since the workers
# started).  Wake-up latency: 4 workers of each kind wait; one writer
# commits one row every 20 ms, EVENTS times; latency = the row's
# applied_at (clock_timestamp() in the handler's insert) - the time its
# COMMIT returned; median and p95.
#
# The Node library needs pg from npm: installed from clients/node's
# package.json into STREAM_SEQ_NPM_CACHE (default /var/cache/stream_seq/npm,
# as test/t/044_node_library.pl does); without node and npm the node rows
# are left out.
#
# Environment: PGBIN (default /usr/lib/postgresql/15/bin),
# WORKER_BENCH_PORT (55560), STREAM_SEQ_SKIP_BUILD, STREAM_SEQ_NPM_CACHE.
set -euo pipefail
PGBIN_WANTED=${PGBIN:-/usr/lib/postgresql/15/bin}
. "$(dirname "$0")/lib.sh"
PGBIN=$PGBIN_WANTED
PG_CONFIG=$PGBIN/pg_config
ROWS=${1:-20000}
EVENTS=${2:-200}
need_packages postgresql-15 python3-psycopg
build_install
start_cluster worker_libraries "${WORKER_BENCH_PORT:-55560}" "max_connections = 50"
export PYTHONPATH=$REPO_DIR/clients/python
DSN="host=$PGHOST port=$PGPORT user=postgres dbname=postgres"
LIB=$CLUSTER_DIR/lib_worker.py
cat >"$LIB" <<'PY'
import sys
from psycopg.types.json import Jsonb
from stream_seq_worker import GroupWorker
def handle(cur, row):
    cur.execute("INSERT INTO shipping_applied (seq, customer_id, payload) VALUES (%s, %s, %s)",
                (row["seq"], row["customer_id"], Jsonb(row["payload"])))
GroupWorker(sys.argv[1], "events", "shipping", sys.argv[2], handle_row=handle,
            wait_timeout=1, renew_every=2, lease=10).run()
PY
NODE_LIB=$CLUSTER_DIR/lib_worker.js
cat >"$NODE_LIB" <<'JS'
const { GroupWorker } = require(process.env.STREAM_SEQ_NODE_LIB)
const stop = new AbortController()
process.on('SIGTERM', () => stop.abort())
new GroupWorker({
  connection: process.argv[2], stream: 'events', consumer: 'shipping', worker: process.argv[3],
  waitMs: 1000, renewMs: 2000, leaseMs: 10000,
  async handleRow ({ seq, row }, { client }) {
    await client.query('INSERT INTO shipping_applied (seq, customer_id, payload) VALUES ($1, $2, $3)',
      [seq, row.customer_id, row.payload])
  }
}).run({ signal: stop.signal }).then(() => process.exit(0))
JS
KINDS="loop python"
NPM_CACHE=${STREAM_SEQ_NPM_CACHE:-/var/cache/stream_seq/npm}
if command -v node >/dev/null && command -v npm >/dev/null; then
	mkdir -p "$NPM_CACHE/worker"
	if ! cmp -s "$REPO_DIR/clients/node/package.json" "$NPM_CACHE/worker/package.json" ||
		[ ! -d "$NPM_CACHE/worker/node_modules/pg" ]; then
		cp "$REPO_DIR/clients/node/package.json" "$NPM_CACHE/worker/package.json"
		npm install --no-audit --no-fund --no-package-lock --prefix "$NPM_CACHE/worker" \
			--cache "$NPM_CACHE/cache" >/dev/null
	fi
	export NODE_PATH=$NPM_CACHE/worker/node_modules STREAM_SEQ_NODE_LIB=$REPO_DIR/clients/node/index.js
	KINDS="loop python node"
else
	echo "(node or npm missing: the Node library is left out)"
fi
NODE_URL="postgres://postgres@/postgres?host=$PGHOST&port=$PGPORT"
WRITER=$CLUSTER_DIR/writer.py
cat >"$WRITER" <<'PY'
import sys, time, random, psycopg
with psycopg.connect(sys.argv[1], autocommit=True) as c:
    for i in range(int(sys.argv[2])):
        with c.transaction():
            (seq_id,) = c.execute("INSERT INTO events (customer_id, payload) VALUES (%s, '{}') RETURNING id",
                                  (random.randint(1, 1000),)).fetchone()
        c.execute("INSERT INTO commits VALUES (%s, %s)", (seq_id, time.time()))
        time.sleep(0.02)
PY
psql_q -o /dev/null <<'SQL'
CREATE EXTENSION stream_seq;
CREATE TABLE events (id bigserial PRIMARY KEY, customer_id int, payload jsonb);
SELECT stream_seq.enable('events');
SELECT stream_seq.create_group('events', 'shipping', 'customer_id', 8);
CREATE TABLE shipping_applied (seq bigint PRIMARY KEY, customer_id int, payload jsonb,
                               applied_at float8 DEFAULT extract(epoch FROM clock_timestamp()));
CREATE TABLE commits (id bigint PRIMARY KEY, t float8);
SQL

# start_workers KIND N: N workers of KIND (loop, python or
# node) in the background
start_workers() {
	local i
	PIDS=()
	for i in $(seq 1 "$2"); do
		if [ "$1" = python ]; then
			$PY "$LIB" "$DSN" "w$i" >/dev/null 2>&1 &
		elif [ "$1" = node ]; then
			node "$NODE_LIB" "$NODE_URL" "w$i" >/dev/null 2>&1 &
		else
			$PY "$REPO_DIR/doc/examples/group_worker.py" "$DSN" events shipping "w$i" >/dev/null 2>&1 &
		fi
		PIDS+=($!)
	done
}
stop_workers() {
	kill -TERM "${PIDS[@]}" 2>/dev/null || true
	wait "${PIDS[@]}" 2>/dev/null || true
	psql_q -o /dev/null -c "SELECT stream_seq.release('events', 'shipping', worker) FROM stream_seq.consumer_slots WHERE worker IS NOT NULL"
}
fresh() {
	psql_q -o /dev/null -c "TRUNCATE shipping_applied, commits" \
		-c "SELECT stream_seq.reset('events', 'shipping', stream_seq.horizon('events') - 1)"
}

psql_q -o /dev/null -c "INSERT INTO events (customer_id, payload) SELECT 1 + (random() * 999)::int, '{\"k\": 1}' FROM generate_series(1, $ROWS)" -c "VACUUM ANALYZE events"
echo "kind	workers	rows/s"
for kind in $KINDS; do
	for n in 1 4; do
		psql_q -o /dev/null -c "TRUNCATE shipping_applied" -c "SELECT stream_seq.reset('events', 'shipping', 0)"
		t0=$(date +%s.%N)
		start_workers $kind $n
		until [ "$(psql_q -At -c 'SELECT count(*) FROM shipping_applied')" -ge "$ROWS" ]; do sleep 0.05; done
		t1=$(psql_q -At -c 'SELECT max(applied_at) FROM shipping_applied')
		stop_workers
		echo "$kind	$n	$(echo "$ROWS / ($t1 - $t0)" | bc -l | xargs printf '%.0f')"
	done
done
echo "kind	events	latency_ms_median	latency_ms_p95"
for kind in $KINDS; do
	fresh
	start_workers $kind 4
	sleep 3   # let the workers claim and settle into wait(); not a synchronisation
	$PY "$WRITER" "$DSN" "$EVENTS"
	until [ "$(psql_q -At -c 'SELECT count(*) FROM shipping_applied')" -ge "$EVENTS" ]; do sleep 0.05; done
	stop_workers
	psql_q -At -F '	' -c "SELECT '$kind', count(*),
	    round((percentile_cont(0.5) WITHIN GROUP (ORDER BY (a.applied_at - c.t) * 1000))::numeric, 1),
	    round((percentile_cont(0.95) WITHIN GROUP (ORDER BY (a.applied_at - c.t) * 1000))::numeric, 1)
	  FROM shipping_applied a JOIN events e ON e.seq = a.seq JOIN commits c ON c.id = e.id"
done
