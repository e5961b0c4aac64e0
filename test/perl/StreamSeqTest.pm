
# Copyright (c) stream_seq contributors
#
# StreamSeqTest.pm: the helpers the TAP tests in test/t share, so that each
# test file holds only its scenario:
#
#  - the top directory of the source tree;
#  - a node that preloads stream_seq, and a streaming standby of one;
#  - queries on a node: a result, one row, one value, or the error a
#    statement ends with (SQLSTATE, message, hint) instead of the end of
#    the script;
#  - a write that must succeed, checked as a test;
#  - the invariant of every stream table: every committed row has a number
#    and no number is used twice;
#  - amcheck over every table of a database: each btree index against the
#    heap (heapallindexed) and the heap itself;
#  - stopping and starting a node, and the server log since a point;
#  - commands (psql, pgbench) run in the background, and waiting for them;
#  - a psql session on any connection string (through a pooler, say) whose
#    statements are sent one at a time, each returning its output and its
#    error's SQLSTATE, for workers that decide what to send next;
#  - a pgbouncer of the test's own in front of a node;
#  - Perl code run in a child process of its own process group, which the
#    test can kill with SIGKILL (client and all) and wait for;
#  - the database of the operations tests (streams, consumers, a group,
#    sealed partitions, made by an ordinary role) and its state as text,
#    to compare after a dump, a restore or an upgrade.
#
# The Makefile puts this directory on prove's include path (PROVE_FLAGS).

package StreamSeqTest;

use strict;
use warnings;

use Exporter 'import';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(usleep time);
use POSIX ();
use Cwd ();

our @EXPORT = qw(
  new_node new_standby slow_wal_conf
  query row val psql_result try_sql sqlstate write_ok
  check_unique amcheck_problems
  stop_start log_offset log_since
  bg_run bg_psql bg_pgbench wait_done slow_commit_options pulse_commits
  session start_pgbouncer stop_pgbouncer
  bg_fork kill_group wait_pid group_worker
  build_ops_scenario ops_state ops_state_parts ops_key_order_read
  source_root
);

# The top directory of the source tree (where README.md is), found from
# this file's place in it: PostgreSQL 15's PGXS tells the tests in TESTDIR,
# 18's does not.
sub source_root
{
	my $dir = __FILE__;
	$dir =~ s{/[^/]*$}{};
	return Cwd::abs_path("$dir/../..");
}

# A new node named "name", initialized (with the options "init", such as
# allows_streaming => 1), preloading stream_seq, with "conf" appended to
# its postgresql.conf, and started.  The retention workers are off
# (stream_seq.retention_interval = 0) unless "conf" turns them on: a
# worker connecting to every database each minute would take snapshots
# and connections behind the back of tests that count them.
sub new_node
{
	my ($name, $conf, %init) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%init);
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries = 'stream_seq'\n"
		  . "stream_seq.retention_interval = 0\n" . ($conf // ''));
	$node->start;
	return $node;
}

# A streaming standby named "name" of node "primary" (initialized with
# allows_streaming), made from a new base backup, started, and caught up
# with the primary.
sub new_standby
{
	my ($primary, $name) = @_;
	$primary->backup("${name}_backup");
	my $standby = PostgreSQL::Test::Cluster->new($name);
	$standby->init_from_backup($primary, "${name}_backup", has_streaming => 1);
	$standby->start;
	$primary->wait_for_catchup($standby, 'replay');
	return $standby;
}

# postgresql.conf lines under which asynchronous commits stay unflushed
# until the WAL writer's next round (at most every 10 s, the maximum), a
# synchronous commit, or a full WAL page: nothing else flushes WAL behind
# the test's back.
sub slow_wal_conf
{
	return qq{
wal_writer_delay = 10000ms
autovacuum = off
bgwriter_lru_maxpages = 0
checkpoint_timeout = 1h
};
}

# Result of "sql" in database "db" (default postgres), without the empty
# lines that calls of void functions print; or, if it fails, "psql exited
# with RC: " and its error output (with SQLSTATEs).  psql, not safe_psql,
# so that a failure fails a check instead of ending the script.
sub query
{
	my ($node, $sql, $db) = @_;
	my ($rc, $out, $err) = $node->psql($db // 'postgres', $sql,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	return "psql exited with $rc: $err" if $rc != 0;
	return join("\n", grep { $_ ne '' } split /\n/, $out);
}

# The one-row result of "sql" as a list of its columns.
sub row
{
	my ($node, $sql) = @_;
	return split /\|/, $node->safe_psql('postgres', $sql);
}

# The one-value result of "sql".
sub val
{
	my ($node, $sql) = @_;
	return $node->safe_psql('postgres', $sql);
}

# Runs "sql" in database "db" (default postgres) with psql, stopping at the
# first error; returns a hash of psql's exit status (rc), output (out) and
# error output (err), and of the first error: its SQLSTATE (sqlstate),
# message and hint (undef where there is none).
sub psql_result
{
	my ($node, $sql, $db) = @_;
	my ($rc, $out, $err) = $node->psql($db // 'postgres', $sql,
		extra_params => [ '-v', 'VERBOSITY=verbose' ]);
	my %r = (rc => $rc, out => $out, err => $err);
	if ($err =~ /ERROR:\s+([0-9A-Z]{5}):\s+([^\n]*)/)
	{
		@r{qw(sqlstate message)} = ($1, $2);
		$r{hint} = $1 if $err =~ /HINT:\s+([^\n]*)/;
	}
	return \%r;
}

# Runs "sql"; returns "ok", or "SQLSTATE: message" of the error it ended
# with, or "psql exited with RC: " and the error output if psql failed
# without an error message (the session died, say).
sub try_sql
{
	my ($node, $sql, $db) = @_;
	my $r = psql_result($node, $sql, $db);
	return 'ok' if $r->{rc} == 0;
	return "$r->{sqlstate}: $r->{message}" if defined $r->{sqlstate};
	return "psql exited with $r->{rc}: $r->{err}";
}

# Runs "sql"; returns "ok", or the SQLSTATE of the error it ended with (or
# what try_sql() returns when there is none).
sub sqlstate
{
	my ($node, $sql, $db) = @_;
	my $result = try_sql($node, $sql, $db);
	return $result =~ /^([0-9A-Z]{5}): / ? $1 : $result;
}

# A write that must succeed, as a test named "what": a failure (a number
# used twice, refused by a unique index, say) is a failed test, not the end
# of the script.
sub write_ok
{
	my ($node, $sql, $what) = @_;
	my ($rc, $out, $err) = $node->psql('postgres', $sql);
	is($rc, 0, $what) or diag $err;
}

# The invariant of stream table "tab", as two tests named after "what":
# every committed row has a number (not NULL, not the placeholder 0), and
# no number is used twice.
sub check_unique
{
	my ($node, $tab, $what) = @_;
	my ($total, $distinct, $nulls) = row($node,
		"SELECT count(*), count(DISTINCT seq) FILTER (WHERE seq > 0), count(*) FILTER (WHERE seq IS NULL OR seq <= 0) FROM $tab");
	is($nulls, 0, "$what: every committed row of $tab has a number");
	is($distinct, $total - $nulls, "$what: no number is used twice in $tab");
}

# What amcheck finds wrong in database "db" (default postgres), as text;
# '' when nothing.  Every btree index of every permanent table, partitions
# included, is checked against its heap (bt_index_check with
# heapallindexed: every heap tuple a snapshot sees has its entry, at the
# root of its HOT chain), and every heap with verify_heapam.  Installs
# amcheck in the database if needed.  Works on a standby too.
sub amcheck_problems
{
	my ($node, $db) = @_;
	$db //= 'postgres';
	$node->safe_psql($db, 'CREATE EXTENSION IF NOT EXISTS amcheck')
	  unless $node->safe_psql($db, 'SELECT pg_is_in_recovery()') eq 't';
	my ($rc, $out, $err) = $node->psql($db, q{
WITH heaps AS (
  SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
   WHERE c.relkind IN ('r', 'm', 't') AND c.relpersistence = 'p'
     AND n.nspname NOT IN ('pg_catalog', 'information_schema')),
indexes AS (
  SELECT i.indexrelid FROM pg_index i JOIN heaps h ON h.oid = i.indrelid
    JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
   WHERE a.amname = 'btree' AND i.indisvalid AND i.indisready),
checked AS (
  SELECT count(bt_index_check(indexrelid, true)) AS n FROM indexes)
SELECT coalesce(string_agg(format('%s block %s offset %s: %s', h.oid::regclass,
                                  v.blkno, v.offnum, v.msg), E'
'), '')
  FROM checked, heaps h, LATERAL verify_heapam(h.oid) v});
	return $rc == 0 ? $out : "amcheck failed: $err";
}

# Stops the node in "mode" (fast, immediate) and starts it again.
sub stop_start
{
	my ($node, $mode) = @_;
	$node->stop($mode);
	$node->start;
}

# Where the server log ends now, for log_since().
sub log_offset
{
	my ($node) = @_;
	return -s $node->logfile;
}

# The server log from byte "offset" on.
sub log_since
{
	my ($node, $offset) = @_;
	return slurp_file($node->logfile, $offset);
}

# Starts a command in the background; returns its handle and its output
# and error output (references to strings that fill as it runs).
sub bg_run
{
	my (@cmd) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(\@cmd, '<', \undef, '>', \$out, '2>', \$err);
	return { handle => $h, out => \$out, err => \$err };
}

# psql in the background, each statement of "sql" sent on its own (-c),
# stopping at the first error.
sub bg_psql
{
	my ($node, @sql) = @_;
	return bg_run($node->installed_command('psql'), '-XAtq', '-v',
		'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'),
		map { ('-c', $_) } @sql);
}

# Slow commits: a session started with the libpq options slow_commit_options()
# waits inside each commit, once its rows have their numbers, while the
# pulsing session that pulse_commits() starts in the background holds
# advisory lock 4243: up to 4 ms at a time, for "seconds" seconds
# (stream_seq.hold_after_numbering; a user's deferred trigger runs before
# the numbers exist).  Later numbers then often become visible first, and
# only the horizon keeps readers from skipping.
use constant SLOW_COMMIT_LOCK => 4243;

sub slow_commit_options
{
	return '-c stream_seq.hold_after_numbering=' . SLOW_COMMIT_LOCK;
}

sub pulse_commits
{
	my ($node, $seconds) = @_;
	my $lock = SLOW_COMMIT_LOCK;
	return bg_psql($node, qq{
DO \$pulse\$
DECLARE
  deadline timestamptz := clock_timestamp() + $seconds * interval '1 second';
BEGIN
  WHILE clock_timestamp() < deadline LOOP
    PERFORM pg_advisory_lock($lock);
    PERFORM pg_sleep(random() * 0.004);
    PERFORM pg_advisory_unlock($lock);
    COMMIT;
    PERFORM pg_sleep(0.002);
    COMMIT;
  END LOOP;
END \$pulse\$});
}

# pgbench in the background with the arguments "args", its sessions given
# the libpq "options" (PGOPTIONS; undef: none).
sub bg_pgbench
{
	my ($node, $options, @args) = @_;
	local %ENV = %ENV;
	$ENV{PGOPTIONS} = $options if defined $options;
	return bg_run($node->installed_command('pgbench'), '-n',
		'-h', $node->host, '-p', $node->port, @args, 'postgres');
}

# Waits for a background command; returns its exit status, or -1 if it had
# to be killed after "limit" seconds (default: the TAP timeout).
sub wait_done
{
	my ($job, $limit) = @_;
	$limit //= $PostgreSQL::Test::Utils::timeout_default;
	my $h = $job->{handle};
	my $deadline = time() + $limit;
	while ($h->pumpable && time() < $deadline)
	{
		$h->pump_nb;
		usleep(50_000);
	}
	my $timed_out = $h->pumpable;
	$h->kill_kill if $timed_out;
	$h->finish;
	return $timed_out ? -1 : $h->result(0);
}

# A psql session of "node"'s psql on libpq connection string "connstr" (a
# pooler's, say): a StreamSeqTest::Session (below), connected.
sub session
{
	my ($node, $connstr) = @_;
	return StreamSeqTest::Session->new($node->installed_command('psql'),
		$connstr);
}

# pgbouncers and children this process started: stopped and killed at its
# end if the test did not do it itself (a test that died half-way)
my @bouncers;
my %children;
my $starter_pid = $$;

# A pgbouncer in front of "node", run in the foreground by the test:
# pool_mode = transaction, one database entry "postgres" with
# default_pool_size "pool_size" (default 20), listening on 127.0.0.1 on a
# free port and on a socket in a directory of its own, auth_type = trust
# for the node's superuser and the roles of "users" (a list, default none),
# its log in the test's log directory ("name"_pgbouncer.log, "name"
# defaulting to the node's).  "path": the
# pgbouncer program (default /usr/sbin/pgbouncer, where Debian installs
# it).  "settings": more lines of its [pgbouncer] section (a list).  Returns a hash: port, dir (its socket directory), log, version, and
# connstr, the connection string of its clients (over TCP, as
# applications connect).
sub start_pgbouncer
{
	my ($node, %opt) = @_;
	my $bin = $opt{path} // '/usr/sbin/pgbouncer';
	my $pool = $opt{pool_size} // 20;
	my $name = $opt{name} // $node->name;
	my $dir = PostgreSQL::Test::Utils::tempdir_short();
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $user = $node->safe_psql('postgres', 'SELECT current_user');
	my $log = "$PostgreSQL::Test::Utils::log_path/${name}_pgbouncer.log";
	my ($host, $node_port) = ($node->host, $node->port);

	open(my $fh, '>', "$dir/userlist.txt") or die "userlist.txt: $!";
	print $fh qq{"$_" ""\n} foreach ($user, @{ $opt{users} // [] });
	close $fh;
	open($fh, '>', "$dir/pgbouncer.ini") or die "pgbouncer.ini: $!";
	print $fh join("\n",
		'[databases]',
		"postgres = host=$host port=$node_port dbname=postgres",
		'',
		'[pgbouncer]',
		'listen_addr = 127.0.0.1',
		"listen_port = $port",
		"unix_socket_dir = $dir",
		'auth_type = trust',
		"auth_file = $dir/userlist.txt",
		"admin_users = $user",
		'pool_mode = transaction',
		"default_pool_size = $pool",
		'max_client_conn = 200',
		'ignore_startup_parameters = extra_float_digits,options',
		"logfile = $log", @{ $opt{settings} // [] }, '');
	close $fh;

	my ($out, $err) = ('', '');
	my $h = IPC::Run::start([ $bin, "$dir/pgbouncer.ini" ],
		'<', \undef, '>', \$out, '2>', \$err);
	my $bouncer = {
		handle => $h,
		port => $port,
		dir => $dir,
		log => $log,
		connstr => "host=127.0.0.1 port=$port dbname=postgres user=$user",
	};
	push @bouncers, $bouncer;

	# ready once its admin console answers
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		$h->pump_nb;
		die "pgbouncer exited: $out$err" unless $h->pumpable;
		my ($o, $e) = ('', '');
		IPC::Run::run(
			[
				$node->installed_command('psql'), '-XAtq',
				'-d', "host=$dir port=$port dbname=pgbouncer user=$user",
				'-c', 'SHOW VERSION'
			],
			'<', \undef, '>', \$o, '2>', \$e);
		if ($? == 0 && $o =~ /(\d+\.\d+(?:\.\d+)?)/)
		{
			$bouncer->{version} = $1;
			return $bouncer;
		}
		usleep(100_000);
	}
	die "pgbouncer did not start: $out$err";
}

# Stops a pgbouncer of start_pgbouncer() (SIGINT: it waits for its clients'
# transactions to end, then exits; SIGKILL after 10 s).
sub stop_pgbouncer
{
	my ($bouncer) = @_;
	my $h = delete $bouncer->{handle};
	return unless $h;
	$h->signal('INT') if $h->pumpable;
	my $deadline = time() + 10;
	while ($h->pumpable && time() < $deadline)
	{
		$h->pump_nb;
		usleep(50_000);
	}
	$h->kill_kill if $h->pumpable;
	$h->finish;
}

# Runs "code" in a child process, in a process group of its own, its
# output and error output appended to file "log"; the child exits with the
# number "code" returns (1 if it dies), without running this process's END
# blocks (which would stop the test's nodes).  Returns the child's pid.
#
# A test killed from outside (a timeout, ^C, the OOM killer) runs no END
# block, and a child that loops until the test tells it to stop would run
# on for ever: so a watchdog in the child's group kills the group once the
# test's process is gone, and ends with the child.  It polls
# rather than signals, as a signal would cut the child's sleeps short.
sub bg_fork
{
	my ($log, $code) = @_;
	my $test_pid = $$;
	STDOUT->flush;
	STDERR->flush;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		POSIX::setpgid(0, 0);
		my $child_pid = $$;
		my $watchdog = fork();
		if (defined $watchdog && $watchdog == 0)
		{
			sleep 1 while getppid() == $child_pid && kill(0, $test_pid);
			kill 'KILL', -$child_pid if getppid() == $child_pid;
			POSIX::_exit(0);
		}
		my $rc = 1;
		if (open(STDOUT, '>>', $log) && open(STDERR, '>&', \*STDOUT))
		{
			STDOUT->autoflush(1);
			$rc = eval { $code->() };
			if (!defined $rc)
			{
				print STDERR "died: $@";
				$rc = 1;
			}
		}
		if (defined $watchdog)
		{
			kill 'KILL', $watchdog;
			waitpid($watchdog, 0);
		}
		POSIX::_exit($rc);
	}
	# here too, so that the group exists as soon as fork() returns
	POSIX::setpgid($pid, $pid);
	$children{$pid} = 1;
	return $pid;
}

# A worker of consumer groups, for the TAP tests of groups: until file
# "stop" exists, it claims each group of "groups" (of stream "stream") as
# worker "name" with a lease of 2 s, through a session on "connstr", and
# for each slot it holds runs the statement work->(group, slot, token)
# returns, a transaction each, counting the rows that statement says it
# applied.  An error whose SQLSTATE matches "expected" (a fence: the lease
# was lost) ends that group's turn; any other ends the worker with 1.
# Stopped, it releases its slots and returns 0.  Its progress goes to
# standard output (bg_fork()'s log).
sub group_worker
{
	my (%a) = @_;
	my ($name, $stream) = ($a{name}, $a{stream});
	my $s = session($a{node}, $a{connstr});
	my %n = (rounds => 0, rows => 0, fenced => 0);
	print "$name: started, pid $$\n";
	while (!-e $a{stop})
	{
		my $done = 0;
		for my $grp (@{ $a{groups} })
		{
			my $r = $s->query(
				qq{SELECT slot, token FROM stream_seq.claim('$stream', '$grp', '$name', '2 s')});
			if (defined $r->{sqlstate})
			{
				print "$name: claim $grp: $r->{sqlstate} $r->{message}\n";
				return 1 unless $r->{sqlstate} =~ $a{expected};
				next;
			}
			for my $held (grep { $_ ne '' } split /\n/, $r->{out})
			{
				my ($slot, $token) = split /\|/, $held;
				$r = $s->query($a{work}->($grp, $slot, $token));
				if (defined $r->{sqlstate})
				{
					print "$name: work $grp slot $slot token $token: $r->{sqlstate} $r->{message}\n";
					return 1 unless $r->{sqlstate} =~ $a{expected};
					$n{fenced}++;
					last;
				}
				$done += $r->{out};
			}
		}
		$n{rounds}++;
		$n{rows} += $done;
		usleep(20_000) unless $done;
	}
	$s->query("SELECT stream_seq.release('$stream', '$_', '$name')")
	  foreach @{ $a{groups} };
	$s->close;
	print "$name: done: " . join(' ', map { "$_=$n{$_}" } sort keys %n) . "\n";
	return 0;
}

# Kills child "pid" of bg_fork() and its process group (the psql it runs,
# say) with SIGKILL.
sub kill_group
{
	my ($pid) = @_;
	kill 'KILL', -$pid;
	kill 'KILL', $pid;
}

# Waits for child "pid" of bg_fork() to exit; returns its exit status, or
# minus the signal that ended it (-9: SIGKILL), or undef if it still runs
# after "limit" seconds (default: the TAP timeout).
sub wait_pid
{
	my ($pid, $limit) = @_;
	$limit //= $PostgreSQL::Test::Utils::timeout_default;
	my $deadline = time() + $limit;
	while (1)
	{
		my $r = waitpid($pid, POSIX::WNOHANG());
		if ($r == $pid || $r == -1)
		{
			delete $children{$pid};
			return undef if $r == -1;
			return -($? & 127) if $? & 127;
			return $? >> 8;
		}
		return undef if time() >= $deadline;
		usleep(20_000);
	}
}

# The state a DBA's tools must carry (test/t/025_operations.pl,
# 029_major_upgrade.pl): built in database postgres of "node" by an
# ordinary role "app" that owns a plain stream "events" and a partitioned
# stream "pevents" (partitions by day, sealed), consumers ("billing" at 20,
# "archive"; "reporting" of role "reader"), and a group "workers" of 2
# slots, keyed by id, with a slot leased by worker w1, a parked row and a
# retry policy (a row scheduled for a retry, a dead letter); and a stream
# "audit" with a time column.
sub build_ops_scenario
{
	my ($node) = @_;
	$node->safe_psql('postgres', q{
CREATE ROLE app LOGIN;
CREATE ROLE reader LOGIN;
CREATE EXTENSION stream_seq;
GRANT USAGE ON SCHEMA stream_seq TO app, reader;
GRANT CREATE ON SCHEMA public TO app;
SET ROLE app;
CREATE TABLE events (id bigserial PRIMARY KEY, payload text);
SELECT stream_seq.enable('events');
CREATE TABLE pevents (id bigserial, day int NOT NULL, payload text,
                      PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
CREATE TABLE pevents_1 PARTITION OF pevents FOR VALUES FROM (1) TO (2);
CREATE TABLE pevents_2 PARTITION OF pevents FOR VALUES FROM (2) TO (3);
CREATE TABLE pevents_3 PARTITION OF pevents FOR VALUES FROM (3) TO (4);
SELECT stream_seq.enable('pevents');
INSERT INTO events (payload) SELECT 'e' || g FROM generate_series(1, 50) g;
INSERT INTO pevents (day, payload) SELECT 1, 'd1' FROM generate_series(1, 10);
INSERT INTO pevents (day, payload) SELECT 2, 'd2' FROM generate_series(1, 10);
INSERT INTO pevents (day, payload) SELECT 3, 'd3' FROM generate_series(1, 5);
SELECT stream_seq.create_consumer('events', 'billing');
SELECT stream_seq.advance('events', 'billing', 20);
SELECT stream_seq.create_consumer('pevents', 'archive');
SELECT stream_seq.create_group('events', 'workers', 'id', 2);
GRANT SELECT ON events TO reader;
});
	is(val($node, 'SELECT stream_seq.seal_partitions(\'pevents\') > 0'), 't',
		'partitions of pevents sealed');
	# the group: one worker holds a lease, reads its page, parks a row, and
	# finishes the rest
	$node->safe_psql('postgres', q{
SET ROLE app;
DO $$
DECLARE
    c record;
    r record;
    parked boolean := false;
BEGIN
    SELECT * INTO c FROM stream_seq.claim('events', 'workers', 'w1', '1 hour') LIMIT 1;
    FOR r IN SELECT * FROM stream_seq.read_slot('events', 'workers', c.slot, c.token, 10) LOOP
        IF NOT parked THEN
            PERFORM stream_seq.park('events', 'workers', r.seq, 'bad row');
            parked := true;
        END IF;
    END LOOP;
END $$;
});
	$node->safe_psql('postgres', q{
SET ROLE reader;
SELECT stream_seq.create_consumer('events', 'reporting');
});
	# 0.5.0: a stream with a time column, and the group's retry policy
	# with a row scheduled for a retry and a dead letter
	$node->safe_psql('postgres', q{
SET ROLE app;
CREATE TABLE audit (id bigserial PRIMARY KEY, action text);
SELECT stream_seq.enable('audit', time_column => 'committed_at');
INSERT INTO audit (action) VALUES ('a'), ('b');
INSERT INTO audit (action) VALUES ('c');
SELECT stream_seq.set_retry_policy('events', 'workers', 2, '1 hour', 2, '2 hours');
SELECT stream_seq.park('events', 'workers', 40, 'retry later');
SELECT stream_seq.park('events', 'workers', 41, 'first'), stream_seq.park('events', 'workers', 41, 'dead');
});
	is(val($node, q{SELECT count(*) FROM stream_seq.parked WHERE consumer = 'workers'}),
		'3', 'rows are parked');
	is( val($node, q{
SELECT count(*) FILTER (WHERE dead) || '|' || count(due_at)
  FROM stream_seq.parked WHERE consumer = 'workers'}),
		'1|1', 'a dead letter and a row scheduled for a retry');

	# 0.8.0: a group keeping per-key order until released, of one slot
	# keyed by id % 3.  Its first page (rows 1, 2, 3: one row a key) fails
	# for row 1 (a retry later holds key 1) and three times for row 2 (a
	# dead letter holds key 2); its second page parks rows 4 and 5 as
	# held behind them and hands out row 6.
	$node->safe_psql('postgres', q{
SET ROLE app;
SELECT stream_seq.create_group('events', 'ordered', 'id % 3', 1);
SELECT stream_seq.set_retry_policy('events', 'ordered', 3, '1 hour');
SELECT stream_seq.set_key_order('events', 'ordered', 'until_released');
BEGIN;
SELECT token AS t FROM stream_seq.claim('events', 'ordered', 'w2', '1 hour') \gset
SELECT string_agg(seq::text, ',') FROM stream_seq.read_slot('events', 'ordered', 0, :t, 10);
SELECT stream_seq.park('events', 'ordered', 1, 'fails'),
       stream_seq.park('events', 'ordered', 2, 'poison'),
       stream_seq.park('events', 'ordered', 2, 'poison'),
       stream_seq.park('events', 'ordered', 2, 'poison');
SELECT stream_seq.advance_slot('events', 'ordered', 0, :t, 3);
COMMIT;
SELECT token AS t FROM stream_seq.claim('events', 'ordered', 'w2', '1 hour') \gset
SELECT stream_seq.advance_slot('events', 'ordered', 0, :t,
         (SELECT max(seq) FROM stream_seq.read_slot('events', 'ordered', 0, :t, 10)));
});
	is( val($node, q{
SELECT string_agg(format('%s:%s%s%s', seq, key, CASE WHEN held THEN ' held behind ' || waits_behind ELSE '' END,
                         CASE WHEN dead THEN ' dead' ELSE '' END), ',' ORDER BY seq)
  FROM stream_seq.parked_rows WHERE consumer = 'ordered'}),
		'1:1,2:2 dead,4:1 held behind 1,5:2 held behind 2',
		'per-key order: a failed row and a dead letter hold their keys');
	is(val($node, q{SELECT position FROM stream_seq.consumer_slots WHERE consumer = 'ordered'}),
		'6', 'per-key order: the slot went on past the held rows');
	return;
}

# For a database holding build_ops_scenario()'s group "ordered" as it left
# it: its next page parks rows 7 and 8 as held behind their keys and hands
# out row 9 only.  Returns what it read and what is held, as one text.
sub ops_key_order_read
{
	my ($node, $db) = @_;
	return $node->safe_psql($db, q{
SET ROLE app;
SELECT token AS t FROM stream_seq.claim('events', 'ordered', 'w2', '1 hour') \gset
SELECT string_agg(seq::text, ',') AS page
  FROM stream_seq.read_slot('events', 'ordered', 0, :t, 10) \gset
SELECT :'page' || ' held ' || string_agg(seq::text, ',' ORDER BY seq)
  FROM stream_seq.parked_rows WHERE consumer = 'ordered' AND held;
});
}

# Everything of build_ops_scenario()'s state, as one text per part.
my %ops_state_sql = (
	events => q{SELECT string_agg(id || ':' || seq, ',' ORDER BY id) FROM events},
	pevents => q{SELECT string_agg(day || '/' || id || ':' || seq, ',' ORDER BY day, id) FROM pevents},
	streams => q{SELECT string_agg(stream || ':' || seq_column, ',' ORDER BY stream::text) FROM stream_seq.streams},
	consumers => q{SELECT string_agg(format('%s/%s@%s by %s slots %s retry %s %s %s %s', stream, consumer, position, owner::regrole, slots, max_attempts, retry_delay, retry_backoff, retry_max_delay), ',' ORDER BY stream::text, consumer) FROM stream_seq.consumer},
	slots => q{SELECT string_agg(t::text, ';' ORDER BY t::text) FROM stream_seq.consumer_slot t},
	parked => q{SELECT string_agg(format('%s/%s:%s %s %s due %s dead %s key %s held %s released %s %s', stream, consumer, seq, reason, attempts, due_at, dead, key, held, released_at, release_reason), ',' ORDER BY consumer, seq) FROM stream_seq.parked},
	key_order => q{SELECT string_agg(format('%s/%s:%s', stream, consumer, key_order), ',' ORDER BY stream::text, consumer) FROM stream_seq.consumer},
	times => q{SELECT string_agg(format('%s:%s@%s', id, seq, committed_at), ',' ORDER BY id) || ' ' || (SELECT string_agg(relid || ':' || coalesce(time_column, '-'), ',' ORDER BY relid::text) FROM stream_seq.stream) FROM audit},
	ranges => q{SELECT string_agg(t::text, ';' ORDER BY t::text) FROM stream_seq.partition_range t},
	triggers => q{SELECT string_agg(format('%s.%s=%s', tgrelid::regclass, tgname, tgenabled), ',' ORDER BY tgrelid::regclass::text, tgname) FROM pg_trigger WHERE tgname LIKE 'stream\_seq\_%'},
);

# The names of the parts ops_state() returns.
sub ops_state_parts
{
	return sort keys %ops_state_sql;
}

# The state of database "db" of "node", as a hash of ops_state_parts().
sub ops_state
{
	my ($node, $db) = @_;
	my %s;
	$s{$_} = $node->safe_psql($db, $ops_state_sql{$_}) foreach keys %ops_state_sql;
	return \%s;
}

END
{
	my $rc = $?;
	if ($$ == $starter_pid)
	{
		for my $pid (keys %children)
		{
			kill_group($pid);
			waitpid($pid, 0);
		}
		stop_pgbouncer($_) for @bouncers;
	}
	$? = $rc;
}

package StreamSeqTest::Session;

# A psql session (tuples only, unaligned, quiet, errors with their
# SQLSTATE) on a connection string.  Statements are sent one at a time and
# each call waits for its result, as a client that decides what to send
# next from what came back: psql sends each with the simple protocol, in
# a round trip of its own, and goes on after an error (in a failed
# transaction the caller must send ROLLBACK, as a client must).

use strict;
use warnings;
use IPC::Run;

sub new
{
	my ($class, $psql, $connstr) = @_;
	my $self = bless { in => '', out => '', err => '', n => 0 }, $class;
	$self->{timer} = IPC::Run::timer($PostgreSQL::Test::Utils::timeout_default);
	$self->{h} = IPC::Run::start(
		[ $psql, '-XAtq', '-v', 'VERBOSITY=verbose', '-d', $connstr ],
		'<', \$self->{in}, '>', \$self->{out}, '2>', \$self->{err},
		$self->{timer});
	my $r = $self->query('SELECT 1');
	die "cannot connect to $connstr: $r->{err}" unless $r->{out} eq '1';
	return $self;
}

# Runs "sql"; returns a hash: out (its rows, one a line, columns separated
# by |), err (error output), and if it failed, sqlstate and message of its
# first error; if psql is gone (its connection lost, say), sqlstate "dead".
# Dies if the result takes longer than the TAP timeout.
sub query
{
	my ($self, $sql) = @_;
	$self->send($sql);
	return $self->result;
}

# Sends "sql" and returns at once, for a statement that is to wait (for a
# lock, say) while the test does something else; result() waits for what
# it returns.  One statement at a time.
sub send
{
	my ($self, $sql) = @_;
	my $h = $self->{h};
	die "send() with a result pending" if defined $self->{banner};
	my $banner = 'stream_seq session ' . ++$self->{n} . ':';
	$self->{banner} = $banner;
	$self->{sql} = $sql;
	$self->{out} = '';
	$self->{err} = '';
	$sql .= ';' unless $sql =~ /;\s*\z/;
	$self->{in} .= "$sql\n\\echo '$banner'\n\\warn '$banner'\n";
	# hand it to psql now: IPC::Run writes only while pumped
	while ($self->{in} ne '' && $h->pumpable)
	{
		last unless eval { $h->pump_nb; 1 };
	}
	return;
}

# The result of the statement send() sent, as query() returns it.
sub result
{
	my ($self) = @_;
	my $h = $self->{h};
	my $banner = delete $self->{banner};
	my $sql = delete $self->{sql};
	die "result() without send()" unless defined $banner;
	$self->{timer}->start($PostgreSQL::Test::Utils::timeout_default);
	while (!($self->{out} =~ /\Q$banner\E\n/ && $self->{err} =~ /\Q$banner\E\n/))
	{
		my $alive = $h->pumpable && eval { $h->pump; 1 };
		return { out => '', err => $self->{err}, sqlstate => 'dead',
			message => 'psql exited' }
		  unless $alive;
		die "query timed out: $sql" if $self->{timer}->is_expired;
	}
	my ($out, $err) = ($self->{out}, $self->{err});
	$out =~ s/\Q$banner\E\n//;
	$err =~ s/\Q$banner\E\n//;
	chomp $out;
	my %r = (out => $out, err => $err);
	@r{qw(sqlstate message)} = ($1, $2)
	  if $err =~ /ERROR:\s+([0-9A-Z]{5}):\s+([^\n]*)/;
	return \%r;
}

# The rows of "sql" as lists of columns; dies if it fails.
sub rows
{
	my ($self, $sql) = @_;
	my $r = $self->query($sql);
	die "query failed: $sql: $r->{err}" if defined $r->{sqlstate};
	return map { [ split /\|/, $_, -1 ] } grep { $_ ne '' } split /\n/,
	  $r->{out};
}

# Ends the session: psql quits.
sub close
{
	my ($self) = @_;
	$self->{in} .= "\\q\n";
	eval { $self->{h}->finish; };
	return;
}

1;
