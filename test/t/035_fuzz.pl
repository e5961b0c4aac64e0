
# Copyright (c) stream_seq contributors
#
# 035_fuzz.pl: every function of schema stream_seq, listed from pg_proc
# when the test runs (so that a new function is fuzzed without a change
# here), called with arguments drawn from NULLs, extreme numbers (0, -1,
# 2^63-1, -2^63, the int4 ends), relations of every kind (an ordinary
# table, a stream, a partitioned stream, a partition, an index, a
# sequence, a view, a materialized view, a foreign table, a TOAST table, a
# composite type's relation), OIDs of dropped relations, 0 and huge OIDs,
# odd names; each call alone, in a savepoint, in REPEATABLE READ or
# SERIALIZABLE, in a transaction prepared (PREPARE TRANSACTION) and then
# committed or rolled back, and in a transaction rolled back; mostly as an
# ordinary role, some as the superuser; while a second session disables,
# drops and recreates streams and consumers that the calls name.
#
# Asserted: the server never crashed (no "terminated by signal" in its
# log, the postmaster's start time unchanged, every batch's connection
# survived), no call raised XX000, and every SQLSTATE a call raised is one
# that doc/reference.md lists (parsed from it), but 57014, which the
# harness itself causes with statement_timeout (wait() and lock waits
# must end).  A call with an unlisted SQLSTATE is printed with it.  After
# every unit of calls, the session runs a statement, ROLLBACK and an
# empty transaction, which must not fail: after a call that ended in
# 57014 (statement_timeout) or 55P03 (lock_timeout) too.
#
# Then, deterministically (about 15 s):
#  - cancels in the middle: every function, called with arguments that get
#    past its checks, while another session holds a stream table, the
#    extension's tables, stream_seq.stream, their rows or their indexes,
#    or while a group's slot expression sleeps; cancelled once it waits
#    (pg_cancel_backend(), or lock_timeout); the same session then runs a
#    statement, ROLLBACK and an empty transaction.  Every function that
#    runs SPI or a subtransaction must have been cancelled inside them at
#    least once (the error's context names an SQL statement or function).
#  - races: every function that takes a relation, called on a plain and
#    on a partitioned stream that another transaction has dropped (DROP
#    TABLE) or disabled and commits once the call waits: no XX000, only
#    SQLSTATEs reference.md lists.
# And at the end: the server log has no "reference leak", "still active"
# or "unexpected state" (what a cancelled call could leave behind).
#
# Bounded in calls (FUZZ_CALLS, default 40000) and in time (FUZZ_SECONDS,
# default 90): it stops at whichever comes first.  The random choices come
# from a fixed seed, printed, that FUZZ_SEED changes; with the same seed a
# failure reproduces (the interleaving with the second session aside).
# FUZZ_ONLY (a regular expression) limits the cancels and races to the
# functions it matches; FUZZ_VERBOSE notes each of their calls.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time usleep);
use StreamSeqTest;

my $seed = $ENV{FUZZ_SEED} // 20261202;
my $max_calls = $ENV{FUZZ_CALLS} // 40000;
my $max_seconds = $ENV{FUZZ_SECONDS} // 90;
srand($seed);
note "fuzz seed $seed (FUZZ_SEED), at most $max_calls calls (FUZZ_CALLS) "
  . "in $max_seconds s (FUZZ_SECONDS)";
my $t_start = time();

# the SQLSTATEs the Reference lists
my $reference = slurp_file(source_root() . '/doc/reference.md');
my %listed = map { $_ => 1 } ($reference =~ /\b([0-9][0-9A-Z]{4}|SS[0-9]{3})\b/g);
ok(exists $listed{'42P01'} && exists $listed{'42809'},
	'SQLSTATEs parsed from reference.md: ' . scalar(keys %listed));
# caused by this harness, not by the extension: statement_timeout
my %harness = ('57014' => 1);

my $node = new_node('fuzz',
	"max_prepared_transactions = 10\nmax_connections = 30\n"
	  . "log_min_messages = warning\n");
my $started = $node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');

$node->safe_psql(
	'postgres', q{
CREATE EXTENSION stream_seq;
CREATE ROLE fuzzer LOGIN;
GRANT USAGE ON SCHEMA stream_seq TO fuzzer;
CREATE TABLE plain_t (id int, seq bigint, note text);
CREATE TABLE ev (id int, k text, seq bigint, at timestamptz, note text);
SELECT stream_seq.enable('ev', 'seq', 'at');
INSERT INTO ev (id, k, note) SELECT g, (g % 5)::text, repeat('x', 3000)
  FROM generate_series(1, 20) g;
SELECT stream_seq.create_consumer('ev', 'c1');
SELECT stream_seq.create_group('ev', 'g1', 'k', 2);
CREATE TABLE pv (id int, k text, seq bigint) PARTITION BY RANGE (id);
CREATE TABLE pv_1 PARTITION OF pv FOR VALUES FROM (0) TO (10);
CREATE TABLE pv_2 PARTITION OF pv FOR VALUES FROM (10) TO (20);
CREATE TABLE pv_3 PARTITION OF pv FOR VALUES FROM (20) TO (1000000);
SELECT stream_seq.enable('pv');
INSERT INTO pv (id, k) SELECT g, (g % 3)::text FROM generate_series(1, 25) g;
SELECT stream_seq.create_consumer('pv', 'c1');
CREATE TABLE secret (id int, seq bigint);
SELECT stream_seq.enable('secret');
CREATE INDEX plain_t_idx ON plain_t (id);
CREATE SEQUENCE a_seq;
CREATE VIEW a_view AS SELECT * FROM ev;
CREATE MATERIALIZED VIEW a_matview AS SELECT id FROM plain_t;
CREATE TYPE a_type AS (x int);
CREATE TABLE dropped_t (id int, seq bigint);
CREATE TABLE dropped_s (id int, seq bigint);
SELECT stream_seq.enable('dropped_s');
GRANT SELECT, INSERT, UPDATE, DELETE ON ev, pv, pv_1, pv_2, pv_3, plain_t TO fuzzer;
GRANT SELECT ON a_view, a_matview, a_seq TO fuzzer;
});
# a foreign table, where postgres_fdw is installed with the server
my $foreign = $node->psql(
	'postgres', q{
CREATE EXTENSION postgres_fdw;
CREATE SERVER loop FOREIGN DATA WRAPPER postgres_fdw OPTIONS (dbname 'postgres');
CREATE FOREIGN TABLE a_foreign (id int, seq bigint) SERVER loop
  OPTIONS (table_name 'plain_t');
}) == 0;
note 'foreign table: ' . ($foreign ? 'yes' : 'postgres_fdw not available');

my @dropped = split /\n/, $node->safe_psql(
	'postgres', q{
SELECT 'dropped_t'::regclass::oid; SELECT 'dropped_s'::regclass::oid;
});
$node->safe_psql('postgres', 'DROP TABLE dropped_t; DROP TABLE dropped_s');

# relations, by OID, of every kind
my @rel_oids = split /\n/, $node->safe_psql(
	'postgres', q{
SELECT c.oid FROM pg_class c
 WHERE c.relname IN ('plain_t', 'ev', 'pv', 'pv_1', 'pv_3', 'secret',
       'plain_t_idx', 'a_seq', 'a_view', 'a_matview', 'a_type', 'a_foreign',
       'ev_seq_key', 'pg_class')
    OR c.oid = (SELECT reltoastrelid FROM pg_class WHERE relname = 'ev')
 ORDER BY c.oid;
});
my @regclass = (
	'NULL',
	(map { "${_}::oid::regclass" } @rel_oids, @dropped, 0, 1, 4294967295,
		123456789),
	# the streams the second session disables, drops and recreates
	"pg_catalog.to_regclass('churn')",
	"pg_catalog.to_regclass('churn_p')",
	"pg_catalog.to_regclass('churn_p_1')");

my @text = ('NULL', "'c1'", "'g1'", "'cc'", "'gg'", "''", "'nope'",
	"'k'", "repeat('z', 300)", q{'we"ird'}, q{E'\\\\'}, q{'ünï'},
	q{'k || 1'}, q{'w1'});
my @int8 = ('NULL', '0', '-1', '1', '3', '10', '9223372036854775807',
	'(-9223372036854775807 - 1)');
my @int4 = ('NULL', '0', '-1', '1', '2', '3', '1024', '1025', '2147483647',
	'(-2147483647 - 1)');
my @bool = ('NULL', 'true', 'false');
my @interval = ('NULL', "'0'", "'-1 s'", "'1 ms'", "'10 ms'", "'1 hour'",
	"'100 years'", "'178000000 years'");
my @tstz = ('NULL', 'now()', "'infinity'", "'-infinity'", "'1970-01-01'",
	"now() + '1 hour'", "'4714-11-24 00:00:00+00 BC'",
	"'294276-12-31 23:59:59+00'");
my @float8 = ('NULL', '0', '1', '2', '10', '11', "'NaN'", "'Infinity'",
	'-1', '1.5');
my @name = ('NULL', "'seq'", "'at'", "'id'", "'k'", "'nope'", "''",
	"'ctid'", "'note'");
my @regrole = ('NULL', "'fuzzer'::regrole", '10::oid::regrole',
	'0::oid::regrole', '4294967295::oid::regrole');
my @regtype = ('NULL', "'ev'::regtype", "'pv'::regtype", "'int4'::regtype",
	"'plain_t'::regtype", '0::oid::regtype', '4294967295::oid::regtype',
	"'a_type'::regtype");
# a row of ev built by name, not by position: enable() with a column ev
# lacks adds it, and a ROW(...)::ev of the original five columns would
# then fail with 42846 before the function is called
my @anyelement = ('NULL::ev', 'NULL::pv', 'NULL::plain_t', 'NULL::int',
	'NULL::secret', 'NULL::a_type',
	"jsonb_populate_record(NULL::ev, jsonb_build_object('id', 1, 'k', 'a', "
	  . "'seq', 1, 'at', now(), 'note', 'x'))");

my %values = (
	'regclass' => \@regclass,
	'text' => \@text,
	'bigint' => \@int8,
	'integer' => \@int4,
	'boolean' => \@bool,
	'interval' => \@interval,
	'timestamp with time zone' => \@tstz,
	'double precision' => \@float8,
	'name' => \@name,
	'regrole' => \@regrole,
	'regtype' => \@regtype,
	'anyelement' => \@anyelement,);

# the functions, from pg_proc: name, input argument types, defaults
my @functions;
for my $line (
	split /\n/,
	$node->safe_psql(
		'postgres', q{
SELECT p.proname, p.pronargdefaults,
       coalesce((SELECT string_agg(pg_catalog.format_type(t, NULL), ',' ORDER BY n)
                   FROM unnest(p.proargtypes) WITH ORDINALITY a(t, n)), '')
  FROM pg_proc p
 WHERE p.pronamespace = 'stream_seq'::regnamespace AND p.prokind = 'f'
 ORDER BY p.oid;
}))
{
	my ($fname, $ndefaults, $types) = split /\|/, $line, -1;
	my @types = $types eq '' ? () : split /,/, $types;
	# no SQL value is of type internal (an access method's handler)
	next if grep { $_ eq 'internal' } @types;
	for my $t (@types)
	{
		die "no values for argument type $t of $fname" unless $values{$t};
	}
	push @functions, [ $fname, $ndefaults, \@types ];
}
ok(@functions >= 50, 'functions listed from pg_proc: ' . scalar(@functions));

sub pick { my ($list) = @_; return $list->[ int(rand(@$list)) ]; }

# One call of a function chosen at random, as SQL.
sub random_call
{
	my $f = pick(\@functions);
	my ($fname, $ndefaults, $types) = @$f;
	my $nargs = @$types - int(rand($ndefaults + 1));
	my @args;
	for my $i (0 .. $nargs - 1)
	{
		# mostly sensible, so that calls get past the first check
		my $t = $types->[$i];
		my $v = pick($values{$t});
		$v = pick([ 'NULL', 'NULL', "'ev'::regclass", "'pv'::regclass",
			"'ev'::regclass", "'pv_1'::regclass" ])
			if $t eq 'regclass' && rand() < 0.4;
		$v = pick([ "'c1'", "'g1'" ]) if $t eq 'text' && $i == 1 && rand() < 0.5;
		# typed, so that overloads (reset, create_consumer) resolve
		push @args, $t eq 'anyelement' ? $v : "($v)::$t";
	}
	return "SELECT * FROM stream_seq.\"$fname\"(" . join(', ', @args) . ')';
}

# The statements of a batch: each entry [sql, judged]; a judged
# statement's error is checked, the others (transaction control around a
# call that failed) may fail as they must.
my $gid = 0;
sub random_unit
{
	my $mode = int(rand(8));
	my $call = random_call();
	if ($mode <= 1)
	{
		return ([ "$call;", 1 ]);
	}
	elsif ($mode == 2)
	{
		return ([ 'BEGIN;', 0 ], [ 'SAVEPOINT a;', 0 ], [ "$call;", 1 ],
			[ 'ROLLBACK TO SAVEPOINT a;', 0 ], [ random_call() . ';', 1 ],
			[ 'COMMIT;', 1 ]);
	}
	elsif ($mode == 3 || $mode == 4)
	{
		my $level = $mode == 3 ? 'REPEATABLE READ' : 'SERIALIZABLE';
		return ([ "BEGIN ISOLATION LEVEL $level;", 0 ],
			[ 'SELECT count(*) FROM ev;', 0 ], [ "$call;", 1 ],
			[ random_call() . ';', 1 ], [ 'COMMIT;', 1 ]);
	}
	elsif ($mode == 5)
	{
		$gid++;
		my $end = rand() < 0.5 ? 'COMMIT' : 'ROLLBACK';
		# the PREPARE of a failed transaction rolls it back: then there
		# is no prepared transaction to end (42704, not judged)
		return ([ 'BEGIN;', 0 ], [ "$call;", 1 ],
			[ "PREPARE TRANSACTION 'fuzz_$$\_$gid';", 1 ],
			[ "$end PREPARED 'fuzz_$$\_$gid';", 0 ]);
	}
	elsif ($mode == 6)
	{
		return ([ 'BEGIN;', 0 ], [ "$call;", 1 ], [ 'ROLLBACK;', 0 ]);
	}
	else
	{
		# a failed statement first, rolled back to its savepoint
		return ([ 'BEGIN;', 0 ], [ 'SAVEPOINT a;', 0 ],
			[ 'SELECT 1 / 0;', 0 ], [ 'ROLLBACK TO SAVEPOINT a;', 0 ],
			[ "$call;", 1 ], [ 'COMMIT;', 1 ]);
	}
}

# The second session: disables, drops and recreates streams and consumers
# named by the calls, in a loop until the fuzzing is done.
my $churn_round = q{
DROP TABLE IF EXISTS churn;
CREATE TABLE churn (id int, k text, seq bigint);
GRANT SELECT, INSERT ON churn TO fuzzer;
SELECT stream_seq.enable('churn');
INSERT INTO churn (id, k) SELECT g, g::text FROM generate_series(1, 5) g;
SELECT stream_seq.create_consumer('churn', 'cc');
SELECT stream_seq.create_group('churn', 'gg', 'k', 2);
SELECT stream_seq.drop_consumer('churn', 'cc');
SELECT stream_seq.create_consumer('churn', 'cc');
SELECT stream_seq.disable('churn');
SELECT stream_seq.enable('churn');
SELECT stream_seq.create_consumer('churn', 'c1');
DROP TABLE IF EXISTS churn_p;
CREATE TABLE churn_p (id int, seq bigint) PARTITION BY RANGE (id);
CREATE TABLE churn_p_1 PARTITION OF churn_p FOR VALUES FROM (0) TO (10);
CREATE TABLE churn_p_2 PARTITION OF churn_p FOR VALUES FROM (10) TO (100);
GRANT SELECT, INSERT ON churn_p, churn_p_1, churn_p_2 TO fuzzer;
SELECT stream_seq.enable('churn_p');
INSERT INTO churn_p (id) SELECT g FROM generate_series(1, 15) g;
SELECT stream_seq.create_consumer('churn_p', 'c1');
SELECT stream_seq.seal_partitions('churn_p');
DROP TABLE churn_p_1;
SELECT stream_seq.drop_consumer('churn', 'gg');
};
my $churn_script = "SET statement_timeout = '5s';\nSET lock_timeout = '2s';\n"
  . ($churn_round x 400);
my ($churn_out, $churn_err) = ('', '');
my $churn = IPC::Run::start(
	[
		$node->installed_command('psql'), '-XAtq', '-v',
		'VERBOSITY=sqlstate', '-d', $node->connstr('postgres'), '-f', '-'
	],
	'<', \$churn_script, '>', \$churn_out, '2>', \$churn_err);

# batches of units, each batch one psql session as the ordinary role (3 of
# 4) or the superuser; psql goes on after an error and names the line
my $calls = 0;
my $batches = 0;
my (%seen, @internal, @unlisted, @lost, @probe_failed);
my $probed_cancels = 0;
my $fuzzer_connstr = $node->connstr('postgres') . ' user=fuzzer';
while ($calls < $max_calls && time() - $t_start < $max_seconds)
{
	my $as_super = rand() < 0.25;
	my @lines = (
		[ "SET statement_timeout = '3s';", 0 ],
		[ "SET lock_timeout = '1s';", 0 ]);
	while (@lines < 300)
	{
		# after every unit (each ends its transaction), what the issue
		# asks of a session whose call was cancelled or timed out
		# waiting for a lock: a statement, ROLLBACK, an empty
		# transaction; none may fail (judged 2: a probe)
		push @lines, random_unit(),
		  map { [ $_, 2 ] } 'SELECT 1;', 'ROLLBACK;', 'BEGIN;', 'COMMIT;';
	}
	my $script = join("\n", map { $_->[0] } @lines) . "\n";
	my ($rc, $out, $err) = $node->psql(
		'postgres', $script,
		on_error_stop => 0,
		extra_params => [ '-v', 'VERBOSITY=sqlstate' ],
		($as_super ? () : (connstr => $fuzzer_connstr)));
	$batches++;
	$calls += scalar(grep { $_->[1] && $_->[0] =~ /stream_seq\./ } @lines);
	if ($err =~ /^psql:<stdin>:(\d+): server closed the connection/m
		|| $err =~ /^psql:<stdin>:(\d+): error: connection to server was lost/m)
	{
		push @lost, 'connection lost at: ' . $lines[ $1 - 1 ]->[0]
		  . ($as_super ? ' (superuser)' : ' (ordinary role)');
	}
	my %code_at;        # line number => SQLSTATE of its error
	for my $eline (split /\n/, $err)
	{
		next unless $eline =~ /^psql:<stdin>:(\d+): (?:ERROR|FATAL|PANIC):\s+(\S+)/;
		my ($lineno, $code) = ($1, $2);
		my ($sql, $judged) = @{ $lines[ $lineno - 1 ] };
		my $who = $as_super ? 'superuser' : 'fuzzer';
		$code_at{$lineno} //= $code;
		if ($code eq 'XX000')
		{
			push @internal, "$code as $who: $sql";
		}
		next if $judged == 2;
		# 25P02: a statement after an error in its transaction, which
		# was judged itself
		next unless $judged && $code ne '25P02';
		$seen{$code}++;
		push @unlisted, "$code as $who: $sql"
		  unless $listed{$code} || $harness{$code};
	}
	# the probes: each after a unit, none failed; count those after a
	# cancel or a lock timeout
	my @unit;
	for my $i (0 .. $#lines)
	{
		my ($sql, $judged) = @{ $lines[$i] };
		my $code = $code_at{ $i + 1 };
		if ($judged != 2)
		{
			push @unit, [ $sql, $code ];
			next;
		}
		if ($sql eq 'SELECT 1;' && @unit)
		{
			$probed_cancels++
			  if grep { defined $_->[1] && $_->[1] =~ /^(57014|55P03)$/ } @unit;
		}
		push @probe_failed, "$sql failed with $code after: "
		  . join(' ', map { $_->[0] . (defined $_->[1] ? " ($_->[1])" : '') } @unit)
		  if defined $code;
		@unit = () if $sql eq 'COMMIT;';
	}
	last if @lost;
}
my $elapsed = time() - $t_start;
$churn->kill_kill;
my @churn_internal = grep { /XX000/ } split /\n/, $churn_err;
is(scalar(@churn_internal), 0, 'the second session saw no XX000')
  or diag join("\n", @churn_internal);
note sprintf('%d calls in %d batches, %.0f s; SQLSTATEs seen: %s',
	$calls, $batches, $elapsed,
	join(' ', map { "$_ x$seen{$_}" } sort keys %seen));
ok($calls > 0, "the fuzzer made $calls calls");

is(scalar(@lost), 0, 'no batch lost its connection')
  or diag join("\n", @lost);
is(scalar(@internal), 0, 'no call raised XX000')
  or diag join("\n", @internal[ 0 .. ($#internal < 30 ? $#internal : 30) ]);
is(scalar(@unlisted), 0, 'every SQLSTATE raised is one reference.md lists')
  or diag join("\n", @unlisted[ 0 .. ($#unlisted < 30 ? $#unlisted : 30) ]);

is(scalar(@probe_failed), 0,
	"after every unit the session ran a statement, ROLLBACK and an empty transaction ($probed_cancels after a 57014 or 55P03)")
  or diag join("\n", @probe_failed[ 0 .. ($#probe_failed < 30 ? $#probe_failed : 30) ]);

# ---------------------------------------------------------------------
# Cancels in the middle.  Every function is called while another session
# holds what it needs, and cancelled once it waits: a stream table
# locked ACCESS EXCLUSIVE (its lock_timeout then ends it: 55P03), the
# extension's tables but stream_seq.stream locked, stream_seq.stream
# locked, the rows of the stream tables and of the extension's tables
# locked FOR UPDATE, and a group keyed by a slow expression (its workers,
# metrics() and the backlog count sleep in it); but the first,
# pg_cancel_backend() once the call waits.  (statement_timeout: the
# random calls above.)  After each call, whatever it ended with, the
# same session runs a statement, ROLLBACK and an empty transaction.  A
# call cancelled in the middle is one whose error has an SQL statement,
# a PL/pgSQL or SQL function in its context (it was inside SPI or a
# subtransaction); every function must have been, but those that run
# neither (listed below).
my $t_cancel = time();
# the database's owner an ordinary role, whom _grant_dump_access() grants to
$node->safe_psql(
	'postgres', q{
CREATE ROLE fz_owner;
ALTER DATABASE postgres OWNER TO fz_owner;
CREATE FUNCTION fz_slowkey(int) RETURNS text LANGUAGE sql IMMUTABLE
  AS $$SELECT CASE WHEN pg_catalog.current_setting('fz.slow', true) = 'on'
                   THEN pg_catalog.pg_sleep(0.05)::text ELSE '' END || $1$$;
});

# the fixture: a stream fz (a consumer c, a group g, a group "slow" keyed
# by fz_slowkey(), which sleeps in sessions that set fz.slow, a retention
# policy, parked rows), a partitioned stream
# fzp with a sealed partition; made again before each function, since a
# call that did not wait may have changed it (disable(), trim())
my $fixture = q{
SET lock_timeout = '10s';
DROP TABLE IF EXISTS fz, fzp, fzt;
CREATE TABLE fzt (id int, seq bigint);
CREATE TABLE fz (id int, k int, seq bigint, at timestamptz);
SELECT stream_seq.enable('fz', 'seq', 'at');
CREATE TABLE fzp (id int, seq bigint) PARTITION BY RANGE (id);
CREATE TABLE fzp_1 PARTITION OF fzp FOR VALUES FROM (0) TO (10);
CREATE TABLE fzp_2 PARTITION OF fzp FOR VALUES FROM (10) TO (100);
SELECT stream_seq.enable('fzp');
INSERT INTO fz (id, k) SELECT g, g FROM generate_series(1, 20) g;
INSERT INTO fzp (id) SELECT g FROM generate_series(1, 15) g;
SELECT stream_seq.create_consumer('fz', 'c', 0);
SELECT stream_seq.create_group('fz', 'g', 'k', 2, 0::bigint);
SELECT stream_seq.create_group('fz', 'slow', 'public.fz_slowkey(k)', 2, 0::bigint);
-- per-key order (0.8.0) on the slow group: its reads walk the slot's keys
SELECT stream_seq.set_key_order('fz', 'slow', 'until_applied');
SELECT stream_seq.create_consumer('fzp', 'c', 0);
SELECT stream_seq.set_retention('fz', keep_rows => 5, respect_consumers => false);
SELECT stream_seq.set_retention('fzp', keep_rows => 5, respect_consumers => false);
SELECT stream_seq.set_retry_policy('fz', 'c', 3);
BEGIN;
SELECT stream_seq.park('fz', 'c', 3, 'r'), stream_seq.park('fz', 'c', 4, 'r', '0 s');
SELECT stream_seq.advance('fz', 'c', 5);
COMMIT;
SELECT stream_seq.seal_partitions('fzp');
SELECT 'tokens', (SELECT token FROM stream_seq.claim('fz', 'g', 'w', '1 hour') WHERE slot = 0),
       (SELECT token FROM stream_seq.claim('fz', 'slow', 'w', '1 hour') WHERE slot = 0);
};
sub make_fixture
{
	my $out = $node->safe_psql('postgres', $fixture);
	my ($g, $slow) = $out =~ /^tokens\|(\d+)\|(\d+)$/m
	  or die "no tokens in the fixture: $out";
	return ($g, $slow);
}

# the functions that can be called (not trigger functions), with their
# input arguments' names and types
my @callable;
for my $line (
	split /\n/,
	$node->safe_psql(
		'postgres', q{
SELECT p.proname, pg_catalog.pg_get_function_identity_arguments(p.oid)
  FROM pg_proc p
 WHERE p.pronamespace = 'stream_seq'::regnamespace AND p.prokind = 'f'
   AND p.prorettype NOT IN ('trigger'::regtype, 'event_trigger'::regtype)
   -- no SQL value is of type internal (an access method's handler)
   AND NOT 'internal'::regtype = ANY (p.proargtypes)
 ORDER BY p.proname, p.oid;
}))
{
	my ($fname, $args) = split /\|/, $line, -1;
	next if $ENV{FUZZ_ONLY} && $fname !~ /$ENV{FUZZ_ONLY}/;
	my @args = map { [ /^(?:IN |VARIADIC )?(\S+) (.+)$/ ] }
	  grep { $_ ne '' && !/^OUT / } split /, /, $args;
	push @callable, [ $fname, \@args ];
}

# A call of function "f" (arguments "args") that gets past its checks:
# arguments chosen by name.  "consumer" is the group for what takes a
# slot, a token or a worker, and the slow group if "slow".
sub sensible_call
{
	my ($f, $args, %o) = @_;
	my %names = map { ($_->[0] => 1) } @$args;
	my $on_group = $names{slot} || $names{token} || $names{worker}
	  || $f =~ /^(resize_group|resize_index|_slot_backlog)$/;
	my $stream =
	    $f eq 'enable' ? 'fzt'
	  : defined $o{stream} ? $o{stream}
	  : $f =~ /partition/ || ($o{partitioned} && !$on_group) ? 'fzp'
	  : 'fz';
	my @v;
	for my $a (@$args)
	{
		my ($n, $t) = @$a;
		my $v =
		    $n eq 'stream' && $t eq 'anyelement' ? "NULL::$stream"
		  : $n eq 'stream' ? "'$stream'::regclass"
		  : $n eq 'partition' ? "'${stream}_1'::regclass"
		  : $n eq 'row_type' ? "'$stream'::regtype"
		  : $n eq 'consumer' ? (
			  $f =~ /^create_/ ? "'new_one'"
			: $on_group ? ($o{slow} ? "'slow'" : "'g'")
			: "'c'")
		  : $n eq 'key' ? "'k'"
		  : $n eq 'slots' ? ($f =~ /^resize/ ? 3 : 2)
		  : $n eq 'slot' ? 0
		  : $n eq 'token' ? ($o{slow} ? $o{slow_token} : $o{token})
		  : $n eq 'worker' ? "'w'"
		  : $n eq 'lease' ? "'1 min'"
		  : $n =~ /^(after|start_after|to_position|seq|"position")$/ ? ($f eq 'wait' ? 1000 : 1)
		  : $n eq 'hold' ? "'until_applied'"
		  : $n eq 'before' ? 2
		  : $n eq 'max_rows' ? 10
		  : $n =~ /^(at|start_at|to_time)$/ ? 'now()'
		  : $n eq 'start' ? "'latest'"
		  : $n eq 'reason' ? "'r'"
		  : $n eq 'keep_rows' ? 5
		  : $n eq 'retain' ? 1
		  : $n eq 'max_attempts' ? 3
		  : $n eq 'delay' ? "'1 s'"
		  : $n eq 'backoff' ? 2
		  : $n eq 'max_delay' ? "'1 min'"
		  : $n eq 'timeout' ? "'10 s'"
		  : $n eq 'new_owner' ? 'current_user'
		  : $n eq 'seq_column' ? "'seq'"
		  : $n eq 'only_kind' ? 'NULL'
		  : $n eq 'backlog_cap' ? 1000
		  : $n =~ /^(force|keep_tables|respect_consumers|only_due)$/ ? 'false'
		  : 'NULL';
		push @v, "($v)::$t";
	}
	return "SELECT * FROM stream_seq.\"$f\"(" . join(', ', @v) . ')';
}

my $caller = session($node, $node->connstr('postgres'));
my $blocker = session($node, $node->connstr('postgres'));
my $watcher = session($node, $node->connstr('postgres'));
my ($caller_pid) = map { $_->[0] } $caller->rows('SELECT pg_backend_pid()');
my $caller_dead = 0;
my @ext_tables = map { $_->[0] } $watcher->rows(q{
SELECT c.oid::regclass FROM pg_depend d JOIN pg_class c ON c.oid = d.objid
 WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
   AND d.classid = 'pg_class'::regclass AND c.relkind = 'r'
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'stream_seq')
 ORDER BY 1});

# Sends "call" from the caller, marked so that caller_waits() knows it.
my $call_no = 0;
sub send_call
{
	my ($call) = @_;
	$call_no++;
	$caller->send("/* fuzz call $call_no */ $call");
}

# Waits until the caller's call of send_call() waits (for a lock unless
# "no_lock", in pg_sleep(), in wait()) or is done; returns whether it
# waits.
sub caller_waits
{
	my ($no_lock) = @_;
	my $lock = $no_lock ? 'false' : "wait_event_type = 'Lock'";
	my $deadline = time() + 10;
	while (time() < $deadline)
	{
		my ($state) = map { $_->[0] } $watcher->rows(qq{
SELECT coalesce((SELECT CASE WHEN query NOT LIKE '/* fuzz call $call_no */%' THEN 'not yet'
            WHEN state <> 'active' THEN 'done'
            WHEN $lock OR wait_event = 'PgSleep'
              OR (wait_event_type = 'Extension' AND query LIKE '%"wait"%') THEN 'waits'
            ELSE 'runs' END
  FROM pg_stat_activity WHERE pid = $caller_pid), 'done')});
		return 1 if $state eq 'waits';
		return 0 if $state eq 'done';
		usleep(2_000);
	}
	return 0;
}

# what comes after every call: none of these may fail.  A session that
# died (FATAL) is replaced, so that the next calls run.
my @after = ('SELECT 1', 'ROLLBACK', 'BEGIN', 'COMMIT');
sub probe_after
{
	my ($what, $failures) = @_;
	for my $sql (@after)
	{
		my $r = $caller->query($sql);
		push @$failures, "$sql failed with $r->{sqlstate} ($r->{message}) after $what"
		  if defined $r->{sqlstate};
		if (($r->{sqlstate} // '') eq 'dead' || $caller_dead)
		{
			$caller = session($node, $node->connstr('postgres'));
			($caller_pid) = map { $_->[0] } $caller->rows('SELECT pg_backend_pid()');
			$caller_dead = 0;
			last;
		}
	}
}

my @strategies = (
	[ 'stream table locked', sub {
		$blocker->query('BEGIN');
		$blocker->query('LOCK TABLE fz, fzp, fzt IN ACCESS EXCLUSIVE MODE');
	  }, 'lock_timeout' ],
	[ "extension's tables locked", sub {
		$blocker->query('BEGIN');
		$blocker->query('LOCK TABLE '
			  . join(', ', grep { $_ ne 'stream_seq.stream' } @ext_tables)
			  . ' IN ACCESS EXCLUSIVE MODE');
		# and their pg_class rows, which GRANT updates without a lock
		# on the table (_grant_dump_access())
		$blocker->query('GRANT SELECT ON ' . join(', ', @ext_tables)
			  . ' TO pg_monitor');
		$blocker->query('GRANT USAGE ON SCHEMA stream_seq TO pg_monitor');
	  }, 'cancel', 0, 1 ],
	[ 'stream_seq.stream locked', sub {
		$blocker->query('BEGIN');
		$blocker->query('LOCK TABLE stream_seq.stream IN ACCESS EXCLUSIVE MODE');
	  }, 'cancel' ],
	[ 'rows locked', sub {
		$blocker->query('BEGIN');
		$blocker->query("SELECT count(*) FROM (SELECT 1 FROM $_ FOR UPDATE) x")
		  for ('fz', 'fzp', @ext_tables);
	  }, 'cancel' ],
	[ "extension's indexes rebuilt", sub {
		# REINDEX holds each index ACCESS EXCLUSIVE (and its table SHARE):
		# a statement on the table waits when it is planned, also one
		# that follows a direct scan of the table in the same call
		$blocker->query('BEGIN');
		$blocker->query("REINDEX TABLE $_") for @ext_tables;
	  }, 'cancel' ],
	[ 'slow key', sub { }, 'cancel', 1 ],);

my (@cancel_failures, @cancel_internal, %mid, %cancelled, %cancel_codes);
for my $fn (@callable)
{
	my ($f, $args) = @$fn;
	my ($token, $slow_token) = make_fixture();
	for my $st (@strategies)
	{
		my ($what, $hold, $how, $slow, $partitioned) = @$st;
		my $call = sensible_call($f, $args, token => $token,
			slow_token => $slow_token, slow => $slow,
			partitioned => $partitioned);
		# the session knows the streams already (its cache of the
		# catalog), as an application's does: the call gets to its
		# statements before it waits
		$caller->query(q{SELECT stream_seq.horizon('fz'), stream_seq.horizon('fzp')});
		$hold->();
		$caller->query($how eq 'lock_timeout' ? "SET lock_timeout = '20ms'"
			: $slow ? "SET fz.slow = 'on'" : 'SELECT 1');
		send_call($call);
		# under lock_timeout a lock wait ends by itself (55P03); a wait
		# for rows (wait()) or in pg_sleep() is cancelled there too
		my $waits = caller_waits($how eq 'lock_timeout');
		$watcher->rows("SELECT pg_cancel_backend($caller_pid)") if $waits;
		my $r = $caller->result;
		$caller_dead = 1 if ($r->{sqlstate} // '') eq 'dead';
		$blocker->query('ROLLBACK');
		$caller->query('RESET lock_timeout') if $how eq 'lock_timeout';
		$caller->query('RESET fz.slow') if $slow;
		my $code = $r->{sqlstate} // 'ok';
		$cancel_codes{$code}++;
		push @cancel_internal, "$code ($what): $call: $r->{err}"
		  if $code eq 'XX000' || $code eq 'dead';
		if ($code =~ /^(57014|55P03)$/)
		{
			$cancelled{$f}++;
			$mid{$f}++
			  if $r->{err} =~ /CONTEXT:.*(SQL statement|PL\/pgSQL function|SQL function)/s;
		}
		note "cancel ($what): $call: " . ($waits ? 'cancelled while waiting, ' : '')
		  . $code . ($mid{$f} ? '' : '') if $ENV{FUZZ_VERBOSE};
		probe_after("$call ($what, $code)", \@cancel_failures);
	}
}
note sprintf('cancels: %d calls of %d functions in %.1f s; SQLSTATEs: %s',
	scalar(@callable) * scalar(@strategies), scalar(@callable),
	time() - $t_cancel,
	join(' ', map { "$_ x$cancel_codes{$_}" } sort keys %cancel_codes));
is(scalar(@cancel_internal), 0, 'no cancelled call raised XX000 or lost its session')
  or diag join("\n", @cancel_internal);
is(scalar(@cancel_failures), 0,
	'after every cancelled call the session ran a statement, ROLLBACK and an empty transaction')
  or diag join("\n", @cancel_failures[ 0 .. ($#cancel_failures < 30 ? $#cancel_failures : 30) ]);
# the functions that run neither SPI nor a subtransaction: shared memory
# and the session's cache of the catalog (_holders, _status, horizon,
# head, stats, wait), the session's memory (last_numbers), a direct scan
# of the catalog row (_stream_info, _stream_of_row_type), arithmetic
# (_invalid_slot_count, slot_of), the parse of a start position
# (_start_position: its subtransaction is around a cast, where nothing
# waits)
my %no_middle = map { ($_ => 1) } qw(
  _holders _status horizon head stats wait
  last_numbers
  _stream_info _stream_of_row_type
  _invalid_slot_count slot_of
  _start_position);
my @not_mid = grep { !$mid{$_} && !$no_middle{$_} } map { $_->[0] } @callable;
is(join(', ', @not_mid), '',
	'every function that runs SPI or a subtransaction was cancelled in its middle');
note 'cancelled in the middle: ' . join(', ', map { "$_ x$mid{$_}" } sort keys %mid);

# ---------------------------------------------------------------------
# Races with DROP TABLE and disable().  Every function that takes a
# relation is called on a stream (plain fz, partitioned fzp) while
# another transaction has dropped or disabled it and not committed yet;
# once the call waits (or is done), that transaction commits.  The call
# must end in a SQLSTATE reference.md lists or succeed, never XX000; the
# session then runs a statement, ROLLBACK and an empty transaction.  A
# function that takes a row of the stream (the typed reads: NULL::fz)
# races disable() only: a statement that names a table's row type and
# waits for DROP TABLE of it fails in PostgreSQL itself, before any
# function runs, with XX000 "could not open relation" (as
# jsonb_populate_recordset(NULL::fz, ...) does).
my $t_race = time();
my (@race_internal, @race_failures, @race_unlisted, %race_codes);
my $races = 0;
for my $fn (@callable)
{
	my ($f, $args) = @$fn;
	next unless grep {
		($_->[0] eq 'stream' && $_->[1] =~ /^(regclass|anyelement)$/)
		  || ($_->[0] eq 'partition' && $_->[1] eq 'regclass')
		  || $_->[0] eq 'row_type'
	} @$args;
	my $row_typed = grep { $_->[1] eq 'anyelement' } @$args;
	for my $target ('fz', 'fzp')
	{
		next if $target eq 'fz' && $f =~ /partition/;
		for my $kind ($row_typed ? ('disable()') : ('DROP TABLE', 'disable()'))
		{
			my ($token, $slow_token) = make_fixture();
			my $rel = $f eq 'enable' ? 'fzt' : $target;
			my $call = sensible_call($f, $args, token => $token,
				slow_token => $slow_token, stream => $target);
			$caller->query(q{SELECT stream_seq.horizon('fz'), stream_seq.horizon('fzp')});
			$blocker->query('BEGIN');
			$blocker->query($kind eq 'DROP TABLE' ? "DROP TABLE $rel"
				: "SELECT stream_seq.disable('$rel')");
			send_call($call);
			my $waited = caller_waits();
			$blocker->query('COMMIT');
			my $r = $caller->result;
			$caller_dead = 1 if ($r->{sqlstate} // '') eq 'dead';
			my $code = $r->{sqlstate} // 'ok';
			$races++;
			$race_codes{$code}++;
			push @race_internal, "$code ($kind $rel, "
			  . ($waited ? 'waited' : 'did not wait') . "): $call: $r->{err}"
			  if $code eq 'XX000' || $code eq 'dead';
			push @race_unlisted, "$code ($kind $rel): $call"
			  unless $code =~ /^(ok|XX000|dead)$/ || $listed{$code};
			note "race ($kind $rel): $call: "
			  . ($waited ? 'waited, ' : '') . $code if $ENV{FUZZ_VERBOSE};
			probe_after("$call (racing $kind $rel, $code)", \@race_failures);
		}
	}
}
$node->safe_psql('postgres', 'DROP TABLE IF EXISTS fz, fzp, fzt');
note sprintf('races: %d calls in %.1f s; SQLSTATEs: %s', $races,
	time() - $t_race,
	join(' ', map { "$_ x$race_codes{$_}" } sort keys %race_codes));
is(scalar(@race_internal), 0,
	'no call racing DROP TABLE or disable() raised XX000 or lost its session')
  or diag join("\n", @race_internal);
is(scalar(@race_unlisted), 0,
	'every SQLSTATE of a call racing DROP TABLE or disable() is one reference.md lists')
  or diag join("\n", @race_unlisted);
is(scalar(@race_failures), 0,
	'after every call that raced DROP TABLE or disable() the session ran a statement, ROLLBACK and an empty transaction')
  or diag join("\n", @race_failures[ 0 .. ($#race_failures < 30 ? $#race_failures : 30) ]);

# left prepared by nothing: every PREPARE was ended in its unit
# psql, not safe_psql: after a crash the server may still be recovering
my $after = (
	$node->psql('postgres',
		'SELECT (SELECT count(*) FROM pg_prepared_xacts), pg_postmaster_start_time()')
)[1] // '';
is($after, "0|$started",
	'no prepared transaction left, and the server never restarted');
my $log = slurp_file($node->logfile);
my @killed = grep { /terminated by signal|was terminated by exception|PANIC:/ }
  split /\n/, $log;
is(scalar(@killed), 0, 'no server process was terminated by a signal, no PANIC')
  or diag join("\n", @killed);
# what a cancelled call can leave behind: resources its subtransaction
# or SPI held (WARNING: ... reference leak, snapshot ... still active,
# resource was not closed), or a transaction state the next command does
# not expect (FATAL: ... unexpected state)
my @left =
  grep { /(WARNING|ERROR|FATAL|PANIC):.*(leak|still active|unexpected state|was not closed)/ }
  split /\n/, $log;
is(scalar(@left), 0,
	'the server log has no reference leak, "still active" or "unexpected state"')
  or diag join("\n", @left[ 0 .. ($#left < 30 ? $#left : 30) ]);

$node->stop('fast', fail_ok => 1);
done_testing();
