#!/usr/bin/env bash
# bench.sh ("make bench"): stream_seq against the alternatives, in one run.
#
# Starts a throwaway cluster (bench/lib.sh) with stream_seq preloaded and
# measures five contenders, alternating them, with pgbench and the scripts
# in bench/pgbench/ and bench/reader.py:
#   serial  (a) bigserial table, plain INSERT, reader "id > cursor" (unsafe)
#   xid8    (b) xid8 DEFAULT pg_current_xact_id() + bigserial, reader below
#               pg_snapshot_xmin(pg_current_snapshot()), cursor (xid, id)
#   lock    (c) pg_advisory_xact_lock(4242) before nextval
#   pgq     (d) PgQ pgq.insert_event, consumer batches; the ticker is
#               reader.py calling pgq.ticker() every 50 ms (max_lag 0)
#   stream  (e) stream_seq, reader "seq > cursor AND seq < horizon()"
# Figures (numbers as in issue 5):
#   1 writer throughput: 1- and 10-row transactions, 1/8/32 clients,
#     synchronous_commit on/off; BENCH_REPS runs of BENCH_SECONDS each,
#     medians
#   2 visibility lag (commit returned -> row returned by the reader) of a
#     probe row every 10 ms, under 8 writers whose 1-row transactions stay
#     open 0-3 ms (the demo's load)
#   3 the same lag while an unrelated write transaction stays open 10 s, and
#     while an uncommitted insert into the contender's own table does
#   4 reader cost: a 100-row page with and without the horizon; horizon()
#     calls per second with 0 and with 64 transactions committing (held in
#     their commit by a deferred trigger waiting on an advisory lock); the
#     variants run interleaved in one pgbench run, compared by mean latency
#   5 rows skipped by each reader during the runs of figures 2 and 3
#   6 shared memory per stream and per tracked transaction
# Prints the table, writes it to bench/results.md, draws bench/throughput.png
# (gnuplot) and keeps the raw numbers in bench/out/.
#
# As root it installs the Debian packages it needs (postgresql-15,
# postgresql-server-dev-15, make, gcc, python3-psycopg2, gnuplot-nox,
# postgresql-15-pgq3); otherwise it prints the apt-get command.
# Environment: BENCH_SECONDS (2), BENCH_REPS (4), BENCH_CLIENTS ("1 8 32"),
# BENCH_CONTENDERS ("serial xid8 lock pgq stream"), BENCH_FIGURES
# ("1 2 3 4 6"; 5 comes with 2 and 3), BENCH_LAG_SECONDS (8),
# BENCH_STALL_SECONDS (10), BENCH_PORT (55402), STREAM_SEQ_SKIP_BUILD.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

SECS=${BENCH_SECONDS:-2}
REPS=${BENCH_REPS:-4}
CLIENTS=${BENCH_CLIENTS:-"1 8 32"}
CONTENDERS=${BENCH_CONTENDERS:-"serial xid8 lock pgq stream"}
FIGURES=${BENCH_FIGURES:-"1 2 3 4 6"}
LAG_SECS=${BENCH_LAG_SECONDS:-8}
STALL_SECS=${BENCH_STALL_SECONDS:-10}
PORT=${BENCH_PORT:-55402}
OUT=$BENCH_DIR/out

need_packages postgresql-15 postgresql-server-dev-15 make gcc python3-psycopg2 \
	gnuplot-nox postgresql-15-pgq3
build_install

T0=$(date +%s)
rm -rf "$OUT"
mkdir -p "$OUT"
LIB_SUM=$(installed_lib_sum)
KEEP_SERVER_LOG=$OUT/server.log
RAW=$OUT/raw.tsv
: >"$RAW"

start_cluster bench "$PORT" "
max_connections = 200
shared_buffers = 512MB
max_wal_size = 8GB
checkpoint_timeout = 1h
log_min_messages = warning
"
psql_q -o /dev/null -f "$BENCH_DIR/schema.sql"
psql_q -o /dev/null -f "$BENCH_DIR/schema_pgq.sql"

has_figure() { [[ " $FIGURES " == *" $1 "* ]]; }
log() { printf '[%4ds] %s\n' $(($(date +%s) - T0)) "$*"; }

# empty a contender's table (PgQ: a fresh queue) before a run
reset() {
	case $1 in
	pgq) psql_q -o /dev/null -f "$BENCH_DIR/schema_pgq.sql" ;;
	*) psql_q -c "TRUNCATE ev_$1" ;;
	esac
}

# run pgbench; prints "tps failed"
pgb() {
	local logf=$1
	shift
	if ! $PGBIN/pgbench -n -M prepared "$@" >"$logf" 2>&1; then
		echo "pgbench failed, see $logf" >&2
	fi
	awk '/^tps = .*without initial connection time/ {tps=$3}
	     /^number of failed transactions:/ {failed=$5}
	     END {printf "%s %s\n", (tps == "" ? "nan" : tps), (failed == "" ? 0 : failed)}' "$logf"
}

# a background PgQ ticker while pgbench writes into the queue
ticker_start() {
	TICK_STOP=$OUT/tick.stop
	rm -f "$TICK_STOP"
	"$PY" "$BENCH_DIR/reader.py" ticker --stop-file "$TICK_STOP" &
	TICK_PID=$!
}
ticker_stop() {
	touch "$TICK_STOP"
	wait "$TICK_PID" || true
}

# the contenders in a rotated order, so that none always runs first
rotated() {
	local -a list=($CONTENDERS)
	local n=${#list[@]} k=$(($1 % ${#list[@]})) i
	for ((i = 0; i < n; i++)); do
		printf '%s ' "${list[$(((i + k) % n))]}"
	done
}

#
# Figure 1: writer throughput
#
if has_figure 1; then
	runs=0
	for rep in $(seq 1 "$REPS"); do
		for sc in on off; do
			for rows in 1 10; do
				for c in $CLIENTS; do
					runs=$((runs + 1))
					for k in $(rotated $runs); do
						reset "$k"
						[ "$k" = pgq ] && ticker_start
						j=$((c < 2 ? 1 : 2))
						read -r tps failed < <(PGOPTIONS="-c synchronous_commit=$sc" \
							pgb "$OUT/tput.$k.$sc.$rows.$c.$rep.log" \
							-c "$c" -j "$j" -T "$SECS" -D rows="$rows" -D hold=0 \
							-f "$BENCH_DIR/pgbench/write_$k.sql")
						[ "$k" = pgq ] && ticker_stop
						printf 'tput\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' \
							"$k" "$sc" "$rows" "$c" "$rep" "$tps" "$failed" >>"$RAW"
					done
				done
			done
			log "figure 1: rep $rep/$REPS, synchronous_commit=$sc done"
		done
	done
fi

#
# Figures 2, 3 and 5: lag and skipped rows under the demo's 8-writer load
#
# lagrun NAME CONTENDER SECONDS [reader.py options]
lagrun() {
	local name=$1 k=$2 secs=$3 stop pid tps failed ev0=0 ev1=0
	shift 3
	stop=$OUT/$name.stop
	reset "$k"
	[ "$k" = stream ] && ev0=$(stream_state evicted)
	"$PY" "$BENCH_DIR/reader.py" read "$k" --stop-file "$stop" --probe-ms 10 \
		--json "$OUT/$name.json" "$@" >/dev/null 2>"$OUT/$name.err" &
	pid=$!
	sleep 0.3
	read -r tps failed < <(pgb "$OUT/$name.log" -c 8 -j 2 -T "$secs" \
		-D rows=1 -D hold=1 -f "$BENCH_DIR/pgbench/write_$k.sql")
	touch "$stop"
	if ! wait "$pid"; then
		echo "reader failed for $name:" >&2
		cat "$OUT/$name.err" >&2
	fi
	printf 'lagtps\t%s\t%s\t%s\n' "$name" "$tps" "$failed" >>"$RAW"
	if [ "$k" = stream ]; then
		ev1=$(stream_state evicted)
		printf 'evicted\t%s\t%s\n' "$name" $((ev1 - ev0)) >>"$RAW"
	fi
}

# a column of the stream_seq.streams row of ev_stream
stream_state() {
	psql_q -At -c "SELECT $1 FROM stream_seq.streams WHERE stream = 'ev_stream'::regclass"
}

if has_figure 2; then
	for k in $CONTENDERS; do
		lagrun "lag.$k" "$k" "$LAG_SECS"
	done
	log "figures 2 and 5: lag under load done"
fi

if has_figure 3; then
	for kind in other stream; do
		for k in $CONTENDERS; do
			lagrun "stall.$kind.$k" "$k" $((STALL_SECS + 2)) \
				--stall "$kind" --stall-at 1 --stall-secs "$STALL_SECS"
		done
		log "figure 3: stall ($kind) done"
	done
fi

#
# Figure 4: reader cost.  The variants run interleaved in one pgbench run
# (one client, scripts picked at random), so that the machine's noise hits
# them alike; each transaction's latency is logged (pgbench -l) and
# report.py compares mean latencies.
#
if has_figure 4 && [[ " $CONTENDERS " == *" stream "* ]]; then
	NPAGE=100000
	psql_q -o /dev/null <<-EOF
		TRUNCATE ev_stream;
		INSERT INTO ev_stream (payload) SELECT g FROM generate_series(1, $NPAGE) g;
		VACUUM ANALYZE ev_stream;
	EOF
	maxc=$(psql_q -At -c "SELECT max(seq) - 100 FROM ev_stream")
	psql_q -At -c "EXPLAIN (COSTS OFF) SELECT seq, payload FROM ev_stream WHERE seq > 5 AND seq < stream_seq.horizon('ev_stream') ORDER BY seq LIMIT 100" >"$OUT/page_plan.txt"
	mkdir -p "$OUT/lat"
	for rep in $(seq 1 "$REPS"); do
		pgb "$OUT/reader.0.$rep.log" -c 1 -T $((SECS * 2)) -D maxc="$maxc" \
			-l --log-prefix="$OUT/lat/reader0_$rep" \
			-f "$BENCH_DIR/pgbench/page_plain.sql" -f "$BENCH_DIR/pgbench/page_horizon.sql" \
			-f "$BENCH_DIR/pgbench/select1.sql" -f "$BENCH_DIR/pgbench/horizon_call.sql" \
			-f "$BENCH_DIR/pgbench/page_const.sql" >/dev/null
	done
	tracked0=$(stream_state tracked)

	# 64 transactions held in their commit by advisory lock 777
	$PGBIN/psql -X -q -o /dev/null -c "SET application_name = 'bench_locker'" \
		-c "SELECT pg_advisory_lock(777)" -c "SELECT pg_sleep(600)" 2>/dev/null &
	for _ in $(seq 100); do
		[ "$(psql_q -At -c "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = 777 AND granted")" = 1 ] && break
		sleep 0.1
	done
	$PGBIN/pgbench -n -c 64 -j 2 -t 1 -f "$BENCH_DIR/pgbench/hold_commit.sql" >"$OUT/hold.log" 2>&1 &
	hold_pid=$!
	committing=0
	for _ in $(seq 300); do
		committing=$(stream_state committing)
		[ "$committing" -ge 64 ] && break
		sleep 0.1
	done
	for rep in $(seq 1 "$REPS"); do
		pgb "$OUT/reader.64.$rep.log" -c 1 -T $((SECS * 2)) -l --log-prefix="$OUT/lat/reader64_$rep" \
			-f "$BENCH_DIR/pgbench/select1.sql" -f "$BENCH_DIR/pgbench/horizon_call.sql" >/dev/null
	done
	tracked64=$(stream_state tracked)
	psql_q -o /dev/null -c "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'bench_locker'"
	wait "$hold_pid" || true
	printf 'hstate\t%s\t%s\t%s\n' "$committing" "$tracked0" "$tracked64" >>"$RAW"
	log "figure 4: reader cost done"
fi

#
# Figure 6: shared memory
#
if has_figure 6; then
	psql_q -At -F $'\t' >>"$RAW" <<-'EOF'
		SELECT 'shmem', a.size,
		       current_setting('stream_seq.max_streams'),
		       current_setting('stream_seq.max_tracked_xacts'),
		       current_setting('max_connections')::int
		         + current_setting('autovacuum_max_workers')::int + 1
		         + current_setting('max_worker_processes')::int
		         + current_setting('max_wal_senders')::int
		  FROM pg_shmem_allocations a WHERE a.name = 'stream_seq';
	EOF
fi

printf 'meta\tstall_secs\t%s\n' "$STALL_SECS" >>"$RAW"
printf 'meta\tlag_secs\t%s\n' "$LAG_SECS" >>"$RAW"
printf 'meta\truntime\t%s\n' $(($(date +%s) - T0)) >>"$RAW"
printf 'meta\tsettings\tBENCH_SECONDS=%s BENCH_REPS=%s BENCH_CLIENTS="%s" BENCH_LAG_SECONDS=%s BENCH_STALL_SECONDS=%s\n' \
	"$SECS" "$REPS" "$CLIENTS" "$LAG_SECS" "$STALL_SECS" >>"$RAW"
printf 'meta\tcpu\t%s (%s cores)\n' "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)" "$(nproc)" >>"$RAW"
printf 'meta\tpostgres\t%s\n' "$(psql_q -At -c 'SHOW server_version')" >>"$RAW"
printf 'meta\tdate\t%s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')" >>"$RAW"

grep -E 'PANIC|terminated by signal|server process .* was terminated' "$CLUSTER_DIR/server.log" |
	sed 's/^/meta\tcrash\t/' >>"$RAW" || true
if [ "$(installed_lib_sum)" != "$LIB_SUM" ]; then
	printf 'meta\treinstalled\tyes\n' >>"$RAW"
fi
stop_cluster
"$PY" "$BENCH_DIR/report.py" "$OUT" "$BENCH_DIR/results.md" "$BENCH_DIR/throughput.png"
log "done"
