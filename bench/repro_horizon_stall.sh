#!/usr/bin/env bash
# repro_horizon_stall.sh: the stream horizon stops moving while one
# unrelated transaction that has an xid stays open, once more stream
# transactions have committed than stream_seq.max_tracked_xacts.
#
# Runs the bench's stall scenario twice in throwaway clusters: 8 writers
# (1-row transactions open 0-3 ms) on ev_stream, a probe row every 10 ms,
# the paging reader, and from second 1 to 1+STALL (default 6) an open
# transaction that inserted one row into the unrelated table.  It samples
# stream_seq.streams every 0.5 s: head, horizon, head - horizon, tracked,
# evicted.  First with the default stream_seq.max_tracked_xacts (1024), then
# with 100000.  Expected without the bug: the horizon follows the head in
# both runs.  Needs the extension installed (make install) and
# python3-psycopg2; run as root or as a user who can initdb.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
STALL=${STALL:-6}

one_run() {
	local conf=$1 stop rp pp i
	start_cluster stallrepro "${REPRO_PORT:-55410}" "max_connections = 100
$conf"
	psql_q -o /dev/null -f "$BENCH_DIR/schema.sql"
	echo "-- $conf"
	stop=$CLUSTER_DIR/stop
	"$PY" "$BENCH_DIR/reader.py" read stream --stop-file "$stop" --probe-ms 10 \
		--stall other --stall-at 1 --stall-secs "$STALL" --json "$CLUSTER_DIR/r.json" >/dev/null &
	rp=$!
	sleep 0.3
	$PGBIN/pgbench -n -M prepared -c 8 -j 2 -T $((STALL + 2)) -D rows=1 -D hold=1 \
		-f "$BENCH_DIR/pgbench/write_stream.sql" >"$CLUSTER_DIR/pgbench.log" 2>&1 &
	pp=$!
	echo "time        head  horizon  behind  tracked  evicted"
	for i in $(seq 1 $(((STALL + 2) * 2))); do
		psql_q -At -F ' ' -c "SELECT to_char(clock_timestamp(), 'HH24:MI:SS.MS'), head, horizon, head - horizon, tracked, evicted FROM stream_seq.streams" |
			awk '{printf "%s %7d %8d %7d %8d %8d\n", $1, $2, $3, $4, $5, $6}'
		sleep 0.5
	done
	wait "$pp"
	touch "$stop"
	wait "$rp"
	"$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); print("probe lag ms: p50 %.1f  p99 %.1f  max %.1f; rows committed %d, missed %d" % (r["lag_p50_ms"], r["lag_p99_ms"], r["lag_max_ms"], r["committed"], r["missed"]))' "$CLUSTER_DIR/r.json"
	stop_cluster
	echo
}

one_run "stream_seq.max_tracked_xacts = 1024"
one_run "stream_seq.max_tracked_xacts = 100000"
