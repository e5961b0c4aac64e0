
# Copyright (c) stream_seq contributors
#
# 017_standby_promotion.pl: a streaming standby promoted after the primary
# stopped hands out numbers above everything it had replayed, and right
# after promotion head() and horizon() describe the replayed rows;
# horizon() on the standby describes them too.  head() is called on the
# standby before the load, as a monitoring query would.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

my $primary = new_node('primary', '', allows_streaming => 1);

$primary->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
SET stream_seq.head_interval = 10;
CREATE TABLE p (id bigserial PRIMARY KEY, phase int NOT NULL, client int);
SELECT stream_seq.enable('p');
INSERT INTO p (phase) SELECT 0 FROM generate_series(1, 15);
});
my $p_script = $primary->basedir . '/p.sql';
append_to_file($p_script, q{
\set n random(1, 4)
INSERT INTO p (phase, client) SELECT :phase, :client_id FROM generate_series(1, :n);
});

my $standby = new_standby($primary, 'standby');

ok($standby->poll_query_until('postgres', "SELECT stream_seq.horizon('p') = 16"),
	'standby: horizon() is 16 after 15 replayed rows');
# a monitoring query on the standby before the load
$standby->psql('postgres', "SELECT stream_seq.head('p')");

my $p_load = bg_pgbench($primary, undef,
	'-c', '4', '-j', '2', '-t', '150', '-D', 'phase=1', '-f', $p_script);
is(wait_done($p_load, 60), 0, 'standby: load on the primary ran cleanly')
  or diag ${ $p_load->{err} };
$primary->wait_for_catchup($standby, 'replay');

my ($sb_count, $sb_max) = row($standby, 'SELECT count(*), max(seq) FROM p');
my ($pr_count, $pr_max) = row($primary, 'SELECT count(*), max(seq) FROM p');
is("$sb_count|$sb_max", "$pr_count|$pr_max", 'standby: caught up with the primary');
is(val($standby, "SELECT stream_seq.horizon('p')"), $sb_max + 1,
	'standby: horizon() is the replayed maximum + 1 once writers are done');
note 'standby: head() reports '
  . val($standby, "SELECT stream_seq.head('p')")
  . " after replaying up to $sb_max";

$primary->stop;
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'standby was not promoted';

# Before any new number: the replayed rows are the stream.
my ($pp_h, $pp_head) =
  row($standby, "SELECT stream_seq.horizon('p'), stream_seq.head('p')");
is($pp_head, $sb_max, 'promoted, idle: head() is the replayed maximum');
is($pp_h, $sb_max + 1, 'promoted, idle: horizon is replayed maximum + 1');

my $p_after = bg_pgbench($standby, undef,
	'-c', '4', '-j', '2', '-t', '30', '-D', 'phase=2', '-f', $p_script);
is(wait_done($p_after, 60), 0, 'promoted: load on the promoted standby ran cleanly')
  or diag ${ $p_after->{err} };
my ($new_count, $p_min, $below) = row($standby, qq{
SELECT count(*), min(seq), count(*) FILTER (WHERE seq <= $sb_max)
  FROM p WHERE phase = 2});
cmp_ok($new_count, '>', 0, 'promoted: new rows');
is($below, 0, "promoted: every new number above the replayed maximum ($sb_max)");
cmp_ok($p_min, '>', $sb_max, 'promoted: lowest new number above the replayed maximum');
check_unique($standby, 'p', 'promoted');
is(val($standby, 'SELECT count(*) FROM p'), $sb_count + $new_count,
	'promoted: replayed rows kept');
my ($p_h, $p_head, $p_max) =
  row($standby, "SELECT stream_seq.horizon('p'), stream_seq.head('p'), max(seq) FROM p");
is($p_head, $p_max, 'promoted: head() is the highest number handed out');
is($p_h, $p_head + 1, 'promoted: idle horizon is head + 1');

$standby->stop;
done_testing();
