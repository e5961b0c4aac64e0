
# Copyright (c) stream_seq contributors
#
# StreamSeqTest.pm: the helpers the TAP tests in test/t share, so that each
# test file holds only its scenario:
#
#  - a node that preloads stream_seq, and a streaming standby of one;
#  - queries on a node: a result, one row, one value, or the error a
#    statement ends with (SQLSTATE, message, hint) instead of the end of
#    the script;
#  - a write that must succeed, checked as a test;
#  - the invariant of every stream table: every committed row has a number
#    and no number is used twice;
#  - stopping and starting a node, and the server log since a point;
#  - commands (psql, pgbench) run in the background, and waiting for them.
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

our @EXPORT = qw(
  new_node new_standby slow_wal_conf
  query row val psql_result try_sql sqlstate write_ok
  check_unique
  stop_start log_offset log_since
  bg_run bg_psql bg_pgbench wait_done
);

# A new node named "name", initialized (with the options "init", such as
# allows_streaming => 1), preloading stream_seq, with "conf" appended to
# its postgresql.conf, and started.
sub new_node
{
	my ($name, $conf, %init) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(%init);
	$node->append_conf('postgresql.conf',
		"shared_preload_libraries = 'stream_seq'\n" . ($conf // ''));
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
# every committed row has a number, and no number is used twice.
sub check_unique
{
	my ($node, $tab, $what) = @_;
	my ($total, $distinct, $nulls) = row($node,
		"SELECT count(*), count(DISTINCT seq), count(*) FILTER (WHERE seq IS NULL) FROM $tab");
	is($nulls, 0, "$what: every committed row of $tab has a number");
	is($distinct, $total - $nulls, "$what: no number is used twice in $tab");
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

1;
