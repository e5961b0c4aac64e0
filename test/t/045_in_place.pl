
# Copyright (c) stream_seq contributors
#
# 045_in_place.pl: the in-place commit-time write (stream_seq.in_place,
# doc/how-it-works.md, "The in-place commit-time write"):
#
# - as an ordinary role, rows are numbered in the version they were
#   inserted as (one row version, no update), their transaction sees them
#   with a null number until commit, and the stream column's indexes and
#   the time column agree;
# - a row whose page another backend holds a pin on (which may be reading
#   the uncommitted row through a dirty snapshot) is not written in place;
# - rows the write does not serve fall back, each with its number: a row
#   TOAST formed again, a row updated by its own transaction, a table with
#   a full index on the stream column;
# - a transaction that fails after its rows were numbered in place, and a
#   crash while one waits there, leave nothing visible and sound heaps and
#   indexes; a crash after commits replays the writes (with and without a
#   full-page image in the record); PREPARE TRANSACTION is refused after
#   the writes and leaves nothing;
# - VACUUM FULL, CLUSTER, pg_dump and pg_restore (serial and -j 2) keep
#   every number and time;
# - with wal_level = logical no row gets room (logical decoding does not
#   decode the record): the number reaches decoding as an update;
# - then 030_heap_only.pl's load (savepoints, aborts, IMMEDIATE, own
#   updates, >64 subtransactions, WITH HOLD cursors, concurrent index
#   builds, VACUUM, a standby, a crash) runs with stream_seq.in_place on.

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

my $node = new_node('inplace', "stream_seq.in_place = on\nautovacuum = off\n",
	allows_streaming => 1);
$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE EXTENSION amcheck;
CREATE EXTENSION pageinspect;
CREATE ROLE app LOGIN;
GRANT CREATE ON SCHEMA public TO app;
GRANT USAGE ON SCHEMA stream_seq TO app;
});
$node->safe_psql('postgres', q{
SET ROLE app;
CREATE TABLE ev (id bigserial PRIMARY KEY, k int NOT NULL, seq bigint,
                 payload text, n int2, at timestamptz);
SELECT stream_seq.enable('ev', 'seq', 'at');
});

# What the inserting transaction sees, and the row versions afterwards.
my $seen = $node->safe_psql('postgres', q{
SET ROLE app;
BEGIN;
INSERT INTO ev (k, payload, n) SELECT g, 'p' || g, g FROM generate_series(1, 5) g;
SELECT count(*) FROM ev WHERE seq IS NULL AND at IS NULL;
COMMIT;
});
is($seen, '5', 'before commit, its own transaction sees the rows without a number');
my ($rows, $versions, $moved, $numbered) = row($node, q{
SELECT (SELECT count(*) FROM ev),
       (SELECT count(*) FROM heap_page_items(get_raw_page('ev', 0))),
       (SELECT count(*) FROM ev WHERE ctid <> ('(0,' || id || ')')::tid),
       (SELECT count(*) FROM ev WHERE seq IS NOT NULL AND at IS NOT NULL)});
is("$rows $versions $moved $numbered", '5 5 0 5',
	'in place: one row version per row, at the TID it was inserted at, numbered and timed');
is(val($node, q{SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'ev'}),
	'0', 'in place: no update was written');
is( val($node, q{
SET enable_seqscan = off;
SELECT string_agg(k::text, ',' ORDER BY seq) FROM ev WHERE seq > 2}),
	'3,4,5', 'the stream column index finds the numbers');
is( val($node, q{
SELECT bool_and(at IS NOT NULL) AND count(DISTINCT at) >= 1 FROM ev}),
	't', 'the time column is written with the number');

# Another backend holding a pin on the row's page may be reading the
# uncommitted row's data (an exclusion constraint's or ON CONFLICT's check
# through a dirty snapshot does, with only a pin): the write needs a
# cleanup lock and, not getting it, leaves the row to the heap-only write.
# Here the pin is a cursor of another session suspended on the page.
$node->safe_psql('postgres', q{
SET ROLE app;
CREATE TABLE pinned (id int PRIMARY KEY, seq bigint, k text);
SELECT stream_seq.enable('pinned');
INSERT INTO pinned (id, k) VALUES (1, 'a'), (2, 'b');
});
my $pinner = session($node, $node->connstr('postgres'));
$pinner->query(q{BEGIN; DECLARE c CURSOR FOR SELECT * FROM pinned; FETCH 1 FROM c});
$node->safe_psql('postgres', q{SET ROLE app; INSERT INTO pinned (id, k) VALUES (3, 'while pinned')});
my $versions_of = q{
SELECT count(*) FROM pinned e, heap_page_items(get_raw_page('pinned', 0)) p
 WHERE e.id = %d AND p.t_xmin = e.xmin};
is(val($node, sprintf($versions_of, 3)), '2',
	'with the page pinned by another backend: numbered by a second version, not in place');
$pinner->query('COMMIT');
$node->safe_psql('postgres', q{SET ROLE app; INSERT INTO pinned (id, k) VALUES (4, 'unpinned')});
is(val($node, sprintf($versions_of, 4)), '1', 'the pin released: numbered in place again');
is(val($node, q{SELECT string_agg(id || ':' || (seq IS NOT NULL), ',' ORDER BY id) FROM pinned}),
	'1:true,2:true,3:true,4:true', 'every row of the pinned page is numbered');
$pinner->close;

# Fallbacks: each row still gets its number.
$node->safe_psql('postgres', q{
SET ROLE app;
BEGIN;
INSERT INTO ev (k, payload) SELECT 100, string_agg(md5(g::text), '') FROM generate_series(1, 400) g;
INSERT INTO ev (k, payload) VALUES (101, 'updated by its own transaction');
UPDATE ev SET payload = 'updated' WHERE k = 101;
SAVEPOINT s;
INSERT INTO ev (k, payload) VALUES (102, 'rolled back');
ROLLBACK TO SAVEPOINT s;
INSERT INTO ev (k, payload) VALUES (103, 'plain');
COMMIT;
});
is( val($node, q{
SELECT string_agg(k::text || ':' || (seq IS NOT NULL)::text, ',' ORDER BY k)
  FROM ev WHERE k >= 100}),
	'100:true,101:true,103:true',
	'a toasted row and a row updated before commit are numbered too; a rolled-back one is gone');
is(amcheck_problems($node), '', 'amcheck after the fallbacks');

# A transaction that fails after its rows were numbered in place (the
# failing trigger fires for its last row, after every row's write).
$node->safe_psql('postgres', q{
CREATE FUNCTION fail_at_commit() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN RAISE EXCEPTION 'refused at commit'; END $$;
CREATE CONSTRAINT TRIGGER zz_fail AFTER INSERT ON ev DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW WHEN (NEW.k = -1) EXECUTE FUNCTION fail_at_commit();
});
my $r = psql_result($node, q{
SET ROLE app;
BEGIN;
INSERT INTO ev (k, payload) SELECT CASE WHEN g = 3 THEN -1 ELSE -3 END, 'fails'
  FROM generate_series(1, 3) g;
SELECT pg_current_xact_id();
COMMIT;
});
is($r->{sqlstate}, 'P0001', 'a deferred trigger after the write fails the commit');
my ($failed_xid) = $r->{out} =~ /(\d+)/;
is( val($node, qq{
SELECT count(*) FILTER (WHERE (tuple_data_split('ev'::regclass, t_data, t_infomask,
                                                t_infomask2, t_bits))[3] IS NOT NULL),
       count(*) FILTER (WHERE t_xmax = 0)
  FROM heap_page_items(get_raw_page('ev', 0)) WHERE t_xmin = '$failed_xid'}),
	'3|3', 'its rows are on the page, numbered in place, without a second version');
is(val($node, 'SELECT count(*) FROM ev WHERE k IN (-1, -3)'), '0', 'none is visible');
is(amcheck_problems($node), '', 'amcheck after the failed commit');

# A crash while a transaction waits after its in-place writes: recovery
# replays them, the transaction is aborted.
$node->safe_psql('postgres', q{
CREATE FUNCTION wait_at_commit() RETURNS trigger LANGUAGE plpgsql AS
  $$ BEGIN PERFORM pg_advisory_lock(45); RETURN NULL; END $$;
CREATE CONSTRAINT TRIGGER zz_wait AFTER INSERT ON ev DEFERRABLE INITIALLY DEFERRED
  FOR EACH ROW WHEN (NEW.k = -2) EXECUTE FUNCTION wait_at_commit();
CHECKPOINT;
});
my $locker = session($node, $node->connstr('postgres'));
$locker->query('SELECT pg_advisory_lock(45)');
my $waiter = bg_psql($node, 'BEGIN',
	q{INSERT INTO ev (k, payload) SELECT -2, 'crash' FROM generate_series(1, 3)},
	'COMMIT');
$node->poll_query_until('postgres', q{
SELECT count(*) > 0 FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'})
  or die 'the committing transaction did not reach the trigger';
my $before = val($node, q{SELECT md5(string_agg(id || ':' || seq || ':' || at, ',' ORDER BY id)) FROM ev});
$node->stop('immediate');
wait_done($waiter);
$locker->close;
$node->start;
is(val($node, 'SELECT count(*) FROM ev WHERE k = -2'), '0',
	'after a crash at commit: the rows of the unfinished transaction are not visible');
is(val($node, q{SELECT md5(string_agg(id || ':' || seq || ':' || at, ',' ORDER BY id)) FROM ev}),
	$before, 'after a crash at commit: every committed row as before');
is(amcheck_problems($node), '', 'amcheck after recovery');

# A crash after commits: two transactions on the same page after a
# checkpoint (the first record of the page has a full-page image, the
# second not).
$node->safe_psql('postgres', q{
CHECKPOINT;
INSERT INTO ev (k, payload) SELECT 200 + g, 'first after the checkpoint' FROM generate_series(1, 20) g;
INSERT INTO ev (k, payload) SELECT 300 + g, 'second' FROM generate_series(1, 20) g;
});
$before = val($node, q{SELECT md5(string_agg(id || ':' || seq || ':' || at, ',' ORDER BY id)) FROM ev});
$node->stop('immediate');
$node->start;
is(val($node, q{SELECT md5(string_agg(id || ':' || seq || ':' || at, ',' ORDER BY id)) FROM ev}),
	$before, 'after a crash: the in-place writes are replayed');
is(val($node, q{SELECT count(*) FROM ev WHERE k > 200 AND seq IS NULL}), '0',
	'after a crash: every committed row has its number');
is(amcheck_problems($node), '', 'amcheck after replay');
$node->safe_psql('postgres', q{INSERT INTO ev (k, payload) VALUES (999, 'after')});
is(val($node, q{SELECT (SELECT seq FROM ev WHERE k = 999) > (SELECT max(seq) FROM ev WHERE k <> 999)}),
	't', 'after a crash: a new row is numbered above every other');

# PREPARE TRANSACTION: refused after the rows were numbered in place
# (the deferred triggers fire before the pre-prepare check), and the
# transaction's rows stay invisible.
$r = psql_result($node, q{
SET ROLE app;
BEGIN;
INSERT INTO ev (k, payload) SELECT -4, 'prepared' FROM generate_series(1, 3);
SELECT pg_current_xact_id();
PREPARE TRANSACTION 'in_place_2pc';
});
is($r->{sqlstate}, '0A000', 'PREPARE TRANSACTION after in-place writes is refused');
my ($prepared_xid) = $r->{out} =~ /(\d+)/;
is( val($node, qq{
SELECT count(*) FILTER (WHERE (tuple_data_split('ev'::regclass, t_data, t_infomask,
                                                t_infomask2, t_bits))[3] IS NOT NULL)
  FROM heap_page_items(get_raw_page('ev', 0)) WHERE t_xmin = '$prepared_xid'}),
	'3', 'the refused transaction had numbered its rows in place');
is( val($node, q{
SELECT (SELECT count(*) FROM ev WHERE k = -4) || ',' || (SELECT count(*) FROM pg_prepared_xacts)}),
	'0,0', 'nothing of it is visible, nothing is left prepared');
is(amcheck_problems($node), '', 'amcheck after the refused PREPARE');

# What a DBA runs on the table: VACUUM FULL and CLUSTER rewrite the rows
# numbered in place, pg_dump and pg_restore (serial and -j 2) copy them;
# every row keeps its number and time, and numbering goes on above them.
my $state = q{SELECT md5(string_agg(id || ':' || k || ':' || seq || ':' || at, ',' ORDER BY id)) FROM ev};
$before = val($node, $state);
$node->safe_psql('postgres', q{SET ROLE app; VACUUM FULL ev;});
is(val($node, $state), $before, 'VACUUM FULL: every row with its number and time');
is(amcheck_problems($node), '', 'amcheck after VACUUM FULL');
$node->safe_psql('postgres', q{SET ROLE app; CLUSTER ev USING ev_pkey;});
is(val($node, $state), $before, 'CLUSTER: every row with its number and time');
is(amcheck_problems($node), '', 'amcheck after CLUSTER');
my $dump = $node->basedir . '/in_place.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', 'postgres' ],
	'pg_dump -Fc of the database');
foreach my $restore ([ 'serial', () ], [ '-j 2', '-j', '2' ])
{
	my ($label, @opts) = @$restore;
	my $db = 'restored_' . ($label eq 'serial' ? 'serial' : 'parallel');
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->command_ok(
		[ 'pg_restore', '--exit-on-error', @opts, '-d', $db, $dump ],
		"pg_restore $label");
	is($node->safe_psql($db, $state), $before,
		"pg_restore $label: every row with its number and time");
	$node->safe_psql($db, q{SET ROLE app;
INSERT INTO ev (k, payload) VALUES (998, 'after the restore')});
	is( $node->safe_psql($db, q{
SELECT (SELECT seq FROM ev WHERE k = 998) > (SELECT max(seq) FROM ev WHERE k <> 998)
       AND (SELECT count(*) FROM ev e,
                   heap_page_items(get_raw_page('ev', (ctid::text::point)[0]::int)) p
             WHERE e.k = 998 AND p.t_xmin = e.xmin) = 1}),
		't', "pg_restore $label: a new row is numbered in place (one version) above every other");
	is(amcheck_problems($node, $db), '', "pg_restore $label: amcheck");
}

# A full index on the stream column: ordinary updates, as before.
$node->safe_psql('postgres', q{
CREATE TABLE full_ix (id int PRIMARY KEY, seq bigint);
SELECT stream_seq.enable('full_ix');
CREATE INDEX ON full_ix (seq);
INSERT INTO full_ix SELECT generate_series(1, 10);
});
is(val($node, q{SELECT count(*) FROM full_ix WHERE ctid <> ('(0,' || id || ')')::tid AND seq IS NOT NULL}),
	'10', 'a full index on the stream column: rows are numbered by an update');
is(amcheck_problems($node), '', 'amcheck with a full index');
$node->stop;

# wal_level = logical: no room, the number is decoded as an update.
my $logical = new_node('logical',
	"stream_seq.in_place = on\nwal_level = logical\nmax_replication_slots = 2\n");
$logical->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE lev (id int PRIMARY KEY, seq bigint);
SELECT stream_seq.enable('lev');
CREATE PUBLICATION p FOR TABLE lev;
SELECT pg_create_logical_replication_slot('s', 'pgoutput');
INSERT INTO lev VALUES (1);
});
is(val($logical, q{SELECT ctid <> '(0,1)' FROM lev}), 't',
	'wal_level = logical: the row is numbered with a new version');
# pgoutput's messages: Begin, Relation, Insert (seq null), Update (the
# number, as text: its last column is 't', length 1, "1"), Commit
is( val($logical, q{
SELECT string_agg(chr(get_byte(data, 0)), '' ORDER BY lsn)
       || ' ' || bool_or(get_byte(data, 0) = ascii('U')
                         AND substr(data, length(data) - 5) = '\x740000000131'::bytea)
  FROM pg_logical_slot_get_binary_changes('s', NULL, NULL,
         'proto_version', '1', 'publication_names', 'p')}),
	'BRIUC true', 'wal_level = logical: decoding sees the number as an update');
$logical->stop;

# The load of 030_heap_only.pl with stream_seq.in_place on.
our $in_place = 1;
my $file = "$FindBin::Bin/030_heap_only.pl";
do $file;
die "$file: $@" if $@;
