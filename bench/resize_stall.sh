#!/bin/sh
# The longest INSERT of a stream while resize_group() runs next to a
# worker's open transaction: 2 pgbench clients insert single rows for 9 s
# into a stream of ROWS rows; at 1.5 s a worker holds slot 0's row (an
# uncommitted advance_slot()) for 3 s and at 2 s resize_group() starts a
# resize (it waits for that worker); at 5.5 s a reader's transaction stays
# open for 2.5 s and at 6 s resize_group() of a second group drops the
# index its finished resize left.  Prints the longest and the p99 INSERT
# latency and how long each resize_group() call took.
# With PREBUILD=1 the index of the resize to 8 slots is built first with
# the statement resize_index() returns (CREATE INDEX CONCURRENTLY), and
# resize_group() adopts it instead of building one.
# With PARTITIONS=N the stream is partitioned (by hash of id, N
# partitions); PREBUILD=1 then runs resize_index()'s statements for it
# (CREATE INDEX ON ONLY, then per partition CREATE INDEX CONCURRENTLY and
# ATTACH PARTITION).
#   [PREBUILD=1] [PARTITIONS=N] sh bench/resize_stall.sh /path/to/bin [rows]
# Runs its own server in a temporary directory (as the calling user, who
# must not be root), and removes it.
set -e
BIN=$1
ROWS=${2:-200000}
DIR=$(mktemp -d /tmp/resize_stall.XXXXXX)
PORT=${PORT:-55491}
export PGPORT=$PORT PGHOST=$DIR PGDATABASE=postgres
"$BIN/initdb" -D "$DIR/data" >/dev/null 2>&1
cat >> "$DIR/data/postgresql.conf" <<CONF
shared_preload_libraries = 'stream_seq'
listen_addresses = ''
unix_socket_directories = '$DIR'
port = $PORT
stream_seq.retention_interval = 0
CONF
"$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/log" -w start >/dev/null
trap '"$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null; rm -rf "$DIR"' EXIT
P="$BIN/psql -X -q -At -v ON_ERROR_STOP=1"
START=$(date +%s.%N)
$P <<SQL
CREATE EXTENSION stream_seq;
CREATE TABLE ev (id bigserial, k int, payload text, seq bigint)
  $( [ "${PARTITIONS:-0}" -gt 0 ] && echo "PARTITION BY HASH (id)" || true );
SELECT format('CREATE TABLE ev_%s PARTITION OF ev FOR VALUES WITH (MODULUS %s, REMAINDER %s)', r, ${PARTITIONS:-0}, r)
  FROM generate_series(0, ${PARTITIONS:-0} - 1) r \gexec
SELECT stream_seq.enable('ev');
INSERT INTO ev (k, payload) SELECT g % 1000, repeat('x', 100) FROM generate_series(1, $ROWS) g;
SQL
$P <<SQL
SELECT stream_seq.create_group('ev', 'g', 'k', 4);
SELECT stream_seq.create_group('ev', 'g2', 'k', 1);
SQL
# g2 switches at once (nothing left to read): its old index is retired
$P <<SQL
SELECT count(stream_seq.advance_slot('ev', 'g2', c.slot, c.token, stream_seq.horizon('ev') - 1))
  FROM stream_seq.claim('ev', 'g2', 'x', '1 hour') c;
SELECT stream_seq.resize_group('ev', 'g2', 2);
SELECT count(*) FROM stream_seq.claim('ev', 'g', 'w1', '1 hour');
VACUUM ANALYZE ev;
SQL
if [ "${PREBUILD:-0}" = 1 ]; then
  $P >/dev/null <<'SQL'
SELECT stream_seq.resize_index('ev', 'g', 8) \gexec
SQL
fi
echo "INSERT INTO ev (k, payload) VALUES (random() * 1000, 'new');" > "$DIR/insert.sql"
(cd "$DIR" && "$BIN/pgbench" -n -c 2 -T 9 -f insert.sql -l --log-prefix=lat >/dev/null 2>&1) &
PGB=$!
sleep 1.5
$P -c "BEGIN; SELECT stream_seq.advance_slot('ev', 'g', 0, (SELECT token FROM stream_seq.consumer_slots WHERE consumer = 'g' AND slot = 0), 1); SELECT pg_sleep(3); COMMIT;" >/dev/null &
sleep 0.5
$P -c '\timing on' -c "SELECT stream_seq.resize_group('ev', 'g', 8);" | sed -n 's/^Time: /resize to 8 slots (a worker open 3 s): /p'
sleep 1.5
$P -c "BEGIN; SELECT count(*) FROM ev WHERE id = 1; SELECT pg_sleep(2.5); COMMIT;" >/dev/null &
sleep 0.5
$P -c '\timing on' -c "SELECT stream_seq.resize_group('ev', 'g2', 2);" | sed -n 's/^Time: /resize_group() dropping the retired index (a reader open 2.5 s): /p'
wait $PGB
wait
$P -c "SELECT 'index of the resize to 8 slots: ' || coalesce(resize_index, slot_index) FROM stream_seq.consumer WHERE consumer = 'g'"
# the longest, and the longest of those that began after the first second
# (the resizes start at 2 s and 6 s; the first inserts warm the caches)
cat "$DIR"/lat* | awk '{printf "%d %.6f\n", $3, $5 + $6 / 1e6 - $3 / 1e6}' > "$DIR/all"
awk 'NR == 1 || $2 < t0 {t0 = $2} {l[NR] = $1; b[NR] = $2} END {
  for (i = 1; i <= NR; i++) {
    if (l[i] > m) {m = l[i]; mb = b[i] - t0}
    if (b[i] - t0 >= 1 && l[i] > r) {r = l[i]; rb = b[i] - t0}
  }
  printf "inserts: %d; longest %.1f ms (began at %.2f s); longest after 1 s %.1f ms (began at %.2f s)\n",
         NR, m / 1000, mb, r / 1000, rb}' "$DIR/all"
