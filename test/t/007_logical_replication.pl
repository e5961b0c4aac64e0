# Copyright (c) stream_seq contributors
#
# 007_logical_replication.pl: stream tables published with logical
# replication.  A stream number is written at commit by an UPDATE of the row
# the transaction inserted (the INSERT is decoded with the column NULL, the
# UPDATE sets it), and the triggers enable() creates are ordinary (ORIGIN)
# triggers, which the apply worker (session_replication_role = replica) does
# not fire.  Checked here, with a publisher and a subscriber that both
# preload the library:
#
#  1. Tables with a primary key.  Rows written on the publisher before the
#     subscription (initial copy) and after it (multi-row and multi-table
#     transactions, a savepoint rolled back, COPY, an update of another
#     column, a delete, two transactions committing in the other order than
#     they started, and four concurrent pgbench clients) arrive with the same
#     numbers, none NULL:
#       (a) into a plain table with a "seq" column;
#       (b) into a table that is itself a stream (enable() before the
#           subscription): its triggers are ORIGIN triggers and do not fire in
#           the apply worker, so nothing is renumbered and the apply worker's
#           UPDATE of the column is not refused.  Local inserts into that
#           table on the subscriber are numbered at commit (above the
#           replicated numbers), and a hand-written number is still refused;
#       (c) into a table without a primary key whose publisher side has
#           REPLICA IDENTITY FULL.
#  2. A stream table without a primary key or replica identity in a
#     publication that publishes updates.  PostgreSQL refuses an ordinary
#     UPDATE of such a table ("does not have a replica identity and
#     publishes updates", SQLSTATE 55000); the commit-time number write is an
#     update too, and must be refused the same way: otherwise the publisher
#     commits, and the subscriber's apply worker fails on the UPDATE ("has
#     neither REPLICA IDENTITY index nor PRIMARY KEY") over and over, holding
#     back everything the subscription carries.  Asserted: the insert on the
#     publisher fails with SQLSTATE 55000 naming the replica identity, nothing
#     is committed, and the subscription keeps applying.
#  3. A publication with publish = 'insert' would send the INSERT (column
#     NULL) and not the UPDATE that numbers the row: the subscriber would
#     keep NULL where the publisher has a number.  Asserted: the insert on
#     the publisher fails with SQLSTATE 55000 naming the publication problem,
#     and nothing is committed.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use StreamSeqTest;

# retry failed apply and sync workers quickly
my $conf = "wal_retrieve_retry_interval = 100ms\n";

my $pub = new_node('publisher', $conf, allows_streaming => 'logical');
my $sub = new_node('subscriber', $conf);

my $pub_connstr = $pub->connstr . ' dbname=postgres';

# query() and psql_result(), not safe_psql, where a statement may fail:
# the check then reports the failure (with its SQLSTATE) instead of the
# script ending.

# The rows of a table as text, in id order (or payload order without id).
sub rows
{
	my ($node, $table, $order) = @_;
	$order //= 'id';
	return $node->safe_psql('postgres',
		"SELECT $order, payload, seq FROM $table ORDER BY $order");
}

########################################################################
# 1. Tables with a primary key (and one with REPLICA IDENTITY FULL).
########################################################################

$pub->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE ev_a (id bigserial PRIMARY KEY, payload text);
SELECT stream_seq.enable('ev_a');
CREATE TABLE ev_b (id bigserial PRIMARY KEY, payload text);
SELECT stream_seq.enable('ev_b');
CREATE TABLE ev_full (payload text);
ALTER TABLE ev_full REPLICA IDENTITY FULL;
SELECT stream_seq.enable('ev_full');
CREATE PUBLICATION pub_pk FOR TABLE ev_a, ev_b, ev_full;

-- rows that reach the subscriber by the initial copy
INSERT INTO ev_a (payload) VALUES ('copy 1'), ('copy 2'), ('copy 3');
INSERT INTO ev_b (payload) VALUES ('copy 1'), ('copy 2');
INSERT INTO ev_full (payload) VALUES ('copy 1');
});

# Subscriber: (a) a plain table, columns in another order; (b) the same
# definition made a stream by enable(), before the subscription starts;
# (c) a plain table without a key.  Nothing on the subscriber looks at the
# stream's counter before the rows arrive here (025_operations does, and
# cuts over).
$sub->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE ev_a (seq bigint, payload text, id bigint PRIMARY KEY);
CREATE TABLE ev_b (id bigint PRIMARY KEY, payload text);
SELECT stream_seq.enable('ev_b');
CREATE TABLE ev_full (payload text, seq bigint);
});
is( $sub->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE tgname = 'stream_seq_guard')
	       || ' ' || bool_and(tgenabled = 'O') FILTER (WHERE tgname <> 'stream_seq_replica')
	       || ' ' || bool_and(tgenabled = 'R') FILTER (WHERE tgname = 'stream_seq_replica')
	  FROM pg_trigger WHERE tgrelid = 'ev_b'::regclass AND tgname LIKE 'stream\_seq\_%'}),
	'1 true true',
	'subscriber stream: its guard trigger fires on origin only (not in the apply worker), its replica trigger in replica mode only');

$sub->safe_psql('postgres',
	"CREATE SUBSCRIPTION sub_pk CONNECTION '$pub_connstr' PUBLICATION pub_pk");
$sub->wait_for_subscription_sync($pub, 'sub_pk');

# Transactions of every shape.
$pub->safe_psql('postgres', q{
BEGIN;
INSERT INTO ev_a (payload) SELECT 'multi ' || g FROM generate_series(1, 5) g;
INSERT INTO ev_b (payload) SELECT 'multi ' || g FROM generate_series(1, 3) g;
INSERT INTO ev_a (payload) VALUES ('multi 6'), ('multi 7');
INSERT INTO ev_full (payload) VALUES ('multi 1'), ('multi 2');
COMMIT;

BEGIN;
INSERT INTO ev_a (payload) VALUES ('kept 1');
SAVEPOINT s;
INSERT INTO ev_a (payload) VALUES ('rolled back');
INSERT INTO ev_b (payload) VALUES ('rolled back');
ROLLBACK TO s;
INSERT INTO ev_b (payload) VALUES ('kept 2');
COMMIT;

BEGIN;
INSERT INTO ev_a (payload) VALUES ('updated later');
UPDATE ev_a SET payload = 'updated in its transaction' WHERE payload = 'updated later';
COMMIT;

UPDATE ev_a SET payload = 'copy 2, updated' WHERE payload = 'copy 2';
DELETE FROM ev_b WHERE payload = 'copy 1';
INSERT INTO ev_a (payload) VALUES ('autocommit');
});
$pub->safe_psql('postgres', "COPY ev_a (payload) FROM STDIN;\ncopy from 1\ncopy from 2\n\\.\n");

# Two transactions committing in the other order than they inserted.
my $s1 = $pub->background_psql('postgres');
my $s2 = $pub->background_psql('postgres');
$s1->query_safe(q{BEGIN; INSERT INTO ev_a (payload) VALUES ('first in, last out')});
$s2->query_safe(q{BEGIN; INSERT INTO ev_a (payload) VALUES ('last in, first out')});
$s2->query_safe(q{INSERT INTO ev_b (payload) VALUES ('last in, first out')});
$s2->query_safe('COMMIT');
$s1->query_safe('COMMIT');
$s1->quit;
$s2->quit;

# Concurrent writers: 4 clients, 50 transactions each, 1 + 3 rows each.
$pub->pgbench(
	'--no-vacuum --client=4 --jobs=4 --transactions=50',
	0,
	[qr{processed: 200/200}],
	[qr{^.*$}s],
	'publisher: concurrent writers',
	{
		'007_writers' => q{
BEGIN;
INSERT INTO ev_a (payload) VALUES ('pgbench :client_id');
INSERT INTO ev_b (payload) SELECT 'pgbench :client_id' FROM generate_series(1, 3);
COMMIT;
}
	});

$pub->wait_for_catchup('sub_pk');

is( $pub->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM ev_a) || ' ' ||
	       (SELECT count(*) FROM ev_a WHERE seq IS NULL OR seq <= 0) || ' ' ||
	       (SELECT count(DISTINCT seq) FROM ev_a) || ' ' ||
	       (SELECT count(*) FROM ev_b) || ' ' ||
	       (SELECT count(*) FROM ev_b WHERE seq IS NULL OR seq <= 0) || ' ' ||
	       (SELECT count(DISTINCT seq) FROM ev_b)}),
	'217 0 217 606 0 606',
	'publisher: every row numbered, numbers unique');

my $pub_a = rows($pub, 'ev_a');
my $pub_b = rows($pub, 'ev_b');
is(rows($sub, 'ev_a'), $pub_a,
	'(a) plain subscriber table: same rows with the same numbers');
is(rows($sub, 'ev_b'), $pub_b,
	'(b) subscriber stream table: same rows with the same numbers (not renumbered)');
is(rows($sub, 'ev_full', 'payload'), rows($pub, 'ev_full', 'payload'),
	'(c) REPLICA IDENTITY FULL without a key: same rows with the same numbers');
is( $sub->safe_psql('postgres', q{
	SELECT count(*) FROM ev_a WHERE seq IS NULL OR seq <= 0
	UNION ALL SELECT count(*) FROM ev_b WHERE seq IS NULL OR seq <= 0
	UNION ALL SELECT count(*) FROM ev_full WHERE seq IS NULL OR seq <= 0}),
	"0\n0\n0",
	'subscriber: no row without its number');

# Local writes on the subscriber stream table are numbered at commit, above
# every replicated number, consecutively.
my $max_b = $sub->safe_psql('postgres', 'SELECT max(seq) FROM ev_b');
is( query($sub, q{
	BEGIN;
	INSERT INTO ev_b (id, payload) VALUES (1000001, 'local 1'), (1000002, 'local 2');
	SELECT count(*) FROM ev_b WHERE id > 1000000 AND seq = 0;
	COMMIT;
	SELECT count(*) FROM ev_b WHERE id > 1000000 AND seq = 0}),
	"2\n0",
	'(b) local insert on the subscriber stream: 0 until commit, then numbered');
is( $sub->safe_psql('postgres', qq{
	SELECT min(seq) > $max_b, max(seq) - min(seq)
	  FROM ev_b WHERE id > 1000000}),
	't|1',
	'(b) local numbers are consecutive and above the replicated ones');
like(
	query($sub,
		"INSERT INTO ev_b (id, payload, seq) VALUES (1000003, 'by hand', 999999)"),
	qr/ERROR:\s+428C9:/,
	'(b) a hand-written number is still refused in a local session');

########################################################################
# 2. No primary key, no replica identity, a publication that publishes
#    updates.
########################################################################

$pub->safe_psql('postgres', q{
CREATE TABLE nopk (payload text);
SELECT stream_seq.enable('nopk');
INSERT INTO nopk (payload) VALUES ('before the publication was used');
CREATE PUBLICATION pub_nopk FOR TABLE nopk WITH (publish = 'insert, update');
});
$sub->safe_psql('postgres', qq{
CREATE TABLE nopk (payload text, seq bigint);
CREATE SUBSCRIPTION sub_nopk CONNECTION '$pub_connstr' PUBLICATION pub_nopk
  WITH (disable_on_error = true);
});
$sub->wait_for_subscription_sync($pub, 'sub_nopk');
is( $sub->safe_psql('postgres', 'SELECT payload, seq FROM nopk'),
	'before the publication was used|1',
	'no key: the initial copy carries the number');

# What PostgreSQL does with an ordinary UPDATE of such a table.
like(
	query($pub, q{UPDATE nopk SET payload = payload}),
	qr/ERROR:\s+55000: cannot update table "nopk" because it does not have a replica identity and publishes updates/,
	'no key: an ordinary UPDATE is refused on the publisher');

# The commit-time number write must be refused the same way.
my $sub_log_offset = -s $sub->logfile;
my $result = query($pub, q{INSERT INTO nopk (payload) VALUES ('new 1'), ('new 2')});
like($result, qr/ERROR:\s+55000:.*replica identity/is,
	'no key: an insert into the stream fails on the publisher with SQLSTATE 55000 naming the replica identity');
is($pub->safe_psql('postgres', q{SELECT count(*) FROM nopk WHERE payload LIKE 'new%'}),
	'0', 'no key: nothing was committed on the publisher');

# If the publisher did commit, see what the subscriber made of it (bounded
# wait: with disable_on_error the failing subscription turns itself off).
if ($result !~ /^psql exited/)
{
	$sub->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM nopk WHERE payload LIKE 'new%'
		  OR NOT (SELECT subenabled FROM pg_subscription WHERE subname = 'sub_nopk')});
	my ($apply_error) = grep { /ERROR/ }
	  split /\n/, substr(slurp_file($sub->logfile), $sub_log_offset);
	diag('publisher committed: ' . $pub->safe_psql('postgres',
			q{SELECT string_agg(payload || ' = ' || seq, ', ') FROM nopk WHERE payload LIKE 'new%'}));
	diag('subscriber apply worker: ' . ($apply_error // '(no error logged)'));
}
else
{
	$pub->wait_for_catchup('sub_nopk');
}
is( $sub->safe_psql('postgres',
		q{SELECT subenabled FROM pg_subscription WHERE subname = 'sub_nopk'}),
	't', 'no key: the subscription keeps applying (no apply error)');
is( $sub->safe_psql('postgres', q{SELECT count(*) FROM nopk WHERE payload LIKE 'new%'}),
	$pub->safe_psql('postgres', q{SELECT count(*) FROM nopk WHERE payload LIKE 'new%'}),
	'no key: publisher and subscriber hold the same rows');
$sub->safe_psql('postgres', 'DROP SUBSCRIPTION sub_nopk');

########################################################################
# 3. publish = 'insert' is refused on the publisher.
########################################################################

$pub->safe_psql('postgres', q{
CREATE TABLE ins_only (id bigserial PRIMARY KEY, payload text);
SELECT stream_seq.enable('ins_only');
CREATE PUBLICATION pub_ins FOR TABLE ins_only WITH (publish = 'insert');
});
my $ins = psql_result($pub,
	q{INSERT INTO ins_only (payload) VALUES ('one'), ('two')});
isnt($ins->{rc}, 0, "publish = 'insert': the insert fails");
like($ins->{err}, qr/55000: stream table "ins_only" is published without updates/,
	"publish = 'insert': ... with 55000 naming the table");
is($pub->safe_psql('postgres', 'SELECT count(*) FROM ins_only'), '0',
	"publish = 'insert': nothing was committed");

$sub->stop;
$pub->stop;
done_testing();
