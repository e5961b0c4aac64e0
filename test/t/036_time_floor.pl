
# Copyright (c) stream_seq contributors
#
# 036_time_floor.pl: times never go down as numbers go up across a crash
# restart (immediate stop), a clean restart, and a standby's promotion.
# The stream's newest row has a time an hour in the future; after each of
# these, new rows must take that time (the clock is behind it), and
# position_at() must agree with a brute force over the table.
#
# After a crash the counter is not started afresh from the table: redo of
# the stream's WAL records starts it, as it does on a standby.  The time
# floor must be raised to the newest row's time on that path too.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

my $primary = new_node('primary', '', allows_streaming => 1);

$primary->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE f (id int, seq bigint, committed_at timestamptz);
INSERT INTO f VALUES (0, NULL, now() + interval '1 hour');
SELECT stream_seq.enable('f', 'seq', 'committed_at');
INSERT INTO f (id) VALUES (1);
});
my $future = val($primary, 'SELECT committed_at FROM f WHERE id = 0');

# Rows whose time is below that of a row with a lower number.
my $down_sql = q{
SELECT count(*) FROM (
  SELECT committed_at < max(committed_at) OVER
           (ORDER BY seq ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS down
    FROM f WHERE seq IS NOT NULL) s
 WHERE down};

# position_at(f, now() + 1 minute) and what a brute force says it is: the
# number before the first row numbered at or after that time, or
# horizon() - 1 if there is none.
my $pos_sql = q{
SELECT stream_seq.position_at('f', now() + interval '1 minute'),
       coalesce((SELECT min(seq) - 1 FROM f
                  WHERE committed_at >= now() + interval '1 minute'),
                stream_seq.horizon('f') - 1)};

# Insert "n" rows numbered "from" on, one transaction each, on "node",
# then check that no time went down, that the new rows took the future
# time, and position_at().
sub insert_and_check
{
	my ($node, $from, $n, $what) = @_;
	my $to = $from + $n - 1;
	$node->safe_psql('postgres',
		join('', map { "INSERT INTO f (id) VALUES ($_);\n" } $from .. $to));
	is(val($node, $down_sql), 0, "$what: no time is below an earlier number's");
	is( val($node,
			"SELECT count(*) FROM f WHERE id BETWEEN $from AND $to AND committed_at < '$future'"
		),
		0,
		"$what: new rows take the newest row's time while the clock is behind it");
	my ($pos, $brute) = row($node, $pos_sql);
	is($pos, $brute, "$what: position_at(now() + 1 minute) is $brute");
}

insert_and_check($primary, 2, 3, 'before any restart');

$primary->stop('immediate');
$primary->start;
insert_and_check($primary, 10, 20, 'after a crash restart');

# a second crash, with only a few rows written since the first
$primary->stop('immediate');
$primary->start;
insert_and_check($primary, 40, 5, 'after a second crash restart');

$primary->stop('fast');
$primary->start;
insert_and_check($primary, 50, 5, 'after a clean restart');

# A standby replays the stream's records; promoted, it hands out times.
my $standby = new_standby($primary, 'standby');
insert_and_check($primary, 60, 5, 'primary with a standby');
$primary->wait_for_catchup($standby, 'replay');
$primary->stop('fast');
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'standby was not promoted';
insert_and_check($standby, 70, 10, 'after promotion');

$standby->stop;
done_testing();
