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
# Each round runs, for 10-row transactions with synchronous_commit on and
# off and 1-row transactions with it off: REV's stream table, this tree's
# stream table and the bigserial table (on this tree's cluster), in an
# order rotated from round to round.  Prints transactions/s, median
# [min-max] over the rounds, and the ratios of the medians: this tree to
# REV, and each build to bigserial; then the WAL each wrote per
# transaction (insert position before and after the run / transactions).
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

RAW=$WORK/raw
: >"$RAW"
contenders=("before 55571 stream_pk" "after 55572 stream_pk" "bigserial 55572 serial_pk")
for round in $(seq 1 "$ROUNDS"); do
	for case in "on 10" "off 10" "off 1"; do
		read -r sc rows <<<"$case"
		for i in 0 1 2; do
			read -r name port table <<<"${contenders[$(((i + round) % 3))]}"
			printf '%s\t%s\t%s\t%s\n' "$sc $rows" "$name" "$round" \
				"$(write_run "$WORK" "$port" "$table" "$sc" "$rows" "$SECS")" >>"$RAW"
		done
	done
	echo "-- round $round/$ROUNDS done"
done

echo
echo "Writer transactions/s, 8 clients, same indexes, $ROUNDS rounds of $SECS s;"
echo "before = $REV ($(git -C "$REPO_DIR" log -1 --format=%h "$REV")), after = this tree"
echo "($(git -C "$REPO_DIR" describe --always --dirty))"
echo
"$PY" - "$RAW" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    case, name, rnd, tps, wal = line.rstrip("\n").split("\t")
    if tps:
        runs.setdefault((case, name), []).append(float(tps))
        runs.setdefault((case, name, "wal"), []).append(float(wal))
def cell(v):
    return "%6.0f [%.0f-%.0f]" % (statistics.median(v), min(v), max(v))
print("%-26s %22s %22s %22s %12s %12s %12s" % (
    "synchronous_commit, rows", "before", "after", "bigserial", "after/before",
    "before/serial", "after/serial"))
for case in ("on 10", "off 10", "off 1"):
    b, a, s = (runs.get((case, n), []) for n in ("before", "after", "bigserial"))
    if not (b and a and s):
        continue
    mb, ma, ms = (statistics.median(v) for v in (b, a, s))
    print("%-26s %22s %22s %22s %12.2f %12.2f %12.2f" % (
        case.replace(" ", ", "), cell(b), cell(a), cell(s), ma / mb, mb / ms, ma / ms))
print()
print("WAL bytes per transaction, median over the rounds:")
print("%-26s %10s %10s %10s %12s" % ("synchronous_commit, rows", "before", "after",
                                      "bigserial", "after-before"))
for case in ("on 10", "off 10", "off 1"):
    b, a, s = (runs.get((case, n, "wal"), []) for n in ("before", "after", "bigserial"))
    if not (b and a and s):
        continue
    mb, ma, ms = (statistics.median(v) for v in (b, a, s))
    print("%-26s %10.0f %10.0f %10.0f %12.0f" % (case.replace(" ", ", "), mb, ma, ms, ma - mb))
PY
