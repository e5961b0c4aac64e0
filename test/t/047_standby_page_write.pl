
# Copyright (c) stream_seq contributors
#
# 047_standby_page_write.pl: a hot standby learns what a transaction holds
# from the records of its commit-time write alone.  With no round written
# (stream_seq.round_interval = 1h), each scenario holds a transaction
# inside its commit once its rows have their numbers, commits a later
# transaction on the same stream, and checks that the standby's horizon
# stays at or below the held transaction's first number; then lets it
# commit and checks that the standby reads every row below its horizon.
# The rows of the held transaction are written in the ways the write
# serves differently: several pages (with and without full-page images),
# two streams, a partitioned stream, rows numbered by an update, rows of
# subtransactions (more than 64: the standby's snapshots overflow),
# committed asynchronously, and with wal_level = logical (no page record:
# the reservation's record of its own).  Then what pg_walinspect shows of
# a page record with an image, a standby restarted while a transaction is
# held, and a crash of the primary followed by a promotion.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

my $primary = new_node('primary',
	"stream_seq.round_interval = 300ms\ncheckpoint_timeout = 1h\n",
	allows_streaming => 1);
$primary->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE multi (payload int, pad text);
SELECT stream_seq.enable('multi');
CREATE TABLE other (payload int);
SELECT stream_seq.enable('other');
CREATE TABLE parted (k int NOT NULL, payload int, seq bigint)
  PARTITION BY LIST (k);
CREATE TABLE parted_1 PARTITION OF parted FOR VALUES IN (1);
CREATE TABLE parted_2 PARTITION OF parted FOR VALUES IN (2);
SELECT stream_seq.enable('parted');
CREATE TABLE updated (payload int);
SELECT stream_seq.enable('updated');
CREATE TABLE full_ix (payload int, seq bigint);
SELECT stream_seq.enable('full_ix');
SET client_min_messages = error;
CREATE INDEX ON full_ix (seq);
RESET client_min_messages;
CREATE TABLE subs (payload int);
SELECT stream_seq.enable('subs');
CREATE FUNCTION insert_in_subxacts(n int) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE i int;
BEGIN
  FOR i IN 1 .. n LOOP
    BEGIN
      INSERT INTO subs VALUES (i);
      IF i % 10 = 0 THEN
        RAISE EXCEPTION 'roll this one back';
      END IF;
    EXCEPTION WHEN raise_exception THEN
      NULL;
    END;
  END LOOP;
END $$;
INSERT INTO multi VALUES (0);
INSERT INTO other VALUES (0);
INSERT INTO parted VALUES (1, 0);
INSERT INTO updated VALUES (0);
INSERT INTO full_ix VALUES (0);
INSERT INTO subs VALUES (0);
});
my $standby = new_standby($primary, 'standby');
ok( $standby->poll_query_until('postgres',
		"SELECT stream_seq.horizon('multi') = 2"),
	'the standby knows every reservation');

# From now on no round rescues the standby.
$primary->safe_psql('postgres', q{
ALTER SYSTEM SET stream_seq.round_interval = '1h';
SELECT pg_reload_conf();
});
sleep 2;		# the lister's last wait with the old interval ends

my $lock = 4700;

# Holds a transaction running "sql" (a list of statements) inside its
# commit, once its numbers exist; commits "later" (statements), which
# number rows of the streams of "streams" (a list) after the held ones;
# checks the standby's horizon of each stream against the held numbers;
# then lets the held transaction commit and checks that the standby reads
# on each stream exactly the rows the primary has, all below its horizon.
sub held_scenario
{
	my ($what, $streams, $sql, $later) = @_;
	$lock++;
	my $gate = session($primary, $primary->connstr('postgres'));
	$gate->query("SELECT pg_advisory_lock($lock)");
	my $held = bg_psql($primary, "SET stream_seq.hold_after_numbering = $lock",
		'BEGIN', @$sql, 'COMMIT');
	my $in = join(', ', map { "'$_'::regclass" } @$streams);
	ok( $primary->poll_query_until('postgres', qq{
SELECT count(DISTINCT stream) = ${\ scalar @$streams}
  FROM stream_seq.holders WHERE stream IN ($in)}),
		"$what: a transaction holds numbers inside its commit");
	my %first;
	for my $s (@$streams)
	{
		$first{$s} = val($primary, qq{
SELECT min(first_number) FROM stream_seq.holders WHERE stream = '$s'::regclass});
	}
	$primary->safe_psql('postgres', $_) for @$later;
	# up to what was inserted: an asynchronous commit may not be written yet
	$primary->wait_for_catchup($standby, 'replay', $primary->lsn('insert'));
	for my $s (@$streams)
	{
		my $horizon = query($standby, "SELECT stream_seq.horizon('$s')");
		cmp_ok($horizon, '<=', $first{$s},
			"$what: the standby's horizon of $s stays at or below the held number "
			  . "($horizon <= $first{$s})");
	}
	$gate->query("SELECT pg_advisory_unlock($lock)");
	$gate->close;
	is(wait_done($held, 60), 0, "$what: the held transaction committed");
	$primary->wait_for_catchup($standby, 'replay', $primary->lsn('insert'));
	for my $s (@$streams)
	{
		my $q = qq{SELECT count(*), coalesce(sum(payload), 0) FROM $s};
		is( val($standby, "$q WHERE seq < stream_seq.horizon('$s')"),
			val($primary, $q),
			"$what: then the standby reads every row of $s below its horizon");
	}
}

held_scenario('several pages', ['multi'],
	[ q{INSERT INTO multi SELECT g, repeat('x', 500) FROM generate_series(1, 60) g} ],
	[ 'INSERT INTO multi VALUES (1000)' ]);

held_scenario('several pages with full-page images', ['multi'],
	[ q{INSERT INTO multi SELECT g, repeat('x', 500) FROM generate_series(1, 60) g},
	  'CHECKPOINT' ],
	[ 'INSERT INTO multi VALUES (1000)' ]);

held_scenario('two streams', ['multi', 'other'],
	[ 'INSERT INTO multi VALUES (1)', 'INSERT INTO other VALUES (1)',
	  'CHECKPOINT' ],
	[ 'INSERT INTO other VALUES (2)', 'INSERT INTO multi VALUES (2)' ]);

held_scenario('a partitioned stream', ['parted'],
	[ 'INSERT INTO parted VALUES (2, 1), (1, 2), (2, 3)' ],
	[ 'INSERT INTO parted VALUES (1, 4)' ]);

held_scenario('a row its transaction updated', ['updated'],
	[ 'INSERT INTO updated VALUES (1), (2)',
	  'UPDATE updated SET payload = 3 WHERE payload = 2 AND seq = 0' ],
	[ 'INSERT INTO updated VALUES (4)' ]);

held_scenario('an index that takes the placeholder', ['full_ix'],
	[ 'INSERT INTO full_ix VALUES (1), (2)' ],
	[ 'INSERT INTO full_ix VALUES (3)' ]);

held_scenario('70 subtransactions', ['subs'],
	[ 'SELECT insert_in_subxacts(70)' ],
	[ 'INSERT INTO subs VALUES (100)' ]);

held_scenario('asynchronous commits', ['multi'],
	[ 'SET synchronous_commit = off',
	  q{INSERT INTO multi SELECT g, repeat('x', 500) FROM generate_series(1, 30) g} ],
	[ 'SET synchronous_commit = off; INSERT INTO multi VALUES (1000)' ]);

held_scenario('rows after a rollback to a savepoint', ['subs'],
	[ 'SAVEPOINT a', 'INSERT INTO subs VALUES (1)', 'ROLLBACK TO a',
	  'INSERT INTO subs VALUES (2)', 'SAVEPOINT b',
	  'INSERT INTO subs VALUES (3)', 'RELEASE b' ],
	[ 'INSERT INTO subs VALUES (4)' ]);

# wal_level = logical: rows are numbered by an update, the reservation
# goes in a record of its own.
{
	my $main = $primary;
	my $main_standby = $standby;
	$primary = new_node('logical',
		"stream_seq.round_interval = 300ms\nwal_level = logical\n",
		allows_streaming => 1);
	$primary->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE multi (payload int, pad text);
SELECT stream_seq.enable('multi');
INSERT INTO multi VALUES (0);
});
	$standby = new_standby($primary, 'logical_standby');
	ok( $standby->poll_query_until('postgres',
			"SELECT stream_seq.horizon('multi') = 2"),
		'wal_level = logical: the standby knows every reservation');
	$primary->safe_psql('postgres', q{
ALTER SYSTEM SET stream_seq.round_interval = '1h';
SELECT pg_reload_conf();
});
	sleep 2;
	held_scenario('wal_level = logical', ['multi'],
		[ q{INSERT INTO multi SELECT g, repeat('x', 500) FROM generate_series(1, 30) g},
		  'CHECKPOINT' ],
		[ 'INSERT INTO multi VALUES (1000)' ]);
	$standby->stop;
	$primary->stop;
	($primary, $standby) = ($main, $main_standby);
}

# What the server says of a page record with a full-page image that
# carries a reservation (pg_walinspect calls the resource manager's desc).
$primary->safe_psql('postgres', 'CREATE EXTENSION pg_walinspect');
my $start = val($primary, 'SELECT pg_current_wal_insert_lsn()');
$primary->safe_psql('postgres', q{
BEGIN;
INSERT INTO other VALUES (10);
CHECKPOINT;
COMMIT;
});
my $end = val($primary, 'SELECT pg_current_wal_insert_lsn()');
like( val($primary, qq{
SELECT string_agg(description, ' / ')
  FROM pg_get_wal_records_info('$start', '$end')
 WHERE resource_manager = 'stream_seq' AND record_type = 'PAGE'
   AND fpi_length > 0}),
	qr/^rows 1 first \d+; rel \d+ holds \d+ next \d+$/,
	'a page record with an image describes the reservation it carries');

# A standby that restarts while a transaction is held knows nothing of it
# if its redo starts after the record of the write: until the next round
# it refuses horizon() (55000), and never gives a horizon above the held
# number.
$lock++;
my $gate = session($primary, $primary->connstr('postgres'));
$gate->query("SELECT pg_advisory_lock($lock)");
my $held = bg_psql($primary, "SET stream_seq.hold_after_numbering = $lock",
	'BEGIN', 'INSERT INTO other VALUES (20), (21)', 'COMMIT');
ok( $primary->poll_query_until('postgres', q{
SELECT count(*) = 1 FROM stream_seq.holders WHERE stream = 'other'::regclass}),
	'restart: a transaction holds numbers inside its commit');
my $held_first = val($primary, q{
SELECT first_number FROM stream_seq.holders WHERE stream = 'other'::regclass});
$primary->safe_psql('postgres', 'CHECKPOINT');
$primary->wait_for_catchup($standby, 'replay');
$standby->safe_psql('postgres', 'CHECKPOINT');	# a restartpoint past the write
$standby->restart;
$primary->safe_psql('postgres', 'INSERT INTO other VALUES (22)');
$primary->wait_for_catchup($standby, 'replay');
my $restarted = try_sql($standby, "SELECT stream_seq.horizon('other')");
like($restarted, qr/^55000: stream horizons are not yet available/,
	'restart: with no round replayed since, horizon() is refused');
# a round, once written, names the held transaction
$primary->safe_psql('postgres', q{
ALTER SYSTEM SET stream_seq.round_interval = '300ms';
SELECT pg_reload_conf();
});
ok( $standby->poll_query_until('postgres',
		"SELECT stream_seq.horizon('other') IS NOT NULL"),
	'restart: a round makes horizons available again');
cmp_ok(val($standby, "SELECT stream_seq.horizon('other')"), '<=', $held_first,
	'restart: the standby learnt the held reservation from the round');

# The primary crashes while the transaction is held; the standby is
# promoted: new numbers are above every number handed out, the held ones
# included, and no row is read twice or skipped.
my $held_last = $held_first + 1;
$primary->stop('immediate');
$gate->close;
wait_done($held, 10);
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'standby was not promoted';
$standby->safe_psql('postgres', 'INSERT INTO other VALUES (30)');
cmp_ok(val($standby, 'SELECT seq FROM other WHERE payload = 30'), '>', $held_last,
	'promoted: a new number is above the numbers the lost transaction held');
is( val($standby, q{
SELECT string_agg(payload::text, ',' ORDER BY seq) FROM other
 WHERE seq < stream_seq.horizon('other')}),
	val($standby, 'SELECT string_agg(payload::text, \',\' ORDER BY seq) FROM other'),
	'promoted: every row is below the horizon');
check_unique($standby, 'other', 'promoted');

done_testing();
