#!/usr/bin/env bash
# wait_latency.sh: wake-up latency of stream_seq.wait(), from the writer's
# COMMIT to the waiter's return, over N wake-ups (default 2000).
#
#   bench/wait_latency.sh [N] [synchronous_commit]    e.g. bench/wait_latency.sh 2000 on
#
# WAIT_LATENCY_CONF="wal_writer_delay = 10ms" adds settings to the cluster's
# postgresql.conf; WAIT_LATENCY_RAW=FILE saves every measurement.
#
# Starts a throwaway cluster with the library preloaded (port 55510, data
# and socket under /tmp, run as the "postgres" user when started as root,
# since initdb refuses root), runs bench/wait_latency.pl against it (one
# Perl process, DBD::Pg, a waiter and a writer connection with asynchronous
# queries and one monotonic clock), prints the figures, and stops the
# cluster by its data directory.  Run as root, it installs the Debian
# packages it needs (postgresql-15, libdbd-pg-perl) and builds and installs
# the extension if it is not installed.
set -euo pipefail
cd "$(dirname "$0")/.."

N=${1:-2000}
SYNC=${2:-on}
PORT=55510
PGBIN=/usr/lib/postgresql/15/bin

. "$(dirname "$0")/../test/packages.sh"
need_packages postgresql-15 libdbd-pg-perl
if [ ! -f /usr/lib/postgresql/15/lib/stream_seq.so ]; then
	need_packages postgresql-server-dev-15 make gcc
fi
if [ ! -f /usr/lib/postgresql/15/lib/stream_seq.so ]; then
	if [ "$(id -u)" = 0 ]; then
		make -s PG_CONFIG=$PGBIN/pg_config && make -s PG_CONFIG=$PGBIN/pg_config install
	else
		echo "stream_seq is not installed; run: make && sudo make install" >&2
		exit 1
	fi
fi

# the cluster runs as "postgres" when we are root
as_owner=()
if [ "$(id -u)" = 0 ]; then
	as_owner=(runuser -u postgres --)
fi

DATA=$(mktemp -d /tmp/stream_seq_wait_latency.XXXXXX)
[ "$(id -u)" = 0 ] && chown postgres "$DATA"
stop_cluster() {
	"${as_owner[@]}" $PGBIN/pg_ctl -D "$DATA/pgdata" -m fast stop >/dev/null 2>&1 || true
	rm -rf "$DATA"
}
trap stop_cluster EXIT

"${as_owner[@]}" $PGBIN/initdb -D "$DATA/pgdata" -U postgres -A trust >/dev/null
cat >>"$DATA/pgdata/postgresql.conf" <<EOF
shared_preload_libraries = 'stream_seq'
port = $PORT
listen_addresses = ''
unix_socket_directories = '$DATA'
synchronous_commit = $SYNC
EOF
if [ -n "${WAIT_LATENCY_CONF:-}" ]; then
	printf '%s\n' "$WAIT_LATENCY_CONF" >>"$DATA/pgdata/postgresql.conf"
fi
"${as_owner[@]}" $PGBIN/pg_ctl -D "$DATA/pgdata" -l "$DATA/server.log" -w start >/dev/null

echo "command: ${WAIT_LATENCY_CONF:+WAIT_LATENCY_CONF='$WAIT_LATENCY_CONF' }bench/wait_latency.sh $N $SYNC"
echo "machine: $(nproc) CPUs, $(uname -sr), $($PGBIN/postgres --version)"
echo "load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
perl bench/wait_latency.pl --dsn "dbi:Pg:host=$DATA;port=$PORT;dbname=postgres" \
	--user postgres --n "$N" ${WAIT_LATENCY_RAW:+--raw "$WAIT_LATENCY_RAW"}
