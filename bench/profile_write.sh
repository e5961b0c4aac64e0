#!/usr/bin/env bash
# profile_write.sh: instructions per transaction of the commit-time write,
# counted by callgrind (repeatable whatever else the machine does).
#
#   bench/profile_write.sh [ROWS]        (default 10 rows per transaction)
#
# A single-user backend (postgres --single, stream_seq preloaded) runs
# INSERT statements, each its own transaction of ROWS rows (not a
# procedure's COMMIT, which takes the ordinary commit-time update), into "plain" (id
# bigserial PRIMARY KEY, seq bigserial UNIQUE, payload) and into "stream"
# (id bigserial PRIMARY KEY, seq numbered by stream_seq, payload): the same
# indexes.  Each is run under callgrind with 50 and with 350 transactions;
# the difference divided by 300 is what one transaction costs, without the
# backend's start.  Prints both and their ratio, and keeps the 350-run
# profiles for callgrind_annotate.  Needs valgrind; as root it installs the
# Debian packages and builds and installs the extension (bench/lib.sh).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

ROWS=${1:-10}
need_packages postgresql-15 valgrind
build_install

dir=$(mktemp -d /tmp/stream_seq_profile.XXXXXX)
is_root && chown postgres: "$dir"
as_pg $PGBIN/initdb -D "$dir/data" -U postgres -A trust --no-sync >"$dir/initdb.log"
printf "shared_preload_libraries = 'stream_seq'\nautovacuum = off\n" >>"$dir/data/postgresql.conf"
as_pg $PGBIN/postgres --single -D "$dir/data" postgres >"$dir/setup.log" 2>&1 <<'SQL'
CREATE EXTENSION stream_seq;
CREATE TABLE plain (id bigserial PRIMARY KEY, seq bigserial UNIQUE, payload bigint NOT NULL DEFAULT 0);
CREATE TABLE stream (id bigserial PRIMARY KEY, seq bigint, payload bigint NOT NULL DEFAULT 0);
SELECT stream_seq.enable('stream');
INSERT INTO plain (payload) SELECT 0 FROM generate_series(1, 200);
INSERT INTO stream (payload) SELECT 0 FROM generate_series(1, 200);
SQL

declare -A per
for tab in plain stream; do
	for n in 50 350; do
		for _ in $(seq "$n"); do
			echo "INSERT INTO $tab (payload) SELECT 0 FROM generate_series(1, $ROWS)"
		done |
			as_pg valgrind --tool=callgrind --callgrind-out-file="$dir/$tab.$n.out" \
				$PGBIN/postgres --single -D "$dir/data" postgres >/dev/null 2>"$dir/$tab.$n.log"
	done
	a=$(awk '/^totals:/ {print $2}' "$dir/$tab.50.out")
	b=$(awk '/^totals:/ {print $2}' "$dir/$tab.350.out")
	per[$tab]=$(((b - a) / 300))
done
printf '%d-row transactions, instructions per transaction (callgrind):\n' "$ROWS"
printf '  plain (bigserial PK + bigserial UNIQUE): %d\n' "${per[plain]}"
printf '  stream (bigserial PK + stream_seq):      %d\n' "${per[stream]}"
awk -v s="${per[stream]}" -v p="${per[plain]}" -v r="$ROWS" \
	'BEGIN { printf "  ratio %.2f; %.0f more per row\n", s / p, (s - p) / r }'
echo "profiles: $dir/plain.350.out, $dir/stream.350.out (callgrind_annotate --inclusive=yes)"
