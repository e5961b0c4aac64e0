#!/usr/bin/env bash
# versions_bench.sh: writer throughput and WAL of stream_seq against
# bigserial on PostgreSQL 15 and on 18, side by side in one run (figure 12
# of make bench), so that a user sees whether the ratio changed.
#
#   bench/versions_bench.sh [SECONDS] [ROUNDS]     default: 5 s, 5 rounds
#
# 15 is Debian's; 18 is the build test/build-pg.sh makes (built first if it
# is not in its cache yet, about 6 minutes).  Builds and installs this tree
# for both.  Starts one throwaway cluster on each (socket only, the library
# preloaded, autovacuum off, data checksums as initdb sets them: off on
# 15, on on 18, and also on 18 with --no-data-checksums), with the tables of
# the same-index shape (id bigserial PRIMARY KEY, plus a unique index on
# the sequence column on both sides).  Each round runs, for 1- and 10-row
# transactions with synchronous_commit on and off, 8 clients, every
# contender on every server, in an order rotated from round to round;
# pgbench is 15's for every server.  Prints transactions/s, median
# [min-max] over the rounds, the ratio stream/bigserial on each server, and
# the WAL each wrote per transaction.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

SECS=${1:-5}
ROUNDS=${2:-5}
need_packages postgresql-15 postgresql-server-dev-15 make gcc

PG18_CONFIG=$("$REPO_DIR/test/build-pg.sh" 18)
PG18BIN=$($PG18_CONFIG --bindir)

WORK=$(mktemp -d /tmp/stream_seq_versions.XXXXXX)
# stop the clusters this script started and remove their directory
cleanup() {
	stop_nodes
	rm -rf "$WORK"
}
trap cleanup EXIT

echo "== building and installing stream_seq for 15 and 18"
(
	cd "$REPO_DIR"
	for config in "$PG_CONFIG" "$PG18_CONFIG"; do
		make -s PG_CONFIG="$config" >/dev/null
		libdir=$($config --pkglibdir)
		cmp -s stream_seq.so "$libdir/stream_seq.so" || rm -f "$libdir/stream_seq.so"
		make -s PG_CONFIG="$config" install >/dev/null
	done
)
is_root && chown -R postgres: "$WORK"

start_node "$WORK" pg15 "$PGBIN" 55581
start_node "$WORK" pg18 "$PG18BIN" 55582
start_node "$WORK" pg18_nosum "$PG18BIN" 55583 --no-data-checksums

RAW=$WORK/raw
: >"$RAW"
contenders=("15 55581 serial_pk" "15 55581 stream_pk" "18 55582 serial_pk" "18 55582 stream_pk"
	"18-nosum 55583 serial_pk" "18-nosum 55583 stream_pk")
n=${#contenders[@]}
for round in $(seq 1 "$ROUNDS"); do
	for case in "on 1" "off 1" "on 10" "off 10"; do
		read -r sc rows <<<"$case"
		for i in $(seq 0 $((n - 1))); do
			read -r server port table <<<"${contenders[$(((i + round) % n))]}"
			printf '%s\t%s\t%s\t%s\t%s\n' "$sc $rows" "$server" "$table" "$round" \
				"$(write_run "$WORK" "$port" "$table" "$sc" "$rows" "$SECS")" >>"$RAW"
		done
	done
	echo "-- round $round/$ROUNDS done"
done

echo
echo "Writer transactions/s on PostgreSQL $($PG_CONFIG --version | cut -d' ' -f2) and"
echo "$($PG18_CONFIG --version | cut -d' ' -f2) (18-nosum: initdb --no-data-checksums), 8 clients,"
echo "same indexes, $ROUNDS rounds of $SECS s, median [min-max]; this tree"
echo "($(git -C "$REPO_DIR" describe --always --dirty))"
echo
"$PY" - "$RAW" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    case, server, table, rnd, tps, wal = line.rstrip("\n").split("\t")
    if tps:
        runs.setdefault((case, server, table), []).append(float(tps))
        runs.setdefault((case, server, table, "wal"), []).append(float(wal))
servers = ("15", "18", "18-nosum")
cases = ("on 1", "off 1", "on 10", "off 10")
def cell(v):
    return "%6.0f [%.0f-%.0f]" % (statistics.median(v), min(v), max(v))
print("%-18s %-9s %22s %22s %14s" % ("sync_commit, rows", "server", "bigserial", "stream_seq",
                                      "stream/serial"))
for case in cases:
    for server in servers:
        s, t = (runs.get((case, server, x), []) for x in ("serial_pk", "stream_pk"))
        if s and t:
            print("%-18s %-9s %22s %22s %14.2f" % (case.replace(" ", ", "), server, cell(s), cell(t),
                                                   statistics.median(t) / statistics.median(s)))
print()
print("WAL bytes per transaction, median over the rounds:")
print("%-18s %-9s %10s %10s %14s" % ("sync_commit, rows", "server", "bigserial", "stream_seq",
                                      "stream/serial"))
for case in cases:
    for server in servers:
        s, t = (runs.get((case, server, x, "wal"), []) for x in ("serial_pk", "stream_pk"))
        if s and t:
            ms, mt = statistics.median(s), statistics.median(t)
            print("%-18s %-9s %10.0f %10.0f %14.2f" % (case.replace(" ", ", "), server, ms, mt,
                                                       mt / ms if ms else 0))
PY
