# lib.sh: helpers shared by demo.sh and bench.sh (sourced, not run).
#
#   need_packages PKG...   install missing Debian packages when root,
#                          otherwise print the apt-get command and exit 1
#   build_install          make && make install of the extension from the
#                          repository this script lives in (skipped when
#                          STREAM_SEQ_SKIP_BUILD is set)
#   start_cluster NAME PORT [CONF]
#                          initdb + start a throwaway cluster under /tmp with
#                          its own socket directory (no TCP), the library
#                          preloaded; exports PGHOST/PGPORT/PGUSER/PGDATABASE
#                          and stops and removes it on exit
#   stop_cluster           stop and remove the cluster start_cluster made
#   same_index_tables      the SQL of the same-index shape: a bigserial
#                          table and a stream table, each with a primary
#                          key and a unique index on the sequence column
#   start_node DIR NAME BINDIR PORT [INITDB OPTION]
#                          one more throwaway cluster, in DIR/NAME with its
#                          socket in DIR (several at once, each with its own
#                          installation), autovacuum off, holding the
#                          same-index tables; stop_nodes stops them all
#   node_lsn DIR PORT      the WAL insert position of such a cluster
#   write_run DIR PORT TABLE SC ROWS SECS
#                          transactions/s of one pgbench run of
#                          bench/pgbench/write_TABLE.sql ($CLIENTS clients,
#                          default 8), a
#                          tab, and the WAL it wrote per transaction
#
# initdb refuses to run as root, so as root the cluster belongs to the
# "postgres" user (created by the postgresql-15 package).
#
# Environment: PGBIN, the PostgreSQL 15 bin directory whose initdb, pg_ctl,
# psql and pgbench are used (default /usr/lib/postgresql/15/bin); the
# extension is built and installed with the pg_config found there, so that
# a copy of the installation tree can be used instead of the system's.

PGBIN=${PGBIN:-/usr/lib/postgresql/15/bin}
PG_CONFIG=$PGBIN/pg_config
PY=/usr/bin/python3
BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_DIR=$(cd "$BENCH_DIR/.." && pwd)
CLUSTER_DIR=""

is_root() { [ "$(id -u)" = 0 ]; }

. "$REPO_DIR/test/packages.sh"

build_install() {
	if [ -n "${STREAM_SEQ_SKIP_BUILD:-}" ]; then
		echo "== STREAM_SEQ_SKIP_BUILD set: using the installed stream_seq"
		return 0
	fi
	echo "== building and installing stream_seq"
	(
		cd "$REPO_DIR"
		make -s PG_CONFIG=$PG_CONFIG >/dev/null
		libdir=$($PG_CONFIG --pkglibdir)
		if is_root || [ -w "$libdir" ]; then
			# GNU install rewrites an existing file in place (same inode),
			# which crashes running servers that have the library mapped;
			# unlink it first so that they keep the old copy
			cmp -s stream_seq.so "$libdir/stream_seq.so" || rm -f "$libdir/stream_seq.so"
			make -s PG_CONFIG=$PG_CONFIG install >/dev/null
		elif ! cmp -s stream_seq.so "$libdir/stream_seq.so"; then
			echo "cannot install into $libdir; run: sudo make install PG_CONFIG=$PG_CONFIG" >&2
			exit 1
		fi
	)
}

# checksum of the installed library, to notice a reinstall during a run
installed_lib_sum() {
	md5sum "$($PG_CONFIG --pkglibdir)/stream_seq.so" 2>/dev/null | cut -d' ' -f1
}

as_pg() {
	if is_root; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

start_cluster() {
	local name=$1 port=$2 conf=${3:-}
	CLUSTER_DIR=$(mktemp -d "/tmp/stream_seq_$name.XXXXXX")
	trap lib_exit EXIT
	trap 'exit 130' INT TERM
	is_root && chown postgres: "$CLUSTER_DIR"
	as_pg $PGBIN/initdb -D "$CLUSTER_DIR/data" -U postgres -A trust --no-sync >"$CLUSTER_DIR/initdb.log" 2>&1 || {
		cat "$CLUSTER_DIR/initdb.log" >&2
		exit 1
	}
	cat >>"$CLUSTER_DIR/data/postgresql.conf" <<-EOF

		# throwaway cluster of bench/lib.sh
		port = $port
		listen_addresses = ''
		unix_socket_directories = '$CLUSTER_DIR'
		shared_preload_libraries = 'stream_seq'
		$conf
	EOF
	echo "== starting a throwaway cluster in $CLUSTER_DIR (port $port, socket only)"
	as_pg $PGBIN/pg_ctl -D "$CLUSTER_DIR/data" -l "$CLUSTER_DIR/server.log" -w -t 60 start >/dev/null || {
		cat "$CLUSTER_DIR/server.log" >&2
		exit 1
	}
	export PGHOST=$CLUSTER_DIR PGPORT=$port PGUSER=postgres PGDATABASE=postgres
	unset PGOPTIONS PGSERVICE PGPASSWORD
}

lib_exit() {
	local rc=$? pid
	if [ "$rc" != 0 ] && [ -n "$CLUSTER_DIR" ] && [ -f "$CLUSTER_DIR/server.log" ]; then
		echo "-- failed (exit $rc); last lines of the server log:" >&2
		tail -n 20 "$CLUSTER_DIR/server.log" >&2
	fi
	# background jobs of this script still running (reader, pgbench, ticker)
	for pid in $(jobs -pr); do
		kill "$pid" 2>/dev/null || true
	done
	stop_cluster
}

stop_cluster() {
	local dir=$CLUSTER_DIR
	[ -n "$dir" ] || return 0
	CLUSTER_DIR=""
	if [ -f "$dir/data/postmaster.pid" ]; then
		as_pg $PGBIN/pg_ctl -D "$dir/data" -m immediate -w stop >/dev/null 2>&1 || true
	fi
	if [ -n "${KEEP_SERVER_LOG:-}" ]; then
		cp "$dir/server.log" "$KEEP_SERVER_LOG" 2>/dev/null || true
	fi
	rm -rf "$dir"
}

psql_q() { $PGBIN/psql -X -q -v ON_ERROR_STOP=1 "$@"; }

same_index_tables() {
	cat <<-'SQL'
		CREATE EXTENSION stream_seq;
		CREATE TABLE ev_serial_pk (id bigserial PRIMARY KEY, seq bigserial UNIQUE,
		                           payload bigint NOT NULL DEFAULT 0);
		CREATE TABLE ev_stream_pk (id bigserial PRIMARY KEY, seq bigint,
		                           payload bigint NOT NULL DEFAULT 0);
		SELECT stream_seq.enable('ev_stream_pk');
	SQL
}

NODES=()
start_node() {
	local dir=$1 name=$2 bin=$3 port=$4 d=$1/$2
	as_pg "$bin/initdb" -D "$d" -U postgres -A trust --no-sync ${5:-} >"$dir/$name.initdb.log" 2>&1
	cat >>"$d/postgresql.conf" <<-EOF
		port = $port
		listen_addresses = ''
		unix_socket_directories = '$dir'
		shared_preload_libraries = 'stream_seq'
		autovacuum = off
		max_connections = 50
	EOF
	as_pg "$bin/pg_ctl" -D "$d" -l "$dir/$name.log" -w start >/dev/null
	NODES+=("$bin|$d")
	same_index_tables | $PGBIN/psql -X -q -h "$dir" -p "$port" -U postgres -d postgres \
		-v ON_ERROR_STOP=1 >/dev/null
}

stop_nodes() {
	local n
	for n in "${NODES[@]}"; do
		as_pg "${n%%|*}/pg_ctl" -D "${n#*|}" -m immediate -w stop >/dev/null 2>&1 || true
	done
	NODES=()
}

node_lsn() {
	$PGBIN/psql -X -At -h "$1" -p "$2" -U postgres -d postgres \
		-c "SELECT pg_current_wal_insert_lsn() - '0/0'"
}

write_run() {
	local dir=$1 port=$2 table=$3 sc=$4 rows=$5 secs=$6 start
	start=$(node_lsn "$dir" "$port")
	PGOPTIONS="-c synchronous_commit=$sc" $PGBIN/pgbench -n -M prepared -h "$dir" -p "$port" \
		-U postgres -c "${CLIENTS:-8}" -j 2 -T "$secs" -D rows="$rows" -D hold=0 \
		-f "$BENCH_DIR/pgbench/write_$table.sql" postgres >"$dir/pgbench.out" 2>&1
	awk -v wal=$(($(node_lsn "$dir" "$port") - start)) \
		'/^number of transactions actually processed:/ { n = $6 }
		 /^tps = / { tps = $3 }
		 END { printf "%.0f\t%.0f\n", tps, (n > 0 ? wal / n : 0) }' "$dir/pgbench.out"
}
