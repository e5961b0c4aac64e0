
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
# must end).  A call with an unlisted SQLSTATE is printed with it.
#
# Bounded in calls (FUZZ_CALLS, default 40000) and in time (FUZZ_SECONDS,
# default 90): it stops at whichever comes first.  The random choices come
# from a fixed seed, printed, that FUZZ_SEED changes; with the same seed a
# failure reproduces (the interleaving with the second session aside).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time);
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
my (%seen, @internal, @unlisted, @lost);
my $fuzzer_connstr = $node->connstr('postgres') . ' user=fuzzer';
while ($calls < $max_calls && time() - $t_start < $max_seconds)
{
	my $as_super = rand() < 0.25;
	my @lines = (
		[ "SET statement_timeout = '3s';", 0 ],
		[ "SET lock_timeout = '1s';", 0 ]);
	while (@lines < 300)
	{
		push @lines, random_unit();
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
	for my $eline (split /\n/, $err)
	{
		next unless $eline =~ /^psql:<stdin>:(\d+): (?:ERROR|FATAL|PANIC):\s+(\S+)/;
		my ($lineno, $code) = ($1, $2);
		my ($sql, $judged) = @{ $lines[ $lineno - 1 ] };
		my $who = $as_super ? 'superuser' : 'fuzzer';
		if ($code eq 'XX000')
		{
			push @internal, "$code as $who: $sql";
		}
		# 25P02: a statement after an error in its transaction, which
		# was judged itself
		next unless $judged && $code ne '25P02';
		$seen{$code}++;
		push @unlisted, "$code as $who: $sql"
		  unless $listed{$code} || $harness{$code};
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

$node->stop('fast', fail_ok => 1);
done_testing();
