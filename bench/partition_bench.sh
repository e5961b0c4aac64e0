#!/usr/bin/env bash
# partition_bench.sh: partitioned stream tables against single-table ones:
# what a 100-row page costs to read, and what retention by dropping a
# partition costs against trim() deleting the same rows.
#
#   bench/partition_bench.sh
#
# Starts a throwaway cluster (bench/lib.sh: socket only, the library
# preloaded, run as "postgres" when started as root; autovacuum off; the
# extension built and installed first unless STREAM_SEQ_SKIP_BUILD is set).
# "make bench" runs it as its figure 11, after its own cluster is stopped.
#
# Page reads.  Stream tables (id bigint, payload text, seq bigint) of N rows
# numbered 1..N: a single table, and partitioned ones (PARTITION BY RANGE
# (id), P partitions of N/P rows, the last one open-ended), filled with
# seq = id before stream_seq.enable() (which keeps those numbers and
# creates the index on seq), then VACUUM ANALYZE and, for the partitioned
# ones, stream_seq.seal_partitions() (every partition but the newest is
# sealed).  Sizes: N = PARTITION_BENCH_ROWS with P in PARTITION_BENCH_PARTS
# (one single table of N rows serves them all), and N =
# PARTITION_BENCH_BIG_ROWS with P = PARTITION_BENCH_BIG_PARTS (the headline:
# 100 partitions, 10 million rows).  Each reading variant is a pgbench
# script (-M prepared, -n, 1 client) counting one 100-row page:
#   plain   SELECT count(*) FROM (SELECT seq FROM t WHERE seq > :cursor
#             AND seq < stream_seq.horizon('t') ORDER BY seq LIMIT 100) s
#           (on a partitioned table PostgreSQL reads every partition: seq
#           is not the partition key)
#   page    SELECT count(*) FROM stream_seq.page('t', :cursor, 100)
#           (on a partitioned stream it reads only the partitions that may
#           hold numbers after the cursor)
# with two cursors: random (anywhere, random(1, N-100)) and tail (the last
# 1% of the numbers, random(N - N/100, N - 100): a reader that has caught
# up; the page is still full).  Every (table, variant, cursor) cell runs
# PARTITION_BENCH_SECONDS per run.  Each partitioned cell is paired with
# the single-table cell of the same size, variant and cursor, run right
# before or after it (the single table's cells thus run once per
# partitioned stream of their size); PARTITION_BENCH_ROUNDS rounds each run
# every pair once, each round starting at another pair, the partitioned
# cell first in odd rounds and second in even ones.  Reported: the median
# of the runs' mean
# latency (pgbench "latency average") with the range, in ms per page, and
# the ratios partitioned / single of the medians, for the plain query and
# for page(); and how many partitions page() reads on average (the
# partitions named by stream_seq._page_source(t, cursor, 100) for 50 cursors of the
# kind).  Before measuring, every table and variant is checked to return
# the 100 numbers after the cursor.
#
# Retention.  Two fresh copies of PARTITION_BENCH_RET_ROWS rows: a
# partitioned stream of PARTITION_BENCH_RET_PARTS partitions (sealed), and
# a single-table stream.  Each gets a consumer advanced to the highest
# number of the first partition, W, so that drop_partitions() can drop that
# partition only and trim() may delete the same numbers.  After a
# CHECKPOINT each: stream_seq.drop_partitions('ret_part') against
# stream_seq.trim('ret_single', W + 1): wall time (clock_timestamp(), the
# commit included), WAL bytes (pg_current_wal_insert_lsn() before and
# after, full-page images included), rows removed, dead tuples left
# (n_dead_tup of the table or its partitions in pg_stat_user_tables, stats
# flushed first), and table+index size (pg_total_relation_size, summed over
# partitions) before and after.  Then the VACUUM the trim leaves to do (its
# time, WAL and the size after it).
#
# Prints markdown tables and writes them to OUT/summary.md; the raw numbers
# (raw.tsv), pgbench logs, scripts and plans stay in OUT.
#
# Environment (defaults in parentheses; the defaults take about 7 minutes
# on 2 cores, 80 s of it loading, 5 minutes the page runs):
#   PARTITION_BENCH_ROWS (3000000)       rows of the streams of ..._PARTS
#   PARTITION_BENCH_PARTS ("1 30 300")   partition counts at that size
#   PARTITION_BENCH_BIG_ROWS (10000000)  rows of the headline stream (0: skip)
#   PARTITION_BENCH_BIG_PARTS (100)      its partitions
#   PARTITION_BENCH_SECONDS (3)          length of each pgbench run
#   PARTITION_BENCH_ROUNDS (3)           rounds of every cell
#   PARTITION_BENCH_RET_ROWS (1000000)   rows of the retention copies
#   PARTITION_BENCH_RET_PARTS (10)       partitions of the partitioned copy
#   PARTITION_BENCH_PORT (55441)
#   PARTITION_BENCH_OUT (bench/out/partition; emptied first)
#   PGBIN (/usr/lib/postgresql/15/bin), STREAM_SEQ_SKIP_BUILD (bench/lib.sh)
set -euo pipefail
# lib.sh sets PGBIN to Debian's directory: keep the caller's
PGBIN_WANTED=${PGBIN:-/usr/lib/postgresql/15/bin}
. "$(dirname "$0")/lib.sh"
PGBIN=$PGBIN_WANTED
PG_CONFIG=$PGBIN/pg_config

ROWS=${PARTITION_BENCH_ROWS:-3000000}
PARTS=${PARTITION_BENCH_PARTS:-"1 30 300"}
BIG_ROWS=${PARTITION_BENCH_BIG_ROWS:-10000000}
BIG_PARTS=${PARTITION_BENCH_BIG_PARTS:-100}
SECS=${PARTITION_BENCH_SECONDS:-3}
ROUNDS=${PARTITION_BENCH_ROUNDS:-3}
RET_ROWS=${PARTITION_BENCH_RET_ROWS:-1000000}
RET_PARTS=${PARTITION_BENCH_RET_PARTS:-10}
PORT=${PARTITION_BENCH_PORT:-55441}
OUT=${PARTITION_BENCH_OUT:-$BENCH_DIR/out/partition}

need_packages postgresql-15
[ -n "${STREAM_SEQ_SKIP_BUILD:-}" ] || need_packages postgresql-server-dev-15 make gcc
build_install

T0=$(date +%s)
LIB_SUM=$(installed_lib_sum)
log() { printf '[%4ds] %s\n' $(($(date +%s) - T0)) "$*"; }

rm -rf "$OUT"
mkdir -p "$OUT/pgbench" "$OUT/logs"
RAW=$OUT/raw.tsv
: >"$RAW"

start_cluster partition_bench "$PORT" "
shared_buffers = 2GB
maintenance_work_mem = 512MB
max_wal_size = 20GB
checkpoint_timeout = 1h
autovacuum = off
log_min_messages = warning
"
psql_q -c "CREATE EXTENSION stream_seq"

# the streams of the page figure: "N P" pairs (P = 0: the single table)
STREAMS=()
add_stream() {
	local s
	for s in "${STREAMS[@]}"; do
		[ "$s" != "$1 $2" ] || return 0
	done
	STREAMS+=("$1 $2")
}
tname() { if [ "$2" = 0 ]; then echo "single_$1"; else echo "part_$2_$1"; fi; }
if [ "$BIG_ROWS" -gt 0 ]; then
	add_stream "$BIG_ROWS" 0
	add_stream "$BIG_ROWS" "$BIG_PARTS"
fi
if [ "$ROWS" -gt 0 ]; then
	add_stream "$ROWS" 0
	for p in $PARTS; do
		add_stream "$ROWS" "$p"
	done
fi

# create and fill stream table NAME of N rows with P partitions (0: a
# single table), numbered 1..N, sealed
load_stream() {
	local name=$1 n=$2 p=$3 i lo hi w
	{
		echo "SET synchronous_commit = off;"
		if [ "$p" = 0 ]; then
			echo "CREATE TABLE $name (id bigint NOT NULL, payload text NOT NULL, seq bigint);"
		else
			echo "CREATE TABLE $name (id bigint NOT NULL, payload text NOT NULL, seq bigint) PARTITION BY RANGE (id);"
			w=$(((n + p - 1) / p))
			for i in $(seq 1 "$p"); do
				lo=$(((i - 1) * w + 1))
				hi=$((i * w + 1))
				[ "$i" -lt "$p" ] || hi=MAXVALUE
				echo "CREATE TABLE ${name}_$i PARTITION OF $name FOR VALUES FROM ($lo) TO ($hi);"
			done
		fi
		echo "INSERT INTO $name SELECT g, 'event ' || g || ' ' || repeat('x', 24), g FROM generate_series(1, $n) g;"
		echo "SELECT stream_seq.enable('$name');"
		echo "VACUUM (ANALYZE) $name;"
		[ "$p" = 0 ] || echo "SELECT stream_seq.seal_partitions('$name');"
	} | psql_q -o /dev/null
}

#
# Load (two at a time: two cores), biggest first
#
load_wait() {
	if ! wait -n; then
		echo "loading failed:" >&2
		grep -h ERROR "$OUT"/logs/load.*.log >&2 || true
		exit 1
	fi
	running=$((running - 1))
}
log "loading ${#STREAMS[@]} streams: ${STREAMS[*]}"
running=0
for s in "${STREAMS[@]}"; do
	set -- $s
	[ "$running" -lt 2 ] || load_wait
	load_stream "$(tname "$1" "$2")" "$1" "$2" >"$OUT/logs/load.$(tname "$1" "$2").log" 2>&1 &
	running=$((running + 1))
done
while [ "$running" -gt 0 ]; do
	load_wait
done
psql_q -c CHECKPOINT
log "loaded"
psql_q -At -F $'\t' -c "
	SELECT 'size', c.relname, pg_size_pretty(coalesce(sum(pg_total_relation_size(i.inhrelid)), 0)
	                                         + pg_total_relation_size(c.oid))
	  FROM pg_class c LEFT JOIN pg_inherits i ON i.inhparent = c.oid
	 WHERE c.relname ~ '^(single|part)_' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
	 GROUP BY c.oid, c.relname ORDER BY c.relname" | tee -a "$RAW"

#
# Check: every table and variant returns the 100 numbers after the cursor
#
for s in "${STREAMS[@]}"; do
	set -- $s
	t=$(tname "$1" "$2")
	for c in 0 $(($1 / 2 + 7)) $(($1 - 150)); do
		ok=$(psql_q -At -c "
			SELECT (SELECT array_agg(seq ORDER BY seq) FROM (SELECT seq FROM $t WHERE seq > $c
			          AND seq < stream_seq.horizon('$t') ORDER BY seq LIMIT 100) s)
			       = ARRAY(SELECT generate_series($c + 1, $c + 100)::bigint)
			   AND (SELECT array_agg(seq ORDER BY seq) FROM stream_seq.page('$t', $c, 100))
			       = ARRAY(SELECT generate_series($c + 1, $c + 100)::bigint)")
		if [ "$ok" != t ]; then
			echo "check failed: $t after $c does not return $((c + 1))..$((c + 100))" >&2
			exit 1
		fi
	done
done
log "checked: every table and variant returns the next 100 numbers"

# plans, for the record
{
	for s in "${STREAMS[@]}"; do
		set -- $s
		[ "$2" != 0 ] || continue
		t=$(tname "$1" "$2")
		c=$(($1 - $1 / 200))
		echo "== $t: plain query, cursor $c"
		psql_q -At -c "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY ON) SELECT seq FROM $t WHERE seq > $c AND seq < stream_seq.horizon('$t') ORDER BY seq LIMIT 100" |
			grep -v '^ *->  Index \(Only \)\?Scan using\|^ *Index Cond\|^ *Filter\|^ *Rows Removed\|^ *Heap Fetches' || true
		echo "== $t: page() source, cursor $c"
		psql_q -At -c "SELECT stream_seq._page_source('$t', $c, 100)"
	done
} >"$OUT/plans.txt" 2>&1

#
# Page reads
#
# cells: "table variant cursor N P"; pairs: a partitioned cell and the
# single-table cell of the same size, variant and cursor, run one after the
# other (the single table's cells thus run once per partitioned stream of
# its size)
CELLS=()
PAIRS=()
for cur in random tail; do
	for s in "${STREAMS[@]}"; do
		set -- $s
		for v in plain page; do
			CELLS+=("$(tname "$1" "$2") $v $cur $1 $2")
			[ "$2" = 0 ] || PAIRS+=("$(tname "$1" "$2") $v $cur $1 $2|$(tname "$1" 0) $v $cur $1 0")
		done
	done
done
NPAIRS=${#PAIRS[@]}
# the tail cursors: the last 1% of the numbers, a full page
tail_lo() {
	local lo=$(($1 - $1 / 100))
	[ "$lo" -le $(($1 - 100)) ] || lo=$(($1 - 100))
	echo "$lo"
}

for c in "${CELLS[@]}"; do
	set -- $c
	t=$1 v=$2 cur=$3 n=$4
	f="$OUT/pgbench/$t.$v.$cur.sql"
	if [ "$cur" = random ]; then
		echo "\\set cursor random(1, $((n - 100)))" >"$f"
	else
		echo "\\set cursor random($(tail_lo "$n"), $((n - 100)))" >"$f"
	fi
	if [ "$v" = plain ]; then
		echo "SELECT count(*) FROM (SELECT seq FROM $t WHERE seq > :cursor AND seq < stream_seq.horizon('$t') ORDER BY seq LIMIT 100) s;" >>"$f"
	else
		echo "SELECT count(*) FROM stream_seq.page('$t', :cursor, 100);" >>"$f"
	fi
done

log "page reads: $((NPAIRS * 2)) runs of ${SECS}s per round, $ROUNDS rounds"
# one run of cell "table variant cursor N P" in round $2
run_cell() {
	local t v cur n p lf
	read -r t v cur n p <<<"$1"
	lf="$OUT/logs/pgbench.$t.$v.$cur.$2.$3.log"
	if ! $PGBIN/pgbench -n -M prepared -c 1 -T "$SECS" -f "$OUT/pgbench/$t.$v.$cur.sql" >"$lf" 2>&1; then
		echo "pgbench failed, see $lf" >&2
		exit 1
	fi
	awk -v t="$t" -v v="$v" -v cur="$cur" -v n="$n" -v p="$p" -v r="$2" '
		/^latency average = / {lat=$4}
		/^number of transactions actually processed: / {x=$6}
		/^number of failed transactions: / {failed=$5}
		END {printf "lat\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", n, p, t, v, cur, r, lat, x, (failed == "" ? 0 : failed)}' \
		"$lf" >>"$RAW"
}
# each round starts at another pair; the partitioned cell of a pair runs
# first in odd rounds, second in even ones
for r in $(seq 1 "$ROUNDS"); do
	for k in $(seq 0 $((NPAIRS - 1))); do
		pair=${PAIRS[$(((k + (r - 1) * (NPAIRS / ROUNDS + 1)) % NPAIRS))]}
		if [ $((r % 2)) = 1 ]; then
			run_cell "${pair%|*}" "$r" "$k"
			run_cell "${pair#*|}" "$r" "$k"
		else
			run_cell "${pair#*|}" "$r" "$k"
			run_cell "${pair%|*}" "$r" "$k"
		fi
	done
	log "page reads: round $r/$ROUNDS done"
done

# partitions page() reads, on average over 50 cursors of each kind
for s in "${STREAMS[@]}"; do
	set -- $s
	[ "$2" != 0 ] || continue
	t=$(tname "$1" "$2")
	n=$1
	psql_q -At -F $'\t' -c "
		SELECT 'src', $n, $2, kind,
		       round(avg((SELECT count(*) FROM regexp_matches(stream_seq._page_source('$t', c, 100), ' FROM ONLY ', 'g'))), 1)
		  FROM (SELECT 'random' AS kind, 1 + (random() * ($n - 101))::bigint AS c FROM generate_series(1, 50)
		        UNION ALL
		        SELECT 'tail', $(tail_lo "$n") + (random() * ($n - 100 - $(tail_lo "$n")))::bigint FROM generate_series(1, 50)) x
		 GROUP BY kind" >>"$RAW"
done

#
# Retention: drop_partitions() against trim() of the same rows
#
log "retention: two copies of $RET_ROWS rows"
w=$(((RET_ROWS + RET_PARTS - 1) / RET_PARTS))
{
	echo "SET synchronous_commit = off;"
	echo "CREATE TABLE ret_part (id bigint NOT NULL, payload text NOT NULL, seq bigint) PARTITION BY RANGE (id);"
	for i in $(seq 1 "$RET_PARTS"); do
		hi=$((i * w + 1))
		[ "$i" -lt "$RET_PARTS" ] || hi=MAXVALUE
		echo "CREATE TABLE ret_part_$i PARTITION OF ret_part FOR VALUES FROM ($(((i - 1) * w + 1))) TO ($hi);"
	done
	echo "CREATE TABLE ret_single (id bigint NOT NULL, payload text NOT NULL, seq bigint);"
	for t in ret_part ret_single; do
		echo "INSERT INTO $t SELECT g, 'event ' || g || ' ' || repeat('x', 24), g FROM generate_series(1, $RET_ROWS) g;"
		echo "SELECT stream_seq.enable('$t');"
		echo "VACUUM (ANALYZE) $t;"
		echo "SELECT stream_seq.create_consumer('$t', 'c');"
	done
	echo "SELECT stream_seq.seal_partitions('ret_part');"
} | psql_q -o /dev/null
W=$(psql_q -At -c "SELECT highest FROM stream_seq.partition_range WHERE partition = 'ret_part_1'::regclass")
for t in ret_part ret_single; do
	psql_q -o /dev/null -c "SELECT stream_seq.advance('$t', 'c', $W)"
done

# table+index bytes, rows and dead tuples of a stream (its partitions)
rel_state() {
	psql_q -At -F $'\t' -c "
		SELECT coalesce(sum(pg_total_relation_size(t.relid)), 0),
		       (SELECT count(*) FROM $1),
		       coalesce(sum(s.n_dead_tup), 0)
		  FROM (SELECT relid FROM pg_partition_tree('$1') WHERE isleaf
		        UNION
		        SELECT oid FROM pg_class WHERE oid = '$1'::regclass AND relkind = 'r') t
		  LEFT JOIN pg_stat_user_tables s ON s.relid = t.relid"
}
# run one statement after a CHECKPOINT: "ms WAL-bytes result"
measured() {
	psql_q -o /dev/null -c CHECKPOINT
	psql_q -At -F $'\t' <<-EOF
		\\o /dev/null
		SELECT pg_current_wal_insert_lsn() AS l0, clock_timestamp() AS t0 \\gset
		$([[ $1 == SELECT* ]] && echo "$1 \\gset r_" || echo "$1;")
		\\if :{?r_result}
		\\else
		\\set r_result ''
		\\endif
		\\o
		SELECT round((extract(epoch FROM clock_timestamp() - :'t0'::timestamptz) * 1000)::numeric, 2),
		       pg_wal_lsn_diff(pg_current_wal_insert_lsn(), :'l0'::pg_lsn), :'r_result';
		\\o /dev/null
		SELECT pg_stat_force_next_flush();
	EOF
}
ret_row() { # label, stream, statement
	local before after m
	before=$(rel_state "$2")
	m=$(measured "$3")
	sleep 1
	after=$(rel_state "$2")
	printf 'ret\t%s\t%s\t%s\t%s\n' "$1" "$m" "$before" "$after" >>"$RAW"
}
ret_row drop_partitions ret_part "SELECT stream_seq.drop_partitions('ret_part') AS result"
ret_row trim ret_single "SELECT stream_seq.trim('ret_single', $W + 1) AS result"
ret_row vacuum_after_trim ret_single "VACUUM ret_single"
psql_q -At -F $'\t' -c "SELECT 'ret_first', stream_seq.first('ret_part'), stream_seq.first('ret_single'), $W" >>"$RAW"
log "retention done"

printf 'meta\tsettings\tPARTITION_BENCH_ROWS=%s PARTITION_BENCH_PARTS="%s" PARTITION_BENCH_BIG_ROWS=%s PARTITION_BENCH_BIG_PARTS=%s PARTITION_BENCH_SECONDS=%s PARTITION_BENCH_ROUNDS=%s PARTITION_BENCH_RET_ROWS=%s PARTITION_BENCH_RET_PARTS=%s\n' \
	"$ROWS" "$PARTS" "$BIG_ROWS" "$BIG_PARTS" "$SECS" "$ROUNDS" "$RET_ROWS" "$RET_PARTS" >>"$RAW"
printf 'meta\truntime\t%s\n' $(($(date +%s) - T0)) >>"$RAW"
printf 'meta\tcpu\t%s (%s cores)\n' "$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)" "$(nproc)" >>"$RAW"
printf 'meta\tpostgres\t%s\n' "$(psql_q -At -c 'SHOW server_version')" >>"$RAW"
printf 'meta\tstream_seq\t%s\n' "$(psql_q -At -c "SELECT extversion FROM pg_extension WHERE extname = 'stream_seq'")" >>"$RAW"
if [ "$(installed_lib_sum)" != "$LIB_SUM" ]; then
	printf 'meta\treinstalled\tyes\n' >>"$RAW"
fi
grep -E 'PANIC|terminated by signal' "$CLUSTER_DIR/server.log" | sed 's/^/meta\tcrash\t/' >>"$RAW" || true
cp "$CLUSTER_DIR/server.log" "$OUT/server.log" 2>/dev/null || true
stop_cluster

#
# Report
#
"$PY" - "$RAW" >"$OUT/summary.md" <<'PY'
import collections, statistics, sys

lat = collections.defaultdict(list)
src, ret, meta = {}, {}, {}
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    if f[0] == "lat":
        n, p, t, v, cur, r, ms, x, failed = f[1:]
        if ms and int(failed or 0) == 0:
            lat[(int(n), int(p), v, cur)].append(float(ms))
    elif f[0] == "src":
        src[(int(f[1]), int(f[2]), f[3])] = f[4]
    elif f[0] == "ret":
        ret[f[1]] = f[2:]
    elif f[0] == "ret_first":
        meta["first"] = f[1:]
    elif f[0] == "meta":
        meta[f[1]] = f[2]

def med(k):
    v = lat.get(k)
    return statistics.median(v) if v else None

def cell(k):
    v = lat.get(k)
    if not v:
        return "-"
    return "%.3f [%.3f-%.3f]" % (statistics.median(v), min(v), max(v))

def ratio(a, b):
    return "%.2f" % (a / b) if a and b else "-"

runs = max((len(v) for v in lat.values()), default=0)
print("### 11a. Page reads: ms per 100-row page, median [min-max] of %d runs" % runs)
print()
print("1 client, pgbench -M prepared; plain: `WHERE seq > cursor AND seq < horizon() ORDER BY seq LIMIT 100`")
print("on the table (the parent, for a partitioned stream); page(): `stream_seq.page(t, cursor, 100)`.")
print("random: cursor anywhere; tail: cursor in the last 1% of the numbers.  Every partition but the")
print("newest is sealed.  ratio = partitioned / single (medians).")
print()
print("| rows | partitions | cursor | single plain | single page() | partitioned plain | partitioned page() | plain ratio | page() ratio | partitions page() reads |")
print("|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
keys = sorted({(n, p) for (n, p, v, c) in lat if p > 0}, key=lambda k: (k[0], k[1]))
if not keys:
    print("| (no page runs) | | | | | | | | | |")
for cur in ("random", "tail"):
    for n, p in keys:
        sp, sg = med((n, 0, "plain", cur)), med((n, 0, "page", cur))
        pp, pg = med((n, p, "plain", cur)), med((n, p, "page", cur))
        print("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            format(n, ","), p, cur,
            cell((n, 0, "plain", cur)), cell((n, 0, "page", cur)),
            cell((n, p, "plain", cur)), cell((n, p, "page", cur)),
            ratio(pp, sp), ratio(pg, sg), src.get((n, p, cur), "-")))
print()

if ret:
    def mb(b):
        return "%.1f MB" % (int(b) / 1048576.0)
    print("### 11b. Retention: drop_partitions() against trim() of the same rows")
    print()
    print("After a CHECKPOINT each; WAL from pg_current_wal_insert_lsn(), full-page images included;")
    print("dead tuples from pg_stat_user_tables (table or partitions); size = table+index bytes.")
    print()
    print("| stream | operation | returned | rows removed | ms | WAL bytes | dead tuples after | size before | size after |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    names = {"drop_partitions": ("partitioned", "drop_partitions()"),
             "trim": ("single", "trim()"),
             "vacuum_after_trim": ("single", "VACUUM after trim()")}
    for k in ("drop_partitions", "trim", "vacuum_after_trim"):
        if k not in ret:
            continue
        ms, wal, res, sz0, rows0, dead0, sz1, rows1, dead1 = ret[k]
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            names[k][0], names[k][1], res or "-",
            format(int(rows0) - int(rows1), ",") if k != "vacuum_after_trim" else "-",
            ms, format(int(float(wal)), ","), format(int(dead1), ","), mb(sz0), mb(sz1)))
    if "first" in meta:
        fp, fs, w = meta["first"]
        print()
        print("first() afterwards: partitioned %s, single %s (the first partition held 1..%s)." % (fp, fs, w))
    print()
print("Settings: %s; %s; PostgreSQL %s, stream_seq %s; %s s." % (
    meta.get("settings", "?"), meta.get("cpu", "?"), meta.get("postgres", "?"),
    meta.get("stream_seq", "?"), meta.get("runtime", "?")))
if "reinstalled" in meta:
    print()
    print("**stream_seq.so was reinstalled during the run**: new connections may have loaded the new copy.")
if "crash" in meta:
    print()
    print("**The server log reports a crash:** %s" % meta["crash"])
PY
cat "$OUT/summary.md"
