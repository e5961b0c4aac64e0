#!/usr/bin/env bash
# wait_pooler.sh: stream_seq.wait() through pgbouncer in transaction pooling
# mode: what a waiting wait() costs the other clients of the pool, how soon
# waiters wake, whether every row is applied exactly once, and which client
# features survive transaction pooling (prepared statements, LISTEN).
#
#   bench/wait_pooler.sh [WAITERS] [SECONDS]      default: 3 waiters, 10 s
#
# Starts a throwaway cluster (bench/lib.sh: socket only, the library
# preloaded, run as "postgres" when started as root) and a pgbouncer of its
# own (pool_mode = transaction, 127.0.0.1 and a socket in the cluster's
# directory, auth_type = trust), both stopped and removed on exit.  As root
# it installs the Debian package pgbouncer if it is missing (Debian's
# package also sets up its own pgbouncer service on port 6432; this script
# does not use it).  The extension must already be installed in the
# PostgreSQL tree it runs (make && sudo make install).
#
# A stream table "events"; WAITERS pgbench clients, each its own consumer
# w<client_id>, loop through pgbouncer:
#   SELECT clock_timestamp(), stream_seq.wait('events', position, TIMEOUT),
#          clock_timestamp();                       -- t0, wait(), t1
#   WITH page AS (read 100 rows), ins AS (INSERT INTO applied ...)
#   SELECT stream_seq.advance(...) FROM ins;        -- one transaction
# and one pgbench writer inserts one row per transaction for SECONDS, either
# nonstop or pausing 10 ms between inserts (as an application does that
# writes now and then).  Each row carries clock_timestamp() of its INSERT
# (the autocommit COMMIT follows in the same statement).  Scenarios:
#   0      writer alone (no waiters), pool_size = WAITERS
#   a, a2  pool_size = WAITERS, wait() timeout 5 s; writer nonstop, paused
#   b, b2  pool_size = WAITERS + 2, timeout 5 s; nonstop, paused
#   c, c2  pool_size = WAITERS, timeout 100 ms; nonstop, paused
#   d      waiters on a database entry of their own (pool_size = WAITERS),
#          the writer on another (pool_size = 2), timeout 5 s; nonstop
# Per scenario: writer inserts/s and the longest pause between two inserts;
# wake-ups (wait() calls whose first row to apply was inserted after the
# call began) and their latency from the row's INSERT to wait() returning
# (server clock) and to the page being applied (the next statement, after
# the result went through pgbouncer and the client got a server connection
# again); the delivery latency of every row; twice a second, whether
# clients were queued at pgbouncer; and, after the run and a final drain of
# each consumer on a direct connection, that each consumer applied every
# row exactly once.
# Then, through pgbouncer: pgbench -M extended (unnamed statements) and -M
# prepared (named statements), SQL PREPARE/EXECUTE next to a busy pool, and
# LISTEN stream_seq with stream_seq.notify = on (direct, through a
# transaction-mode entry and through a session-mode one).
#
# Environment: PGBIN (default /usr/lib/postgresql/15/bin), WAIT_POOLER_PORT
# (cluster, default 55540), WAIT_POOLER_BOUNCER_PORT (default 55541).
set -euo pipefail
# lib.sh sets PGBIN to Debian's directory: keep the caller's
PGBIN_WANTED=${PGBIN:-/usr/lib/postgresql/15/bin}
. "$(dirname "$0")/lib.sh"
PGBIN=$PGBIN_WANTED
PG_CONFIG=$PGBIN/pg_config

WAITERS=${1:-3}
SECS=${2:-10}
PORT=${WAIT_POOLER_PORT:-55540}
BPORT=${WAIT_POOLER_BOUNCER_PORT:-55541}
T_START=$(date +%s)

if [ ! -x "$PGBIN/postgres" ]; then
	need_packages postgresql-15
fi
# Debian installs it in /usr/sbin, which is not in every user's PATH
PGBOUNCER=$(command -v pgbouncer || echo /usr/sbin/pgbouncer)
[ -x "$PGBOUNCER" ] || need_packages pgbouncer
if [ ! -f "$($PG_CONFIG --pkglibdir)/stream_seq.so" ]; then
	echo "stream_seq is not installed in $($PG_CONFIG --pkglibdir); run: make && sudo make install PG_CONFIG=$PG_CONFIG" >&2
	exit 1
fi

start_cluster wait_pooler "$PORT" "max_connections = 100"
DIR=$CLUSTER_DIR

stop_bouncer() {
	if [ -f "$DIR/pgbouncer.pid" ]; then
		kill "$(cat "$DIR/pgbouncer.pid")" 2>/dev/null || true
		for _ in $(seq 50); do
			[ -f "$DIR/pgbouncer.pid" ] || break
			sleep 0.1
		done
	fi
}
on_exit() {
	local rc=$?
	stop_bouncer
	(exit $rc)
	lib_exit
}
trap on_exit EXIT

# pgbouncer: one database entry per pool, all on the cluster's database
db() { echo "$1 = host=$DIR port=$PORT dbname=postgres pool_size=$2"; }
cat >"$DIR/pgbouncer.ini" <<EOF
[databases]
$(db pool_eq "$WAITERS")
$(db pool_more $((WAITERS + 2)))
$(db waiters "$WAITERS")
$(db writers 2)
$(db prep $((WAITERS + 2)))
$(db prep_mix $((WAITERS + 2)))
$(db notify 2)
$(db notify_session 2) pool_mode=session

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BPORT
unix_socket_dir = $DIR
auth_type = trust
auth_file = $DIR/userlist.txt
admin_users = postgres
pool_mode = transaction
max_client_conn = 200
logfile = $DIR/pgbouncer.log
pidfile = $DIR/pgbouncer.pid
EOF
echo '"postgres" ""' >"$DIR/userlist.txt"
is_root && chown postgres: "$DIR/pgbouncer.ini" "$DIR/userlist.txt"
as_pg "$PGBOUNCER" -d "$DIR/pgbouncer.ini" >/dev/null
for _ in $(seq 50); do
	[ -f "$DIR/pgbouncer.pid" ] && [ -S "$DIR/.s.PGSQL.$BPORT" ] && break
	sleep 0.1
done
echo "== pgbouncer $("$PGBOUNCER" --version | head -1 | cut -d' ' -f2) on 127.0.0.1:$BPORT, pool_mode = transaction"

# clients of pgbouncer connect over TCP, as applications do
bouncer_opts=(-h 127.0.0.1 -p "$BPORT" -U postgres)
admin() { "$PGBIN"/psql -X -q -h "$DIR" -p "$BPORT" -U postgres -d pgbouncer "$@"; }

psql_q -o /dev/null <<'EOF'
CREATE EXTENSION stream_seq;
CREATE TABLE events (id bigserial PRIMARY KEY,
                     ins_at timestamptz NOT NULL DEFAULT clock_timestamp(),
                     payload text NOT NULL DEFAULT 'w');
SELECT stream_seq.enable('events');
-- what the consumers applied; t0/woke: clock before and after their wait()
-- call (epoch seconds; 0 for rows applied by the final drain)
CREATE TABLE applied (consumer text NOT NULL, seq bigint NOT NULL,
                      ins_at timestamptz NOT NULL, t0 numeric NOT NULL,
                      woke numeric NOT NULL,
                      applied_at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE TABLE run (start_seq bigint NOT NULL);
EOF

cat >"$DIR/waiter.sql" <<'EOF'
SELECT extract(epoch FROM clock_timestamp()) AS t0, stream_seq.wait('events', stream_seq.position('events', 'w' || :client_id::int), :timeout_ms::int * interval '1 ms') AS h, extract(epoch FROM clock_timestamp()) AS t1 \gset
WITH page AS (SELECT seq, "row" FROM stream_seq.read('events', 'w' || :client_id::int, 100)), ins AS (INSERT INTO applied (consumer, seq, ins_at, t0, woke) SELECT 'w' || :client_id::int, seq, ("row"->>'ins_at')::timestamptz, :t0::numeric, :t1::numeric FROM page RETURNING seq) SELECT stream_seq.advance('events', 'w' || :client_id::int, max(seq)) FROM ins HAVING count(*) > 0;
EOF
cat >"$DIR/writer.sql" <<'EOF'
INSERT INTO events (payload) VALUES ('w');
\sleep :think_ms ms
EOF

# a fresh set of consumers w0.. starting after everything written so far
reset_run() {
	psql_q -o /dev/null <<-EOF
		TRUNCATE applied, run;
		SELECT stream_seq.drop_consumer('events', consumer)
		  FROM stream_seq.consumers WHERE stream = 'events'::regclass;
		INSERT INTO run SELECT coalesce(stream_seq.head('events'), 0);
		SELECT stream_seq.create_consumer('events', 'w' || i, start_after => (SELECT start_seq FROM run))
		  FROM generate_series(0, $WAITERS - 1) i;
	EOF
}

# twice a second: server connections asleep in wait(), clients queued at
# pgbouncer for the given database entries
sampler() {
	local out=$1 entries=$2 in_wait queued
	while [ ! -f "$out.stop" ]; do
		in_wait=$(psql_q -At -c "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Extension' AND query LIKE '%stream_seq.wait(%' AND pid <> pg_backend_pid()" 2>/dev/null || echo 0)
		queued=$(admin -A -F'|' -c 'SHOW POOLS' 2>/dev/null | awk -F'|' -v want="$entries" '
			NR == 1 { for (i = 1; i <= NF; i++) col[$i] = i; next }
			index(" " want " ", " " $col["database"] " ") { q += $col["cl_waiting"] }
			END { print q + 0 }' || true)
		echo "$in_wait $queued" >>"$out"
		sleep 0.5
	done
}

RESULTS=$DIR/results.txt
: >"$RESULTS"

# scenario NAME WRITER_DB WAITER_DB TIMEOUT_MS WAITERS THINK_MS: the writer
# pauses THINK_MS between its inserts (0: as fast as it can)
scenario() {
	local name=$1 wdb=$2 qdb=$3 timeout_ms=$4 nwait=$5 think_ms=$6
	local log=$DIR/$name pids=() started
	reset_run
	if [ "$nwait" = 0 ]; then
		echo "== ($name) 1 writer alone, $(writer_label "$think_ms"), pool_size $(pool_desc "$wdb" "$qdb")"
	else
		echo "== ($name) $nwait waiters, wait() timeout $(timeout_label "$nwait" "$timeout_ms"), pool_size $(pool_desc "$wdb" "$qdb"); 1 writer, $(writer_label "$think_ms")"
	fi
	: >"$log.samples"
	rm -f "$log.samples.stop"
	sampler "$log.samples" "$wdb $qdb" &
	local sampler_pid=$!
	started=$(date +%s.%N)
	if [ "$nwait" -gt 0 ]; then
		"$PGBIN"/pgbench -n "${bouncer_opts[@]}" -c "$nwait" -j 1 -T $((SECS + 2)) \
			-D timeout_ms="$timeout_ms" -f "$DIR/waiter.sql" "$qdb" >"$log.waiters" 2>&1 &
		pids+=($!)
		sleep 1
	fi
	"$PGBIN"/pgbench -n "${bouncer_opts[@]}" -c 1 -T "$SECS" -D think_ms="$think_ms" -f "$DIR/writer.sql" "$wdb" \
		>"$log.writer" 2>&1 || {
		cat "$log.writer" >&2
		exit 1
	}
	if [ "$nwait" -gt 0 ]; then
		# once the waiters' run time is over, one more row wakes those that
		# are asleep in wait() so that they finish now, not at their timeout
		sleep "$(awk -v s="$started" -v now="$(date +%s.%N)" -v secs="$SECS" \
			'BEGIN { d = s + secs + 3.2 - now; print (d > 0 ? d : 0) }')"
		psql_q -c "INSERT INTO events (payload) VALUES ('end')" >/dev/null
		wait "${pids[@]}" || {
			cat "$log.waiters" >&2
			exit 1
		}
	fi
	touch "$log.samples.stop"
	wait "$sampler_pid"
	# the final drain, on a direct connection: whatever the waiters left
	psql_q -o /dev/null -c "
		WITH c AS (SELECT 'w' || i AS consumer FROM generate_series(0, $nwait - 1) i),
		     page AS (SELECT c.consumer, r.seq, r.\"row\" FROM c, stream_seq.read('events', c.consumer, 1000000) r),
		     ins AS (INSERT INTO applied (consumer, seq, ins_at, t0, woke)
		             SELECT consumer, seq, (\"row\"->>'ins_at')::timestamptz, 0, 0 FROM page
		             RETURNING consumer, seq)
		SELECT stream_seq.advance('events', consumer, max(seq)) FROM ins GROUP BY consumer"
	summarize "$name" "$wdb" "$qdb" "$timeout_ms" "$nwait" "$think_ms" "$log"
}

summarize() {
	local name=$1 wdb=$2 qdb=$3 timeout_ms=$4 nwait=$5 think_ms=$6 log=$7 tps samples
	tps=$(sed -n 's/^tps = \([0-9.]*\) .*/\1/p' "$log.writer")
	# samples: "asleep-in-wait queued"; share of samples with a queued client
	samples=$(awk '{ n++; w += $1; if ($2 > 0) q++ } END { printf "%d|%.1f|%d", n, n ? w / n : 0, q }' "$log.samples")
	psql_q -At -F'|' -v tps="$tps" -v samples="$samples" -v name="$name" \
		-v pool="$(pool_desc "$wdb" "$qdb")" -v tlabel="$(timeout_label "$nwait" "$timeout_ms")" \
		-v wlabel="$(writer_label "$think_ms")" -v nwait="$nwait" \
		>>"$RESULTS" <<-'EOF'
		WITH r AS (SELECT start_seq FROM run),
		w AS (SELECT ins_at, extract(epoch FROM ins_at - lag(ins_at) OVER (ORDER BY ins_at)) AS gap
		        FROM events, r WHERE seq > r.start_seq AND payload = 'w'),
		firsts AS (SELECT DISTINCT ON (consumer, t0) t0, woke, extract(epoch FROM ins_at) AS ins,
		                  extract(epoch FROM applied_at) AS app
		             FROM applied WHERE t0 > 0 ORDER BY consumer, t0, seq),
		wk AS (SELECT (woke - ins) * 1000 AS to_return, (app - ins) * 1000 AS to_applied
		         FROM firsts WHERE ins > t0 AND ins <= woke),
		dl AS (SELECT extract(epoch FROM applied_at - ins_at) * 1000 AS ms FROM applied WHERE t0 > 0),
		expected AS (SELECT count(*) AS n FROM events, r WHERE seq > r.start_seq),
		per AS (SELECT c.consumer,
		               (SELECT count(*) FROM applied a WHERE a.consumer = c.consumer) AS rows,
		               (SELECT count(DISTINCT a.seq) FROM applied a WHERE a.consumer = c.consumer) AS distinct_rows,
		               (SELECT count(*) FROM events e, r WHERE e.seq > r.start_seq
		                   AND NOT EXISTS (SELECT FROM applied a WHERE a.consumer = c.consumer AND a.seq = e.seq)) AS missing,
		               (SELECT count(*) FROM applied a, r WHERE a.consumer = c.consumer AND a.seq <= r.start_seq) AS foreign_rows,
		               (SELECT count(*) FROM applied a WHERE a.consumer = c.consumer AND a.t0 = 0) AS drained
		          FROM stream_seq.consumers c WHERE c.stream = 'events'::regclass)
		SELECT :'name', :'pool', :'tlabel', :'wlabel',
		       round(:tps::numeric, CASE WHEN :tps::numeric < 10 THEN 1 ELSE 0 END), (SELECT count(*) FROM w),
		       coalesce(round((SELECT max(gap) FROM w)::numeric, 2), 0),
		       coalesce(round((SELECT sum(gap) FROM w WHERE gap >= 1)::numeric, 1), 0),
		       (SELECT count(*) FROM wk),
		       coalesce((SELECT round(percentile_disc(0.5) WITHIN GROUP (ORDER BY to_return), 2) FROM wk)::text, '-'),
		       coalesce((SELECT round(percentile_disc(0.99) WITHIN GROUP (ORDER BY to_return), 2) FROM wk)::text, '-'),
		       coalesce((SELECT round(percentile_disc(0.5) WITHIN GROUP (ORDER BY to_applied), 2) FROM wk)::text, '-'),
		       coalesce((SELECT round(percentile_disc(0.99) WITHIN GROUP (ORDER BY to_applied), 2) FROM wk)::text, '-'),
		       coalesce((SELECT round(percentile_disc(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 1) FROM dl)::text, '-'),
		       coalesce((SELECT round(percentile_disc(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 1) FROM dl)::text, '-'),
		       split_part(:'samples', '|', 1), split_part(:'samples', '|', 2), split_part(:'samples', '|', 3),
		       CASE WHEN :nwait = 0 THEN '-'
		            WHEN (SELECT bool_and(rows = (SELECT n FROM expected) AND distinct_rows = rows
		                                  AND missing = 0 AND foreign_rows = 0) FROM per)
		                 AND (SELECT count(*) FROM per) = :nwait
		            THEN format('yes: %s rows x %s consumers, %s left for the drain',
		                        (SELECT n FROM expected), :nwait, (SELECT sum(drained) FROM per))
		            ELSE (SELECT 'NO: ' || string_agg(format('%s rows=%s distinct=%s missing=%s foreign=%s',
		                                                     consumer, rows, distinct_rows, missing, foreign_rows), '; ')
		                         || format(' (expected %s)', (SELECT n FROM expected)) FROM per)
		       END
	EOF
	grep -h "rror" "$log.writer" "$log.waiters" 2>/dev/null | sort | uniq -c | head -5 || true
}

timeout_label() {
	if [ "$1" = 0 ]; then
		echo "-"
	elif [ "$2" -lt 1000 ]; then
		echo "$2 ms"
	else
		echo "$(($2 / 1000)) s"
	fi
}

writer_label() {
	if [ "$1" = 0 ]; then echo "nonstop"; else echo "$1 ms pause"; fi
}

pool_desc() {
	case "$1 $2" in
	"pool_eq pool_eq") echo "$WAITERS shared" ;;
	"pool_more pool_more") echo "$((WAITERS + 2)) shared" ;;
	"writers waiters") echo "writer 2 / waiters $WAITERS" ;;
	*) echo "$1" ;;
	esac
}

echo "command: PGBIN=$PGBIN bench/wait_pooler.sh $WAITERS $SECS"
echo "machine: $(nproc) CPUs, $(uname -sr), $("$PGBIN"/postgres --version), load average $(cut -d' ' -f1-3 /proc/loadavg)"
scenario 0 pool_eq pool_eq 0 0 0
scenario a pool_eq pool_eq 5000 "$WAITERS" 0
scenario a2 pool_eq pool_eq 5000 "$WAITERS" 10
scenario b pool_more pool_more 5000 "$WAITERS" 0
scenario b2 pool_more pool_more 5000 "$WAITERS" 10
scenario c pool_eq pool_eq 100 "$WAITERS" 0
scenario c2 pool_eq pool_eq 100 "$WAITERS" 10
scenario d writers waiters 5000 "$WAITERS" 0

echo
echo "Writer: 1 pgbench client, 1 row per transaction, for $SECS s, nonstop or pausing 10 ms between inserts."
echo "'paused': time in pauses of 1 s or more between two inserts.  Latencies in ms from the row's INSERT"
echo "(clock_timestamp() stored in the row); wake-ups: wait() calls whose first row to apply was inserted after"
echo "the call began; 'return': wait() returned (server clock); 'applied': the next statement, applying the page,"
echo "began; 'all rows': every row, from its INSERT to the statement that applied it.  Sampled twice a second:"
echo "server connections asleep in wait() (mean), and samples in which a client was queued at pgbouncer."
printf '%-4s %-20s %-7s %-12s %8s %7s %9s %7s %8s %15s %15s %15s %7s %7s  %s\n' \
	"" "pool_size" "timeout" "writer" "writer/s" "inserts" "max pause" "paused" "wake-ups" \
	"return p50/p99" "applied p50/99" "all rows p50/99" "asleep" "queued" "each row applied once"
while IFS='|' read -r name pool tmo wl tps ins maxgap paused wk r50 r99 a50 a99 d50 d99 ns nw nq once; do
	printf '%-4s %-20s %-7s %-12s %8s %7s %8ss %6ss %8s %15s %15s %15s %7s %7s  %s\n' \
		"($name)" "$pool" "$tmo" "$wl" "$tps" "$ins" "$maxgap" "$paused" "$wk" \
		"$r50 / $r99" "$a50 / $a99" "$d50 / $d99" "$nw" "$nq/$ns" "$once"
done <"$RESULTS"

# --- prepared statements through transaction pooling ------------------------
# Entry "prep" (pool_size WAITERS + 2), which only these runs use.
protocol_run() {
	local mode=$1 log=$DIR/prep_$1 pid
	reset_run
	"$PGBIN"/pgbench -n -M "$mode" "${bouncer_opts[@]}" -c "$WAITERS" -j 1 -T 5 -D timeout_ms=500 \
		-f "$DIR/waiter.sql" prep >"$log.waiters" 2>&1 &
	pid=$!
	sleep 0.5
	"$PGBIN"/pgbench -n -M "$mode" "${bouncer_opts[@]}" -c 1 -T 4 -D think_ms=0 -f "$DIR/writer.sql" prep >"$log.writer" 2>&1 || true
	wait "$pid" || true
	echo "-- pgbench -M $mode ($WAITERS waiters + 1 writer, 4 s):"
	echo "   writer: $(sed -n 's/^number of transactions actually processed: /transactions /p' "$log.writer"), waiters: $(sed -n 's/^number of transactions actually processed: /transactions /p' "$log.waiters")"
	echo "   clients aborted: $(cat "$log.writer" "$log.waiters" | grep -c 'aborted in command' || true)"
	cat "$log.writer" "$log.waiters" | sed -n 's/.*\(ERROR: .*\)/\1/p' | sort | uniq -c | sed 's/^/   /' | head -6
	psql_q -At -c "
		SELECT format('   rows inserted %s; applied by the consumers: %s (distinct per consumer: %s)',
		       (SELECT count(*) FROM events, run WHERE seq > start_seq),
		       (SELECT count(*) FROM applied),
		       (SELECT string_agg(n::text, ', ') FROM (SELECT count(DISTINCT seq) n FROM applied GROUP BY consumer) x))"
}
echo
echo "== prepared statements through pool_mode = transaction (entry \"prep\", pool_size = $((WAITERS + 2)))"
protocol_run extended
protocol_run prepared

# named statements of the same name but other text: the writer's P_0 is
# its INSERT, the readers' P_0 is a SELECT, both without parameters (entry
# "prep_mix": a fresh pool, no statements left by earlier clients)
reset_run
echo "SELECT count(*) FROM events;" >"$DIR/reader.sql"
"$PGBIN"/pgbench -n -M prepared "${bouncer_opts[@]}" -c "$WAITERS" -j 1 -T 4 -f "$DIR/reader.sql" prep_mix \
	>"$DIR/prep_mix.readers" 2>&1 &
bg=$!
"$PGBIN"/pgbench -n -M prepared "${bouncer_opts[@]}" -c 1 -T 4 -D think_ms=0 -f "$DIR/writer.sql" prep_mix >"$DIR/prep_mix.writer" 2>&1 || true
wait "$bg" || true
echo "-- pgbench -M prepared on a fresh pool (entry \"prep_mix\"), 1 writer (P_0: its INSERT) + $WAITERS readers (P_0: SELECT count(*)), 4 s:"
echo "   writer: $(sed -n 's/^number of transactions actually processed: /transactions /p' "$DIR/prep_mix.writer")," \
	"readers: $(sed -n 's/^number of transactions actually processed: /transactions /p' "$DIR/prep_mix.readers")," \
	"rows the writer's INSERT added: $(psql_q -At -c "SELECT count(*) FROM events, run WHERE seq > start_seq AND payload = 'w'")"
echo "   clients aborted: $(cat "$DIR/prep_mix.writer" "$DIR/prep_mix.readers" | grep -c 'aborted in command' || true)"
cat "$DIR/prep_mix.writer" "$DIR/prep_mix.readers" | sed -n 's/.*\(ERROR: .*\)/\1/p' | sort | uniq -c | sed 's/^/   /' | head -6

# SQL-level PREPARE in one client session, EXECUTE 200 times while other
# clients keep the pool busy
"$PGBIN"/pgbench -n "${bouncer_opts[@]}" -c "$((WAITERS + 2))" -j 1 -T 4 -D think_ms=0 -f "$DIR/writer.sql" prep >/dev/null 2>&1 &
bg=$!
sleep 0.3
{
	echo "PREPARE ins_sql(text) AS INSERT INTO events (payload) VALUES (\$1);"
	for _ in $(seq 200); do echo "EXECUTE ins_sql('sql');"; done
} | "$PGBIN"/psql -X -q "${bouncer_opts[@]}" -d prep >"$DIR/prep_sql.out" 2>&1 || true
wait "$bg" || true
echo "-- SQL PREPARE once, then EXECUTE 200 times in the same client session, next to $((WAITERS + 2)) busy clients:"
echo "   EXECUTE that failed: $(grep -c 'ERROR' "$DIR/prep_sql.out" || true) of 200"
sed -n 's/.*\(ERROR: .*\)/\1/p' "$DIR/prep_sql.out" | sort | uniq -c | sed 's/^/   /' | head -3

# --- LISTEN / NOTIFY ----------------------------------------------------------
# A listener LISTENs, stays idle 2 s (as a client waiting for notifications
# does), then runs one query; 0.6 s in, another client commits an insert
# with stream_seq.notify = on.  Who receives the notification?
notify_run() {
	local host=$1 port=$2 dbname=$3
	{
		echo "LISTEN stream_seq;"
		sleep 2
		echo "SELECT 1;"
	} | "$PGBIN"/psql -X -At -h "$host" -p "$port" -U postgres -d "$dbname" >"$DIR/listener.out" 2>&1 &
	local lpid=$!
	sleep 0.6
	"$PGBIN"/psql -X -At -h "$host" -p "$port" -U postgres -d "$dbname" -c "BEGIN" \
		-c "SET LOCAL stream_seq.notify = on" -c "INSERT INTO events (payload) VALUES ('notify')" \
		-c "COMMIT" >"$DIR/notifier.out" 2>&1
	wait "$lpid"
	echo "   listener received: $(grep -c 'Asynchronous notification' "$DIR/listener.out" || true);" \
		"the inserting client (which never ran LISTEN) received: $(grep -c 'Asynchronous notification' "$DIR/notifier.out" || true)"
}
echo
echo "== LISTEN stream_seq, stream_seq.notify = on"
echo "-- direct connection:"
notify_run "$DIR" "$PORT" postgres
echo "-- through pgbouncer, pool_mode = transaction (entry \"notify\", pool_size = 2):"
notify_run 127.0.0.1 "$BPORT" notify
echo "-- through pgbouncer, an entry with pool_mode = session (\"notify_session\", pool_size = 2):"
notify_run 127.0.0.1 "$BPORT" notify_session

echo
echo "total time: $(($(date +%s) - T_START)) s"
