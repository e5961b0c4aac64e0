#!/usr/bin/env bash
# group_bench.sh: consumer groups (stream_seq.create_group): how many rows
# a group's workers apply per second, 1 worker against 4, and how soon a
# worker waiting in stream_seq.wait() reads a row after its writer's commit.
#
#   bench/group_bench.sh [ROWS] [LATENCY_SECONDS]     default: 100000 rows, 15 s
#
# Starts a throwaway cluster (bench/lib.sh: socket only, the library
# preloaded, run as "postgres" when started as root; the extension built
# and installed first unless STREAM_SEQ_SKIP_BUILD is set).  "make bench"
# runs it as its figure 9 on its own cluster instead (GROUP_BENCH_EXISTING
# set: the cluster of PGHOST/PGPORT, no build), with GROUP_BENCH_RAW naming
# the file its raw lines are appended to.
#
# A stream table group_ev (id, k int: 1,000 keys, payload) and a group "g"
# of 8 slots keyed by k.  The workers are Python processes (psycopg2, one
# connection each, autocommit with explicit transactions) that loop:
#   claim (lease 10 s, every loop); then for each slot held, one
#   transaction: read_slot() a page of 100 rows and insert them into the
#   oracle table group_applied (primary key seq; read_at = clock_timestamp()
#   as the row is applied), advance_slot() to the page's last row, COMMIT.
#
# Throughput: ROWS rows are inserted ahead (random keys, then VACUUM
# ANALYZE); the group, reset to 0, is drained by 1 worker, then by 4
# (GROUP_BENCH_REPS rounds of both, default 2; the oracle is emptied and the
# group reset before each run).  Rows per second = ROWS / (last row applied
# - the moment the workers were started, their connection included);
# median over the rounds, and the ratio 4 workers / 1.  Each run checks that
# every row was applied exactly once.
#
# Wake-up latency: 4 workers hold 2 slots each; when none of their slots had
# a row, they call stream_seq.wait() before their next loop.  One writer
# inserts one row per transaction, a random key, pausing 10 ms between
# transactions, for LATENCY_SECONDS, and notes when it sent each COMMIT and
# when the COMMIT returned (the client's clock is the server's: same
# machine).  Latency = the row's read_at - the writer's COMMIT (returned;
# and sent), median and p99 over every row, and the range of the per-slot
# medians.  Three runs:
#   slot_position  wait(stream, the lowest position of the slots held,
#                  1 s), claim every loop.  A slot's position is its own
#                  last row, so once any other slot has a later row, wait()
#                  returns at once: the worker polls;
#   horizon        wait(stream, the horizon seen just before the worker read
#                  its slots - 1, 1 s), claim every loop: every row below
#                  that horizon was visible to those reads, so wait()
#                  returns only for a later commit (of any slot: the worker
#                  then reads its slots and may find nothing);
#   horizon, claim every 2 s: the same, renewing the 10 s lease every 2 s
#                  instead of every loop (claim() locks every slot of the
#                  group, so the 4 workers a commit wakes queue on each
#                  other's claims).
# For each: wait() calls per second per worker, and reads that found
# nothing per row applied (the cost of waking workers whose slots got no
# row).
#
# Environment: PGBIN (default /usr/lib/postgresql/15/bin), GROUP_BENCH_PORT
# (standalone cluster, default 55550), GROUP_BENCH_REPS (2),
# GROUP_BENCH_EXISTING, GROUP_BENCH_RAW, STREAM_SEQ_SKIP_BUILD.
set -euo pipefail
# lib.sh sets PGBIN to Debian's directory: keep the caller's
PGBIN_WANTED=${PGBIN:-/usr/lib/postgresql/15/bin}
. "$(dirname "$0")/lib.sh"
PGBIN=$PGBIN_WANTED
PG_CONFIG=$PGBIN/pg_config

ROWS=${1:-100000}
LAT_SECS=${2:-15}
REPS=${GROUP_BENCH_REPS:-2}
PORT=${GROUP_BENCH_PORT:-55550}
RAW_OUT=${GROUP_BENCH_RAW:-}
T_START=$(date +%s)

if [ -z "${GROUP_BENCH_EXISTING:-}" ]; then
	need_packages postgresql-15 python3-psycopg2
	[ -n "${STREAM_SEQ_SKIP_BUILD:-}" ] || need_packages postgresql-server-dev-15 make gcc
	build_install
	start_cluster group_bench "$PORT" "max_connections = 50"
	WORK=$CLUSTER_DIR
else
	WORK=$(mktemp -d /tmp/stream_seq_group_bench.XXXXXX)
	on_exit() {
		local rc=$? pid
		for pid in $(jobs -pr); do
			kill "$pid" 2>/dev/null || true
		done
		rm -rf "$WORK"
		return $rc
	}
	trap on_exit EXIT
	trap 'exit 130' INT TERM
fi

psql_q -o /dev/null <<'EOF'
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
DROP TABLE IF EXISTS group_ev, group_applied, group_commits, group_last;
CREATE TABLE group_ev (id bigserial PRIMARY KEY, k int NOT NULL, payload text NOT NULL);
SELECT stream_seq.enable('group_ev');
-- what the workers applied, and when
CREATE TABLE group_applied (seq bigint PRIMARY KEY, id bigint NOT NULL, k int NOT NULL,
                            worker text NOT NULL,
                            read_at timestamptz NOT NULL DEFAULT clock_timestamp());
-- the latency writer's commits: sent and returned, epoch seconds
CREATE TABLE group_commits (id bigint PRIMARY KEY, sent float8 NOT NULL, returned float8 NOT NULL);
EOF

cat >"$WORK/group_client.py" <<'EOF'
"""The workers and the writer of bench/group_bench.sh (see there).

  group_client.py worker NAME IDLE CLAIM_EVERY STOP_FILE STATS_FILE
      IDLE: drain (exit once every slot is at its last row),
            slot_position or horizon (how to wait when its slots had no row)
      CLAIM_EVERY: seconds between claims (lease renewals) while it holds
            slots; 0: every loop
  group_client.py writer SECONDS PAUSE_MS
"""
import os
import random
import sys
import time

import psycopg2

STREAM = "group_ev"
GROUP = "g"
PAGE = 100
LEASE = "10 s"
APPLY = """
WITH page AS (SELECT seq, "row" FROM stream_seq.read_slot(%(stream)s, %(group)s, %(slot)s, %(token)s, %(page)s)),
     ins AS (INSERT INTO group_applied (seq, id, k, worker)
             SELECT seq, ("row"->>'id')::bigint, ("row"->>'k')::int, %(name)s FROM page ORDER BY seq
             RETURNING seq)
SELECT count(*), max(seq) FROM ins"""


def connect():
    conn = psycopg2.connect("")
    conn.autocommit = True
    return conn


def worker(name, idle, claim_every, stop_file, stats_file):
    claim_every = float(claim_every)
    conn = connect()
    cur = conn.cursor()
    stats = dict(loops=0, claims=0, waits=0, empty_reads=0, pages=0, rows=0, fenced=0, errors=0)
    held = []
    claimed = 0.0
    while not os.path.exists(stop_file):
        stats["loops"] += 1
        if not held or time.time() - claimed >= claim_every:
            cur.execute("SELECT slot, token, stream_seq.horizon(%s) "
                        "FROM stream_seq.claim(%s, %s, %s, %s)", (STREAM, STREAM, GROUP, name, LEASE))
            held = cur.fetchall()
            claimed = time.time()
            stats["claims"] += 1
        elif idle == "horizon":
            cur.execute("SELECT stream_seq.horizon(%s)", (STREAM,))
            h = cur.fetchone()[0]
            held = [(slot, token, h) for slot, token, _ in held]
        got = 0
        for slot, token, _ in held:
            try:
                cur.execute("BEGIN")
                cur.execute(APPLY, dict(stream=STREAM, group=GROUP, slot=slot, token=token,
                                        page=PAGE, name=name))
                n, last = cur.fetchone()
                if n:
                    cur.execute("SELECT stream_seq.advance_slot(%s, %s, %s, %s, %s)",
                                (STREAM, GROUP, slot, token, last))
                cur.execute("COMMIT")
            except psycopg2.Error as e:
                cur.execute("ROLLBACK")
                stats["fenced" if e.pgcode == "SS001" else "errors"] += 1
                if e.pgcode not in ("SS001", "40P01"):
                    raise
                held = []
                break
            if n:
                stats["pages"] += 1
                stats["rows"] += n
                got += n
            else:
                stats["empty_reads"] += 1
        if got:
            continue
        if idle == "drain":
            cur.execute("SELECT count(*) FROM stream_seq.consumer_slots s JOIN group_last l USING (slot) "
                        "WHERE s.stream = %s::regclass AND s.consumer = %s AND s.position < l.last",
                        (STREAM, GROUP))
            if cur.fetchone()[0] == 0:
                break
            time.sleep(0.002)
        elif not held:
            time.sleep(0.01)
        else:
            if idle == "slot_position":
                cur.execute("SELECT min(stream_seq.slot_position(%s, %s, s)) FROM unnest(%s::int[]) s",
                            (STREAM, GROUP, [h[0] for h in held]))
                after = cur.fetchone()[0]
            else:
                after = held[0][2] - 1
            cur.execute("SELECT stream_seq.wait(%s, %s, '1 s')", (STREAM, after))
            stats["waits"] += 1
    cur.execute("SELECT stream_seq.release(%s, %s, %s)", (STREAM, GROUP, name))
    with open(stats_file, "a") as fh:
        fh.write("%s %s\n" % (name, " ".join("%s=%d" % kv for kv in sorted(stats.items()))))


def writer(seconds, pause_ms):
    conn = psycopg2.connect("")
    cur = conn.cursor()
    commits = []
    end = time.time() + seconds
    while time.time() < end:
        cur.execute("INSERT INTO group_ev (k, payload) VALUES (%s, 'w') RETURNING id",
                    (random.randint(1, 1000),))
        row_id = cur.fetchone()[0]
        sent = time.time()
        conn.commit()
        commits.append((row_id, sent, time.time()))
        time.sleep(pause_ms / 1000.0)
    cur.executemany("INSERT INTO group_commits VALUES (%s, %s, %s)", commits)
    conn.commit()


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        worker(*sys.argv[2:7])
    else:
        writer(float(sys.argv[2]), float(sys.argv[3]))
EOF

STATS=$WORK/worker_stats
RESULTS=$WORK/results.txt
: >"$RESULTS"

# workers NAME_PREFIX N IDLE CLAIM_EVERY: start N workers in the
# background; their pids in WORKER_PIDS
workers() {
	local prefix=$1 n=$2 idle=$3 claim_every=$4 i
	WORKER_PIDS=()
	rm -f "$WORK/stop"
	for i in $(seq 1 "$n"); do
		"$PY" "$WORK/group_client.py" worker "$prefix$i" "$idle" "$claim_every" "$WORK/stop" "$STATS" &
		WORKER_PIDS+=($!)
	done
}

wait_workers() {
	local pid rc=0
	for pid in "${WORKER_PIDS[@]}"; do
		wait "$pid" || rc=1
	done
	if [ "$rc" != 0 ]; then
		echo "a worker failed" >&2
		exit 1
	fi
}

# the group, empty oracle, and no worker left from an earlier run
fresh_group() {
	psql_q -o /dev/null -c "TRUNCATE group_applied" \
		-c "SELECT stream_seq.reset('group_ev', 'g', $1)" \
		-c "DELETE FROM stream_seq.consumer_worker WHERE stream = 'group_ev'::regclass"
}

# "yes" if every row of group_ev above "after" was applied exactly once
applied_once() {
	psql_q -At -c "
		SELECT CASE WHEN (SELECT count(*) FROM group_ev WHERE seq > $1) = (SELECT count(*) FROM group_applied)
		             AND NOT EXISTS (SELECT FROM group_ev e WHERE seq > $1
		                              AND NOT EXISTS (SELECT FROM group_applied a WHERE a.seq = e.seq AND a.id = e.id))
		            THEN 'yes' ELSE 'NO' END"
}

echo "command: bench/group_bench.sh $ROWS $LAT_SECS (GROUP_BENCH_REPS=$REPS)"
echo "machine: $(nproc) CPUs, $(uname -sr), $("$PGBIN"/postgres --version), load average $(cut -d' ' -f1-3 /proc/loadavg)"

#
# Throughput: ROWS rows inserted ahead, drained by 1 worker, then by 4
#
echo "== inserting $ROWS rows (1,000 keys)"
psql_q -o /dev/null <<EOF
INSERT INTO group_ev (k, payload)
SELECT 1 + (random() * 999)::int, repeat('x', 40) FROM generate_series(1, $ROWS);
VACUUM ANALYZE group_ev;
SELECT stream_seq.create_group('group_ev', 'g', 'k', 8);
-- each slot's last row: the drained workers stop there
CREATE TABLE group_last AS
  SELECT stream_seq.slot_of(k::text, 8) AS slot, max(seq) AS last FROM group_ev GROUP BY 1;
EOF
# CPU time of the whole machine so far, from /proc/stat: "busy total" in
# clock ticks (busy: user, nice, system, irq, softirq; total adds idle and
# iowait), to report how many of the cores a run kept busy
cpu_ticks() {
	awk '/^cpu / { print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 }' /proc/stat
}
NCPU=$(nproc)
for rep in $(seq 1 "$REPS"); do
	for n in 1 4; do
		fresh_group 0
		: >"$STATS"
		t0=$(psql_q -At -c "SELECT extract(epoch FROM clock_timestamp())")
		read -r busy0 total0 < <(cpu_ticks)
		workers "t${n}_" "$n" drain 0
		wait_workers
		read -r busy1 total1 < <(cpu_ticks)
		cores=$(awk -v b=$((busy1 - busy0)) -v t=$((total1 - total0)) -v n="$NCPU" \
			'BEGIN { printf "%.2f", t ? n * b / t : 0 }')
		read -r secs rps < <(psql_q -At -F ' ' -c "
			SELECT round(extract(epoch FROM max(read_at)) - $t0, 3),
			       round(count(*) / (extract(epoch FROM max(read_at)) - $t0))
			  FROM group_applied")
		once=$(applied_once 0)
		fenced=$(awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^fenced=/) { sub(/fenced=/, "", $i); f += $i } } END { print f + 0 }' "$STATS")
		printf 'group_tput\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$rep" "$ROWS" "$secs" "$rps" "$once" "$fenced" "$cores" "$NCPU" >>"$RESULTS"
		echo "-- round $rep, $n worker(s): $ROWS rows in $secs s = $rps rows/s; each row applied once: $once; cores busy: $cores of $NCPU"
	done
done

#
# Wake-up latency: 4 waiting workers, 1 writer
#
for variant in slot_position:0 horizon:0 horizon:2; do
	idle=${variant%:*}
	claim_every=${variant#*:}
	head=$(psql_q -At -c "SELECT coalesce(stream_seq.head('group_ev'), 0)")
	fresh_group "$head"
	psql_q -o /dev/null -c "TRUNCATE group_commits"
	: >"$STATS"
	workers "l_" 4 "$idle" "$claim_every"
	sleep 3 # the workers share the slots out
	"$PY" "$WORK/group_client.py" writer "$LAT_SECS" 10
	sleep 1.5
	touch "$WORK/stop"
	wait_workers
	once=$(applied_once "$head")
	read -r waits empty < <(awk -v secs="$LAT_SECS" '
		{ for (i = 2; i <= NF; i++) { split($i, kv, "="); s[kv[1]] += kv[2] } n++ }
		END { printf "%.1f %.2f\n", s["waits"] / n / (secs + 4.5), (s["rows"] ? s["empty_reads"] / s["rows"] : 0) }' "$STATS")
	psql_q -At -F $'\t' -v idle="$idle" -v claim_every="$claim_every" -v waits="$waits" -v empty="$empty" -v once="$once" >>"$RESULTS" <<-'EOF'
		WITH l AS (SELECT stream_seq.slot_of(a.k::text, 8) AS slot,
		                  (extract(epoch FROM a.read_at) - c.returned) * 1000 AS after_return,
		                  (extract(epoch FROM a.read_at) - c.sent) * 1000 AS after_send
		             FROM group_applied a JOIN group_commits c USING (id)),
		     per_slot AS (SELECT slot, percentile_cont(0.5) WITHIN GROUP (ORDER BY after_return) AS p50
		                    FROM l GROUP BY slot)
		SELECT 'group_lat', :'idle', :'claim_every', count(*),
		       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY after_return)::numeric, 2),
		       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY after_return)::numeric, 2),
		       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY after_send)::numeric, 2),
		       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY after_send)::numeric, 2),
		       (SELECT round(min(p50)::numeric, 2) FROM per_slot),
		       (SELECT round(max(p50)::numeric, 2) FROM per_slot),
		       :'waits', :'empty', :'once'
		  FROM l
	EOF
	echo "-- wake-up latency, wait() after the $idle, claim $([ "$claim_every" = 0 ] && echo "every loop" || echo "every $claim_every s"): done"
done

[ -n "$RAW_OUT" ] && cat "$RESULTS" >>"$RAW_OUT"
# on a cluster of someone else's, leave nothing behind
[ -n "${GROUP_BENCH_EXISTING:-}" ] &&
	psql_q -o /dev/null -c "DROP TABLE group_ev, group_applied, group_commits, group_last"

echo
echo "Throughput: $ROWS rows inserted ahead, drained by the group's workers (8 slots, pages of 100 rows,"
echo "one transaction per page: read_slot, insert into the oracle, advance_slot).  rows/s = rows / (last"
echo "row applied - workers started)."
printf '%-8s %-8s %10s %10s  %s\n' workers round seconds "rows/s" "each row applied once"
awk -F'\t' '$1 == "group_tput" { printf "%-8s %-8s %10s %10s  %s\n", $2, $3, $5, $6, $7 }' "$RESULTS"
awk -F'\t' '$1 == "group_tput" { v[$2] = v[$2] " " $6 }
	function med(s,   a, n, i, j, t) { n = split(s, a, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
		return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
	END { m1 = med(v[1]); m4 = med(v[4]); printf "median: 1 worker %.0f rows/s, 4 workers %.0f rows/s, ratio 4/1 = %.2f\n", m1, m4, (m1 ? m4 / m1 : 0) }' "$RESULTS"
echo
echo "Wake-up latency: 4 workers (2 slots each), 1 writer, 1 row per transaction every ~10 ms for $LAT_SECS s;"
echo "ms from the writer's COMMIT (returned; sent) to the worker applying the row (read_at)."
printf '%-14s %-11s %6s %20s %20s %22s %12s %16s  %s\n' "wait() after" "claim" rows "p50/p99 (returned)" "p50/p99 (sent)" "per-slot p50 min-max" "waits/s/wkr" "empty reads/row" "each row applied once"
awk -F'\t' '$1 == "group_lat" { printf "%-14s %-11s %6s %20s %20s %22s %12s %16s  %s\n", $2, ($3 == 0 ? "every loop" : "every " $3 " s"), $4, $5 " / " $6, $7 " / " $8, $9 " - " $10, $11, $12, $13 }' "$RESULTS"
echo
echo "total time: $(($(date +%s) - T_START)) s"
