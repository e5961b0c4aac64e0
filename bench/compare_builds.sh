#!/usr/bin/env bash
# compare_builds.sh: writer throughput of this tree's stream_seq against an
# earlier revision's, side by side in one run, on the same-index shape
# (id bigserial PRIMARY KEY plus the unique index on seq, 8 clients).
#
#   bench/compare_builds.sh REV [SECONDS] [ROUNDS]     default: 5 s, 5 rounds
#
# Builds REV in a git worktree and installs it into a copy of the
# PostgreSQL installation (PostgreSQL's programs find their library and
# share directories relative to themselves, so the copy has its own
# extension directory); builds and installs this tree as make bench does.
# Starts one throwaway cluster on each (socket only, the library preloaded,
# autovacuum off), with the tables of bench/schema.sql's same-index shape.
# Each round runs, for 1- and 10-row transactions with synchronous_commit
# on and off: REV's stream table, this tree's stream table and the
# bigserial table (on this tree's cluster), in an order rotated from round
# to round.  Prints transactions/s, median [min-max] over the rounds, and
# the ratios of the medians: this tree to REV, and each build to
# bigserial; then the WAL each wrote per transaction (insert position
# before and after the run / transactions) and per row; then the share of
# each table's updates that were heap-only (HOT) over all rounds.
#
# With COPY_ROWS=N each round also loads N rows into each table with one
# COPY (one transaction) and reports rows/s and WAL per row.
#
# Environment: CASES, the "synchronous_commit rows" cases separated by
# "|" (default "on 1|off 1|on 10|off 10"; "on 1000" is a bulk
# transaction); CLIENTS, pgbench clients (default 8); AFTER_SETTINGS,
# lines added to this tree's postgresql.conf (for example
# "stream_seq.in_place = on": then REV may be this very tree, and the
# comparison is of the two writes).
#
# Last, the work VACUUM has after a fixed load: each table is emptied,
# given 4,000 rows in 1-row transactions (or 8,000 in 10-row ones) by 8
# clients, and vacuumed (VERBOSE); printed per 1,000 rows: the index
# pages VACUUM processed (the sum of "pages: N in total" of the indexes it
# scanned) and the heap pages it scanned, with the index passes it made.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

REV=${1:?usage: bench/compare_builds.sh REV [SECONDS] [ROUNDS]}
SECS=${2:-5}
ROUNDS=${3:-5}
need_packages postgresql-15 postgresql-server-dev-15 make gcc

WORK=$(mktemp -d /tmp/stream_seq_compare.XXXXXX)
# stop the clusters this script started, remove the worktree and the copy
cleanup() {
	stop_nodes
	git -C "$REPO_DIR" worktree remove --force "$WORK/src" >/dev/null 2>&1 || true
	rm -rf "$WORK"
}
trap cleanup EXIT

# REV, installed into a copy of the installation
echo "== building $REV into a copy of the PostgreSQL installation"
git -C "$REPO_DIR" worktree add --detach "$WORK/src" "$REV" >/dev/null 2>&1
pgroot=$(cd "$PGBIN/../../../.." && pwd)       # /usr for Debian's layout
mkdir -p "$WORK/old/lib/postgresql" "$WORK/old/share/postgresql" "$WORK/old/include/postgresql"
cp -a "$pgroot/lib/postgresql/15" "$WORK/old/lib/postgresql/"
cp -a "$pgroot/share/postgresql/15" "$WORK/old/share/postgresql/"
cp -a "$pgroot/include/postgresql/15" "$WORK/old/include/postgresql/"
OLDBIN=$WORK/old/lib/postgresql/15/bin
rm -f "$WORK"/old/share/postgresql/15/extension/stream_seq*
# built and installed with the copy's pg_config (with the headers copied
# too, the copy is an installation of its own: the Makefile rebuilds when
# PG_CONFIG names another one)
make -s -C "$WORK/src" PG_CONFIG="$OLDBIN/pg_config" >/dev/null
make -s -C "$WORK/src" PG_CONFIG="$OLDBIN/pg_config" install >/dev/null
build_install
is_root && chown -R postgres: "$WORK"

start_node "$WORK" before "$OLDBIN" 55571
start_node "$WORK" after "$PGBIN" 55572
if [ -n "${AFTER_SETTINGS:-}" ]; then
	printf '%s\n' "$AFTER_SETTINGS" >>"$WORK/after/postgresql.conf"
	as_pg "$PGBIN/pg_ctl" -D "$WORK/after" -w restart -l "$WORK/after.log" >/dev/null
fi
IFS='|' read -r -a CASE_LIST <<<"${CASES:-on 1|off 1|on 10|off 10}"

# copy_run PORT TABLE ROWS: one COPY of ROWS rows; prints rows/s, a tab,
# and the WAL it wrote per row
copy_run() {
	local port=$1 table=$2 rows=$3 start ms
	start=$(node_lsn "$WORK" "$port")
	ms=$(seq 1 "$rows" | $PGBIN/psql -X -q -h "$WORK" -p "$port" -U postgres -d postgres \
		-c '\timing on' -c "COPY ev_$table (payload) FROM STDIN" | awk '/^Time:/ { print $2 }')
	awk -v rows="$rows" -v ms="$ms" -v wal=$(($(node_lsn "$WORK" "$port") - start)) \
		'BEGIN { printf "%.0f\t%.0f\n", rows / (ms / 1000), wal / rows }'
}

RAW=$WORK/raw
: >"$RAW"
contenders=("before 55571 stream_pk" "after 55572 stream_pk" "bigserial 55572 serial_pk")
for round in $(seq 1 "$ROUNDS"); do
	for case in "${CASE_LIST[@]}"; do
		read -r sc rows <<<"$case"
		for i in 0 1 2; do
			read -r name port table <<<"${contenders[$(((i + round) % 3))]}"
			printf '%s\t%s\t%s\t%s\n' "$sc $rows" "$name" "$round" \
				"$(write_run "$WORK" "$port" "$table" "$sc" "$rows" "$SECS")" >>"$RAW"
		done
	done
	if [ -n "${COPY_ROWS:-}" ]; then
		for i in 0 1 2; do
			read -r name port table <<<"${contenders[$(((i + round) % 3))]}"
			printf '%s\t%s\t%s\t%s\n' "copy $COPY_ROWS" "$name" "$round" \
				"$(copy_run "$port" "$table" "$COPY_ROWS")" >>"$RAW"
		done
	fi
	echo "-- round $round/$ROUNDS done"
done

# heap-only share of the updates, over all rounds (the stream tables'
# updates are their commit-time writes; the bigserial table has none)
sleep 1
hot_share() {
	$PGBIN/psql -X -At -h "$WORK" -p "$1" -U postgres -d postgres -c "
		SELECT n_tup_upd, n_tup_hot_upd, n_tup_ins FROM pg_stat_user_tables WHERE relname = 'ev_$2'" |
		tr '|' '\t'
}
printf 'hot\tbefore\t%s\n' "$(hot_share 55571 stream_pk)" >>"$RAW"
printf 'hot\tafter\t%s\n' "$(hot_share 55572 stream_pk)" >>"$RAW"

# vacuum_run PORT TABLE ROWS TXNS: empty the table, TXNS transactions of
# ROWS rows from each of 8 clients, then VACUUM (VERBOSE); prints rows, the
# index pages processed, the heap pages scanned and the index passes
vacuum_run() {
	local port=$1 table=$2 rows=$3 txns=$4 q
	q=(-X -q -h "$WORK" -p "$port" -U postgres -d postgres)
	$PGBIN/psql "${q[@]}" -c "TRUNCATE ev_$table" -c CHECKPOINT
	PGOPTIONS="-c synchronous_commit=off" $PGBIN/pgbench -n -M prepared -h "$WORK" -p "$port" \
		-U postgres -c 8 -j 2 -t "$txns" -D rows="$rows" -D hold=0 \
		-f "$BENCH_DIR/pgbench/write_$table.sql" postgres >/dev/null 2>&1
	$PGBIN/psql "${q[@]}" -c "VACUUM (VERBOSE) ev_$table" 2>&1 |
		awk -v rows=$((8 * txns * rows)) '
			/finished vacuuming/ { sub(/.*index scans: /, ""); passes = $1 }
			/^pages: .* scanned/ { scanned = $(NF - 4) }
			/^index ".*": pages: / { for (i = 1; i <= NF; i++) if ($i == "pages:") idx += $(i + 1) }
			END { printf "%d\t%d\t%d\t%d\n", rows, idx, scanned, passes }'
}
for rows_txns in "1 500" "10 100"; do
	read -r rows txns <<<"$rows_txns"
	printf 'vac\t%s\tbefore\t%s\n' "$rows" "$(vacuum_run 55571 stream_pk "$rows" "$txns")" >>"$RAW"
	printf 'vac\t%s\tafter\t%s\n' "$rows" "$(vacuum_run 55572 stream_pk "$rows" "$txns")" >>"$RAW"
	printf 'vac\t%s\tbigserial\t%s\n' "$rows" "$(vacuum_run 55572 serial_pk "$rows" "$txns")" >>"$RAW"
done

echo
echo "Writer transactions/s, ${CLIENTS:-8} clients, same indexes, $ROUNDS rounds of $SECS s;"
echo "before = $REV ($(git -C "$REPO_DIR" log -1 --format=%h "$REV")), after = this tree${AFTER_SETTINGS:+ with $AFTER_SETTINGS}"
[ -n "${COPY_ROWS:-}" ] && echo "(case \"copy $COPY_ROWS\": rows/s of one COPY, not transactions/s)"
echo "($(git -C "$REPO_DIR" describe --always --dirty))"
echo
"$PY" - "$RAW" <<'PY'
import statistics, sys
runs, hot, vac = {}, {}, {}
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    if f[0] == "hot":
        hot[f[1]] = (int(f[2] or 0), int(f[3] or 0), int(f[4] or 0))
        continue
    if f[0] == "vac":
        vac[(f[1], f[2])] = [int(x) for x in f[3:7]]
        continue
    case, name, rnd, tps, wal = f
    if tps:
        runs.setdefault((case, name), []).append(float(tps))
        runs.setdefault((case, name, "wal"), []).append(float(wal))
def cell(v):
    return "%6.0f [%.0f-%.0f]" % (statistics.median(v), min(v), max(v))
cases = []
for key in runs:
    if len(key) == 2 and key[0] not in cases:
        cases.append(key[0])
print("%-26s %22s %22s %22s %12s %12s %12s" % (
    "synchronous_commit, rows", "before", "after", "bigserial", "after/before",
    "before/serial", "after/serial"))
for case in cases:
    b, a, s = (runs.get((case, n), []) for n in ("before", "after", "bigserial"))
    if not (b and a and s):
        continue
    mb, ma, ms = (statistics.median(v) for v in (b, a, s))
    print("%-26s %22s %22s %22s %12.2f %12.2f %12.2f" % (
        case.replace(" ", ", "), cell(b), cell(a), cell(s), ma / mb, mb / ms, ma / ms))
print()
print("WAL bytes per transaction (per row), median over the rounds:")
print("%-26s %16s %16s %16s %14s %14s" % ("synchronous_commit, rows", "before", "after",
                                          "bigserial", "before/serial", "after/serial"))
for case in cases:
    b, a, s = (runs.get((case, n, "wal"), []) for n in ("before", "after", "bigserial"))
    if not (b and a and s):
        continue
    rows = 1 if case.startswith("copy") else int(case.split()[1])
    mb, ma, ms = (statistics.median(v) for v in (b, a, s))
    print("%-26s %16s %16s %16s %14.2f %14.2f" % (
        case.replace(" ", ", "), "%.0f (%.0f)" % (mb, mb / rows), "%.0f (%.0f)" % (ma, ma / rows),
        "%.0f (%.0f)" % (ms, ms / rows), mb / ms, ma / ms))
print()
print("Heap-only share of the stream tables' updates, all rounds:")
for name in ("before", "after"):
    if name in hot:
        upd, h, ins = hot[name]
        print("  %-8s %9d rows, %9d updates, %9d heap-only (%.1f %%)" % (
            name, ins, upd, h, 100.0 * h / upd if upd else 0))
print()
print("VACUUM (VERBOSE) after a fixed load, per 1,000 rows:")
print("%-6s %-10s %8s %22s %20s %12s" % ("rows", "contender", "rows", "index pages processed",
                                          "heap pages scanned", "index passes"))
for rows in ("1", "10"):
    for name in ("before", "after", "bigserial"):
        if (rows, name) in vac:
            n, idx, heap, passes = vac[(rows, name)]
            print("%-6s %-10s %8d %22.1f %20.1f %12d" % (
                rows, name, n, 1000.0 * idx / n, 1000.0 * heap / n, passes))
PY
