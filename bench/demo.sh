#!/usr/bin/env bash
# demo.sh ("make demo"): the skipped-row problem and the fix, side by side.
#
# Builds and installs stream_seq, starts a throwaway cluster under /tmp
# with the library preloaded, and runs the same workload twice:
#   (1) a bigserial table read with    WHERE id > $cursor ORDER BY id LIMIT 100
#   (2) a stream table read with       WHERE seq > $cursor
#                                        AND seq < stream_seq.horizon('ev_stream')
#                                      ORDER BY seq LIMIT 100
# 8 pgbench writers insert one row per transaction and keep it open 0-3 ms
# (pg_sleep(random() * 0.003)) for DEMO_SECONDS (default 10) while one
# reader (bench/reader.py) pages in a loop, moving its cursor to the last
# row returned.  Then it prints, for each table, the rows committed, the
# rows the reader returned and the rows it never returned.
#
# As root on Debian bookworm it installs the Debian packages it needs; as
# another user it prints the apt-get command.  The cluster is stopped and
# removed on exit.  Environment: DEMO_SECONDS, DEMO_PORT (default 55401).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

SECONDS_RUN=${DEMO_SECONDS:-10}
PORT=${DEMO_PORT:-55401}

need_packages postgresql-15 postgresql-server-dev-15 make gcc python3-psycopg2
build_install
start_cluster demo "$PORT" "max_connections = 50"

psql_q -o /dev/null <<'EOF'
CREATE EXTENSION stream_seq;
CREATE TABLE ev_serial (id bigserial PRIMARY KEY, payload bigint NOT NULL DEFAULT 0);
CREATE TABLE ev_stream (seq bigint, payload bigint NOT NULL DEFAULT 0);
SELECT stream_seq.enable('ev_stream');
EOF

run() {
	local contender=$1 stop="$CLUSTER_DIR/stop.$1" pid
	"$PY" "$BENCH_DIR/reader.py" read "$contender" --stop-file "$stop" \
		--json "$CLUSTER_DIR/$contender.json" >/dev/null &
	pid=$!
	sleep 0.3
	$PGBIN/pgbench -n -c 8 -j 2 -T "$SECONDS_RUN" -D rows=1 -D hold=1 \
		-f "$BENCH_DIR/pgbench/write_$contender.sql" >"$CLUSTER_DIR/pgbench.$contender.log" 2>&1 || {
		cat "$CLUSTER_DIR/pgbench.$contender.log" >&2
		exit 1
	}
	touch "$stop"
	wait "$pid"
}

echo "== 8 writers (1 row, open 0-3 ms) + 1 paging reader, ${SECONDS_RUN} s per table"
echo "   (1) bigserial table, reader: id > cursor"
run serial
echo "   (2) stream_seq table, reader: seq > cursor AND seq < stream_seq.horizon()"
run stream

"$PY" - "$CLUSTER_DIR/serial.json" "$CLUSTER_DIR/stream.json" <<'EOF'
import json, sys
rows = [json.load(open(f)) for f in sys.argv[1:]]
label = {"serial": "bigserial, id > cursor", "stream": "stream_seq, seq < horizon()"}
print()
print("%-30s %10s %10s %10s" % ("table, reader", "committed", "read", "missed"))
for r in rows:
    pct = 100.0 * r["missed"] / r["committed"] if r["committed"] else 0.0
    print("%-30s %10d %10d %10d  (%.1f%%)" % (label[r["contender"]], r["committed"],
                                            r["read"], r["missed"], pct))
    if r["duplicates"] or r["unnumbered"] or r["errors"]:
        print("   !! duplicates=%d unnumbered=%d errors=%s"
              % (r["duplicates"], r["unnumbered"], r["errors"]))
print()
s = rows[1]
if s["missed"] == 0 and not s["duplicates"]:
    print("The bigserial reader never saw %d committed rows; the stream reader saw every one."
          % rows[0]["missed"])
else:
    print("UNEXPECTED: the stream reader missed rows; this is a stream_seq bug.")
    sys.exit(1)
EOF
