#!/usr/bin/env bash
# valgrind.sh ("make check-valgrind"): run the pg_regress and isolation
# suites against a server running under valgrind's memcheck, and fail if
# valgrind reports an error with a stream_seq frame in its stack.
#
#  1. As root, installs the Debian packages it needs (valgrind,
#     postgresql-15, postgresql-server-dev-15, libipc-run-perl, make, gcc);
#     otherwise says which are missing.
#  2. Builds and installs the extension (as "make test" does).
#  3. Creates a throwaway cluster in a new directory /tmp/stream_seq_valgrind.*
#     (as the "postgres" user when run as root: initdb refuses root) with
#     test/stream_seq.conf appended to postgresql.conf, its own port
#     ($VALGRIND_PGPORT, default 55530) and its own socket directory.
#  4. Starts the postmaster under valgrind (every backend is a fork of it, so
#     every backend runs under valgrind too, each with its own log file
#     valgrind.<pid>.log) and waits until it accepts connections: valgrind
#     makes everything 20-50 times slower, so this allows minutes.
#  5. Runs "make installcheck TEST_EXISTING_SERVER=1" for the regression
#     suite, then for the isolation suite, against that server, from a copy
#     of the source tree (results are written there, not into the checkout);
#     then stops it with -m immediate and starts it again under valgrind, so
#     that crash recovery replays stream_seq's WAL records (the redo a
#     standby runs).
#  6. Stops the server and scans the valgrind logs: prints every error whose
#     stack has a stream_seq frame, then counts the others (errors in
#     PostgreSQL or libraries alone), and exits 1 if there was a stream_seq
#     error, 2 if a suite failed or the server did not start, 0 otherwise.
#     The work directory (logs, cluster, suite results) is removed after a
#     clean run and kept otherwise.
#
# What memcheck can see here: Debian's PostgreSQL is not built with
# USE_VALGRIND, so the memory-context allocator (aset.c) does not tell
# valgrind about individual palloc chunks.  Valgrind knows only the large
# blocks malloc'd for memory contexts: it catches reads of never-written
# bytes (uninitialised values reaching a branch, a system call or the disk)
# and accesses outside malloc'd blocks and shared memory, but not an overrun
# into the next chunk of the same block, a use after pfree(), or a read of a
# recycled chunk's stale contents.  Leak checking is off: memory contexts are
# freed wholesale, and process exit frees the rest.
#
# Environment: VALGRIND_PGPORT (55530), VALGRIND_START_TIMEOUT seconds to
# wait for the server to accept connections (900), VALGRIND_EXTRA_OPTS
# (added to valgrind's options), KEEP_WORKDIR=1 to keep the work directory
# after a clean run too.
set -euo pipefail
cd "$(dirname "$0")/.."
srcdir=$PWD

port=${VALGRIND_PGPORT:-55530}
start_timeout=${VALGRIND_START_TIMEOUT:-900}
# Exit status of a process in which valgrind saw an error: 1, the status
# of a backend ending with FATAL, which the postmaster takes in its stride.
# Any other status would make it treat the backend as crashed and restart
# every session, failing the suites for an error in PostgreSQL itself.
# Errors are found in the logs (step 6), whatever the process's status.
# (The startup process is the exception: exiting with 1 stops the server
# from starting, which is why valgrind.supp has entries for errors Debian's
# build shows there.)
error_exitcode=1

#----------------------------------------------------------------------
# 1. packages
#----------------------------------------------------------------------
. "$(dirname "$0")/packages.sh"
need_packages valgrind postgresql-15 postgresql-server-dev-15 libipc-run-perl make gcc

bindir=/usr/lib/postgresql/15/bin
PG_CONFIG=$bindir/pg_config
export PATH="$bindir:$PATH"

#----------------------------------------------------------------------
# 2. build and install
#----------------------------------------------------------------------
echo "== building and installing stream_seq"
make -s PG_CONFIG=$PG_CONFIG
if [ "$(id -u)" != 0 ] && [ ! -w "$($PG_CONFIG --pkglibdir)" ]; then
	echo "cannot install into $($PG_CONFIG --pkglibdir); run as root, or run: sudo make install" >&2
	exit 2
fi
make -s PG_CONFIG=$PG_CONFIG install

# Commands that touch the cluster run as "postgres" when we are root.
if [ "$(id -u)" = 0 ]; then
	pguser=postgres
	as_pg() { runuser -u postgres -- "$@"; }
else
	pguser=$(id -un)
	as_pg() { "$@"; }
fi

#----------------------------------------------------------------------
# 3. throwaway cluster
#----------------------------------------------------------------------
work=$(mktemp -d /tmp/stream_seq_valgrind.XXXXXX)
chmod 755 "$work"
pgdata=$work/data
sockdir=$work/sock
mkdir "$sockdir" "$work/tree"
# the suites write their results into the tree they run from
tar -C "$srcdir" --exclude=./.git --exclude='./tmp_check*' --exclude=./results \
	-cf - . | tar -C "$work/tree" -xf -
cp "$srcdir/test/valgrind.supp" "$work/valgrind.supp"
[ "$(id -u)" = 0 ] && chown -R postgres "$work"

echo "== work directory $work"
as_pg initdb -D "$pgdata" -A trust -U "$pguser" --no-sync >"$work/initdb.log" 2>&1 || {
	cat "$work/initdb.log" >&2
	exit 2
}
{
	cat "$srcdir/test/stream_seq.conf"
	echo "port = $port"
	echo "listen_addresses = ''"
	echo "unix_socket_directories = '$sockdir'"
	# speed: nothing here needs durability or background vacuuming
	echo "fsync = off"
	echo "autovacuum = off"
	echo "log_line_prefix = '%m [%p] '"
} | as_pg tee -a "$pgdata/postgresql.conf" >/dev/null

server_pid=""
postmaster_status=0
stop_server()
{
	if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
		echo "== stopping the server (valgrind is slow: this can take a minute)"
		if ! as_pg pg_ctl -D "$pgdata" -m fast -t 600 -w stop >/dev/null 2>&1 &&
			! as_pg pg_ctl -D "$pgdata" -m immediate -w stop >/dev/null 2>&1; then
			# no postmaster.pid yet (still starting): SIGQUIT to the
			# postmaster, which is $server_pid or, as root, runuser's child
			local pm
			pm=$(ps -o pid= --ppid "$server_pid" | head -n 1)
			kill -QUIT "${pm:-$server_pid}" 2>/dev/null || true
		fi
	fi
	# the postmaster's valgrind writes its log as it exits
	if [ -n "$server_pid" ]; then
		wait "$server_pid" || postmaster_status=$?
	fi
	server_pid=""
}
trap stop_server EXIT

#----------------------------------------------------------------------
# 4. the server, under valgrind
#----------------------------------------------------------------------
valgrind_opts=(
	--tool=memcheck
	--trace-children=yes
	--leak-check=no
	--track-origins=yes
	--read-var-info=yes
	--num-callers=40
	"--error-exitcode=$error_exitcode"
	--suppressions="$work/valgrind.supp"
	--gen-suppressions=all
	--show-error-list=yes
	"--error-markers=VALGRINDERROR-BEGIN,VALGRINDERROR-END"
	--fullpath-after=
	--log-file="$work/valgrind.%p.log"
)
# shellcheck disable=SC2206
valgrind_opts+=(${VALGRIND_EXTRA_OPTS:-})

# start_server: start the postmaster under valgrind and wait until it
# accepts connections (after a crash: until recovery is over)
start_server()
{
	echo "== starting the server under valgrind on port $port (waiting up to ${start_timeout}s)"
	as_pg valgrind "${valgrind_opts[@]}" "$bindir/postgres" -D "$pgdata" \
		>>"$work/postmaster.log" 2>&1 &
	server_pid=$!

	local waited=0
	until as_pg pg_isready -q -h "$sockdir" -p "$port" -d postgres; do
		if ! kill -0 "$server_pid" 2>/dev/null; then
			echo "the server under valgrind exited during start-up; its log:" >&2
			tail -n 40 "$work/postmaster.log" >&2
			server_pid=""
			exit 2
		fi
		if [ "$waited" -ge "$start_timeout" ]; then
			echo "the server under valgrind did not accept connections within ${start_timeout}s" >&2
			tail -n 40 "$work/postmaster.log" >&2
			exit 2
		fi
		sleep 2
		waited=$((waited + 2))
	done
	echo "== server accepting connections after ${waited}s"
}
start_server

#----------------------------------------------------------------------
# 5. the suites
#----------------------------------------------------------------------
# TEST_EXISTING_SERVER makes the Makefile leave out --temp-instance; the
# isolation suite still gets --load-extension=stream_seq from it.  Each suite
# is its own make run, so that a failing regression suite does not keep the
# isolation suite from running.
suite_failed=0
run_suite()
{
	local name=$1
	shift
	echo "== $name suite"
	if ! (cd "$work/tree" &&
		as_pg env PGHOST="$sockdir" PGPORT="$port" PGUSER="$pguser" \
			make -s PG_CONFIG=$PG_CONFIG installcheck TEST_EXISTING_SERVER=1 \
			TAP_TESTS= PGHOST="$sockdir" PGPORT="$port" "$@"); then
		suite_failed=1
		for diffs in "$work/tree/regression.diffs"; do
			if [ -s "$diffs" ]; then
				echo "   differences: $diffs"
			fi
		done
	fi
	return 0
}
started=$(date +%s)
run_suite regression ISOLATION=
run_suite isolation REGRESS=
echo "== suites took $(( $(date +%s) - started ))s"

#----------------------------------------------------------------------
# 5b. crash recovery: the startup process replays, under valgrind, the
#     WAL records stream_seq wrote during the suites (its resource
#     manager's redo, as a standby runs it)
#----------------------------------------------------------------------
echo "== crash recovery under valgrind: writes after a checkpoint, immediate stop, start again"
# after the checkpoint, so that recovery replays them: numbers taken,
# and (after round_interval) a listing round of the lister worker
as_pg psql -X -q -h "$sockdir" -p "$port" -d postgres -v ON_ERROR_STOP=1 <<-'SQL' || suite_failed=1
	CHECKPOINT;
	CREATE EXTENSION IF NOT EXISTS stream_seq;
	CREATE TABLE valgrind_redo (payload int);
	SELECT stream_seq.enable('valgrind_redo') \gset
	INSERT INTO valgrind_redo SELECT g FROM generate_series(1, 100) g;
	BEGIN;
	INSERT INTO valgrind_redo VALUES (0);
	SAVEPOINT s;
	INSERT INTO valgrind_redo VALUES (1);
	ROLLBACK TO s;
	COMMIT;
	SELECT pg_sleep(6) \gset
SQL
as_pg pg_ctl -D "$pgdata" -m immediate -w stop >/dev/null 2>&1 || true
wait "$server_pid" || true
server_pid=""
start_server
if ! grep -q "redo done" "$work/postmaster.log" && ! grep -q "redo done" "$pgdata"/log/* 2>/dev/null; then
	echo "   (the server log does not say \"redo done\": see $work/postmaster.log)"
fi

#----------------------------------------------------------------------
# 6. stop, then scan the valgrind logs
#----------------------------------------------------------------------
stop_server
trap - EXIT

# An error is the text between the markers; it involves stream_seq when a
# frame is in stream_seq.so or in one of its source files (the build
# directory's path: --fullpath-after= prints full paths; with debug
# information valgrind names the source file, not the object).
report=$work/valgrind-errors.txt
: >"$report"
shopt -s nullglob
logs=("$work"/valgrind.*.log)
ext_errors=0
other_errors=0
other_kinds=$(mktemp)
for log in "${logs[@]}"; do
	counts=$(awk -v srcdir="$srcdir/src/" -v report="$report" -v kinds="$other_kinds" -v logfile="$log" '
		/VALGRINDERROR-BEGIN/ { inside = 1; block = ""; mine = 0; first = ""; next }
		/VALGRINDERROR-END/ {
			inside = 0
			if (mine) {
				ext++
				print "---- " logfile >> report
				printf "%s", block >> report
			} else {
				other++
				print first >> kinds
			}
			next
		}
		inside {
			line = $0
			sub(/^==[0-9]+== ?/, "", line)
			block = block line "\n"
			if (first == "" && line != "")
				first = line
			if (index($0, "stream_seq.so") || index($0, srcdir))
				mine = 1
		}
		END { printf "%d %d\n", ext, other }
	' "$log")
	ext_errors=$((ext_errors + ${counts% *}))
	other_errors=$((other_errors + ${counts#* }))
done

echo
if [ "$ext_errors" -gt 0 ]; then
	echo "== valgrind errors with a stream_seq frame:"
	cat "$report"
fi
if [ "$other_errors" -gt 0 ]; then
	echo "== valgrind errors without a stream_seq frame (PostgreSQL or libraries), by kind:"
	sort "$other_kinds" | uniq -c | sort -rn
	echo "   (stacks in $work/valgrind.<pid>.log, between VALGRINDERROR-BEGIN and -END)"
fi
rm -f "$other_kinds"
# which suppressions were used, over all processes (--show-error-list)
suppressed=$(cat "${logs[@]}" /dev/null | awk '
	/used_suppression:/ { n[$4] += $3 }
	END { for (s in n) printf "%s=%d ", s, n[s] }')
if [ -n "$suppressed" ]; then
	echo "== suppressed (valgrind.supp): $suppressed"
fi
if [ "$postmaster_status" != 0 ]; then
	echo "== the postmaster (under valgrind) exited with status $postmaster_status"
fi

status=0
[ "$suite_failed" = 1 ] && status=2
[ "$ext_errors" -gt 0 ] && status=1
echo "valgrind: ${#logs[@]} processes, $ext_errors error(s) in stream_seq, $other_errors other error(s); suites $([ "$suite_failed" = 1 ] && echo FAILED || echo passed); logs in $work"

if [ "$status" = 0 ] && [ "${KEEP_WORKDIR:-0}" != 1 ]; then
	rm -rf "$work"
	echo "(clean run: work directory removed; KEEP_WORKDIR=1 keeps it)"
fi
exit $status
