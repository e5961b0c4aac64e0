
# Copyright (c) stream_seq contributors
#
# 042_wait_events_stats.pl: stream_seq in PostgreSQL's own views.
#
#  1. pg_stat_activity: a backend in wait() and the retention launcher
#     between intervals show wait events of their own on 17 and later
#     (StreamSeqWait, StreamSeqRetentionInterval), the generic Extension
#     before; the lister's (StreamSeqListerRound) is in pg_wait_events;
#  2. stream_seq.stats() on 18 and later: numbers assigned in committed
#     transactions, those transactions (a rolled-back one counts for
#     neither), entries evicted (the sum of the streams view's evicted),
#     retention runs and the rows they removed, and a failed run; the
#     counters survive a clean restart and are reset by a crash; before
#     18 the function returns NULLs;
#  3. a role with pg_monitor may call stats(), an ordinary role may not.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

my $node = new_node('ws',
	"stream_seq.retention_interval = 1\n"
	  . "max_connections = 10\n"
	  . "stream_seq.max_tracked_xacts = 16\n");
my $v = $node->pg_version->major;
my $named = $v >= 17;

$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE ev (id bigint, v text);
SELECT stream_seq.enable('ev', 'id');
CREATE ROLE mon LOGIN IN ROLE pg_monitor;
CREATE ROLE nobody LOGIN;
GRANT USAGE ON SCHEMA stream_seq TO mon, nobody;
CREATE PROCEDURE fill(n int) LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..n LOOP
    INSERT INTO ev (v) VALUES ('f' || i);
    COMMIT;
  END LOOP;
END $$;
});

# 1. wait events
my ($w_type, $w_event) = $named ? ('Extension', 'StreamSeqWait') : ('Extension', 'Extension');
my $waiter = $node->background_psql('postgres', on_error_stop => 0);
$waiter->query_until(qr/waiting/, q{
\echo waiting
SELECT stream_seq.wait('ev', 1000000, '300 s');
});
ok( $node->poll_query_until('postgres', qq{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE query LIKE 'SELECT stream_seq.wait(%'
   AND wait_event_type = '$w_type' AND wait_event = '$w_event'}),
	"a backend in wait() shows $w_type / $w_event");
# the lister connects to nothing and is not in pg_stat_activity: its
# event is registered (pg_wait_events, 17 and later) once it has waited
if ($named)
{
	ok( $node->poll_query_until('postgres', q{
SELECT count(*) = 1 FROM pg_wait_events
 WHERE type = 'Extension' AND name = 'StreamSeqListerRound'}),
		'the lister has its wait event');
}
my $launcher_event = $named ? 'StreamSeqRetentionInterval' : 'Extension';
ok( $node->poll_query_until('postgres', qq{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE backend_type = 'stream_seq retention launcher' AND wait_event = '$launcher_event'}),
	"the retention launcher shows $launcher_event");
$node->safe_psql('postgres', q{
SELECT pg_cancel_backend(pid) FROM pg_stat_activity
 WHERE query LIKE 'SELECT stream_seq.wait(%' AND pid <> pg_backend_pid()});
$waiter->quit;

# 2. the counters
if ($v < 18)
{
	is( $node->safe_psql('postgres',
			'SELECT num_nulls(numbers_assigned, xacts_committed, evictions, retention_runs, '
			  . 'retention_failures, retention_removed_rows, stats_reset) FROM stream_seq.stats()'),
		'7', 'before 18: stats() returns NULLs');
}
else
{
	my $stats = q{SELECT numbers_assigned, xacts_committed FROM stream_seq.stats()};
	my $base = $node->safe_psql('postgres', $stats);
	my ($n0, $x0) = split /\|/, $base;
	$node->safe_psql('postgres', q{
INSERT INTO ev (v) SELECT 'a' || g FROM generate_series(1, 7) g;
INSERT INTO ev (v) VALUES ('b');
BEGIN; INSERT INTO ev (v) VALUES ('c'); ROLLBACK;
BEGIN; INSERT INTO ev (v) VALUES ('d'); INSERT INTO ev (v) VALUES ('e'); COMMIT;
});
	is($node->safe_psql('postgres', $stats), ($n0 + 10) . '|' . ($x0 + 3),
		'10 numbers in 3 committed transactions, the rolled-back one not counted');

	# evictions: a repeatable read snapshot keeps 40 committed entries
	# from being dropped from a list of 16
	my $rr = $node->background_psql('postgres');
	$rr->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
	$rr->query_safe('SELECT count(*) FROM ev');
	$node->safe_psql('postgres', 'CALL fill(40)');
	$rr->query_safe('COMMIT');
	$rr->quit;
	my ($ev, $sum) = split /\|/, $node->safe_psql('postgres', q{
SELECT (SELECT evictions FROM stream_seq.stats()), (SELECT sum(evicted) FROM stream_seq.streams)});
	cmp_ok($ev, '>', 0, 'entries were evicted');
	is($ev, $sum, 'stats() counts the evictions the streams view shows');

	# retention: rows removed by a run, and a failed run
	$node->safe_psql('postgres', q{
SELECT stream_seq.set_retention('ev', keep_rows => 5, respect_consumers => false);
SELECT stream_seq.apply_retention('ev');
});
	my $removed = $node->safe_psql('postgres', q{
SELECT sum(removed_rows) FROM stream_seq.retention_runs WHERE removed_rows > 0});
	cmp_ok($removed, '>', 0, 'a run removed rows');
	is( $node->safe_psql('postgres', q{
SELECT retention_runs >= 1, retention_removed_rows FROM stream_seq.stats()}),
		"t|$removed", 'stats() counts the runs and the rows they removed');
	$node->safe_psql('postgres', q{
CREATE ROLE owner2;
CREATE TABLE ev2 (id bigint, v text);
ALTER TABLE ev2 OWNER TO owner2;
SELECT stream_seq.enable('ev2', 'id');
INSERT INTO ev2 (v) SELECT 'x' FROM generate_series(1, 10);
SELECT stream_seq.set_retention('ev2', keep_rows => 1, respect_consumers => false);
REVOKE DELETE ON ev2 FROM owner2;
});
	ok( $node->poll_query_until('postgres',
			'SELECT retention_failures > 0 FROM stream_seq.stats()'),
		'a failed run is counted');
	$node->safe_psql('postgres', "SELECT stream_seq.drop_retention('ev2')");

	# a clean restart keeps them, a crash resets them
	my $all = q{SELECT numbers_assigned, xacts_committed, evictions,
  retention_runs > 0, retention_removed_rows, retention_failures > 0
  FROM stream_seq.stats()};
	$node->append_conf('postgresql.conf', "stream_seq.retention_interval = 0\n");
	$node->reload;
	my $before = $node->safe_psql('postgres', $all);
	$node->restart;
	is($node->safe_psql('postgres', $all), $before,
		'the counters survive a clean restart');
	$node->stop('immediate');
	$node->start;
	is( $node->safe_psql('postgres',
			'SELECT numbers_assigned, xacts_committed FROM stream_seq.stats()'),
		'0|0', 'a crash resets them');
}

# 3. privileges
is( $node->safe_psql('postgres', 'SELECT count(*) FROM stream_seq.stats()',
		extra_params => [ '-U', 'mon' ]),
	'1', 'a pg_monitor role may call stats()');
my ($rc, $out, $err) = $node->psql('postgres', 'SELECT * FROM stream_seq.stats()',
	extra_params => [ '-U', 'nobody' ]);
like($err, qr/permission denied for function stats/,
	'an ordinary role may not');

$node->stop;
done_testing();
