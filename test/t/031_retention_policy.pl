
# Copyright (c) stream_seq contributors
#
# 031_retention_policy.pl: the retention workers apply the policies of
# every database on their own (stream_seq.retention_interval = 1 s):
#
#  1. a plain stream (keep_rows) is trimmed up to its consumer and the run
#     records the consumer that held it back; once the consumer advances,
#     the rows go;
#  2. a stream partitioned by time (keep_for) loses its old partitions;
#  3. a stream whose policy fails (its owner revoked its own DELETE) has the
#     error recorded and in the server log, and the others still run;
#     a database where recording fails (a trigger raising on
#     stream_seq.retention_run) gets its error in the log, and the other
#     databases still run; a database without the extension, and one with
#     it at 0.4.2 (no policy table), are left alone, and the latter's
#     policies run once it is updated;
#  4. the launcher terminated (SIGTERM) comes back and runs; killed with
#     SIGKILL, the postmaster restarts everything and it runs again;
#  5. writers and a consumer through pgbouncer in transaction pooling
#     mode while the worker trims: the consumer never finds rows trimmed
#     under it, every committed row has a unique number;
#  6. pg_dump / pg_restore, serial and in two steps with -j, keep the
#     policies;
#  7. a standby runs no launcher (its workers start when recovery has
#     finished) until it is promoted.
#
# Only what is guaranteed is asserted: the waits poll until a run shows
# what must eventually happen.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use StreamSeqTest;

my $node = new_node('retention',
	"stream_seq.retention_interval = 1\nrestart_after_crash = on\n",
	allows_streaming => 1);

# 0.4.2 without the policy table, a database without the extension, and
# one where recording a run fails
$node->safe_psql('postgres', q{
CREATE DATABASE old_ext;
CREATE DATABASE no_ext;
CREATE DATABASE db2;
CREATE DATABASE dbfail;
});
$node->safe_psql('old_ext', "CREATE EXTENSION stream_seq VERSION '0.4.2'");

$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE ROLE bad_owner;
CREATE TABLE bad (v int);
ALTER TABLE bad OWNER TO bad_owner;
SELECT stream_seq.enable('bad');
INSERT INTO bad SELECT g FROM generate_series(1, 10) g;
SELECT stream_seq.set_retention('bad', keep_rows => 5);
-- the owner gave up its own right to read and delete: its runs fail
REVOKE ALL ON bad FROM bad_owner;
CREATE TABLE ev (v int);
SELECT stream_seq.enable('ev');
INSERT INTO ev SELECT g FROM generate_series(1, 100) g;
SELECT stream_seq.create_consumer('ev', 'c', 50);
CREATE TABLE pev (ts timestamptz NOT NULL DEFAULT now(), v int) PARTITION BY RANGE (ts);
CREATE TABLE pev_1 PARTITION OF pev FOR VALUES FROM ('2000-01-01') TO ('2000-02-01');
CREATE TABLE pev_2 PARTITION OF pev FOR VALUES FROM ('2000-02-01') TO ('2000-03-01');
CREATE TABLE pev_now PARTITION OF pev FOR VALUES FROM ('2000-03-01') TO ('3000-01-01');
SELECT stream_seq.enable('pev');
INSERT INTO pev VALUES ('2000-01-05', 1), ('2000-02-05', 2), (now(), 3);
SELECT stream_seq.set_retention('pev', keep_for => '1 day');
SELECT stream_seq.set_retention('ev', keep_rows => 10);
});
foreach my $db ('db2', 'dbfail')
{
	$node->safe_psql($db, q{
CREATE EXTENSION stream_seq;
CREATE TABLE ev2 (v int);
SELECT stream_seq.enable('ev2');
INSERT INTO ev2 SELECT g FROM generate_series(1, 20) g;
SELECT stream_seq.set_retention('ev2', keep_rows => 5);
});
}
$node->safe_psql('dbfail', q{
CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS
  $$BEGIN RAISE EXCEPTION 'retention_run refused by the test'; END$$;
CREATE TRIGGER refuse BEFORE INSERT ON stream_seq.retention_run
  FOR EACH ROW EXECUTE FUNCTION refuse();
});

# 1. the consumer holds the plain stream back, and the run says so
ok($node->poll_query_until('postgres', q{
SELECT count(*) > 0 FROM stream_seq.retention_runs
 WHERE stream = 'ev'::regclass AND by_worker AND held_by = 'c' AND held_at = 50}),
	'the worker ran the policy of ev and recorded the consumer that held it back');
is(val($node, "SELECT stream_seq.first('ev')"), '51', 'ev starts after the consumer');
is(val($node, 'SELECT min(seq) FROM ev'), '51', 'the rows before the consumer are gone, no more');
$node->safe_psql('postgres', "SELECT stream_seq.advance('ev', 'c', 100)");
ok($node->poll_query_until('postgres', 'SELECT min(seq) = 91 FROM ev'),
	'once the consumer advanced, the worker kept only the newest 10 rows');

# 2. the old partitions of the stream partitioned by time are dropped
ok($node->poll_query_until('postgres', q{
SELECT count(*) = 1 FROM pg_inherits WHERE inhparent = 'pev'::regclass}),
	'the worker dropped the partitions older than keep_for');
is(val($node, q{SELECT removed_partitions FROM stream_seq.retention_runs
 WHERE stream = 'pev'::regclass AND by_worker AND removed_partitions > 0}),
	'2', 'the run recorded the two partitions it dropped');
is(val($node, 'SELECT count(*) FROM pev'), '1', 'the newest partition keeps its row');

# 3. errors: recorded and logged, the others still handled
ok($node->poll_query_until('postgres', q{
SELECT count(*) > 0 FROM stream_seq.retention_runs
 WHERE stream = 'bad'::regclass AND by_worker AND sqlstate = '42501'}),
	'the failed run of bad is recorded with its SQLSTATE');
ok($node->poll_query_until('db2',
	"SELECT min(seq) = 16 FROM ev2"), 'the policy of database db2 ran');
ok($node->poll_query_until('dbfail', q{SELECT true}), 'dbfail is up');
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
usleep(100_000)
  until slurp_file($node->logfile) =~ /retention_run refused by the test/
  || time() > $deadline;
like(slurp_file($node->logfile),
	qr/retention policy of stream table "bad" failed/,
	'the failed run of bad is in the server log');
like(slurp_file($node->logfile), qr/retention_run refused by the test/,
	'the failure to record a run in dbfail is in the server log');
is(val($node, q{SELECT count(*) FROM pg_stat_activity
 WHERE backend_type = 'stream_seq retention launcher'}), '1',
	'the launcher still runs');
# after dbfail failed, db2 and postgres still get runs
my $t0 = val($node, 'SELECT clock_timestamp()');
ok($node->poll_query_until('db2',
	"SELECT count(*) > 0 FROM stream_seq.retention_runs WHERE ran_at > '$t0'"),
	'db2 still gets runs after dbfail failed');
is(val($node, q{SELECT count(*) FROM stream_seq.retention_runs
 WHERE stream = 'ev'::regclass AND sqlstate IS NOT NULL}), '0',
	'ev had no failed run');
is($node->safe_psql('old_ext', q{SELECT count(*) FROM pg_class
 WHERE relname LIKE 'retention%'}), '0', 'the 0.4.2 database was left as it was');
# updated, it gets runs too
$node->safe_psql('old_ext', q{
ALTER EXTENSION stream_seq UPDATE;
CREATE TABLE ev3 (v int);
SELECT stream_seq.enable('ev3');
INSERT INTO ev3 SELECT g FROM generate_series(1, 20) g;
SELECT stream_seq.set_retention('ev3', keep_rows => 5);
});
ok($node->poll_query_until('old_ext', q{
SELECT count(*) > 0 FROM stream_seq.retention_runs WHERE by_worker AND removed_rows = 15}),
	'after ALTER EXTENSION UPDATE, the worker runs the policies of that database');

# 4. the launcher terminated, then killed
my $launcher = q{SELECT pid FROM pg_stat_activity
 WHERE backend_type = 'stream_seq retention launcher'};
my $pid = val($node, $launcher);
ok($pid =~ /^\d+$/, 'the launcher runs');
$node->safe_psql('postgres', "SELECT pg_terminate_backend($pid)");
ok($node->poll_query_until('postgres', qq{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE backend_type = 'stream_seq retention launcher' AND pid <> $pid}),
	'the launcher came back after SIGTERM');
$node->safe_psql('postgres', 'INSERT INTO ev SELECT g FROM generate_series(1, 10) g');
ok($node->poll_query_until('postgres', 'SELECT min(seq) = 101 FROM ev'),
	'and ran the policy again');

$pid = val($node, $launcher);
kill 'KILL', $pid;
ok($node->poll_query_until('postgres', qq{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE backend_type = 'stream_seq retention launcher' AND pid <> $pid}),
	'the launcher came back after SIGKILL and the crash restart');
like(slurp_file($node->logfile), qr/terminated by signal 9/,
	'the postmaster saw the launcher killed');
$node->safe_psql('postgres', q{
SELECT stream_seq.advance('ev', 'c', stream_seq.horizon('ev') - 1);
INSERT INTO ev SELECT g FROM generate_series(1, 10) g;
});
ok($node->poll_query_until('postgres',
	'SELECT count(*) = 10 AND min(seq) > 110 FROM ev'),
	'the worker ran the policy after the crash restart');

# 5. writers and a consumer through pgbouncer while the worker trims
SKIP:
{
	skip 'pgbouncer is not installed', 4 unless -x '/usr/sbin/pgbouncer';
	my $bouncer = start_pgbouncer($node);
	my $script = $node->basedir . '/write.sql';
	open(my $fh, '>', $script) or die $!;
	print $fh "BEGIN;\nINSERT INTO ev (v) SELECT g FROM generate_series(1, 3) g;\nCOMMIT;\n";
	close $fh;
	my $pgbench = bg_run($node->installed_command('pgbench'), '-n',
		'-h', '127.0.0.1', '-p', $bouncer->{port}, '-c', '4', '-T', '60',
		'-f', $script, 'postgres');
	my $consumer = session($node, $bouncer->{connstr});
	my $t1 = val($node, 'SELECT clock_timestamp()');
	my ($reads, $errors, $removed) = (0, '', 0);
	my $until = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $until)
	{
		my $r = $consumer->query(q{
SELECT stream_seq.advance('ev', 'c', m)
  FROM (SELECT max(seq) AS m FROM stream_seq.read('ev', 'c', 50)) s
 WHERE m IS NOT NULL});
		$errors .= "$r->{sqlstate}: $r->{message}\n" if defined $r->{sqlstate};
		$reads++;
		$removed = val($node, qq{
SELECT count(*) FROM stream_seq.retention_runs
 WHERE stream = 'ev'::regclass AND by_worker AND removed_rows > 0
   AND ran_at > '$t1'});
		last if $removed >= 3 && $reads >= 20;
		usleep(50_000);
	}
	$pgbench->{handle}->signal('INT');
	wait_done($pgbench, 30);
	$consumer->close;
	stop_pgbouncer($bouncer);
	is($errors, '', 'the consumer through pgbouncer never failed');
	cmp_ok($removed, '>=', 3, 'the worker trimmed while writers and the consumer ran');
	is(${ $pgbench->{err} } =~ /ERROR/ ? ${ $pgbench->{err} } : '', '',
		'the writers through pgbouncer never failed');
	check_unique($node, 'ev', 'after writers and retention');
}

# 6. dump and restore keep the policies
$node->safe_psql('postgres', "SELECT stream_seq.set_retention('ev', keep_rows => 1000000)");
my $policies = q{SELECT string_agg(format('%s %s %s %s', stream, keep_for,
  keep_rows, respect_consumers), ', ' ORDER BY stream::text)
  FROM stream_seq.retention_policy};
my $source = val($node, $policies);
my $dump = $node->basedir . '/ret.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', 'postgres' ], 'pg_dump -Fc');
foreach my $how (
	[ 'serial', [ [] ] ],
	[ 'parallel',
		[ [ '-j', '4', '--section=pre-data', '--section=data' ],
		  [ '--section=post-data' ] ] ])
{
	my ($name, $steps) = @$how;
	my $db = "restored_$name";
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->command_ok(
		[ 'pg_restore', '--exit-on-error', @$_, '-d', $db, $dump ],
		"pg_restore @$_ ($name)")
	  foreach @$steps;
	is($node->safe_psql($db, $policies), $source, "$name restore keeps the policies");
}

# 7. no runs on a standby, until it is promoted
my $standby = new_standby($node, 'retention_standby');
is($standby->safe_psql('postgres', q{SELECT count(*) FROM pg_stat_activity
 WHERE backend_type LIKE 'stream_seq retention%'}), '0',
	'a standby runs no retention launcher or worker');
$standby->promote;
ok($standby->poll_query_until('postgres', q{SELECT count(*) = 1 FROM pg_stat_activity
 WHERE backend_type = 'stream_seq retention launcher'}),
	'the promoted standby starts the launcher');
$standby->stop;

done_testing();
