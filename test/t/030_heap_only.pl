
# Copyright (c) stream_seq contributors
#
# 030_heap_only.pl: the commit-time version of a stream row written as a
# heap-only tuple (doc/how-it-works.md, "The heap-only commit-time write")
# leaves every index in agreement with the heap, under everything that
# can meet such a chain:
#
# - four pgbench writers commit rows into a plain stream ("events", with a
#   primary key, an index on another column and a group's slot index) and
#   a partitioned one ("parts"), in transactions of 1-5 rows, some with a
#   savepoint rolled back, some aborted, some under SET CONSTRAINTS ALL
#   IMMEDIATE, some updating their own row before commit, some with more
#   than 64 subtransactions, some declaring a cursor WITH HOLD;
# - meanwhile, one session builds indexes on the stream column
#   CONCURRENTLY (partial ones, which the heap-only write keeps up to date,
#   then full ones, which turn it off for their table), rebuilds the
#   stream's own index with REINDEX CONCURRENTLY, and runs VACUUM;
# - a streaming standby replays it all.
#
# Then, on the primary, on the standby, and on the primary after a crash:
# amcheck finds every btree index in agreement with its heap
# (heapallindexed) and every heap sound, and queries through each index
# return exactly what a sequential scan returns.  Every committed row has
# a number, once, and new rows still get numbers above them.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

my $duration = 8;    # seconds of write load

# 045_in_place.pl runs this file with $in_place set: the same load with
# stream_seq.in_place on, so that most rows are numbered in place.
our $in_place;
$in_place //= 0;

my $node = new_node('primary',
	"autovacuum = off\n" . ($in_place ? "stream_seq.in_place = on\n" : ''),
	allows_streaming => 1);
$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE EXTENSION amcheck;
CREATE EXTENSION pageinspect;
CREATE TABLE events (id bigserial PRIMARY KEY, customer int NOT NULL,
                     payload text, seq bigint);
CREATE INDEX events_customer ON events (customer);
SELECT stream_seq.enable('events');
SELECT stream_seq.create_group('events', 'workers', 'customer', 4);
CREATE TABLE parts (id bigserial, customer int NOT NULL, payload text, seq bigint,
                    PRIMARY KEY (id, customer)) PARTITION BY HASH (customer);
CREATE TABLE parts_0 PARTITION OF parts FOR VALUES WITH (MODULUS 2, REMAINDER 0);
CREATE TABLE parts_1 PARTITION OF parts FOR VALUES WITH (MODULUS 2, REMAINDER 1);
SELECT stream_seq.enable('parts');
});
my $standby = new_standby($node, 'standby');

# The writers: each transaction picks one of the shapes above.
my $writer_sql = q{
\set shape random(1, 10)
\set n random(1, 5)
\set c random(1, 50)
BEGIN;
\if :shape = 1
SAVEPOINT s;
INSERT INTO events (customer, payload) SELECT :c, 'rolled back' FROM generate_series(1, :n);
ROLLBACK TO SAVEPOINT s;
INSERT INTO events (customer, payload) VALUES (:c, 'after a savepoint');
\elif :shape = 2
INSERT INTO events (customer, payload) SELECT :c, 'aborted' FROM generate_series(1, :n);
INSERT INTO parts (customer, payload) VALUES (:c, 'aborted');
ROLLBACK;
BEGIN;
\elif :shape = 3
SET CONSTRAINTS ALL IMMEDIATE;
INSERT INTO events (customer, payload) SELECT :c, 'immediate' FROM generate_series(1, :n);
\elif :shape = 4
INSERT INTO events (customer, payload) SELECT :c, 'updated' FROM generate_series(1, :n);
UPDATE events SET payload = 'updated again' WHERE id = currval('events_id_seq');
\elif :shape = 5
DO $$ BEGIN
  FOR i IN 1 .. 70 LOOP
    BEGIN
      INSERT INTO events (customer, payload) VALUES (i % 50, 'subtransaction');
      IF i % 10 = 0 THEN RAISE EXCEPTION 'roll back this one'; END IF;
    EXCEPTION WHEN raise_exception THEN NULL;
    END;
  END LOOP;
END $$;
\elif :shape = 6
INSERT INTO events (customer, payload) SELECT :c, 'held cursor' FROM generate_series(1, :n);
DECLARE held CURSOR WITH HOLD FOR SELECT id, seq FROM events WHERE seq > 0 ORDER BY seq DESC LIMIT 5;
\else
INSERT INTO events (customer, payload) SELECT :c, 'plain' FROM generate_series(1, :n);
INSERT INTO parts (customer, payload) SELECT :c + g, 'plain' FROM generate_series(1, :n) g;
\endif
COMMIT;
\if :shape = 6
CLOSE held;
\endif
};
my $writer_script = $node->basedir . '/writer.sql';
append_to_file($writer_script, $writer_sql);
my $writers = bg_pgbench($node, undef, '-c', '4', '-j', '2', '-T', $duration,
	'-f', $writer_script);

# Index builds and VACUUM while the writers commit.
my @ddl = (
	'VACUUM events',
	'CREATE INDEX CONCURRENTLY events_seq_partial ON events (seq, customer) WHERE seq IS NOT NULL',
	'REINDEX INDEX CONCURRENTLY events_seq_idx',
	'VACUUM parts',
	'CREATE INDEX CONCURRENTLY events_seq_even ON events ((seq % 2)) WHERE seq IS NOT NULL',
	'VACUUM events',
	'CREATE INDEX CONCURRENTLY events_seq_full ON events (seq)',
	'CREATE INDEX CONCURRENTLY parts_0_seq_full ON parts_0 (seq)',
	'VACUUM events');
for my $sql (@ddl)
{
	sleep(int($duration / scalar(@ddl)) || 1);
	my ($rc, $out, $err) = $node->psql('postgres', $sql);
	is($rc, 0, "during the load: $sql") or diag $err;
}
is(wait_done($writers), 0, 'writers finished without an error')
  or diag ${ $writers->{err} };
my ($xacts) = ${ $writers->{out} } =~ /number of transactions actually processed: (\d+)/;
diag "writers committed or aborted " . ($xacts // 0) . " transactions";

# Rows written while the full indexes surely exist, one per transaction
# so that most numbered versions would fit on their page: they must be
# ordinary updates, or the full indexes would hold two keys for one row.
$node->safe_psql('postgres', join("\n", map {
	"INSERT INTO events (customer, payload) VALUES ($_ % 50, 'under a full index');"
	  . "INSERT INTO parts (customer, payload) VALUES ($_, 'under a full index');"
} 1 .. 50));

# Heap-only versions exist (the writers' many same-page updates, before
# the full index).
my ($heap_only, $versions) = row($node, q{
SELECT count(*) FILTER (WHERE (t_infomask2 & 32768) <> 0), count(*)
  FROM generate_series(0, pg_relation_size('events') / 8192 - 1) b,
       heap_page_items(get_raw_page('events', b::int))
 WHERE lp_flags = 1});
if ($in_place)
{
	# Every committed row written with an update counts in n_tup_upd at
	# least once; rows numbered in place do not.
	my ($rows, $updates) = row($node, q{
SELECT (SELECT count(*) FROM events), n_tup_upd
  FROM pg_stat_user_tables WHERE relname = 'events'});
	cmp_ok($updates, '<', $rows, 'some rows of events are numbered in place');
	diag "events: $rows rows, $updates updates, $heap_only heap-only versions of $versions";
}
else
{
	ok($heap_only > 0, 'some numbered versions of events are heap-only');
	diag "events: $heap_only heap-only of $versions row versions in use";
}

# Each index answers as a sequential scan does.
my @queries = (
	'SELECT id, seq FROM events WHERE seq > 100 AND seq < 200',
	'SELECT id, seq FROM events WHERE seq = 150',
	'SELECT count(*) FROM events WHERE seq IS NULL',
	'SELECT count(*) FROM parts_0 WHERE seq IS NULL',
	'SELECT seq FROM events WHERE seq > 0',
	'SELECT id, seq FROM events WHERE id BETWEEN 100 AND 300',
	'SELECT id, seq FROM events WHERE customer = 7',
	'SELECT id, seq FROM events WHERE seq % 2 = 0 AND seq IS NOT NULL AND seq < 500',
	q{SELECT id, seq FROM events WHERE stream_seq.slot_of(customer::text, 4) = 2 AND seq > 0},
	'SELECT id, customer, seq FROM parts WHERE id BETWEEN 10 AND 200',
	'SELECT id, seq FROM parts WHERE seq > 10 AND seq < 300');

# What the sequential scans and the index scans of @queries return, for
# "node", as two strings; they must be equal.
sub both_ways
{
	my ($on, $query) = @_;
	my $agg = "SELECT md5(coalesce(string_agg(r::text, ',' ORDER BY r::text), '')) FROM ($query) r";
	my $seq = $on->safe_psql('postgres', qq{
SET enable_indexscan = off; SET enable_indexonlyscan = off; SET enable_bitmapscan = off;
$agg});
	my $idx = $on->safe_psql('postgres', qq{
SET enable_seqscan = off; $agg});
	return ($seq, $idx);
}

# Everything checked on "on", named after "what".
sub check_all
{
	my ($on, $what) = @_;
	is(amcheck_problems($on), '', "$what: amcheck finds every index and heap sound");
	for my $q (@queries)
	{
		my ($seq, $idx) = both_ways($on, $q);
		is($idx, $seq, "$what: index scans return what a sequential scan does: $q");
	}
	for my $tab ('events', 'parts')
	{
		my ($total, $distinct, $nulls) = row($on,
			"SELECT count(*), count(DISTINCT seq), count(*) FILTER (WHERE seq IS NULL) FROM $tab");
		is($nulls, 0, "$what: every committed row of $tab has a number");
		is($distinct, $total, "$what: no number is used twice in $tab");
	}
}

check_all($node, 'primary');
$node->wait_for_catchup($standby, 'replay');
check_all($standby, 'standby');

# A crash, then recovery replays the heap-only writes.
$node->safe_psql('postgres', 'CHECKPOINT');
$node->safe_psql('postgres',
	"INSERT INTO events (customer, payload) SELECT g % 50, 'before the crash' FROM generate_series(1, 200) g");
$node->stop('immediate');
$node->start;
check_all($node, 'after a crash');
$node->safe_psql('postgres',
	"INSERT INTO events (customer, payload) VALUES (1, 'after the crash')");
is( val($node, q{
SELECT seq > (SELECT max(seq) FROM events WHERE payload <> 'after the crash')
  FROM events WHERE payload = 'after the crash'}),
	't', 'after a crash: a new row is numbered above every other');

# The same load with the heap-only write turned off leaves no new
# heap-only version of the write's making.
$node->safe_psql('postgres', 'CREATE TABLE off_t (id int PRIMARY KEY, seq bigint)');
$node->safe_psql('postgres', "SELECT stream_seq.enable('off_t')");
$node->safe_psql('postgres', q{
SET stream_seq.heap_only = off;
INSERT INTO off_t SELECT generate_series(1, 50)});
is( val($node, q{
SELECT count(*) FROM heap_page_items(get_raw_page('off_t', 0))
 WHERE (t_infomask2 & 32768) <> 0}),
	'0', 'stream_seq.heap_only = off: ordinary updates only');
is(amcheck_problems($node), '', 'amcheck after the ordinary updates');

$standby->stop;
$node->stop;
done_testing();
