#!/usr/bin/env bash
# restart_cost.sh: what the first stream number after a restart costs, on a
# stream of 10 million rows and on one of 1,000 rows.
#
# After a start, the first use of a stream (horizon(), head(), or the commit
# of the first insert) initialises its counter: it reads the table's highest
# number through the stream's unique index, the recorded head from the head
# sequence and the trim point (src/catalog.c), and the first insert then
# records a new block in the head sequence.  None of that may grow with the
# table.
#
# The script starts a throwaway cluster with the library preloaded (port
# 55520, socket directory under /tmp, no TCP; as root, the cluster runs as
# "postgres"), builds both streams the fast way (rows inserted with their
# numbers already set, in the transaction that creates the table, so that
# wal_level = minimal writes no WAL for them; stream_seq.enable() then keeps
# the numbers and only builds the unique index), and then, after each of
# several restarts, times in a fresh session (psql \timing, connection set
# up before the clock starts):
#
#   horizon   SELECT stream_seq.horizon(s)         first use of the stream
#   insert    INSERT INTO s ... one row; COMMIT     first use + first block
#
# and the same statement again in that session (warm) for comparison.  Each
# restart measures the 1,000-row and the 10-million-row stream, alternating
# which goes first.  The cluster is stopped by its data directory and
# removed at the end (also on error or Ctrl-C).
#
# Usage: bench/restart_cost.sh [BIG_ROWS]     (default 10000000)
#        REPS=n: restarts per figure (default 5)
#        STREAM_SEQ_SKIP_BUILD=1: use the installed extension as is
set -euo pipefail

BIG_ROWS=${1:-10000000}
SMALL_ROWS=1000
REPS=${REPS:-5}
PORT=55520
PGBIN=/usr/lib/postgresql/15/bin
PG_CONFIG=$PGBIN/pg_config
REPO_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

is_root() { [ "$(id -u)" = 0 ]; }
as_pg() {
	if is_root; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

if [ -z "${STREAM_SEQ_SKIP_BUILD:-}" ]; then
	echo "== building and installing stream_seq from $REPO_DIR"
	(
		cd "$REPO_DIR"
		make -s PG_CONFIG=$PG_CONFIG >/dev/null
		if is_root || [ -w "$($PG_CONFIG --pkglibdir)" ]; then
			make -s PG_CONFIG=$PG_CONFIG install >/dev/null
		elif ! cmp -s stream_seq.so "$($PG_CONFIG --pkglibdir)/stream_seq.so"; then
			echo "cannot install into $($PG_CONFIG --pkglibdir); run: sudo make install" >&2
			exit 1
		fi
	)
fi

DIR=$(mktemp -d /tmp/stream_seq_restart_cost.XXXXXX)
DATA=$DIR/data
cleanup() {
	if [ -f "$DATA/postmaster.pid" ]; then
		as_pg $PGBIN/pg_ctl -D "$DATA" -m fast -w stop >/dev/null 2>&1 ||
			as_pg $PGBIN/pg_ctl -D "$DATA" -m immediate -w stop >/dev/null 2>&1 || true
	fi
	rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
is_root && chown postgres: "$DIR"

as_pg $PGBIN/initdb -D "$DATA" -U postgres -A trust --no-sync >"$DIR/initdb.log" 2>&1 || {
	cat "$DIR/initdb.log" >&2
	exit 1
}
cat >>"$DATA/postgresql.conf" <<EOF

# throwaway cluster of bench/restart_cost.sh
port = $PORT
listen_addresses = ''
unix_socket_directories = '$DIR'
shared_preload_libraries = 'stream_seq'
wal_level = minimal
max_wal_senders = 0
maintenance_work_mem = '1GB'
max_wal_size = '8GB'
checkpoint_timeout = '1h'
autovacuum = off
EOF

export PGHOST=$DIR PGPORT=$PORT PGUSER=postgres PGDATABASE=postgres
unset PGOPTIONS PGSERVICE PGPASSWORD

start() {
	as_pg $PGBIN/pg_ctl -D "$DATA" -l "$DIR/server.log" -w -t 120 start >/dev/null || {
		cat "$DIR/server.log" >&2
		exit 1
	}
}
psql_q() { $PGBIN/psql -X -q -At -v ON_ERROR_STOP=1 "$@"; }
now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

echo "== throwaway cluster in $DIR (port $PORT, socket only)"
start

build() {
	local tab=$1 rows=$2 t0
	t0=$(now)
	psql_q <<-EOF
		BEGIN;
		CREATE TABLE $tab (id bigint NOT NULL, seq bigint, payload text);
		INSERT INTO $tab (id, seq) SELECT g, g FROM generate_series(1, $rows) g;
		COMMIT;
		SELECT stream_seq.enable('$tab') \g /dev/null
		VACUUM ANALYZE $tab;
	EOF
	echo "   $tab: $rows rows, $(psql_q -c "SELECT pg_size_pretty(pg_total_relation_size('$tab'))") with indexes, built in $(elapsed "$t0") s"
}

echo "== building the streams"
psql_q -c 'CREATE EXTENSION stream_seq'
build small $SMALL_ROWS
build big "$BIG_ROWS"
psql_q -c "SELECT 'small: max ' || max(seq) FROM small" -c "SELECT 'big: max ' || max(seq) FROM big"

# Times (ms) of the statements of a psql script, in order.
timings() {
	psql_q -c 'SELECT 1' -c '\timing on' "$@" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p'
}

# First use after the restart and the same again (warm), in one fresh
# session; prints "first warm" in ms.
measure() {
	local op=$1 tab=$2
	case $op in
	horizon)
		timings -c "SELECT stream_seq.horizon('$tab')" -c "SELECT stream_seq.horizon('$tab')" |
			paste -sd' '
		;;
	insert)
		timings -c 'BEGIN' -c "INSERT INTO $tab (id, payload) VALUES (0, 'after restart')" -c 'COMMIT' \
			-c 'BEGIN' -c "INSERT INTO $tab (id, payload) VALUES (0, 'warm')" -c 'COMMIT' |
			paste -sd' ' | awk '{ printf "%.3f %.3f\n", $2 + $3, $5 + $6 }'
		;;
	esac
}

RESULTS=$DIR/results.txt
: >"$RESULTS"
echo "== measuring: $REPS restarts per operation"
for rep in $(seq 1 "$REPS"); do
	for op in horizon insert; do
		t0=$(now)
		as_pg $PGBIN/pg_ctl -D "$DATA" -m fast -w -t 120 restart -l "$DIR/server.log" >/dev/null
		restart_s=$(elapsed "$t0")
		if [ $((rep % 2)) = 1 ]; then order="small big"; else order="big small"; fi
		for tab in $order; do
			read -r first warm < <(measure $op $tab)
			echo "$op $tab $first $warm $restart_s" >>"$RESULTS"
			printf '   restart %d (%s s): %-7s %-5s first %8.3f ms   warm %8.3f ms\n' \
				"$rep" "$restart_s" "$op" "$tab" "$first" "$warm"
		done
	done
done

# The plan of the lookup the first use runs (src/catalog.c).
echo "== plan of the highest-number lookup on the big stream"
psql_q -c 'EXPLAIN (COSTS OFF) SELECT max(seq) FROM big' | sed 's/^/   /'

if grep -q 'recorded head of stream table' "$DIR/server.log"; then
	echo "== server log: recorded head warnings"
	grep 'recorded head of stream table' "$DIR/server.log" | sort | uniq -c | sed 's/^/   /'
fi

echo
echo "== time to the first number after a restart (ms; median, min-max of $REPS restarts)"
awk -v big="$BIG_ROWS" -v small="$SMALL_ROWS" '
function med(list,   n, a, i, j, t) {
	n = split(list, a, " ")
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
	lo = a[1]; hi = a[n]
	return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{ first[$1 " " $2] = first[$1 " " $2] " " $3; warm[$1 " " $2] = warm[$1 " " $2] " " $4 }
END {
	printf "   %-24s %12s %24s %10s\n", "operation", "rows", "first use", "warm"
	split("horizon insert", ops, " ")
	split("small big", tabs, " ")
	for (o = 1; o <= 2; o++) for (t = 1; t <= 2; t++) {
		k = ops[o] " " tabs[t]
		m = med(first[k]); r = sprintf("%.2f (%.2f-%.2f)", m, lo, hi)
		w = med(warm[k])
		label = (ops[o] == "horizon") ? "SELECT horizon()" : "INSERT 1 row + COMMIT"
		printf "   %-24s %12d %24s %10.2f\n", label, (tabs[t] == "big") ? big : small, r, w
	}
}' "$RESULTS"
