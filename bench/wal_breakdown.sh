#!/usr/bin/env bash
# wal_breakdown.sh: where the WAL of an inserted row goes, record type by
# record type, for a bigserial table and a stream table with the same
# indexes (make bench's figure 7 gives the totals; this says which records
# make the difference, and so what of it is structural).
#
#   bench/wal_breakdown.sh [ROWS_PER_TXN] [ROWS]      default: 1 row, 40000 rows
#
# Starts a throwaway cluster (bench/lib.sh; autovacuum off), creates
# ev_serial_pk (id bigserial PRIMARY KEY, seq bigserial UNIQUE) and
# ev_stream_pk (id bigserial PRIMARY KEY, seq numbered by stream_seq), the
# tables of bench/schema.sql, and for each: CHECKPOINT, 8 pgbench clients
# write ROWS rows in transactions of ROWS_PER_TXN rows (synchronous_commit
# off), then pg_waldump --stats=record over exactly the WAL they wrote.
# Prints, per record type, records per row and bytes per row (the
# record's own bytes and its full-page images), side by side.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

PER_TXN=${1:-1}
ROWS=${2:-40000}
PORT=${WAL_BREAKDOWN_PORT:-55560}
need_packages postgresql-15
build_install
start_cluster wal "$PORT" "autovacuum = off
wal_keep_size = 1GB"
OUT=$(mktemp -d /tmp/stream_seq_wal.XXXXXX)
is_root && chown postgres: "$OUT"

same_index_tables | psql_q -o /dev/null

per_client=$((ROWS / 8 / PER_TXN))
nrows=$((per_client * 8 * PER_TXN))
for k in serial_pk stream_pk; do
	psql_q -o /dev/null -c CHECKPOINT
	lsn0=$(psql_q -At -c "SELECT pg_current_wal_insert_lsn()")
	PGOPTIONS="-c synchronous_commit=off" $PGBIN/pgbench -n -M prepared -c 8 -j 2 \
		-t "$per_client" -D rows="$PER_TXN" -D hold=0 \
		-f "$BENCH_DIR/pgbench/write_$k.sql" >"$OUT/pgbench.$k.log" 2>&1
	lsn1=$(psql_q -At -c "SELECT pg_current_wal_insert_lsn()")
	# the WAL must be on disk for pg_waldump
	psql_q -o /dev/null -c "SELECT pg_switch_wal()"
	as_pg $PGBIN/pg_waldump --stats=record -p "$CLUSTER_DIR/data/pg_wal" \
		-s "$lsn0" -e "$lsn1" >"$OUT/waldump.$k" 2>"$OUT/waldump.$k.err" || {
		cat "$OUT/waldump.$k.err" >&2
		exit 1
	}
done

echo
echo "WAL per inserted row, $nrows rows in $PER_TXN-row transactions of 8 clients"
echo "(records per row, then the records' and their full-page images' bytes per row)"
echo
"$PY" - "$OUT" "$nrows" <<'PY'
import re, sys
out, n = sys.argv[1], int(sys.argv[2])
# a custom resource manager's records are "custom128/UNKNOWN (10)"
line_re = re.compile(r"^(\S+/\S+(?: \([0-9a-f]+\))?)\s+(\d+)\s+\(\s*[\d.]+\)\s+(\d+)\s+\(\s*[\d.]+\)\s+(\d+)")
stats = {}
for k in ("serial_pk", "stream_pk"):
    stats[k] = {}
    for line in open("%s/waldump.%s" % (out, k)):
        m = line_re.match(line)
        if m:
            stats[k][m.group(1)] = tuple(int(m.group(i)) for i in (2, 3, 4))
kinds = sorted(set(stats["serial_pk"]) | set(stats["stream_pk"]),
               key=lambda t: -max(sum(stats[k].get(t, (0, 0, 0))[1:]) for k in stats))
print("%-28s %24s %24s %10s" % ("record type", "bigserial, same indexes",
                                 "stream_seq, same indexes", "difference"))
print("%-28s %24s %24s %10s" % ("", "records  bytes (FPI)", "records  bytes (FPI)", "bytes"))
total = {k: 0 for k in stats}
for t in kinds:
    cells = []
    for k in ("serial_pk", "stream_pk"):
        c, rec, fpi = stats[k].get(t, (0, 0, 0))
        total[k] += rec + fpi
        cells.append("%7.3f %7.1f (%5.1f)" % (c / n, rec / n, fpi / n))
    d = sum(stats["stream_pk"].get(t, (0, 0, 0))[1:]) - sum(stats["serial_pk"].get(t, (0, 0, 0))[1:])
    if all(abs(sum(stats[k].get(t, (0, 0, 0))[1:])) / n < 0.05 for k in stats):
        continue
    print("%-28s %24s %24s %+10.1f" % (t, cells[0], cells[1], d / n))
print("%-28s %24.1f %24.1f %+10.1f (ratio %.2f)" % (
    "total", total["serial_pk"] / n, total["stream_pk"] / n,
    (total["stream_pk"] - total["serial_pk"]) / n, total["stream_pk"] / total["serial_pk"]))
PY
rm -rf "$OUT"
