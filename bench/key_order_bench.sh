#!/usr/bin/env bash
# key_order_bench.sh: what per-key order through retries (set_key_order())
# costs a consumer group, against the same group without it, in one run:
#
#   bench/key_order_bench.sh [ROUNDS] [SECONDS]     default: 3 rounds, 4 s
#
# 1. Throughput with poison keys: one worker (pgbench, one client) drains
#    KO_BENCH_ROWS rows of 10,000 keys from a group of 4 slots, 100 rows a
#    page per slot, each row applied in a subtransaction of its own and
#    parked if it fails, the group's due() rows taken every transaction
#    (retry policy: 3 attempts, no delay).  0 %, 0.1 % and 1 % of the keys
#    are poison: the first row of such a key fails twice, then succeeds.
#    Keys are drawn at random (a fixed seed), about 5 rows a key by default,
#    so that a slot's keys repeat within a page.
#    Without per-key order the key's later rows go on; with it
#    ('until_applied') they are held and handed back by due() in order.
#    Rows per second until every row is applied, medians of ROUNDS.
# 2. The cost per row when nothing is parked: read_slot() of one slot of
#    the same group, pages of 100 rows, one client, SECONDS per run, with
#    and without per-key order (under it a page holds one row per key, so
#    its pages are shorter when keys repeat); pages/s, rows per page and
#    microseconds per row returned, medians of ROUNDS.  The two groups
#    alternate which goes first from round to round.
# 3. Wake-up latency of the keys that are not held: a writer commits
#    KO_LAT_RATE rows/s (default 500, one row a transaction, keys of
#    10,000 at random) for KO_LAT_SECS seconds (default 10) while one
#    worker (one transaction: due() rows, then a page of each of 4 slots;
#    wait() after the horizon when it found nothing) applies them; every
#    row of keys 1..100 (1 %) fails twice, then succeeds (0 %: none).
#    Latency: from the row's insert (its transaction commits right after)
#    to its apply, for rows of the other keys; p50 and p99 in ms, medians
#    of ROUNDS, with and without per-key order.
#
# KO_BENCH_PARTS (default "1 2 3") picks the parts to run.
#
# A throwaway cluster (bench/lib.sh; the extension built and installed first
# unless STREAM_SEQ_SKIP_BUILD is set).  Environment: PGBIN, KO_BENCH_PORT
# (default 55570), KO_BENCH_ROWS (default 50000).
set -euo pipefail
PGBIN_WANTED=${PGBIN:-/usr/lib/postgresql/15/bin}
. "$(dirname "$0")/lib.sh"
PGBIN=$PGBIN_WANTED
PG_CONFIG=$PGBIN/pg_config

ROUNDS=${1:-3}
SECS=${2:-4}
PORT=${KO_BENCH_PORT:-55570}
ROWS=${KO_BENCH_ROWS:-50000}
PARTS=${KO_BENCH_PARTS:-1 2 3}
LAT_RATE=${KO_LAT_RATE:-500}
LAT_SECS=${KO_LAT_SECS:-10}
part() { case " $PARTS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
KEYS=10000
T_START=$(date +%s)

need_packages postgresql-15
[ -n "${STREAM_SEQ_SKIP_BUILD:-}" ] || need_packages postgresql-server-dev-15 make gcc
build_install
start_cluster key_order "$PORT" "max_connections = 20
autovacuum = off"
WORK=$CLUSTER_DIR
PGBENCH="as_pg $PGBIN/pgbench -n -h $PGHOST -p $PGPORT -U postgres postgres"

echo "command: bench/key_order_bench.sh $ROUNDS $SECS (KO_BENCH_ROWS=$ROWS)"
echo "machine: $(nproc) CPUs, $(uname -sr), $("$PGBIN"/postgres --version), load average $(cut -d' ' -f1-3 /proc/loadavg)"

psql_q -o /dev/null <<EOF
SET client_min_messages = warning;
CREATE EXTENSION stream_seq;
CREATE TABLE ko_ev (id bigserial PRIMARY KEY, k int NOT NULL, first_of_key boolean NOT NULL);
SELECT stream_seq.enable('ko_ev');
-- keys at random (a fixed seed), so that a slot's keys repeat within a
-- page as they do in life; first_of_key: the key's first row
SELECT setseed(0.42);
INSERT INTO ko_ev (k, first_of_key)
  SELECT k, row_number() OVER (PARTITION BY k ORDER BY g) = 1
    FROM (SELECT g, 1 + floor(random() * $KEYS)::int AS k
            FROM generate_series(1, $ROWS) g) x
   ORDER BY g;
VACUUM ANALYZE ko_ev;
SELECT stream_seq.create_group('ko_ev', 'g_off', 'k', 4);
SELECT stream_seq.create_group('ko_ev', 'g_on', 'k', 4);
SELECT stream_seq.set_key_order('ko_ev', 'g_on', 'until_applied');
SELECT stream_seq.set_retry_policy('ko_ev', g, 3, '0 seconds', 1, '0 seconds')
  FROM (VALUES ('g_off'), ('g_on')) v (g);
CREATE TABLE ko_applied (seq bigint PRIMARY KEY);
-- poison: keys 1..poison are poison
CREATE TABLE ko_mode (poison int NOT NULL);
INSERT INTO ko_mode VALUES (0);
CREATE FUNCTION ko_handle(seq bigint, r jsonb, failures int) RETURNS void
LANGUAGE plpgsql AS \$\$
BEGIN
    IF (r->>'first_of_key')::boolean AND failures < 2
       AND (r->>'k')::int <= (SELECT poison FROM ko_mode) THEN
        RAISE EXCEPTION 'poison' USING ERRCODE = '22000';
    END IF;
    INSERT INTO ko_applied (seq) VALUES (seq);
END;
\$\$;
-- one worker transaction: the group's due rows, then a page of each slot
CREATE FUNCTION ko_work(grp text) RETURNS int
LANGUAGE plpgsql AS \$\$
DECLARE
    r record;
    s record;
    last bigint;
    n int := 0;
BEGIN
    FOR r IN SELECT * FROM stream_seq.due('ko_ev', grp, 100) LOOP
        BEGIN
            PERFORM ko_handle(r.seq, r."row", r.attempts);
        EXCEPTION WHEN data_exception THEN
            PERFORM stream_seq.park('ko_ev', grp, r.seq, SQLERRM);
        END;
        n := n + 1;
    END LOOP;
    FOR s IN SELECT slot, token FROM stream_seq.consumer_slots
              WHERE stream = 'ko_ev'::regclass AND consumer = grp ORDER BY slot LOOP
        last := NULL;
        FOR r IN SELECT * FROM stream_seq.read_slot('ko_ev', grp, s.slot, s.token, 100) LOOP
            BEGIN
                PERFORM ko_handle(r.seq, r."row", 0);
            EXCEPTION WHEN data_exception THEN
                PERFORM stream_seq.park('ko_ev', grp, r.seq, SQLERRM);
            END;
            last := r.seq;
            n := n + 1;
        END LOOP;
        IF last IS NOT NULL THEN
            PERFORM stream_seq.advance_slot('ko_ev', grp, s.slot, s.token, last);
        END IF;
    END LOOP;
    RETURN n;
END;
\$\$;
EOF
echo "SELECT ko_work(CASE :on WHEN 1 THEN 'g_on' ELSE 'g_off' END);" >"$WORK/drain.sql"
chmod a+r "$WORK/drain.sql"

# part 3: a stream of its own, written while a worker applies it
psql_q -o /dev/null <<'SQL'
SET client_min_messages = warning;
CREATE TABLE ko_lat (id bigserial PRIMARY KEY, k int NOT NULL,
                     t0 timestamptz NOT NULL DEFAULT clock_timestamp());
SELECT stream_seq.enable('ko_lat');
SELECT stream_seq.create_group('ko_lat', 'g_off', 'k', 4);
SELECT stream_seq.create_group('ko_lat', 'g_on', 'k', 4);
SELECT stream_seq.set_key_order('ko_lat', 'g_on', 'until_applied');
SELECT stream_seq.set_retry_policy('ko_lat', g, 3, '0 seconds', 1, '0 seconds')
  FROM (VALUES ('g_off'), ('g_on')) v (g);
CREATE TABLE ko_lat_applied (seq bigint PRIMARY KEY, k int NOT NULL, lat interval NOT NULL);
-- every row of a poison key fails twice, then succeeds
CREATE FUNCTION ko_lat_handle(seq bigint, r jsonb, failures int) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF failures < 2 AND (r->>'k')::int <= (SELECT poison FROM ko_mode) THEN
        RAISE EXCEPTION 'poison' USING ERRCODE = '22000';
    END IF;
    INSERT INTO ko_lat_applied
      VALUES (seq, (r->>'k')::int, clock_timestamp() - (r->>'t0')::timestamptz);
END;
$$;
CREATE FUNCTION ko_lat_work(grp text) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    s record;
    last bigint;
    n int := 0;
BEGIN
    FOR r IN SELECT * FROM stream_seq.due('ko_lat', grp, 100) LOOP
        BEGIN
            PERFORM ko_lat_handle(r.seq, r."row", r.attempts);
        EXCEPTION WHEN data_exception THEN
            PERFORM stream_seq.park('ko_lat', grp, r.seq, SQLERRM);
        END;
        n := n + 1;
    END LOOP;
    FOR s IN SELECT slot, token FROM stream_seq.consumer_slots
              WHERE stream = 'ko_lat'::regclass AND consumer = grp ORDER BY slot LOOP
        last := NULL;
        FOR r IN SELECT * FROM stream_seq.read_slot('ko_lat', grp, s.slot, s.token, 100) LOOP
            BEGIN
                PERFORM ko_lat_handle(r.seq, r."row", 0);
            EXCEPTION WHEN data_exception THEN
                PERFORM stream_seq.park('ko_lat', grp, r.seq, SQLERRM);
            END;
            last := r.seq;
            n := n + 1;
        END LOOP;
        IF last IS NOT NULL THEN
            PERFORM stream_seq.advance_slot('ko_lat', grp, s.slot, s.token, last);
        END IF;
    END LOOP;
    RETURN n;
END;
$$;
SQL
cat >"$WORK/lat_write.sql" <<'SQL'
\set k random(1, 10000)
INSERT INTO ko_lat (k) VALUES (:k);
SQL
# the worker: the horizon first, then its transaction; nothing found: wait
cat >"$WORK/lat_work.sql" <<'SQL'
SELECT stream_seq.horizon('ko_lat') - 1 AS seen \gset
SELECT ko_lat_work(CASE :on WHEN 1 THEN 'g_on' ELSE 'g_off' END) AS n \gset
\if :n = 0
SELECT stream_seq.wait('ko_lat', :seen, '1 s');
\endif
SQL
chmod a+r "$WORK/lat_write.sql" "$WORK/lat_work.sql"

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
RES=$WORK/results
: >"$RES"

#
# 1. throughput with 0 %, 0.1 % and 1 % poison keys
#
part 1 && for round in $(seq 1 "$ROUNDS"); do
	for poison in 0 10 100; do
		# the two alternate which goes first from round to round
		for grp in $( ((round % 2)) && echo g_off g_on || echo g_on g_off); do
			psql_q -o /dev/null -c "TRUNCATE ko_applied" -c "UPDATE ko_mode SET poison = $poison" \
				-c "DELETE FROM stream_seq.parked WHERE consumer = '$grp'" \
				-c "SELECT stream_seq.reset('ko_ev', '$grp', 0)" \
				-c "SELECT count(*) FROM stream_seq.claim('ko_ev', '$grp', 'bench', '1 hour')"
			t0=$(date +%s.%N)
			$PGBENCH -c 1 -t $((ROWS / 400 + 2)) -D on="$([ $grp = g_on ] && echo 1 || echo 0)" -f "$WORK/drain.sql" >/dev/null
			while [ "$(psql_q -At -c "SELECT count(*) FROM ko_applied")" != "$ROWS" ]; do
				psql_q -At -o /dev/null -c "SELECT ko_work('$grp')"
			done
			t1=$(date +%s.%N)
			left=$(psql_q -At -c "SELECT count(*) FROM stream_seq.parked_rows WHERE consumer = '$grp'")
			[ "$left" = 0 ] || { echo "drain $grp: $left rows still parked" >&2; exit 1; }
			printf 'drain\t%s\t%s\t%s\n' "$poison" "$grp" \
				"$(awk -v r="$ROWS" -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", r / (b - a) }')" >>"$RES"
		done
	done
done
part 1 && echo "-- throughput with poison keys: done"

#
# 2. read_slot() with nothing parked
#
part 2 && psql_q -o /dev/null -c "DELETE FROM stream_seq.parked WHERE consumer IN ('g_off', 'g_on')"
part 2 && for round in $(seq 1 "$ROUNDS"); do
	for grp in $( ((round % 2)) && echo g_off g_on || echo g_on g_off); do
		psql_q -o /dev/null -c "SELECT stream_seq.reset('ko_ev', '$grp', 0)"
		token=$(psql_q -At -c "SELECT token FROM stream_seq.claim('ko_ev', '$grp', 'bench', '1 hour') WHERE slot = 0")
		echo "SELECT count(*) FROM stream_seq.read_slot('ko_ev', '$grp', 0, $token, 100);" >"$WORK/slot_$grp.sql"
		chmod a+r "$WORK/slot_$grp.sql"
		rows=$(psql_q -At -c "SELECT count(*) FROM stream_seq.read_slot('ko_ev', '$grp', 0, $token, 100)")
		tps=$($PGBENCH -c 1 -T "$SECS" -f "$WORK/slot_$grp.sql" 2>/dev/null | awk '/^tps/ { print $3; exit }')
		printf 'slot\t%s\t%s\t%s\n' "$grp" "$tps" "$rows" >>"$RES"
	done
done
part 2 && echo "-- read_slot() with nothing parked: done"

#
# 3. wake-up latency of the keys not held
#
part 3 && for round in $(seq 1 "$ROUNDS"); do
	for poison in 0 100; do
		for grp in $( ((round % 2)) && echo g_off g_on || echo g_on g_off); do
			psql_q -o /dev/null -c "TRUNCATE ko_lat_applied" -c "UPDATE ko_mode SET poison = $poison" \
				-c "DELETE FROM stream_seq.parked WHERE stream = 'ko_lat'::regclass AND consumer = '$grp'" \
				-c "SELECT stream_seq.reset('ko_lat', '$grp', stream_seq.horizon('ko_lat') - 1)" \
				-c "SELECT count(*) FROM stream_seq.claim('ko_lat', '$grp', 'bench', '1 hour')"
			from=$(psql_q -At -c "SELECT stream_seq.horizon('ko_lat') - 1")
			on=$([ $grp = g_on ] && echo 1 || echo 0)
			$PGBENCH -c 1 -T $((LAT_SECS + 1)) -D on="$on" -f "$WORK/lat_work.sql" >"$WORK/lat_work.log" 2>&1 &
			worker=$!
			$PGBENCH -c 1 -R "$LAT_RATE" -T "$LAT_SECS" -f "$WORK/lat_write.sql" >"$WORK/lat_write.log" 2>&1
			wait $worker || { cat "$WORK/lat_work.log" >&2; exit 1; }
			printf 'lat\t%s\t%s\t%s\n' "$poison" "$grp" "$(psql_q -At -F $'\t' -c "
				SELECT round(1000 * extract(epoch FROM percentile_cont(0.5) WITHIN GROUP (ORDER BY lat))::numeric, 2),
				       round(1000 * extract(epoch FROM percentile_cont(0.99) WITHIN GROUP (ORDER BY lat))::numeric, 2),
				       count(*), (SELECT count(*) FROM ko_lat WHERE seq > $from AND k > 100)
				  FROM ko_lat_applied WHERE k > 100")" >>"$RES"
		done
	done
done
part 3 && echo "-- wake-up latency: done"

if part 1; then
echo
echo "1. One worker draining $ROWS rows of $KEYS keys, a group of 4 slots, pages of 100 (rows/s, medians of $ROUNDS)"
printf '%-14s %14s %14s %8s\n' "poison keys" "without order" "with order" ratio
for poison in 0 10 100; do
	a=$(awk -F'\t' -v p=$poison '$1 == "drain" && $2 == p && $3 == "g_off" { print $4 }' "$RES" | median)
	b=$(awk -F'\t' -v p=$poison '$1 == "drain" && $2 == p && $3 == "g_on" { print $4 }' "$RES" | median)
	printf '%-14s %14.0f %14.0f %8.2f\n' "$(awk -v p=$poison -v k=$KEYS 'BEGIN { printf "%g %% (%d)", 100 * p / k, p }')" \
		"$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { print a ? b / a : 0 }')"
done
fi
if part 2; then
echo
echo "2. read_slot() of slot 0, nothing parked, one client, $SECS s per run (medians of $ROUNDS)"
printf '%-14s %10s %14s %12s\n' "" "pages/s" "rows per page" "us per row"
for grp in g_off g_on; do
	tps=$(awk -F'\t' -v g=$grp '$1 == "slot" && $2 == g { print $3 }' "$RES" | median)
	rows=$(awk -F'\t' -v g=$grp '$1 == "slot" && $2 == g { print $4 }' "$RES" | median)
	printf '%-14s %10.0f %14s %12.2f\n' "$([ $grp = g_on ] && echo 'with order' || echo 'without order')" \
		"$tps" "$rows" "$(awk -v t="$tps" -v r="$rows" 'BEGIN { print (t && r) ? 1e6 / t / r : 0 }')"
done
fi
if part 3; then
echo
echo "3. Wake-up latency of the keys not held: $LAT_RATE rows/s for $LAT_SECS s, one worker, 4 slots (ms from insert to apply; medians of $ROUNDS)"
printf '%-12s %-14s %8s %8s %18s  %s\n' "poison keys" "" p50 p99 "applied / written" "p99 of each run"
for poison in 0 100; do
	for grp in g_off g_on; do
		sel() { awk -F'\t' -v p=$poison -v g=$grp '$1 == "lat" && $2 == p && $3 == g { print $'"$1"' }' "$RES"; }
		printf '%-12s %-14s %8.2f %8.2f %18s  %s\n' "$(awk -v p=$poison 'BEGIN { printf "%g %%", p / 100 }')" \
			"$([ $grp = g_on ] && echo 'with order' || echo 'without order')" \
			"$(sel 4 | median)" "$(sel 5 | median)" "$(sel 6 | tail -1)/$(sel 7 | tail -1)" "$(sel 5 | tr '\n' ' ')"
	done
done
fi
echo
echo "total time: $(($(date +%s) - T_START)) s"
