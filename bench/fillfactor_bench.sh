#!/usr/bin/env bash
# fillfactor_bench.sh: how much room on a page the heap-only commit-time
# write needs (doc/performance.md, "The heap-only commit-time write").
#
#   bench/fillfactor_bench.sh [SECONDS] [ROUNDS]     default: 5 s, 3 rounds
#
# One throwaway cluster of this tree (socket only, autovacuum off).  For
# each client count (8, 32) and transaction size (1 and 10 rows), a stream
# table of the same-index shape (primary key plus the stream's index) at
# fillfactor 100, 90 and 80, and a bigserial table of the same shape at
# fillfactor 100; each its own table, so that its statistics are its own.
# Each round runs every one of them for SECONDS with synchronous_commit
# off, in an order rotated from round to round.  Prints transactions/s,
# median [min-max], each stream table's ratio to the bigserial table of
# its row, and the share of its commit-time writes that were heap-only
# (n_tup_hot_upd / n_tup_upd over all rounds).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

SECS=${1:-5}
ROUNDS=${2:-3}
need_packages postgresql-15 postgresql-server-dev-15 make gcc

WORK=$(mktemp -d /tmp/stream_seq_fillfactor.XXXXXX)
cleanup() {
	stop_nodes
	rm -rf "$WORK"
}
trap cleanup EXIT

build_install
is_root && chown -R postgres: "$WORK"
PORT=55581
start_node "$WORK" node "$PGBIN" "$PORT"
sql() { $PGBIN/psql -X -q -At -v ON_ERROR_STOP=1 -h "$WORK" -p "$PORT" -U postgres -d postgres "$@"; }

# the tables, and a pgbench script for each
cases=()
for clients in 8 32; do
	for rows in 1 10; do
		for ff in 100 90 80; do
			t=ff${ff}_c${clients}_r${rows}
			sql -c "CREATE TABLE $t (id bigserial PRIMARY KEY, seq bigint,
			                         payload bigint NOT NULL DEFAULT 0) WITH (fillfactor = $ff)" \
				-c "SELECT stream_seq.enable('$t')" >/dev/null
			cases+=("$t stream $ff $clients $rows")
		done
		t=serial_c${clients}_r${rows}
		sql -c "CREATE TABLE $t (id bigserial PRIMARY KEY, seq bigserial UNIQUE,
		                         payload bigint NOT NULL DEFAULT 0)"
		cases+=("$t bigserial 100 $clients $rows")
	done
done
for c in "${cases[@]}"; do
	read -r t _ _ _ rows <<<"$c"
	printf 'BEGIN;\nINSERT INTO %s (payload) SELECT 0 FROM generate_series(1, %s);\nCOMMIT;\n' \
		"$t" "$rows" >"$WORK/$t.sql"
done

RAW=$WORK/raw
: >"$RAW"
n=${#cases[@]}
for round in $(seq 1 "$ROUNDS"); do
	for i in $(seq 0 $((n - 1))); do
		read -r t kind ff clients rows <<<"${cases[$(((i + round) % n))]}"
		tps=$(PGOPTIONS="-c synchronous_commit=off" $PGBIN/pgbench -n -M prepared \
			-h "$WORK" -p "$PORT" -U postgres -c "$clients" -j 2 -T "$SECS" \
			-f "$WORK/$t.sql" postgres 2>/dev/null | awk '/^tps = / { printf "%.0f", $3 }')
		printf 'run\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$kind" "$ff" "$clients" "$rows" "$tps" >>"$RAW"
	done
	echo "-- round $round/$ROUNDS done"
done
sleep 1
sql -F $'\t' -c "SELECT 'hot', relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables" >>"$RAW"

echo
echo "Writer transactions/s, synchronous_commit off, $ROUNDS rounds of $SECS s"
echo "($(git -C "$REPO_DIR" describe --always --dirty)); stream tables at three"
echo "fillfactors against a bigserial table at 100, same indexes:"
echo
"$PY" - "$RAW" <<'PY'
import statistics, sys
tps, hot, meta = {}, {}, {}
for line in open(sys.argv[1]):
    f = line.rstrip("\n").split("\t")
    if f[0] == "run":
        t, kind, ff, clients, rows, v = f[1:]
        meta[t] = (kind, int(ff), int(clients), int(rows))
        if v:
            tps.setdefault(t, []).append(float(v))
    elif f[0] == "hot":
        hot[f[1]] = (int(f[2]), int(f[3]))
print("%-8s %-5s %-10s %-9s %22s %12s %10s" % ("clients", "rows", "table", "fillfactor",
                                               "transactions/s", "to serial", "heap-only"))
for clients in (8, 32):
    for rows in (1, 10):
        serial = [t for t, m in meta.items() if m == ("bigserial", 100, clients, rows)]
        ms = statistics.median(tps[serial[0]]) if serial and serial[0] in tps else None
        for t, m in sorted(meta.items(), key=lambda kv: (kv[1][0] != "bigserial", -kv[1][1])):
            if m[2:] != (clients, rows) or t not in tps:
                continue
            v = tps[t]
            upd, h = hot.get(t, (0, 0))
            print("%-8d %-5d %-10s %-9d %22s %12s %10s" % (
                clients, rows, m[0], m[1],
                "%6.0f [%.0f-%.0f]" % (statistics.median(v), min(v), max(v)),
                "%.2f" % (statistics.median(v) / ms) if ms and m[0] == "stream" else "",
                "%.1f %%" % (100.0 * h / upd) if upd else ""))
PY
