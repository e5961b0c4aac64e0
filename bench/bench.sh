#!/usr/bin/env bash
# bench.sh ("make bench"): stream_seq against the alternatives, in one run.
#
# Starts a throwaway cluster (bench/lib.sh) with stream_seq preloaded and
# measures seven contenders, alternating them, with pgbench and the scripts
# in bench/pgbench/ and bench/reader.py.  The five of issue 5, each table
# with the index its reader needs:
#   serial  (a) bigserial table, plain INSERT, reader "id > cursor" (unsafe)
#   xid8    (b) xid8 DEFAULT pg_current_xact_id() + bigserial, reader below
#               pg_snapshot_xmin(pg_current_snapshot()), cursor (xid, id)
#   lock    (c) pg_advisory_xact_lock(4242) before nextval
#   pgq     (d) PgQ pgq.insert_event, consumer batches; the ticker is
#               reader.py calling pgq.ticker() every 50 ms (max_lag 0)
#   stream  (e) stream_seq, reader "seq > cursor AND seq < horizon()"
# and the same-index shape of issue 11, a primary key plus the unique index
# on the sequence column on both sides (writers only):
#   serial_pk  (a) as (id bigserial PRIMARY KEY, seq bigserial UNIQUE, ...)
#   stream_pk  (e) as (id bigserial PRIMARY KEY, seq bigint numbered by
#              stream_seq (its partial unique index), ...)
# Figures (numbers as in issues 5 and 11):
#   1 writer throughput: 1-, 10- and 1,000-row transactions,
#     BENCH_CLIENTS clients, synchronous_commit on/off, every contender;
#     and one COPY of BENCH_COPY_ROWS rows (rows/s, WAL per row) into each
#     table COPY can fill as its writer does (not lock's, PgQ's);
#     BENCH_REPS rounds, each running every cell once with the contenders
#     in a rotated order, runs of BENCH_SECONDS; medians with the spread
#     (min-max) across rounds, and ratios against the bigserial contender
#     of the same shape
#   2 visibility lag (commit returned -> row returned by the reader) of a
#     probe row every 10 ms, under 8 writers whose 1-row transactions stay
#     open 0-3 ms (the demo's load)
#   3 the same lag while an unrelated write transaction stays open 10 s, and
#     while an uncommitted insert into the contender's own table does
#   4 reader cost: a 100-row page with and without the horizon; horizon()
#     calls per second with 0 and with 64 transactions committing (held in
#     their commit, numbered, on an advisory lock:
#     stream_seq.hold_after_numbering); the
#     variants run interleaved in one pgbench run, compared by mean latency
#   5 rows skipped by each reader during the runs of figures 2 and 3
#     (figures 2, 3 and 5 run the five contenders of issue 5 only)
#   6 shared memory per stream and per tracked transaction
#   7 physical cost per row, every contender, 1-, 10- and 1,000-row
#     transactions:
#     BENCH_COST_ROWS rows written by 8 clients (pgbench -t,
#     synchronous_commit off) with autovacuum off; WAL bytes per row
#     (pg_current_wal_insert_lsn() before and after; PgQ without its ticker,
#     so the ticks' WAL is not included), dead tuples per row
#     (pg_stat_user_tables.n_dead_tup), heap bytes per row in the pages
#     that hold row versions (pageinspect), index bytes per row
#     (pg_indexes_size), table+index bytes per row (pg_total_relation_size)
#     before and after a plain VACUUM, and the VACUUM's own WAL (run after
#     a CHECKPOINT, full-page images included)
#   8 autovacuum work: for BENCH_VACUUM_CONTENDERS one after the other, on
#     a cluster otherwise idle, BENCH_VACUUM_SECONDS of 1-row transactions
#     at a fixed rate (pgbench --rate BENCH_VACUUM_RATE,
#     BENCH_VACUUM_CLIENTS clients, synchronous_commit off so that the rate
#     holds on a small machine) with autovacuum_naptime = 5s and
#     log_autovacuum_min_duration = 0; report.py reads the server log's
#     "automatic vacuum of table" entries (runs, heap pages scanned and
#     removed, tuples removed, index scans and the index pages they read,
#     WAL) and pg_stat_user_tables (autovacuum_count, n_dead_tup at the end)
#   9 consumer groups (bench/group_bench.sh, run on this cluster): rows
#     applied per second by a group of 8 slots drained by 1 worker and by 4
#     (BENCH_GROUP_ROWS rows inserted ahead, BENCH_GROUP_REPS rounds), and
#     the wake-up latency from a writer's commit to a waiting worker's read
#     of the row, for three ways of waiting (BENCH_GROUP_LAT_SECONDS each)
#  10 replica reads: lag from a commit on the primary to the row returned
#     by a reader on a streaming standby paging with wait() + horizon(),
#     against the same reader on the primary (bench/replica_bench.sh,
#     BENCH_REPLICA_SECONDS); and the primary's writer throughput and WAL
#     per transaction with the standby records against the build before
#     them, BENCH_REPLICA_BASE (bench/compare_builds.sh, its own clusters,
#     BENCH_REPLICA_ROUNDS rounds of BENCH_SECONDS)
#  11 partitioned streams (bench/partition_bench.sh, its own cluster): a
#     100-row page read with the plain horizon-bounded query and with
#     stream_seq.page(), random and tail cursors, on partitioned streams
#     (sealed partitions) against a single table of the same rows: 3 million
#     rows in 1, 30 and 300 partitions and 10 million in 100; and retention
#     of one partition by drop_partitions() against trim() of the same rows
#     (time, WAL, dead tuples, size); sizes and run lengths from its
#     PARTITION_BENCH_* variables
#  12 PostgreSQL 15 and 18 (bench/versions_bench.sh, its own clusters):
#     figure 1's same-index shape (bigserial against stream_seq, 1- and
#     10-row transactions, synchronous_commit on and off, 8 clients) on
#     15, on 18 and on 18 without data checksums, in one run, with WAL per
#     transaction; BENCH_VERSIONS_ROUNDS rounds of BENCH_SECONDS.  Builds
#     18 by test/build-pg.sh first if it is not cached (about 6 minutes)
#  13 the worker libraries (bench/worker_libraries.sh, its own cluster):
#     rows/s of 1 and 4 workers of clients/python and clients/node against
#     the hand-written loop of doc/examples/group_worker.py draining 20,000
#     rows, and their wake-up latency (median, p95) over 200 events
#  14 instructions per row (bench/instructions_per_row.sh 2000, callgrind,
#     a single-user backend): bigserial, the stream table's write and its
#     update route (in_place off), for 1- and 10-row transactions and COPY, and COPY
#     into bigserial with a BEFORE row trigger in C
#  15 per-key order through retries (bench/key_order_bench.sh, its own
#     cluster): rows/s of one worker draining a group of 4 slots with 0 %,
#     0.1 % and 1 % poison keys (a key's first row fails twice), with and
#     without set_key_order(); read_slot() with nothing parked, with
#     and without it (pages/s, rows per page, microseconds per row); and
#     the wake-up latency (p50, p99) of the keys not held, with 0 % and
#     1 % poison keys, with and without it
# Prints the tables, writes them to bench/results.md, draws
# bench/throughput.png (gnuplot) and keeps the raw numbers in bench/out/.
#
# As root it installs the Debian packages it needs (postgresql-15,
# postgresql-server-dev-15, make, gcc, python3-psycopg2, gnuplot-nox,
# postgresql-15-pgq3); otherwise it prints the apt-get command.
# Environment (defaults in parentheses; the defaults take about 60 minutes,
# figure 1 nineteen, figure 8 ten, figure 9 two, figure 10 six,
# figure 11 eight, figure 12 twelve, figure 13 two, figure 14 two,
# figure 15 two):
#   BENCH_SECONDS (5)          length of a figure 1 run; figure 4's runs
#                              last twice as long
#   BENCH_REPS (3)             rounds of figure 1, runs of figure 4
#   BENCH_CLIENTS ("8 32")     figure 1 client counts; "1 8 32" adds the
#                              1-client rows (about 7 more minutes)
#   BENCH_CONTENDERS ("serial xid8 lock pgq stream serial_pk stream_pk")
#                              contenders of figures 1-3 and 7
#   BENCH_FIGURES ("1 2 3 4 6 7 8 9 10 11 12 13 14 15"; 5 comes with 2 and 3)
#   BENCH_LAG_SECONDS (8)      figure 2 run length
#   BENCH_STALL_SECONDS (10)   figure 3: how long the transaction stays open
#   BENCH_COPY_ROWS (100000)   figure 1: rows of the COPY
#   BENCH_COST_ROWS (50000)    figure 7: rows written per measurement
#                              (rounded down to a multiple of 80)
#   BENCH_VACUUM_CONTENDERS ("serial_pk stream_pk")
#   BENCH_VACUUM_SECONDS (300) figure 8: run length per contender
#   BENCH_VACUUM_RATE (500)    figure 8: transactions (= rows) per second
#   BENCH_VACUUM_CLIENTS (4)   figure 8: pgbench clients
#   BENCH_VACUUM_RELOPTIONS ("")
#                              figure 8: storage parameters set on both
#                              tables for the run, e.g.
#                              "autovacuum_vacuum_scale_factor = 0.01"
#   BENCH_GROUP_ROWS (100000)  figure 9: rows the workers drain per run
#   BENCH_GROUP_REPS (2)       figure 9: rounds of 1 worker and 4 workers
#   BENCH_GROUP_LAT_SECONDS (15)
#                              figure 9: length of each latency run
#   BENCH_REPLICA_SECONDS (15) figure 10: length of the lag run
#   BENCH_REPLICA_BASE (b43a230) figure 10: the revision before the standby
#                              records (needs the git history)
#   BENCH_REPLICA_ROUNDS (5)   figure 10: rounds of the throughput comparison
#   BENCH_VERSIONS_ROUNDS (5)  figure 12: rounds on 15 and 18
#   BENCH_PORT (55402)
#   PGBIN (/usr/lib/postgresql/15/bin)
#                              the PostgreSQL installation used (bench/lib.sh)
#   STREAM_SEQ_SKIP_BUILD      set: use the installed stream_seq as it is
#                              instead of building and installing it
set -euo pipefail
. "$(dirname "$0")/lib.sh"

SECS=${BENCH_SECONDS:-5}
REPS=${BENCH_REPS:-3}
CLIENTS=${BENCH_CLIENTS:-"8 32"}
CONTENDERS=${BENCH_CONTENDERS:-"serial xid8 lock pgq stream serial_pk stream_pk"}
FIGURES=${BENCH_FIGURES:-"1 2 3 4 6 7 8 9 10 11 12 13 14 15"}
VERSIONS_ROUNDS=${BENCH_VERSIONS_ROUNDS:-5}
REPLICA_SECS=${BENCH_REPLICA_SECONDS:-15}
REPLICA_BASE=${BENCH_REPLICA_BASE:-b43a230}
REPLICA_ROUNDS=${BENCH_REPLICA_ROUNDS:-5}
LAG_SECS=${BENCH_LAG_SECONDS:-8}
STALL_SECS=${BENCH_STALL_SECONDS:-10}
COST_ROWS=${BENCH_COST_ROWS:-50000}
COPY_ROWS=${BENCH_COPY_ROWS:-100000}
VAC_CONTENDERS=${BENCH_VACUUM_CONTENDERS:-"serial_pk stream_pk"}
VAC_SECS=${BENCH_VACUUM_SECONDS:-300}
VAC_RATE=${BENCH_VACUUM_RATE:-500}
VAC_CLIENTS=${BENCH_VACUUM_CLIENTS:-4}
VAC_RELOPTS=${BENCH_VACUUM_RELOPTIONS:-}
GROUP_ROWS=${BENCH_GROUP_ROWS:-100000}
GROUP_REPS=${BENCH_GROUP_REPS:-2}
GROUP_LAT_SECS=${BENCH_GROUP_LAT_SECONDS:-15}
PORT=${BENCH_PORT:-55402}
OUT=$BENCH_DIR/out

# reader.py knows the five contenders of issue 5; the same-index ones
# (*_pk) only write
LAG_CONTENDERS=""
for k in $CONTENDERS; do
	[[ $k == *_pk ]] || LAG_CONTENDERS="$LAG_CONTENDERS $k"
done

need_packages postgresql-15 postgresql-server-dev-15 make gcc python3-psycopg2 \
	gnuplot-nox postgresql-15-pgq3 valgrind
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

# copy_run CONTENDER: one COPY of COPY_ROWS rows into its table, in one
# transaction; prints rows/s and WAL bytes per row, tab-separated
copy_run() {
	local start ms
	start=$(psql_q -At -c "SELECT pg_current_wal_insert_lsn() - '0/0'")
	ms=$(seq 1 "$COPY_ROWS" | psql_q -c '\timing on' -c "COPY ev_$1 (payload) FROM STDIN" |
		awk '/^Time:/ { print $2 }')
	awk -v rows="$COPY_ROWS" -v ms="$ms" \
		-v wal=$(($(psql_q -At -c "SELECT pg_current_wal_insert_lsn() - '0/0'") - start)) \
		'BEGIN { printf "%.0f\t%.0f\n", rows / (ms / 1000), wal / rows }'
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
			for rows in 1 10 1000; do
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
		# one COPY of COPY_ROWS rows into each table COPY can fill as its
		# writer does (not lock's and PgQ's, whose writers call functions)
		runs=$((runs + 1))
		for k in $(rotated $runs); do
			case $k in lock | pgq) continue ;; esac
			reset "$k"
			printf 'copy\t%s\t%s\t%s\t%s\n' "$k" "$rep" "$COPY_ROWS" "$(copy_run "$k")" >>"$RAW"
		done
		log "figure 1: rep $rep/$REPS, COPY done"
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
	for k in $LAG_CONTENDERS; do
		lagrun "lag.$k" "$k" "$LAG_SECS"
	done
	log "figures 2 and 5: lag under load done"
fi

if has_figure 3; then
	for kind in other stream; do
		for k in $LAG_CONTENDERS; do
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
		# the two pages again, every execution on the generic plan (as
		# drivers' named statements after five executions, when the
		# planner finds it no dearer): the index on seq is used either way
		PGOPTIONS="-c plan_cache_mode=force_generic_plan" \
			pgb "$OUT/reader.0g.$rep.log" -c 1 -T "$SECS" -D maxc="$maxc" \
			-l --log-prefix="$OUT/lat/reader0g_$rep" \
			-f "$BENCH_DIR/pgbench/page_plain.sql" -f "$BENCH_DIR/pgbench/page_horizon.sql" >/dev/null
	done
	PGOPTIONS="-c plan_cache_mode=force_generic_plan" psql_q -At \
		-c "PREPARE p(bigint) AS SELECT seq, payload FROM ev_stream WHERE seq > \$1 AND seq < stream_seq.horizon('ev_stream') ORDER BY seq LIMIT 100" \
		-c "EXPLAIN (COSTS OFF) EXECUTE p(5)" >"$OUT/page_plan_generic.txt"
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

#
# Figure 7: physical cost per row
#
# the tables that hold a contender's rows, comma-separated: ev_<k>, or the
# event tables of PgQ's queue (the children of its data table)
rels_of() {
	case $1 in
	pgq)
		psql_q -At -c "SELECT string_agg(inhrelid::regclass::text, ', ' ORDER BY inhrelid::regclass::text)
		                 FROM pg_inherits
		                WHERE inhparent = (SELECT queue_data_pfx FROM pgq.queue
		                                    WHERE queue_name = 'ev_pgq')::regclass"
		;;
	*) echo "ev_$1" ;;
	esac
}

# what pg_stat_user_tables and the size functions say about those tables:
# "inserted updated dead table_bytes index_bytes" (table = heap, TOAST,
# free space map and visibility map)
rel_stats() {
	psql_q -At -F ' ' -c "SELECT coalesce(sum(n_tup_ins), 0), coalesce(sum(n_tup_upd), 0),
	                             coalesce(sum(n_dead_tup), 0),
	                             coalesce(sum(pg_table_size(relid)), 0),
	                             coalesce(sum(pg_indexes_size(relid)), 0)
	                        FROM pg_stat_user_tables WHERE relid = ANY ('{$1}'::regclass[])"
}

# bytes in the heap pages of those tables that hold row versions (live or
# dead): a table that concurrent inserts extend adds up to 20 pages per
# waiting backend at once, so its size runs ahead of its rows (pageinspect)
heap_in_use() {
	psql_q -At -c "SELECT coalesce(sum(8192 * (SELECT count(*)
	                                             FROM generate_series(0, pg_relation_size(r) / 8192 - 1) b
	                                            WHERE (page_header(get_raw_page(r::text, b))).lower > 24)), 0)
	                 FROM unnest('{$1}'::regclass[]) r"
}

lsn() { psql_q -At -c "SELECT pg_current_wal_insert_lsn()"; }
lsn_diff() { psql_q -At -c "SELECT pg_wal_lsn_diff('$1', '$2')::bigint"; }

# wait (up to 60 s) until no autovacuum worker is running
autovacuum_idle() {
	local _
	for _ in $(seq 600); do
		[ "$(psql_q -At -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'autovacuum worker'")" = 0 ] && return 0
		sleep 0.1
	done
	echo "autovacuum workers still running after 60 s" >&2
}

if has_figure 7; then
	# autovacuum off for the whole cluster, so that neither the measured
	# tables nor the catalogs are vacuumed (and write WAL) during a
	# measurement
	psql_q -o /dev/null -c "ALTER SYSTEM SET autovacuum = off" -c "SELECT pg_reload_conf()"
	autovacuum_idle
	# the same number of rows for 1-, 10- and 1,000-row transactions of 8
	# clients (1,000-row ones: 48 of them, a few rows fewer)
	blocks=$((COST_ROWS / 80))
	for rows in 1 10 1000; do
		per_client=$((blocks * 10 / rows))
		nrows=$((per_client * 8 * rows))
		for k in $CONTENDERS; do
			if [ "$k" = pgq ]; then
				reset pgq
				truncate=""
			else
				truncate="TRUNCATE ev_$k;"
			fi
			rels=$(rels_of "$k")
			# empty the table, flush this session's statistics (the TRUNCATE
			# zeroes n_dead_tup when they arrive) and start from a checkpoint,
			# so that every measurement writes the same few full-page images:
			# the first change of the pages that exist at the checkpoint (the
			# index metapages, the sequences), none for pages made after it
			psql_q -o /dev/null <<-SQL
				$truncate
				DO \$\$ BEGIN PERFORM pg_stat_force_next_flush(); END \$\$;
				CHECKPOINT;
			SQL
			read -r ins0 upd0 _ <<<"$(rel_stats "$rels")"
			lsn0=$(lsn)
			read -r _ failed < <(PGOPTIONS="-c synchronous_commit=off" \
				pgb "$OUT/cost.$k.$rows.log" -c 8 -j 2 -t "$per_client" \
				-D rows="$rows" -D hold=0 -f "$BENCH_DIR/pgbench/write_$k.sql")
			lsn1=$(lsn)
			# the writers' counters arrive when their backends exit
			for _ in $(seq 200); do
				read -r ins _ <<<"$(rel_stats "$rels")"
				[ $((ins - ins0)) -ge "$nrows" ] && break
				sleep 0.1
			done
			read -r ins upd dead tbl idx <<<"$(rel_stats "$rels")"
			heap=$(heap_in_use "$rels")
			psql_q -o /dev/null -c CHECKPOINT
			lsn2=$(lsn)
			psql_q -o /dev/null -c "VACUUM $rels"
			lsn3=$(lsn)
			read -r _ _ _ tbl2 idx2 <<<"$(rel_stats "$rels")"
			printf 'cost\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$k" "$rows" "$nrows" \
				$((ins - ins0)) $((upd - upd0)) "$dead" "$(lsn_diff "$lsn1" "$lsn0")" \
				"$tbl" "$idx" "$heap" "$tbl2" "$idx2" "$(lsn_diff "$lsn3" "$lsn2")" "$failed" >>"$RAW"
		done
		log "figure 7: physical cost, $rows-row transactions done"
	done
	psql_q -o /dev/null -c "ALTER SYSTEM RESET autovacuum" -c "SELECT pg_reload_conf()"
fi

#
# Figure 8: autovacuum work at a fixed rate, one contender after the other
#
if has_figure 8; then
	psql_q -o /dev/null <<-SQL
		ALTER SYSTEM SET autovacuum_naptime = '5s';
		ALTER SYSTEM SET log_autovacuum_min_duration = 0;
		SELECT pg_reload_conf();
	SQL
	# empty every contender's table, so that autovacuum finds work only in
	# the measured one
	for k in $CONTENDERS $VAC_CONTENDERS; do
		reset "$k"
	done
	for k in $VAC_CONTENDERS; do
		psql_q -o /dev/null <<-SQL
			${VAC_RELOPTS:+ALTER TABLE ev_$k SET ($VAC_RELOPTS);}
			SELECT pg_stat_reset_single_table_counters('ev_$k'::regclass);
		SQL
		autovacuum_idle
		psql_q -o /dev/null -c CHECKPOINT
		logpos=$(stat -c %s "$CLUSTER_DIR/server.log")
		lsn0=$(lsn)
		read -r tps failed < <(PGOPTIONS="-c synchronous_commit=off" \
			pgb "$OUT/vac.$k.log" -c "$VAC_CLIENTS" -j 2 -R "$VAC_RATE" -T "$VAC_SECS" \
			-D rows=1 -D hold=0 -f "$BENCH_DIR/pgbench/write_$k.sql")
		lsn1=$(lsn)
		# an autovacuum still running works on this run's rows: wait for it,
		# and for its log entry (written after it leaves
		# pg_stat_progress_vacuum)
		for _ in $(seq 1200); do
			[ "$(psql_q -At -c "SELECT count(*) FROM pg_stat_progress_vacuum WHERE relid = 'ev_$k'::regclass")" = 0 ] && break
			sleep 0.1
		done
		for _ in $(seq 100); do
			tail -c +$((logpos + 1)) "$CLUSTER_DIR/server.log" >"$OUT/autovacuum.$k.log"
			runs=$(grep -c "automatic vacuum of table \"postgres.public.ev_$k\"" "$OUT/autovacuum.$k.log" || true)
			count=$(psql_q -At -c "SELECT autovacuum_count FROM pg_stat_user_tables WHERE relid = 'ev_$k'::regclass")
			[ "$runs" -ge "$count" ] && break
			sleep 0.1
		done
		read -r nrows count acount dead size < <(psql_q -At -F ' ' -c "
			SELECT (SELECT count(*) FROM ev_$k), autovacuum_count, autoanalyze_count, n_dead_tup,
			       pg_total_relation_size(relid)
			  FROM pg_stat_user_tables WHERE relid = 'ev_$k'::regclass")
		printf 'vac\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$k" "$VAC_SECS" "$VAC_RATE" \
			"$nrows" "$tps" "$failed" "$count" "$acount" "$dead" "$size" \
			"$(lsn_diff "$lsn1" "$lsn0")" >>"$RAW"
		psql_q -c "TRUNCATE ev_$k"
		log "figure 8: autovacuum work of $k done"
	done
	psql_q -o /dev/null <<-SQL
		ALTER SYSTEM RESET autovacuum_naptime;
		ALTER SYSTEM RESET log_autovacuum_min_duration;
		SELECT pg_reload_conf();
	SQL
fi

#
# Figure 9: consumer groups, by bench/group_bench.sh on this cluster (last,
# so that its tables give autovacuum no work during figure 8)
#
if has_figure 9; then
	if GROUP_BENCH_EXISTING=1 GROUP_BENCH_RAW="$RAW" GROUP_BENCH_REPS="$GROUP_REPS" PGBIN="$PGBIN" \
		"$BENCH_DIR/group_bench.sh" "$GROUP_ROWS" "$GROUP_LAT_SECS" >"$OUT/group.log" 2>&1; then
		log "figure 9: consumer groups done"
	else
		echo "group_bench.sh failed, see $OUT/group.log" >&2
		tail -n 5 "$OUT/group.log" >&2
	fi
fi

printf 'meta\tstall_secs\t%s\n' "$STALL_SECS" >>"$RAW"
printf 'meta\tlag_secs\t%s\n' "$LAG_SECS" >>"$RAW"
printf 'meta\truntime\t%s\n' $(($(date +%s) - T0)) >>"$RAW"
printf 'meta\tsettings\tBENCH_SECONDS=%s BENCH_REPS=%s BENCH_CLIENTS="%s" BENCH_LAG_SECONDS=%s BENCH_STALL_SECONDS=%s BENCH_COST_ROWS=%s BENCH_VACUUM_SECONDS=%s BENCH_VACUUM_RATE=%s BENCH_VACUUM_CLIENTS=%s BENCH_GROUP_ROWS=%s BENCH_GROUP_REPS=%s BENCH_GROUP_LAT_SECONDS=%s%s\n' \
	"$SECS" "$REPS" "$CLIENTS" "$LAG_SECS" "$STALL_SECS" "$COST_ROWS" "$VAC_SECS" "$VAC_RATE" "$VAC_CLIENTS" \
	"$GROUP_ROWS" "$GROUP_REPS" "$GROUP_LAT_SECS" \
	"${VAC_RELOPTS:+ BENCH_VACUUM_RELOPTIONS=\"$VAC_RELOPTS\"}" >>"$RAW"
printf 'meta\tsecs\t%s\n' "$SECS" >>"$RAW"
printf 'meta\tvacuum_reloptions\t%s\n' "${VAC_RELOPTS:-none}" >>"$RAW"
printf 'meta\tcpu\t%s (%s cores)\n' "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)" "$(nproc)" >>"$RAW"
printf 'meta\tpostgres\t%s\n' "$(psql_q -At -c 'SHOW server_version')" >>"$RAW"
printf 'meta\tdate\t%s\n' "$(date -u '+%Y-%m-%d %H:%M UTC')" >>"$RAW"

grep -E 'PANIC|terminated by signal|server process .* was terminated' "$CLUSTER_DIR/server.log" |
	sed 's/^/meta\tcrash\t/' >>"$RAW" || true
if [ "$(installed_lib_sum)" != "$LIB_SUM" ]; then
	printf 'meta\treinstalled\tyes\n' >>"$RAW"
fi
stop_cluster

#
# Figure 10: replica reads, by bench/replica_bench.sh and
# bench/compare_builds.sh, each with clusters of its own (after this
# script's cluster is stopped, so that they do not compete with it)
#
REPLICA_MD=$OUT/replica.md
: >"$REPLICA_MD"
if has_figure 10; then
	{
		echo
		echo "## Figure 10: replica reads"
		echo
		echo "bench/replica_bench.sh $REPLICA_SECS 200:"
		echo
		echo '```'
		STREAM_SEQ_SKIP_BUILD=1 "$BENCH_DIR/replica_bench.sh" "$REPLICA_SECS" 200 \
			>"$OUT/replica_bench.log" 2>&1 || echo "(replica_bench.sh failed: see bench/out/replica_bench.log)"
		sed -n '/^Replica read lag/,$p' "$OUT/replica_bench.log"
		echo '```'
		echo
		echo "Writer throughput and WAL with the standby records (after) and without"
		echo "(before: $REPLICA_BASE), bench/compare_builds.sh $REPLICA_BASE $SECS $REPLICA_ROUNDS:"
		echo
		echo '```'
		if git -C "$REPO_DIR" cat-file -e "$REPLICA_BASE^{commit}" 2>/dev/null; then
			"$BENCH_DIR/compare_builds.sh" "$REPLICA_BASE" "$SECS" "$REPLICA_ROUNDS" \
				>"$OUT/compare_builds.log" 2>&1 || echo "(compare_builds.sh failed: see bench/out/compare_builds.log)"
			sed -n '/^Writer transactions/,$p' "$OUT/compare_builds.log"
		else
			echo "(skipped: revision $REPLICA_BASE is not in this checkout)"
		fi
		echo '```'
	} >"$REPLICA_MD"
	log "figure 10: replica reads done"
fi

#
# Figure 11: partitioned streams, by bench/partition_bench.sh on a cluster
# of its own (its raw numbers in bench/out/partition/)
#
PARTITION_MD=$OUT/partition.md
: >"$PARTITION_MD"
if has_figure 11; then
	{
		echo
		echo "## Figure 11: partitioned streams"
		echo
		echo "bench/partition_bench.sh:"
		echo
		if PARTITION_BENCH_OUT="$OUT/partition" PGBIN="$PGBIN" STREAM_SEQ_SKIP_BUILD=1 \
			"$BENCH_DIR/partition_bench.sh" >"$OUT/partition_bench.log" 2>&1; then
			cat "$OUT/partition/summary.md"
		else
			echo "(partition_bench.sh failed: see bench/out/partition_bench.log)"
		fi
	} >"$PARTITION_MD"
	log "figure 11: partitioned streams done"
fi

#
# Figure 12: PostgreSQL 15 and 18, by bench/versions_bench.sh with clusters
# of its own
#
VERSIONS_MD=$OUT/versions.md
: >"$VERSIONS_MD"
if has_figure 12; then
	{
		echo
		echo "## Figure 12: PostgreSQL 15 and 18"
		echo
		echo "bench/versions_bench.sh $SECS $VERSIONS_ROUNDS:"
		echo
		echo '```'
		"$BENCH_DIR/versions_bench.sh" "$SECS" "$VERSIONS_ROUNDS" \
			>"$OUT/versions_bench.log" 2>&1 || echo "(versions_bench.sh failed: see bench/out/versions_bench.log)"
		sed -n '/^Writer transactions/,$p' "$OUT/versions_bench.log"
		echo '```'
	} >"$VERSIONS_MD"
	log "figure 12: PostgreSQL 15 and 18 done"
fi

#
# Figure 13: the worker libraries, by bench/worker_libraries.sh on a
# cluster of its own
#
WORKERS_MD=$OUT/workers.md
: >"$WORKERS_MD"
if has_figure 13; then
	{
		echo
		echo "## Figure 13: the worker libraries"
		echo
		echo "bench/worker_libraries.sh 20000 200:"
		echo
		echo '```'
		PGBIN="$PGBIN" STREAM_SEQ_SKIP_BUILD=1 "$BENCH_DIR/worker_libraries.sh" 20000 200 \
			>"$OUT/worker_libraries.log" 2>&1 || echo "(worker_libraries.sh failed: see bench/out/worker_libraries.log)"
		sed -n '/^kind/,$p' "$OUT/worker_libraries.log"
		echo '```'
	} >"$WORKERS_MD"
	log "figure 13: the worker libraries done"
fi

#
# Figure 14: instructions per row, by bench/instructions_per_row.sh on a
# data directory of its own
#
INSTRUCTIONS_MD=$OUT/instructions.md
: >"$INSTRUCTIONS_MD"
if has_figure 14; then
	{
		echo
		echo "## Figure 14: instructions per row"
		echo
		echo "bench/instructions_per_row.sh 2000:"
		echo
		echo '```'
		PGBIN="$PGBIN" STREAM_SEQ_SKIP_BUILD=1 "$BENCH_DIR/instructions_per_row.sh" 2000 \
			>"$OUT/instructions_per_row.log" 2>&1 || echo "(instructions_per_row.sh failed: see bench/out/instructions_per_row.log)"
		sed -n '/^case/,$p' "$OUT/instructions_per_row.log"
		echo '```'
	} >"$INSTRUCTIONS_MD"
	log "figure 14: instructions per row done"
fi

#
# Figure 15: per-key order through retries, by bench/key_order_bench.sh on
# a cluster of its own
#
KEY_ORDER_MD=$OUT/key_order.md
: >"$KEY_ORDER_MD"
if has_figure 15; then
	{
		echo
		echo "## Figure 15: per-key order through retries"
		echo
		echo "bench/key_order_bench.sh 3 4:"
		echo
		echo '```'
		PGBIN="$PGBIN" STREAM_SEQ_SKIP_BUILD=1 "$BENCH_DIR/key_order_bench.sh" 3 4 \
			>"$OUT/key_order.log" 2>&1 || echo "(key_order_bench.sh failed: see bench/out/key_order.log)"
		sed -n '/^1\. /,$p' "$OUT/key_order.log"
		echo '```'
	} >"$KEY_ORDER_MD"
	log "figure 15: per-key order through retries done"
fi

"$PY" "$BENCH_DIR/report.py" "$OUT" "$BENCH_DIR/results.md" "$BENCH_DIR/throughput.png"
cat "$REPLICA_MD" "$PARTITION_MD" "$VERSIONS_MD" "$WORKERS_MD" "$INSTRUCTIONS_MD" "$KEY_ORDER_MD" >>"$BENCH_DIR/results.md"
cat "$REPLICA_MD" "$PARTITION_MD" "$VERSIONS_MD" "$WORKERS_MD" "$INSTRUCTIONS_MD" "$KEY_ORDER_MD"
log "done"
