#!/usr/bin/env bash
# instructions_per_row.sh: CPU instructions a stream row costs, against a
# bigserial row, counted by callgrind (deterministic, unlike timings).
#
#   bench/instructions_per_row.sh [ROWS]     default: 2000
#
# One throwaway data directory with the same-index tables of lib.sh (a
# bigserial table and a stream table, each with its primary key and the
# unique index on seq), plus ev_serial_trig: the bigserial table with a
# BEFORE INSERT row trigger in C (contrib's insert_username), which makes
# COPY insert one row at a time (PostgreSQL's CopyFrom inserts rows singly
# into a table with any row trigger before the insert; stream tables of
# 0.6.0 had one).  Each case runs in a single-user backend (postgres
# --single, the library preloaded, fsync off) under valgrind
# --tool=callgrind, twice: with ROWS and with 2 * ROWS rows; the
# difference divided by ROWS is the cost of one row without the backend's
# start and end.  Cases: 1-row transactions, 10-row transactions and one
# COPY, for the bigserial table and the stream table with its default
# write (the number written into the stored version, page by page) and
# with stream_seq.in_place off (every row numbered by an ordinary update);
# COPY also for ev_serial_trig.  Prints instructions per row and the ratio
# to bigserial.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

ROWS=${1:-2000}
need_packages postgresql-15 postgresql-server-dev-15 make gcc valgrind
build_install

WORK=$(mktemp -d /tmp/stream_seq_ir.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
is_root && chown postgres: "$WORK"
DATA=$WORK/data
as_pg "$PGBIN/initdb" -D "$DATA" -U postgres -A trust --no-sync >"$WORK/initdb.log" 2>&1
cat >>"$DATA/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$WORK'
port = 55581
shared_preload_libraries = 'stream_seq'
autovacuum = off
fsync = off
EOF
as_pg "$PGBIN/pg_ctl" -D "$DATA" -l "$WORK/server.log" -w start >/dev/null
{
	same_index_tables
	cat <<-'SQL'
		CREATE EXTENSION insert_username;
		CREATE TABLE ev_serial_trig (id bigserial PRIMARY KEY, seq bigserial UNIQUE,
		                             payload bigint NOT NULL DEFAULT 0, by_user text);
		CREATE TRIGGER single_rows BEFORE INSERT ON ev_serial_trig
		    FOR EACH ROW EXECUTE FUNCTION insert_username(by_user);
	SQL
} | $PGBIN/psql -X -q -h "$WORK" -p 55581 -U postgres -d postgres -v ON_ERROR_STOP=1 >/dev/null
as_pg "$PGBIN/pg_ctl" -D "$DATA" -w stop >/dev/null
seq 1 $((2 * ROWS)) >"$WORK/rows.txt"
is_root && chown -R postgres: "$WORK"

# script TABLE SHAPE N: the statements of N rows, one per line (the
# single-user backend runs each line as a statement); the INSERT is
# prepared once, as pgbench -M prepared does in compare_builds.sh
script() {
	local table=$1 shape=$2 n=$3
	if [ "$shape" = copy ]; then
		head -n "$n" "$WORK/rows.txt" >"$WORK/copy.txt"
		echo "COPY ev_$table (payload) FROM '$WORK/copy.txt';"
		return
	fi
	echo "PREPARE ins(bigint) AS INSERT INTO ev_$table (payload) VALUES (\$1);"
	awk -v n="$n" -v per="$shape" 'BEGIN {
		for (i = 0; i < n; i += per) {
			if (per > 1) print "BEGIN;"
			for (j = 0; j < per; j++) print "EXECUTE ins(" i + j ");"
			if (per > 1) print "COMMIT;"
		} }' 
}

# instructions TABLE SHAPE N IN_PLACE: instructions of one single-user
# backend that writes N rows
instructions() {
	local out=$WORK/callgrind.out
	script "$1" "$2" "$3" >"$WORK/script.sql"
	is_root && chown postgres: "$WORK/script.sql" "$WORK"/copy.txt 2>/dev/null || true
	rm -f "$out"
	as_pg valgrind --tool=callgrind --callgrind-out-file="$out" \
		"$PGBIN/postgres" --single -D "$DATA" -c stream_seq.in_place="$4" \
		postgres <"$WORK/script.sql" >"$WORK/single.log" 2>"$WORK/valgrind.log"
	if grep -q 'ERROR' "$WORK/single.log"; then
		cat "$WORK/single.log" >&2
		exit 1
	fi
	awk '/^summary:/ { print $2 }' "$out"
}

# per_row TABLE SHAPE IN_PLACE: instructions per row, start and end left out
per_row() {
	local a b
	a=$(instructions "$1" "$2" "$ROWS" "$3")
	b=$(instructions "$1" "$2" $((2 * ROWS)) "$3")
	echo $(((b - a) / ROWS))
}

echo "== instructions per row (callgrind, $ROWS and $((2 * ROWS)) rows per case, single-user backend)"
printf '%-22s %12s %12s %12s %12s %10s %10s\n' case bigserial 'C trigger' 'page write' \
	'update' 'page/big' 'upd/big'
for shape in 1 10 copy; do
	serial=$(per_row serial_pk "$shape" on)
	trig=-
	[ "$shape" = copy ] && trig=$(per_row serial_trig copy on)
	page=$(per_row stream_pk "$shape" on)
	update=$(per_row stream_pk "$shape" off)
	label="$shape-row transactions"
	[ "$shape" = copy ] && label="COPY"
	printf '%-22s %12s %12s %12s %12s %10.2f %10.2f\n' "$label" "$serial" "$trig" "$page" "$update" \
		"$(echo "$page / $serial" | bc -l)" "$(echo "$update / $serial" | bc -l)"
done
