
# Copyright (c) stream_seq contributors
#
# 022_partitioned_lifecycle.pl: a partitioned stream through what its
# server goes through, everything done as an ordinary role that owns it:
#
#  1. Crash (immediate stop) with a transaction holding numbers in one
#     partition and rows committed in another: after the restart numbering
#     continues above every number handed out before, in every partition,
#     and no number is used twice; the sealed partition is still sealed.
#  2. pg_dump -Fc and pg_restore into a new database: the rows and their
#     numbers, the triggers of the parent and of each partition, the sealed
#     ranges (with the restored partitions' new OIDs) and first() come
#     back; new rows are numbered above every number handed out before the
#     dump; the sealed partition still refuses rows; page() skips it.
#  3. Logical replication of the parent with publish_via_partition_root:
#     the subscriber's (unpartitioned) table gets every row with the
#     publisher's number, none NULL, rows written in several partitions
#     and in one transaction across partitions included.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use StreamSeqTest;

# every committed row of ev in database "db" has a number, none twice
sub unique_in
{
	my ($n, $db, $what) = @_;
	is( $n->safe_psql($db, q{
SELECT count(*) FILTER (WHERE seq IS NULL OR seq <= 0) || ',' || (count(seq) - count(DISTINCT seq)) FROM ev}),
		'0,0', "$what: every row has a number, none is used twice");
}

my $node = new_node('parted', "wal_retrieve_retry_interval = 100ms\n",
	allows_streaming => 'logical');
$node->safe_psql('postgres', q{
CREATE ROLE app LOGIN REPLICATION;
CREATE DATABASE src OWNER app;
});
$node->safe_psql('src', q{
CREATE EXTENSION stream_seq;
GRANT USAGE ON SCHEMA stream_seq TO app;
});

# A stream partitioned by day, owned by "app"; the primary key contains the
# partition key (a unique index on the number alone is impossible).
$node->safe_psql('src', q{
SET ROLE app;
CREATE TABLE ev (id int NOT NULL, day int NOT NULL, payload text, seq bigint,
                 PRIMARY KEY (id, day)) PARTITION BY RANGE (day);
CREATE TABLE ev_1 PARTITION OF ev FOR VALUES FROM (1) TO (2);
CREATE TABLE ev_2 PARTITION OF ev FOR VALUES FROM (2) TO (3);
CREATE TABLE ev_3 PARTITION OF ev FOR VALUES FROM (3) TO (4);
SELECT stream_seq.enable('ev');
INSERT INTO ev (id, day, payload) SELECT g, 1, 'day 1' FROM generate_series(1, 5) g;
INSERT INTO ev (id, day, payload) SELECT g, 2, 'day 2' FROM generate_series(6, 10) g;
SELECT stream_seq.seal_partitions('ev');
});
is($node->safe_psql('src', q{SELECT string_agg(partition::text || ':' || lowest || '-' || highest, ',') FROM stream_seq.partition_range}),
	'ev_1:1-5', 'ev_1 is sealed with numbers 1-5');

# 1. Crash with a transaction holding numbers (held inside its commit,
# after numbering, on an advisory lock: stream_seq.hold_after_numbering)
# and rows committed meanwhile.
my $locker = session($node, $node->connstr('src'));
$locker->query('SELECT pg_advisory_lock(4711)');
my $held = bg_run($node->installed_command('psql'), '-XAtq', '-v',
	'ON_ERROR_STOP=1', '-d', $node->connstr('src'),
	'-c', 'SET stream_seq.hold_after_numbering = 4711', '-c', 'SET ROLE app',
	'-c', q{INSERT INTO ev (id, day, payload) VALUES (100, 3, 'held')});
ok( $node->poll_query_until('src',
		"SELECT count(*) = 1 FROM stream_seq.holders"),
	'a transaction holds a number inside its commit');
$node->safe_psql('src', q{
SET ROLE app;
INSERT INTO ev (id, day, payload) VALUES (11, 2, 'after the held one'), (12, 3, 'day 3');
});
my $before_crash = $node->safe_psql('src', q{SELECT stream_seq.head('ev')});
$node->stop('immediate');
$locker->close;
wait_done($held, 10);
$node->start;

$node->safe_psql('src', q{
SET ROLE app;
INSERT INTO ev (id, day, payload) VALUES (13, 2, 'after the crash'), (14, 3, 'after the crash');
});
is( $node->safe_psql('src', q{SELECT count(*) FROM ev WHERE payload = 'held'}),
	'0', 'the transaction that was committing at the crash left no row');
cmp_ok($node->safe_psql('src', q{SELECT min(seq) FROM ev WHERE payload = 'after the crash'}),
	'>', $before_crash, 'after the crash, numbering continues above every number handed out');
unique_in($node, 'src', 'after the crash');
is( sqlstate($node, q{INSERT INTO ev (id, day, payload) VALUES (15, 1, 'late')}, 'src'),
	'55000', 'the sealed partition still refuses rows after the crash');
my $rows_src = $node->safe_psql('src', q{SELECT string_agg(id || ':' || seq, ',' ORDER BY seq) FROM ev});
is( $node->safe_psql('src', q{
SELECT string_agg(("row"->>'id') || ':' || seq, ',' ORDER BY seq) FROM stream_seq.page('ev', 0, 1000)}),
	$rows_src, 'page() returns every row in order after the crash');

# 2. pg_dump and pg_restore into a new database.
$node->safe_psql('src', q{
SET ROLE app;
SELECT stream_seq.create_consumer('ev', 'c');
SELECT stream_seq.advance('ev', 'c', 3);
});
my $head_src = $node->safe_psql('src', q{SELECT stream_seq.head('ev')});
my $dump = $node->basedir . '/parted.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', 'src' ],
	'pg_dump -Fc of the partitioned stream');
$node->safe_psql('postgres', q{CREATE DATABASE dst OWNER app});
$node->command_ok([ 'pg_restore', '-d', 'dst', $dump ],
	'pg_restore into a new database');

# A one-step pg_restore -j may create the parent's triggers, which
# PostgreSQL clones onto the partitions, before a partition's rows are
# loaded: pg_dump makes a trigger depend on its own table's data only.
# That order, replayed in one session from a reordered list: the guard
# refuses the partition's rows, which come with numbers (428C9: a row
# arriving in a partition with a number is also what an UPDATE moving a
# numbered row looks like, and a trigger cannot tell a restore's COPY
# from any other).  The two-step restore of doc/operations.md keeps every
# row.
my ($toc) = run_command([ 'pg_restore', '-l', $dump ]);
my @toc = split /\n/, $toc;
my @late = grep { /TABLE DATA public ev_1 / } @toc;
is(scalar @late, 1, 'the dump lists the rows of partition ev_1');
my $list = $node->basedir . '/parted_late.list';
append_to_file($list, join("\n", (grep { !/TABLE DATA public ev_1 / } @toc), @late) . "\n");
$node->safe_psql('postgres', q{CREATE DATABASE dst_late OWNER app});
$node->command_fails_like([ 'pg_restore', '-L', $list, '-d', 'dst_late', $dump ],
	qr/cannot write a number into column "seq" of stream table "ev"/,
	'a partition\'s rows restored after the triggers are refused');
$node->safe_psql('postgres', q{CREATE DATABASE dst_two OWNER app});
$node->command_ok(
	[ 'pg_restore', '-j', '4', '--section=pre-data', '--section=data', '-d', 'dst_two', $dump ],
	'two-step restore: tables and rows with -j 4');
$node->command_ok([ 'pg_restore', '--section=post-data', '-d', 'dst_two', $dump ],
	'two-step restore: post-data in one session');
is( $node->safe_psql('dst_two', q{SELECT string_agg(id || ':' || seq, ',' ORDER BY seq) FROM ev}),
	$rows_src, 'two-step restore: the rows and their numbers');

is( $node->safe_psql('dst', q{SELECT string_agg(id || ':' || seq, ',' ORDER BY seq) FROM ev}),
	$rows_src, 'restored: the rows and their numbers');
is( $node->safe_psql('dst', q{
SELECT string_agg(c.relname || '.' || t.tgname, ',' ORDER BY c.relname, t.tgname)
  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
 WHERE t.tgname LIKE 'stream\_seq\_%'}),
	join(',', map { my $r = $_; map { "$r.stream_seq_$_" } qw(guard guard_update replica truncate) } qw(ev ev_1 ev_2 ev_3)),
	'restored: the triggers of the parent and of each partition');
is( $node->safe_psql('dst', q{
SELECT string_agg(t.relname, ',' ORDER BY t.relname)
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
  JOIN pg_class t ON t.oid = i.indrelid
  JOIN pg_am a ON a.oid = c.relam
 WHERE a.amname = 'stream_seq_capture'}),
	'ev,ev_1,ev_2,ev_3',
	'restored: the capture index of the parent and of each partition');
is( $node->safe_psql('dst', q{
SELECT string_agg(partition::text || ':' || lowest || '-' || highest, ',')
  FROM stream_seq.partition_range WHERE partition = 'ev_1'::regclass}),
	'ev_1:1-5', 'restored: the sealed range, on the restored partition');
is($node->safe_psql('dst', q{SELECT stream_seq.position('ev', 'c')}), '3',
	'restored: the consumer keeps its position');
is( sqlstate($node, q{INSERT INTO ev (id, day, payload) VALUES (16, 1, 'late')}, 'dst'),
	'55000', 'restored: the sealed partition refuses rows');
$node->safe_psql('dst', q{
SET ROLE app;
INSERT INTO ev (id, day, payload) VALUES (17, 2, 'restored'), (18, 3, 'restored');
});
cmp_ok($node->safe_psql('dst', q{SELECT min(seq) FROM ev WHERE payload = 'restored'}),
	'>', $head_src, 'restored: new rows are numbered above every number handed out before the dump');
unique_in($node, 'dst', 'restored');
is( $node->safe_psql('dst', q{SELECT stream_seq._page_source('ev', 5) LIKE '%ev_1 %'}),
	'f', 'restored: a page after the sealed range leaves ev_1 out');

# 3. Logical replication of the parent, published as the parent.
my $sub = new_node('parted_sub', "wal_retrieve_retry_interval = 100ms\n");
$sub->safe_psql('postgres', q{
CREATE TABLE ev (id int NOT NULL, day int NOT NULL, payload text, seq bigint,
                 PRIMARY KEY (id, day));
});
$node->safe_psql('src', q{
CREATE PUBLICATION ev_pub FOR TABLE ev WITH (publish_via_partition_root = true);
});
my $connstr = $node->connstr . ' dbname=src';
$sub->safe_psql('postgres', qq{CREATE SUBSCRIPTION ev_sub CONNECTION '$connstr' PUBLICATION ev_pub});
$node->wait_for_catchup('ev_sub');
$sub->poll_query_until('postgres',
	q{SELECT count(*) = 0 FROM pg_subscription_rel WHERE srsubstate NOT IN ('r', 's')})
  or die 'initial sync did not finish';
$node->safe_psql('src', q{
SET ROLE app;
INSERT INTO ev (id, day, payload) VALUES (20, 2, 'replicated');
BEGIN;
INSERT INTO ev (id, day, payload) VALUES (21, 3, 'across'), (22, 2, 'across');
SAVEPOINT s;
INSERT INTO ev (id, day, payload) VALUES (23, 3, 'rolled back');
ROLLBACK TO s;
COMMIT;
});
$node->wait_for_catchup('ev_sub');
my $pub_rows = $node->safe_psql('src', q{SELECT string_agg(id || ':' || seq, ',' ORDER BY id) FROM ev});
is( $sub->safe_psql('postgres', q{SELECT string_agg(id || ':' || seq, ',' ORDER BY id) FROM ev}),
	$pub_rows, 'subscriber: every row with the publisher\'s number');
is($sub->safe_psql('postgres', q{SELECT count(*) FROM ev WHERE seq IS NULL OR seq <= 0}),
	'0', 'subscriber: no row without a number');

$sub->stop;
$node->stop;
done_testing();
