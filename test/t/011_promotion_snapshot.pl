
# Copyright (c) stream_seq contributors
#
# 011_promotion_snapshot.pl: a snapshot taken on a standby, during
# recovery, can outlive the standby's promotion (a REPEATABLE READ
# transaction keeps it).  The promoted server does not know which of the
# primary's transactions that snapshot saw as running, so horizon() must
# refuse it (SQLSTATE 0A000) rather than return a horizon above rows the
# snapshot cannot see.  A new transaction on the promoted server gets a
# horizon and reads every replayed row, and new rows are numbered above the
# replayed ones.  (During recovery, horizon() works on the standby: see
# 020_replica_reads.pl.)

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

my $primary = new_node('primary', '', allows_streaming => 1);
$primary->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE t (payload text);
SELECT stream_seq.enable('t');
INSERT INTO t (payload) VALUES ('one');
});
is($primary->safe_psql('postgres', q{SELECT string_agg(seq::text, ',') FROM t}),
	'1', 'primary: the first row is numbered 1');

my $standby = new_standby($primary, 'standby');

# A REPEATABLE READ transaction on the standby takes its snapshot now.
my $session = $standby->background_psql('postgres', on_error_stop => 0);
$session->query_safe('\set VERBOSITY verbose');
$session->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
is($session->query_safe('SELECT count(*) FROM t'), '1',
	'standby: the REPEATABLE READ snapshot sees one row');

# During recovery, a fresh snapshot gets the standby's horizon (from the
# replayed reservations, once the primary's listing was replayed).
ok( $standby->poll_query_until('postgres',
		q{SELECT stream_seq.horizon('t') = 2}),
	'standby: a fresh snapshot during recovery gets horizon 2');

# Two more rows committed on the primary and replayed; then promotion.
$primary->safe_psql('postgres', q{INSERT INTO t (payload) VALUES ('two')});
$primary->safe_psql('postgres', q{INSERT INTO t (payload) VALUES ('three')});
$primary->wait_for_catchup($standby, 'replay');
is($standby->safe_psql('postgres', q{SELECT string_agg(seq::text, ',' ORDER BY seq) FROM t}),
	'1,2,3', 'standby: the new rows were replayed');
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'standby was not promoted';

# The old snapshot, after promotion.
is($session->query('SELECT count(*) FROM t'), '1',
	'promoted: the old snapshot still sees one row');
$session->{stderr} = '';
my ($out, $failed) = $session->query(q{SELECT stream_seq.horizon('t')});
my $err = $session->{stderr};
ok($failed, 'promoted: horizon() with the snapshot taken during recovery fails')
  or diag "horizon() returned $out, while the snapshot sees only row 1";
like($err, qr/ERROR:  0A000: /, '... with SQLSTATE 0A000');
$session->query('ROLLBACK');
$session->quit;

# A new transaction on the promoted server.
is( $standby->safe_psql('postgres', q{BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT stream_seq.horizon('t') || ':' || string_agg(seq::text, ',' ORDER BY seq)
  FROM t WHERE seq < stream_seq.horizon('t');
COMMIT;}),
	'4:1,2,3', 'promoted: a new transaction gets horizon 4 and reads rows 1-3');

# New rows on the promoted server are numbered above the replayed ones.
$standby->safe_psql('postgres', q{INSERT INTO t (payload) VALUES ('four')});
$standby->safe_psql('postgres', q{INSERT INTO t (payload) SELECT 'five' FROM generate_series(1, 2)});
my ($low, $n, $distinct) = split /\|/, $standby->safe_psql('postgres', q{
SELECT min(seq), count(seq), count(DISTINCT seq) FROM t WHERE payload IN ('four', 'five')});
is("$n|$distinct", '3|3', 'promoted: the new rows have distinct numbers');
cmp_ok($low, '>', 3, 'promoted: new numbers are above the replayed ones (3)');
is( $standby->safe_psql('postgres', q{
SELECT stream_seq.horizon('t') = max(seq) + 1 AND count(*) = 6 FROM t
 WHERE seq < stream_seq.horizon('t')}),
	't', 'promoted: the horizon passes every row once writers are done');

$standby->stop;
$primary->stop;
done_testing();
