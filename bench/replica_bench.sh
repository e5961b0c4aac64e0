#!/usr/bin/env bash
# replica_bench.sh: how soon a row committed on the primary is returned to
# a reader on a hot standby that pages with stream_seq.wait() and
# horizon(), against the same reader on the primary.
#
#   bench/replica_bench.sh [SECONDS] [RATE]     default: 15 s, 200 rows/s
#
# Starts a throwaway primary (bench/lib.sh: socket only, the library
# preloaded; the extension built and installed first unless
# STREAM_SEQ_SKIP_BUILD is set) and a streaming standby made with
# pg_basebackup (same machine, asynchronous replication, the default
# settings otherwise).  One writer (Python, psycopg2) inserts one row per
# transaction into a stream table, RATE transactions per second for
# SECONDS, and notes when each COMMIT returned.  Two readers run at the
# same time, one on the primary and one on the standby, each looping:
#   h := stream_seq.wait(stream, cursor, 1 s), then one page
#   WHERE seq > cursor AND seq < stream_seq.horizon(stream) ORDER BY seq
# and note when each row came back.  The clocks are the same machine's.
# Lag = row returned - its COMMIT returned: median, p99 and max per
# reader, and how many rows each read (every committed row must be read
# exactly once; the script fails otherwise).  On the standby, the lag
# includes replication (WAL sent when flushed, then replayed) and wait()'s
# recheck interval there (a standby learns of commits by looking again).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

SECS=${1:-15}
RATE=${2:-200}
PORT=${REPLICA_BENCH_PORT:-55431}
SB_PORT=$((PORT + 1))
need_packages postgresql-15 postgresql-server-dev-15 make gcc python3-psycopg2
build_install

start_cluster replica_primary "$PORT" "
wal_level = replica
max_wal_senders = 4
"
PRIMARY_DIR=$CLUSTER_DIR
SB_DIR=$PRIMARY_DIR/standby
# stop the standby too (stop_cluster removes $PRIMARY_DIR with it)
stop_standby() {
	if [ -f "$SB_DIR/postmaster.pid" ]; then
		as_pg $PGBIN/pg_ctl -D "$SB_DIR" -m immediate -w stop >/dev/null 2>&1 || true
	fi
}
trap 'stop_standby; lib_exit' EXIT

psql_q -o /dev/null <<-'SQL'
	CREATE EXTENSION stream_seq;
	CREATE TABLE replica_ev (id bigserial PRIMARY KEY, payload bigint NOT NULL);
	SELECT stream_seq.enable('replica_ev');
SQL
as_pg $PGBIN/pg_basebackup -h "$PRIMARY_DIR" -p "$PORT" -U postgres -D "$SB_DIR" -R \
	--checkpoint fast --no-sync >/dev/null
cat >>"$SB_DIR/postgresql.conf" <<-EOF
	port = $SB_PORT
	hot_standby = on
EOF
as_pg $PGBIN/pg_ctl -D "$SB_DIR" -l "$PRIMARY_DIR/standby.log" -w -t 60 start >/dev/null
# the standby answers once it has replayed a listing of the primary's
# reservations
for _ in $(seq 1 300); do
	if psql_q -p "$SB_PORT" -At -c "SELECT stream_seq.horizon('replica_ev')" >/dev/null 2>&1; then
		break
	fi
	sleep 0.1
done

"$PY" - "$PRIMARY_DIR" "$PORT" "$SB_PORT" "$SECS" "$RATE" <<'PY'
import multiprocessing as mp, statistics, sys, time
import psycopg2

host, port, sb_port, secs, rate = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])

def connect(p):
    c = psycopg2.connect(host=host, port=p, user="postgres", dbname="postgres")
    c.autocommit = True
    return c

def writer(q):
    c = connect(port)
    cur = c.cursor()
    done = {}
    start = time.time()
    n = 0
    while time.time() - start < secs:
        cur.execute("BEGIN")
        cur.execute("INSERT INTO replica_ev (payload) VALUES (%s) RETURNING id", (n,))
        ident = cur.fetchone()[0]
        cur.execute("COMMIT")
        done[ident] = time.time()
        n += 1
        pause = start + n / rate - time.time()
        if pause > 0:
            time.sleep(pause)
    cur.execute("SELECT id, seq FROM replica_ev")
    numbers = dict(cur.fetchall())
    q.put({numbers[i]: t for i, t in done.items()})

def reader(p, name, q, stop_at):
    c = connect(p)
    cur = c.cursor()
    seen = {}
    cursor = 0
    while True:
        cur.execute("SELECT stream_seq.wait('replica_ev', %s, '1 s')", (cursor,))
        cur.execute("""SELECT seq FROM replica_ev
                        WHERE seq > %s AND seq < stream_seq.horizon('replica_ev')
                        ORDER BY seq LIMIT 1000""", (cursor,))
        now = time.time()
        rows = [r[0] for r in cur.fetchall()]
        for s in rows:
            if s in seen:
                raise SystemExit("%s read %d twice" % (name, s))
            seen[s] = now
        if rows:
            cursor = rows[-1]
        if stop_at.value and cursor >= stop_at.value:
            break
    q.put((name, seen))

if __name__ == "__main__":
    wq, rq = mp.Queue(), mp.Queue()
    stop_at = mp.Value("q", 0)
    readers = [mp.Process(target=reader, args=(p, n, rq, stop_at))
               for p, n in ((port, "primary"), (sb_port, "standby"))]
    for r in readers:
        r.start()
    time.sleep(1)
    w = mp.Process(target=writer, args=(wq,))
    w.start()
    committed = wq.get()
    w.join()
    stop_at.value = max(committed)
    results = dict(rq.get() for _ in readers)
    for r in readers:
        r.join()
    print("Replica read lag: 1 writer, %.0f one-row transactions/s for %.0f s, "
          "one reader on each server (wait() + horizon-bounded page)" % (rate, secs))
    print()
    print("%-10s %8s %10s %10s %10s" % ("reader", "rows", "p50 ms", "p99 ms", "max ms"))
    failed = False
    for name in ("primary", "standby"):
        seen = results[name]
        missing = [s for s in committed if s not in seen]
        extra = [s for s in seen if s not in committed]
        if missing or extra:
            print("%s: %d committed rows not read, %d read that were not committed"
                  % (name, len(missing), len(extra)))
            failed = True
        lags = sorted((seen[s] - committed[s]) * 1000 for s in committed if s in seen)
        p99 = lags[min(len(lags) - 1, int(len(lags) * 0.99))]
        print("%-10s %8d %10.2f %10.2f %10.2f" % (name, len(seen), statistics.median(lags), p99, lags[-1]))
    sys.exit(1 if failed else 0)
PY
