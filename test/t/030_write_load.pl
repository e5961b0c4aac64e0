
# Copyright (c) stream_seq contributors
#
# 030_write_load.pl: the commit-time write (doc/how-it-works.md, "The
# write path") leaves every index in agreement with the heap, under
# everything that can meet it:
#
# - four pgbench writers commit rows into a plain stream ("events", with a
#   primary key, an index on another column and a group's slot index) and
#   a partitioned one ("parts"), in transactions of 1-5 rows, some with a
#   savepoint rolled back, some aborted, some under SET CONSTRAINTS ALL
#   IMMEDIATE (which changes nothing now), some updating their own row
#   before commit, some with more than 64 subtransactions, some declaring
#   a cursor WITH HOLD, some loading 200 rows with COPY (stored in
#   batches), some upserting the same few keys (the losers' rows are
#   super-deleted after the capture index saw them);
# - meanwhile, one session builds indexes on the stream column
#   CONCURRENTLY (partial ones, which the page write keeps up to date,
#   then a full one, which sends its table's rows to the update), rebuilds
#   the stream's own index and its capture index with REINDEX
#   CONCURRENTLY, and runs VACUUM;
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

# 045_page_write.pl runs this file with $update_route set: the same load
# with stream_seq.in_place off, so that every row is numbered by an update.
our $update_route;
$update_route //= 0;

my $node = new_node('primary',
	"autovacuum = off\n" . ($update_route ? "stream_seq.in_place = off\n" : ''),
	allows_streaming => 1);
$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE EXTENSION amcheck;
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
my $capture_index = $node->safe_psql('postgres', q{
SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
  JOIN pg_am a ON a.oid = c.relam
 WHERE i.indrelid = 'events'::regclass AND a.amname = 'stream_seq_capture'});
my $standby = new_standby($node, 'standby');

# The writers: each transaction picks one of the shapes above.
my $writer_sql = q{
\set shape random(1, 12)
\set n random(1, 5)
\set c random(1, 50)
\set key random(1, 5)
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
\elif :shape = 7
COPY events (customer) FROM PROGRAM 'seq 1 200';
\elif :shape = 8
INSERT INTO events (id, customer, payload) VALUES (-:key, :c, 'upserted')
  ON CONFLICT (id) DO UPDATE SET payload = 'upserted again', customer = excluded.customer;
INSERT INTO parts (id, customer, payload) VALUES (-:key, :key, 'upserted')
  ON CONFLICT (id, customer) DO NOTHING;
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

# Index builds, rebuilds and VACUUM while the writers commit.
my @ddl = (
	'VACUUM events',
	'CREATE INDEX CONCURRENTLY events_seq_partial ON events (seq, customer) WHERE seq > 0',
	'REINDEX INDEX CONCURRENTLY events_seq_idx',
	"REINDEX INDEX CONCURRENTLY $capture_index",
	'VACUUM parts',
	'CREATE INDEX CONCURRENTLY events_seq_even ON events ((seq % 2)) WHERE seq > 0',
	'VACUUM events',
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

# Rows written while the full index surely exists: they must be numbered
# by an update, or the full index would hold the placeholder for them.
$node->safe_psql('postgres', join("\n", map {
	"INSERT INTO parts (customer, payload) VALUES ($_, 'under a full index');"
} 1 .. 50));

# How the rows were numbered: n_tup_upd counts the updates (own updates,
# upserts and, on the update route, every row).
my ($rows, $updates) = row($node, q{
SELECT (SELECT count(*) FROM events), n_tup_upd
  FROM pg_stat_user_tables WHERE relname = 'events'});
if ($update_route)
{
	cmp_ok($updates, '>=', $rows, 'stream_seq.in_place = off: every row of events is numbered by an update');
}
else
{
	cmp_ok($updates, '<', $rows / 4, 'most rows of events are numbered in the version they were stored as');
}
diag "events: $rows rows, $updates updates";

# Each index answers as a sequential scan does.
my @queries = (
	'SELECT id, seq FROM events WHERE seq > 100 AND seq < 200',
	'SELECT id, seq FROM events WHERE seq = 150',
	'SELECT count(*) FROM events WHERE seq IS NULL OR seq <= 0',
	'SELECT count(*) FROM parts_0 WHERE seq IS NULL OR seq <= 0',
	'SELECT seq FROM events WHERE seq > 0',
	'SELECT id, seq FROM events WHERE seq IS NOT NULL',
	'SELECT id, seq FROM events WHERE id BETWEEN 100 AND 300',
	'SELECT id, seq FROM events WHERE id < 0',
	'SELECT id, seq FROM events WHERE customer = 7',
	'SELECT id, seq FROM events WHERE seq % 2 = 0 AND seq > 0 AND seq < 500',
	q{SELECT id, seq FROM events WHERE stream_seq.slot_of(customer::text, 4) = 2 AND seq > 0},
	'SELECT id, customer, seq FROM parts WHERE id BETWEEN 10 AND 200',
	'SELECT id, seq FROM parts WHERE seq > 10 AND seq < 300',
	'SELECT id, seq FROM parts_0 WHERE seq >= 0');

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
		my ($total, $distinct, $unnumbered) = row($on,
			"SELECT count(*), count(DISTINCT seq), count(*) FILTER (WHERE seq IS NULL OR seq <= 0) FROM $tab");
		is($unnumbered, 0, "$what: every committed row of $tab has a number");
		is($distinct, $total, "$what: no number is used twice in $tab");
	}
}

check_all($node, 'primary');
$node->wait_for_catchup($standby, 'replay');
check_all($standby, 'standby');

# A crash, then recovery replays the page writes.
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

$standby->stop;
$node->stop;
done_testing();
