
# Copyright (c) stream_seq contributors
#
# 023_standby_stream_churn.pl: streams come and go on the primary (created,
# written, dropped or disabled) while a hot standby with the same small
# stream_seq.max_streams serves horizon() and read().  The primary frees a
# stream's slot at commit of its DROP TABLE or disable(), and no record
# tells the standby; redo must take back a slot nothing needs any more
# instead of giving up on every stream (54000 until a restart).  A reader
# session stays connected on the standby throughout, so a slot taken from
# under it is exercised too, and an ordinary role reads.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use StreamSeqTest;

my $primary = new_node('primary',
	"stream_seq.max_streams = 2\nstream_seq.round_interval = 200ms\n",
	allows_streaming => 1);
$primary->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE ROLE reader LOGIN;
GRANT USAGE ON SCHEMA stream_seq TO reader;
CREATE TABLE keep (payload int);
SELECT stream_seq.enable('keep');
GRANT SELECT ON keep TO reader;
SELECT stream_seq.create_consumer('keep', 'c');
INSERT INTO keep SELECT g FROM generate_series(1, 3) g;
});
my $standby = new_standby($primary, 'standby');
ok( $standby->poll_query_until('postgres',
		"SELECT stream_seq.horizon('keep') = 4"),
	'standby: horizon() of the stream that stays');

# a reader connected to the standby for the whole test, as the reader role
my $reader = session($standby,
	$standby->connstr('postgres') . ' user=reader');

my $rounds = 8;
my @errors;
for my $i (1 .. $rounds)
{
	my $how = $i % 2 ? 'DROP TABLE' : 'disable';
	$primary->safe_psql('postgres', qq{
CREATE TABLE churn_$i (payload int);
SELECT stream_seq.enable('churn_$i');
GRANT SELECT ON churn_$i TO reader;
INSERT INTO churn_$i SELECT g FROM generate_series(1, $i) g;
INSERT INTO keep VALUES ($i);
});
	$primary->wait_for_catchup($standby, 'replay');
	# the standby reads the new stream and the one that stays
	my $r = $reader->query(
		"SELECT stream_seq.horizon('churn_$i') || '|' || stream_seq.horizon('keep')");
	push @errors, "round $i: $r->{sqlstate} $r->{message}"
	  if defined $r->{sqlstate};
	is($r->{out}, ($i + 1) . '|' . ($i + 4),
		"round $i: the standby's horizons of the new stream and the one that stays");
	if ($how eq 'disable')
	{
		$primary->safe_psql('postgres', qq{
SELECT stream_seq.disable('churn_$i');
DROP TABLE churn_$i;});
	}
	else
	{
		$primary->safe_psql('postgres', "DROP TABLE churn_$i");
	}
}
$primary->wait_for_catchup($standby, 'replay');
is(join('; ', @errors), '', 'no reader query on the standby failed');

# the standby still reads, and a consumer's page comes from it
is( $reader->query(
		q{SELECT string_agg(payload::text, ',' ORDER BY seq) FROM keep
		   WHERE seq > 0 AND seq < stream_seq.horizon('keep')})->{out},
	'1,2,3,' . join(',', 1 .. $rounds),
	'standby: the stream that stays reads in full');
is( $standby->safe_psql('postgres',
		q{SELECT count(*) FROM stream_seq.read('keep', 'c', 100)}),
	3 + $rounds,
	'standby: read() of its consumer');
# a new stream after the churn is served too, by a new session
$primary->safe_psql('postgres', q{
CREATE TABLE late (payload int);
SELECT stream_seq.enable('late');
INSERT INTO late VALUES (1), (2);
});
$primary->wait_for_catchup($standby, 'replay');
is($standby->safe_psql('postgres', "SELECT stream_seq.horizon('late')"),
	3, 'standby: a stream created after the churn');
$reader->close;

# wait() on the standby for a stream nothing was replayed for rechecks the
# table every 10 ms; its memory must not grow with each recheck.  The
# primary restarts cleanly (nothing lists stream "idle" after that), and
# the standby restarts from a restartpoint at the checkpoint made after it.
$primary->safe_psql('postgres', q{
DROP TABLE late;
CREATE TABLE idle (payload int);
SELECT stream_seq.enable('idle');
GRANT SELECT ON idle TO reader;
INSERT INTO idle VALUES (1), (2);
});
$primary->restart;
$primary->safe_psql('postgres', 'CHECKPOINT');
$primary->wait_for_catchup($standby, 'replay');
$standby->safe_psql('postgres', 'CHECKPOINT');
$standby->restart;
ok( $standby->poll_query_until('postgres',
		q{SELECT head IS NULL AND horizon = 3 FROM stream_seq.streams
		   WHERE stream = 'idle'::regclass}),
	'standby: nothing replayed for stream "idle"; horizon from its rows');
my $waiter = bg_psql($standby, 'SET ROLE reader',
	q{SELECT stream_seq.wait('idle', 100, '10 min')});
ok( $standby->poll_query_until('postgres', q{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE query LIKE '%wait(''idle''%' AND wait_event_type = 'Extension'}),
	'standby: a reader waits for stream "idle"');
# by its query alone: between its rechecks the waiter is briefly not in
# its wait event
my $waiter_pid = $standby->safe_psql('postgres', q{
SELECT pid FROM pg_stat_activity
 WHERE query LIKE '%wait(''idle''%' AND pid <> pg_backend_pid()});

# the waiting backend's memory, as pg_log_backend_memory_contexts logs it
sub waiter_memory
{
	my $offset = log_offset($standby);
	$standby->safe_psql('postgres',
		"SELECT pg_log_backend_memory_contexts($waiter_pid)");
	my $total;
	for (1 .. 100)
	{
		($total) = log_since($standby, $offset) =~ /Grand total: (\d+) bytes/;
		last if defined $total;
		usleep(50_000);
	}
	return $total // -1;
}
usleep(500_000);
my $early = waiter_memory();
usleep(4_000_000);
my $late = waiter_memory();
ok($early > 0 && $late > 0, 'standby: the waiting backend logged its memory twice');
# About 400 rechecks in those 4 s.  A wait() that kept what each allocates
# grew by 917,504 bytes here; caches and the logging itself may add a few
# blocks (25,600 bytes seen once), so the bound is 128 kB.
cmp_ok($late - $early, '<', 131072,
	"standby: wait()'s memory does not grow with its rechecks ($early, then $late bytes)");
$standby->safe_psql('postgres', "SELECT pg_cancel_backend($waiter_pid)");
isnt(wait_done($waiter, 30), -1, 'standby: the wait ended when cancelled');

done_testing();
