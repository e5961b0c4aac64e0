#!/usr/bin/env bash
# consumer_features_bench.sh: what the consumer features of 0.5.0 cost, each
# against the same work without it, side by side in one run:
#
#   bench/consumer_features_bench.sh [ROUNDS] [SECONDS]     default: 5 rounds, 8 s
#
# 1. The time column on the write path: 8 pgbench clients insert into a
#    stream without a time column and into one with, 1 row and 10 rows per
#    transaction, synchronous_commit on and off; the two tables alternate
#    within each round; median transactions/s and the ratio with/without,
#    and WAL bytes per row.
# 2. Retries in the worker loop: one worker (pgbench, one client) drains
#    ROWS rows of a plain consumer, 100 rows per transaction, each row
#    applied in a subtransaction of its own (as a worker that parks must):
#    without a due() call, with one every transaction, and with one every
#    transaction and 1 row in 100 failing once (parked, retried at once by
#    the policy).  Rows per second.
# 3. Wake-up latency with and without retries: one writer commits a row
#    every 10 ms for SECONDS; one worker waits in wait() after the horizon
#    when it found nothing, then reads and applies; latency is the time the
#    row was applied minus the time the commit took its number (the stream's
#    time column).  p50 and p99, without and with a due() call every loop.
# 4. Typed reads: one client pages through the stream with page() (jsonb)
#    and with page_rows() (the table's type), 100 rows a page; pages/s.
# 5. Resizing: one client reads a slot of a 4-slot group (read_slot(), 100
#    rows) with no resize pending and with a resize to 8 pending (the slot
#    is then read up to the fence); pages/s.
# 6. A retention run (apply_retention(), as the worker runs it) that
#    removes 10,000 rows of 20,000, and one that finds nothing to remove;
#    milliseconds.
#
# A throwaway cluster (bench/lib.sh; the extension built and installed first
# unless STREAM_SEQ_SKIP_BUILD is set).  Environment: PGBIN, CF_BENCH_PORT
# (default 55560), CF_BENCH_ROWS (default 50000).
set -euo pipefail
PGBIN_WANTED=${PGBIN:-/usr/lib/postgresql/15/bin}
. "$(dirname "$0")/lib.sh"
PGBIN=$PGBIN_WANTED
PG_CONFIG=$PGBIN/pg_config

ROUNDS=${1:-5}
SECS=${2:-8}
PORT=${CF_BENCH_PORT:-55560}
ROWS=${CF_BENCH_ROWS:-50000}
T_START=$(date +%s)

need_packages postgresql-15
[ -n "${STREAM_SEQ_SKIP_BUILD:-}" ] || need_packages postgresql-server-dev-15 make gcc
build_install
start_cluster consumer_features "$PORT" "max_connections = 50
autovacuum = off"
WORK=$CLUSTER_DIR
PGBENCH="as_pg $PGBIN/pgbench -n -h $PGHOST -p $PGPORT -U postgres postgres"

echo "command: bench/consumer_features_bench.sh $ROUNDS $SECS (CF_BENCH_ROWS=$ROWS)"
echo "machine: $(nproc) CPUs, $(uname -sr), $("$PGBIN"/postgres --version), load average $(cut -d' ' -f1-3 /proc/loadavg)"

psql_q -o /dev/null <<'EOF'
SET client_min_messages = warning;
CREATE EXTENSION stream_seq;
CREATE TABLE w_plain (id bigserial PRIMARY KEY, payload text NOT NULL);
SELECT stream_seq.enable('w_plain');
CREATE TABLE w_time (id bigserial PRIMARY KEY, payload text NOT NULL);
SELECT stream_seq.enable('w_time', time_column => 'committed_at');
EOF
for t in w_plain w_time; do
	for n in 1 10; do
		f=$WORK/ins_${t}_$n.sql
		echo "BEGIN;" >"$f"
		echo "INSERT INTO $t (payload) SELECT repeat('x', 40) FROM generate_series(1, $n);" >>"$f"
		echo "COMMIT;" >>"$f"
	done
done
chmod a+r "$WORK"/*.sql

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
lsn() { psql_q -At -c "SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn"; }

#
# 1. the time column on the write path
#
RES=$WORK/results
: >"$RES"
for sync in on off; do
	psql_q -o /dev/null -c "ALTER SYSTEM SET synchronous_commit = $sync" -c "SELECT pg_reload_conf()"
	for n in 1 10; do
		for round in $(seq 1 "$ROUNDS"); do
			for t in w_plain w_time; do
				l0=$(lsn)
				r0=$(psql_q -At -c "SELECT count(*) FROM $t")
				tps=$($PGBENCH -c 8 -j 2 -T "$SECS" -f "$WORK/ins_${t}_$n.sql" 2>/dev/null |
					awk '/^tps/ { print $3; exit }')
				l1=$(lsn)
				r1=$(psql_q -At -c "SELECT count(*) FROM $t")
				printf 'write\t%s\t%s\t%s\t%s\t%s\n' "$sync" "$n" "$t" "$tps" \
					"$(awk -v b=$((l1 - l0)) -v r=$((r1 - r0)) 'BEGIN { printf "%.1f", r ? b / r : 0 }')" >>"$RES"
			done
			psql_q -o /dev/null -c "CHECKPOINT"
		done
		echo "-- write path: synchronous_commit $sync, $n row(s) per transaction: done"
	done
done
psql_q -o /dev/null -c "ALTER SYSTEM RESET synchronous_commit" -c "SELECT pg_reload_conf()"

#
# 2. retries in the worker loop
#
psql_q -o /dev/null <<EOF
SET client_min_messages = warning;
CREATE TABLE r_ev (id bigserial PRIMARY KEY, payload text NOT NULL);
SELECT stream_seq.enable('r_ev', time_column => 'committed_at');
INSERT INTO r_ev (payload) SELECT CASE WHEN g % 100 = 0 THEN 'flaky' ELSE 'ok' END
  FROM generate_series(1, $ROWS) g;
VACUUM ANALYZE r_ev;
CREATE TABLE r_applied (seq bigint PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT clock_timestamp());
-- fail: whether flaky rows fail on their first delivery
CREATE TABLE r_mode (fail boolean NOT NULL);
INSERT INTO r_mode VALUES (false);
CREATE FUNCTION r_handle(seq bigint, r jsonb, failures int) RETURNS void
LANGUAGE plpgsql AS \$\$
BEGIN
    IF r->>'payload' = 'flaky' AND failures = 0 AND (SELECT fail FROM r_mode) THEN
        RAISE EXCEPTION 'flaky' USING ERRCODE = '22000';
    END IF;
    INSERT INTO r_applied (seq) VALUES (seq);
END;
\$\$;
-- one worker transaction: (the due retries,) then a page of 100 rows,
-- each row in a subtransaction, failures parked; returns the rows done
CREATE FUNCTION r_work(with_due boolean) RETURNS int
LANGUAGE plpgsql AS \$\$
DECLARE
    r record;
    last bigint;
    n int := 0;
BEGIN
    IF with_due THEN
        FOR r IN SELECT * FROM stream_seq.due('r_ev', 'c', 100) LOOP
            BEGIN
                PERFORM r_handle(r.seq, r."row", r.attempts);
            EXCEPTION WHEN data_exception THEN
                PERFORM stream_seq.park('r_ev', 'c', r.seq, SQLERRM);
            END;
            n := n + 1;
        END LOOP;
    END IF;
    FOR r IN SELECT * FROM stream_seq.read('r_ev', 'c', 100) LOOP
        BEGIN
            PERFORM r_handle(r.seq, r."row", 0);
        EXCEPTION WHEN data_exception THEN
            PERFORM stream_seq.park('r_ev', 'c', r.seq, SQLERRM);
        END;
        last := r.seq;
        n := n + 1;
    END LOOP;
    IF last IS NOT NULL THEN
        PERFORM stream_seq.advance('r_ev', 'c', last);
    END IF;
    RETURN n;
END;
\$\$;
SELECT stream_seq.create_consumer('r_ev', 'c');
SELECT stream_seq.set_retry_policy('r_ev', 'c', 3, '0 seconds', 1, '0 seconds');
EOF
echo "SELECT r_work(:with_due);" >"$WORK/drain.sql"
chmod a+r "$WORK/drain.sql"
pages=$(((ROWS + 99) / 100 + 2))
for round in $(seq 1 "$ROUNDS"); do
	for variant in none:false:false due:true:false due_1pct_fail:true:true; do
		IFS=: read -r name with_due fail <<<"$variant"
		psql_q -o /dev/null -c "TRUNCATE r_applied" -c "UPDATE r_mode SET fail = $fail" \
			-c "SELECT stream_seq.reset('r_ev', 'c', 0)" \
			-c "DELETE FROM stream_seq.parked WHERE consumer = 'c'"
		t0=$(date +%s.%N)
		$PGBENCH -c 1 -t "$pages" -D with_due="$with_due" -f "$WORK/drain.sql" >/dev/null
		# what is left: retries (due at once)
		while [ "$(psql_q -At -c "SELECT count(*) FROM stream_seq.parked WHERE consumer = 'c' AND NOT resolved")" != 0 ]; do
			psql_q -At -o /dev/null -c "SELECT r_work(true)"
		done
		t1=$(date +%s.%N)
		got=$(psql_q -At -c "SELECT count(*) FROM r_applied")
		[ "$got" = "$ROWS" ] || { echo "drain $name: $got rows applied, not $ROWS" >&2; exit 1; }
		printf 'drain\t%s\t%s\n' "$name" "$(awk -v r="$ROWS" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", r / (b - a) }')" >>"$RES"
	done
done
echo "-- worker loop with and without retries: done"

#
# 3. wake-up latency with and without a due() call every loop
#
cat >"$WORK/lat_worker.sql" <<'EOF'
SELECT stream_seq.horizon('r_ev') - 1 AS seen \gset
SELECT r_work(:with_due) AS done \gset
\if :done
\else
SELECT stream_seq.wait('r_ev', :seen, '1 s');
\endif
EOF
echo "INSERT INTO r_ev (payload) VALUES ('ok');" >"$WORK/lat_writer.sql"
chmod a+r "$WORK"/*.sql
for variant in none:false due:true; do
	IFS=: read -r name with_due <<<"$variant"
	head=$(psql_q -At -c "SELECT stream_seq.horizon('r_ev') - 1")
	psql_q -o /dev/null -c "UPDATE r_mode SET fail = false" -c "SELECT stream_seq.reset('r_ev', 'c', $head)"
	$PGBENCH -c 1 -T $((SECS + 2)) -D with_due="$with_due" -f "$WORK/lat_worker.sql" >/dev/null &
	wpid=$!
	sleep 1
	$PGBENCH -c 1 -T "$SECS" -R 100 -f "$WORK/lat_writer.sql" >/dev/null
	wait "$wpid"
	psql_q -At -F $'\t' -v name="$name" -v head="$head" >>"$RES" <<-'EOF'
		SELECT 'latency', :'name', count(*),
		       round(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms)::numeric, 2),
		       round(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)::numeric, 2)
		  FROM (SELECT extract(epoch FROM a.applied_at - e.committed_at) * 1000 AS ms
		          FROM r_ev e JOIN r_applied a USING (seq) WHERE e.seq > :head) x
	EOF
done
echo "-- wake-up latency: done"

#
# 4. typed reads against jsonb
#
echo "SELECT count(*) FROM stream_seq.page('r_ev', (random() * $ROWS)::bigint, 100);" >"$WORK/page_jsonb.sql"
echo "SELECT count(*) FROM stream_seq.page_rows(NULL::r_ev, (random() * $ROWS)::bigint, 100);" >"$WORK/page_typed.sql"
chmod a+r "$WORK"/*.sql
for round in $(seq 1 "$ROUNDS"); do
	for v in jsonb typed; do
		tps=$($PGBENCH -c 1 -T 4 -f "$WORK/page_$v.sql" 2>/dev/null | awk '/^tps/ { print $3; exit }')
		printf 'page\t%s\t%s\n' "$v" "$tps" >>"$RES"
	done
done
echo "-- typed reads: done"

#
# 5. resizing: the worker's read_slot() with and without a resize pending
#
psql_q -o /dev/null <<'EOF'
SET client_min_messages = warning;
CREATE TABLE g_ev (id bigserial PRIMARY KEY, k int NOT NULL);
SELECT stream_seq.enable('g_ev');
INSERT INTO g_ev (k) SELECT g % 1000 FROM generate_series(1, 20000) g;
VACUUM ANALYZE g_ev;
SELECT stream_seq.create_group('g_ev', 'g', 'k', 4);
EOF
for round in $(seq 1 "$ROUNDS"); do
	for v in none pending; do
		if [ "$v" = pending ]; then
			psql_q -At -o /dev/null -c "SELECT stream_seq.resize_group('g_ev', 'g', 8)"
		else
			psql_q -At -o /dev/null -c "SELECT stream_seq.resize_group('g_ev', 'g', 4)"
		fi
		token=$(psql_q -At -c "SELECT token FROM stream_seq.claim('g_ev', 'g', 'bench', '1 hour') WHERE slot = 0")
		echo "SELECT count(*) FROM stream_seq.read_slot('g_ev', 'g', 0, $token, 100);" >"$WORK/slot_$v.sql"
		chmod a+r "$WORK/slot_$v.sql"
		tps=$($PGBENCH -c 1 -T 4 -f "$WORK/slot_$v.sql" 2>/dev/null | awk '/^tps/ { print $3; exit }')
		printf 'slot\t%s\t%s\n' "$v" "$tps" >>"$RES"
	done
done
psql_q -At -o /dev/null -c "SELECT stream_seq.resize_group('g_ev', 'g', 4)"
echo "-- read_slot() with and without a resize pending: done"

#
# 6. a retention run: 10,000 rows to remove, then nothing to remove
#
psql_q -o /dev/null <<'EOF'
SET client_min_messages = warning;
CREATE TABLE k_ev (id bigserial PRIMARY KEY, payload text NOT NULL);
SELECT stream_seq.enable('k_ev');
INSERT INTO k_ev (payload) SELECT 'x' FROM generate_series(1, 20000);
SELECT stream_seq.set_retention('k_ev', keep_rows => 10000);
EOF
for kind in remove_10000 nothing; do
	ms=$(psql_q -At -c "SELECT round(extract(epoch FROM clock_timestamp() - now()) * 1000, 1) FROM stream_seq.apply_retention('k_ev') r")
	printf 'retention\t%s\t%s\n' "$kind" "$ms" >>"$RES"
done
echo "-- retention runs: done"

echo
echo "1. The time column on the write path: 8 clients, $SECS s per run, $ROUNDS rounds (medians)"
printf '%-18s %-6s %14s %14s %8s %16s %16s\n' synchronous_commit rows "tps without" "tps with" ratio "WAL/row without" "WAL/row with"
for sync in on off; do
	for n in 1 10; do
		a=$(awk -F'\t' -v s=$sync -v n=$n '$1 == "write" && $2 == s && $3 == n && $4 == "w_plain" { print $5 }' "$RES" | median)
		b=$(awk -F'\t' -v s=$sync -v n=$n '$1 == "write" && $2 == s && $3 == n && $4 == "w_time" { print $5 }' "$RES" | median)
		wa=$(awk -F'\t' -v s=$sync -v n=$n '$1 == "write" && $2 == s && $3 == n && $4 == "w_plain" { print $6 }' "$RES" | median)
		wb=$(awk -F'\t' -v s=$sync -v n=$n '$1 == "write" && $2 == s && $3 == n && $4 == "w_time" { print $6 }' "$RES" | median)
		printf '%-18s %-6s %14.0f %14.0f %8.2f %16s %16s\n' "$sync" "$n" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { print a ? b / a : 0 }')" "$wa" "$wb"
	done
done
echo
echo "2. One worker draining $ROWS rows, 100 per transaction, each in a subtransaction (rows/s, medians of $ROUNDS)"
for name in none due due_1pct_fail; do
	printf '%-16s %10.0f\n' "$name" "$(awk -F'\t' -v n=$name '$1 == "drain" && $2 == n { print $3 }' "$RES" | median)"
done
echo
echo "3. Wake-up latency: 1 row committed every 10 ms for $SECS s; ms from the number's time to the row applied"
printf '%-8s %6s %8s %8s\n' due rows p50 p99
awk -F'\t' '$1 == "latency" { printf "%-8s %6s %8s %8s\n", $2, $3, $4, $5 }' "$RES"
echo
echo "4. Pages of 100 rows, one client (pages/s, medians of $ROUNDS runs of 4 s)"
for v in jsonb typed; do
	printf '%-8s %10.0f\n' "$v" "$(awk -F'\t' -v n=$v '$1 == "page" && $2 == n { print $3 }' "$RES" | median)"
done
echo
echo "5. read_slot() of a 4-slot group, pages of 100 rows, one client (pages/s, medians of $ROUNDS runs of 4 s)"
for v in none pending; do
	printf '%-14s %10.0f\n' "resize_$v" "$(awk -F'\t' -v n=$v '$1 == "slot" && $2 == n { print $3 }' "$RES" | median)"
done
echo
echo "6. apply_retention() of a stream of 20,000 rows keeping 10,000 (ms, one run each)"
awk -F'\t' '$1 == "retention" { printf "%-14s %10s\n", $2, $3 }' "$RES"
echo
echo "total time: $(($(date +%s) - T_START)) s"
