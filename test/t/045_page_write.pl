
# Copyright (c) stream_seq contributors
#
# 045_page_write.pl: the commit-time page write (doc/how-it-works.md, "The
# write path"):
#
# - as an ordinary role, rows are numbered in the version they were
#   stored as (one row version, no update), their transaction sees them
#   with the placeholders (0, -infinity) until commit, and the stream
#   column's indexes and the time column agree; the rows of a transaction
#   on one page get one WAL record, and COPY stores its rows in batches;
# - another backend's pin on the page does not stop the write (it changes
#   8 bytes that no reader of the uncommitted row uses);
# - rows the page write does not serve fall back to an update, each with
#   its number: a row updated by its own transaction, a table with an
#   index that takes the placeholder;
# - a transaction that fails after its rows were numbered (cancelled
#   while held there), and a crash while one waits there, leave nothing
#   visible and sound heaps and indexes; a crash after commits replays the
#   writes (with and without a full-page image in the record); PREPARE
#   TRANSACTION is refused and leaves nothing;
# - VACUUM FULL, CLUSTER, pg_dump and pg_restore (serial and -j 2) keep
#   every number and time;
# - with wal_level = logical the number reaches logical decoding as an
#   update (pgoutput, test_decoding, wal2json where it is installed);
# - then 030_write_load.pl's load runs with stream_seq.in_place off (every
#   row numbered by an update).

use strict;
use warnings;

use FindBin;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

my $node = new_node('pagewrite', "autovacuum = off\n", allows_streaming => 1);
$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE EXTENSION amcheck;
CREATE EXTENSION pageinspect;
CREATE EXTENSION pg_walinspect;
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

# What the inserting transaction sees, the row versions afterwards, and
# the WAL of the commit.
my $lsn = val($node, 'SELECT pg_current_wal_lsn()');
my $seen = $node->safe_psql('postgres', q{
SET ROLE app;
BEGIN;
INSERT INTO ev (k, payload, n) SELECT g, 'p' || g, g FROM generate_series(1, 5) g;
SELECT count(*) FROM ev WHERE seq = 0 AND at = '-infinity';
COMMIT;
});
is($seen, '5', 'before commit, its own transaction sees the placeholders');
my ($rows, $versions, $moved, $numbered) = row($node, q{
SELECT (SELECT count(*) FROM ev),
       (SELECT count(*) FROM heap_page_items(get_raw_page('ev', 0))),
       (SELECT count(*) FROM ev WHERE ctid <> ('(0,' || id || ')')::tid),
       (SELECT count(*) FROM ev WHERE seq > 0 AND at > '-infinity')});
is("$rows $versions $moved $numbered", '5 5 0 5',
	'one row version per row, at the TID it was stored at, numbered and timed');
is(val($node, q{SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'ev'}),
	'0', 'no update was written');
is( val($node, qq{
SELECT count(*) FILTER (WHERE resource_manager = 'stream_seq' AND record_type = 'PAGE')
       || ',' || count(*) FILTER (WHERE resource_manager LIKE 'Heap%' AND record_type LIKE 'UPDATE%')
  FROM pg_get_wal_records_info('$lsn', pg_current_wal_lsn())}),
	'1,0', 'the five rows on one page: one PAGE record, no heap update');
is( val($node, q{
SET enable_seqscan = off;
SELECT string_agg(k::text, ',' ORDER BY seq) FROM ev WHERE seq > 2}),
	'3,4,5', 'the stream column index finds the numbers');
is(val($node, q{SELECT count(DISTINCT at) FROM ev}), '1',
	'the time column is written with the number, one time for the transaction');

# COPY stores its rows in batches (multi-insert records, no row trigger)
# and the pass writes one record per page.
$node->safe_psql('postgres', q{
CREATE TABLE bulk (id bigint, pad text, seq bigint);
SELECT stream_seq.enable('bulk');
});
$lsn = val($node, 'SELECT pg_current_wal_lsn()');
$node->safe_psql('postgres', q{
COPY bulk (id) FROM PROGRAM 'seq 1 2000';
});
my ($pages, $copied) = row($node, q{
SELECT count(DISTINCT (ctid::text::point)[0]), count(*) FILTER (WHERE seq BETWEEN 1 AND 2000)
  FROM bulk});
is($copied, '2000', 'COPY: every row numbered');
is( val($node, qq{
SELECT count(*) FILTER (WHERE resource_manager = 'stream_seq' AND record_type = 'PAGE')
       || ',' || (count(*) FILTER (WHERE record_type LIKE 'MULTI_INSERT%') > 0)
       || ',' || count(*) FILTER (WHERE resource_manager LIKE 'Heap%' AND record_type LIKE 'UPDATE%')
  FROM pg_get_wal_records_info('$lsn', pg_current_wal_lsn())}),
	"$pages,true,0", "COPY: rows stored in batches, one PAGE record for each of the $pages pages");
is( val($node, q{
SELECT bool_and(seq = id) FROM bulk}),
	't', 'COPY: numbers in the order the rows were stored');

# Another backend's pin on the page (a cursor suspended on it) does not
# stop the write.
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
is(val($node, sprintf($versions_of, 3)), '1',
	'with the page pinned by another backend: numbered in the version stored');
$pinner->query('COMMIT');
is(val($node, q{SELECT string_agg(id || ':' || seq, ',' ORDER BY id) FROM pinned}),
	'1:1,2:2,3:3', 'every row of the pinned page is numbered');
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
SELECT string_agg(k::text || ':' || (seq > 0)::text, ',' ORDER BY k)
  FROM ev WHERE k >= 100}),
	'100:true,101:true,103:true',
	'a toasted row and a row updated before commit are numbered too; a rolled-back one is gone');
is( val($node, q{
SELECT string_agg(k || ':' || seq, ',' ORDER BY k) FROM ev WHERE k >= 100}),
	'100:6,101:7,103:8', 'in the order the transaction stored them');
is(amcheck_problems($node), '', 'amcheck after the fallbacks');

# A transaction that fails after its rows were numbered: held after
# numbering (stream_seq.hold_after_numbering), then cancelled.
my $locker = session($node, $node->connstr('postgres'));
$locker->query('SELECT pg_advisory_lock(45)');
my $failing = bg_psql($node, 'SET stream_seq.hold_after_numbering = 45',
	'SET ROLE app', 'BEGIN',
	q{INSERT INTO ev (k, payload) SELECT -3, 'fails' FROM generate_series(1, 3)},
	'SELECT pg_current_xact_id()', 'COMMIT');
$node->poll_query_until('postgres', q{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' AND query = 'COMMIT'})
  or die 'the committing transaction was not held';
$node->safe_psql('postgres', q{
SELECT pg_cancel_backend(pid) FROM pg_stat_activity
 WHERE wait_event = 'advisory' AND query = 'COMMIT'});
isnt(wait_done($failing), 0, 'a cancel after the numbering fails the commit');
like(${ $failing->{err} }, qr/canceling statement/, '... with the cancel');
my ($failed_xid) = ${ $failing->{out} } =~ /(\d+)/;
is( val($node, qq{
SELECT count(*) FILTER (WHERE (tuple_data_split('ev'::regclass, t_data, t_infomask,
                                                t_infomask2, t_bits))[3] <> '\\x0000000000000000')
       || '|' || count(*) FILTER (WHERE t_xmax = 0)
  FROM generate_series(0, pg_relation_size('ev') / 8192 - 1) b,
       heap_page_items(get_raw_page('ev', b::int)) WHERE t_xmin = '$failed_xid'}),
	'3|3', 'its rows are on the page, numbered, without a second version');
is(val($node, 'SELECT count(*) FROM ev WHERE k = -3'), '0', 'none is visible');
is(amcheck_problems($node), '', 'amcheck after the failed commit');

# A crash while a transaction is held after its page writes: recovery
# replays them, the transaction is aborted.
$node->safe_psql('postgres', 'CHECKPOINT');
my $waiter = bg_psql($node, 'SET stream_seq.hold_after_numbering = 45', 'BEGIN',
	q{INSERT INTO ev (k, payload) SELECT -2, 'crash' FROM generate_series(1, 3)},
	'COMMIT');
$node->poll_query_until('postgres', q{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND wait_event = 'advisory' AND query = 'COMMIT'})
  or die 'the committing transaction was not held';
my $state = q{SELECT md5(string_agg(id || ':' || k || ':' || seq || ':' || at, ',' ORDER BY id)) FROM ev};
my $before = val($node, $state);
$node->stop('immediate');
wait_done($waiter);
$locker->close;
$node->start;
is(val($node, 'SELECT count(*) FROM ev WHERE k = -2'), '0',
	'after a crash at commit: the rows of the unfinished transaction are not visible');
is(val($node, $state), $before, 'after a crash at commit: every committed row as before');
is(amcheck_problems($node), '', 'amcheck after recovery');

# A crash after commits: two transactions on the same page after a
# checkpoint (the first record of the page has a full-page image, the
# second not).
$node->safe_psql('postgres', q{
CHECKPOINT;
INSERT INTO ev (k, payload) SELECT 200 + g, 'first after the checkpoint' FROM generate_series(1, 20) g;
INSERT INTO ev (k, payload) SELECT 300 + g, 'second' FROM generate_series(1, 20) g;
});
$before = val($node, $state);
$node->stop('immediate');
$node->start;
is(val($node, $state), $before, 'after a crash: the page writes are replayed');
is(val($node, q{SELECT count(*) FROM ev WHERE k > 200 AND seq <= 0}), '0',
	'after a crash: every committed row has its number');
is(amcheck_problems($node), '', 'amcheck after replay');
$node->safe_psql('postgres', q{INSERT INTO ev (k, payload) VALUES (999, 'after')});
is(val($node, q{SELECT (SELECT seq FROM ev WHERE k = 999) > (SELECT max(seq) FROM ev WHERE k <> 999)}),
	't', 'after a crash: a new row is numbered above every other');

# PREPARE TRANSACTION: refused before anything is numbered, and the
# transaction's rows stay invisible.
my $r = psql_result($node, q{
SET ROLE app;
BEGIN;
INSERT INTO ev (k, payload) SELECT -4, 'prepared' FROM generate_series(1, 3);
PREPARE TRANSACTION 'page_write_2pc';
});
is($r->{sqlstate}, '0A000', 'PREPARE TRANSACTION of stream rows is refused');
is( val($node, q{
SELECT (SELECT count(*) FROM ev WHERE k = -4) || ',' || (SELECT count(*) FROM pg_prepared_xacts)}),
	'0,0', 'nothing of it is visible, nothing is left prepared');
is(amcheck_problems($node), '', 'amcheck after the refused PREPARE');

# What a DBA runs on the table: VACUUM FULL and CLUSTER rewrite the rows,
# pg_dump and pg_restore (serial and -j 2) copy them; every row keeps its
# number and time, and numbering goes on above them.
$before = val($node, $state);
$node->safe_psql('postgres', q{SET ROLE app; VACUUM FULL ev;});
is(val($node, $state), $before, 'VACUUM FULL: every row with its number and time');
is(amcheck_problems($node), '', 'amcheck after VACUUM FULL');
$node->safe_psql('postgres', q{SET ROLE app; CLUSTER ev USING ev_pkey;});
is(val($node, $state), $before, 'CLUSTER: every row with its number and time');
is(amcheck_problems($node), '', 'amcheck after CLUSTER');
$node->safe_psql('postgres', q{SET ROLE app; INSERT INTO ev (k, payload) VALUES (997, 'after the rewrites')});
is( val($node, q{
SELECT (SELECT seq FROM ev WHERE k = 997) > (SELECT max(seq) FROM ev WHERE k <> 997)
       AND (SELECT count(*) FROM ev e,
                   heap_page_items(get_raw_page('ev', (ctid::text::point)[0]::int)) p
             WHERE e.k = 997 AND p.t_xmin = e.xmin) = 1}),
	't', 'after the rewrites: a new row is numbered in place above every other');
$before = val($node, $state);
my $dump = $node->basedir . '/page_write.dump';
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

# The first commit after a start reads the stream's highest number and
# newest time through the stream's index: its transaction stored rows
# with the placeholder, for which the planner keeps the index's predicate
# "seq > 0" as it is, so a plain max(seq) read the whole table (at the
# first commit of every writer after each restart).  The scans of the
# table are counted across clean restarts, which write every backend's
# statistics.
$node->safe_psql('postgres', q{
INSERT INTO ev (k, payload) SELECT 400 + g, 'many' FROM generate_series(1, 20000) g;
ANALYZE ev;
});
$node->restart;
my $scans = q{SELECT seq_scan FROM pg_stat_user_tables WHERE relid = 'ev'::regclass};
my $scans_before = val($node, $scans);
$node->safe_psql('postgres',
	q{SET ROLE app; INSERT INTO ev (k, payload) VALUES (50000, 'first after the start')});
$node->restart;
is(val($node, $scans), $scans_before,
	'the first commit after a start reads the stream table through its index, not whole');
is( val($node, q{
SELECT (SELECT seq FROM ev WHERE k = 50000) > (SELECT max(seq) FROM ev WHERE k <> 50000)
       AND (SELECT at FROM ev WHERE k = 50000) >= (SELECT max(at) FROM ev WHERE k <> 50000)}),
	't', 'and numbers the row above every other, at a time not below theirs');

# An index on the stream column without 'seq > 0' would take the
# placeholder: a warning, and rows numbered by an update.
my ($rc, $out, $err) = $node->psql('postgres', q{
CREATE TABLE full_ix (id int PRIMARY KEY, seq bigint);
SELECT stream_seq.enable('full_ix');
CREATE INDEX ON full_ix (seq);
INSERT INTO full_ix SELECT generate_series(1, 10);
});
like($err, qr/WARNING: .*full_ix_seq_idx/, 'a full index on the stream column is warned of');
is(val($node, q{SELECT count(*) FROM full_ix WHERE ctid <> ('(0,' || id || ')')::tid AND seq > 0}),
	'10', 'with it, rows are numbered by an update');
is( val($node, q{SET enable_seqscan = off; SELECT count(*) FROM full_ix WHERE seq >= 0}),
	'10', 'the full index holds each row once, with its number');
is(amcheck_problems($node), '', 'amcheck with a full index');
$node->stop;

# wal_level = logical: the number is decoded as an update.
my $logical = new_node('logical',
	"wal_level = logical\nmax_replication_slots = 4\n");
my $wal2json = -e $logical->config_data('--pkglibdir') . '/wal2json.so';
$logical->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE lev (id int PRIMARY KEY, seq bigint);
SELECT stream_seq.enable('lev');
CREATE PUBLICATION p FOR TABLE lev;
SELECT pg_create_logical_replication_slot('s', 'pgoutput');
SELECT pg_create_logical_replication_slot('t', 'test_decoding');
});
if ($wal2json)
{
	# a server that limits the output plugins (output_plugin_libraries,
	# where it exists) is told to allow wal2json
	if (val($logical, q{SELECT count(*) FROM pg_settings WHERE name = 'output_plugin_libraries'}))
	{
		$logical->append_conf('postgresql.conf',
			"output_plugin_libraries = 'pgoutput, test_decoding, wal2json'\n");
		$logical->reload;
	}
	$logical->safe_psql('postgres',
		q{SELECT pg_create_logical_replication_slot('j', 'wal2json')});
}
$logical->safe_psql('postgres', 'INSERT INTO lev VALUES (1)');
is(val($logical, q{SELECT ctid <> '(0,1)' AND seq = 1 FROM lev}), 't',
	'wal_level = logical: the row is numbered with a new version');
# pgoutput's messages: Begin, Relation, Insert (seq 0), Update (the
# number, as text: its last column is 't', length 1, "1"), Commit
is( val($logical, q{
SELECT string_agg(chr(get_byte(data, 0)), '' ORDER BY lsn)
       || ' ' || bool_or(get_byte(data, 0) = ascii('U')
                         AND substr(data, length(data) - 5) = '\x740000000131'::bytea)
  FROM pg_logical_slot_get_binary_changes('s', NULL, NULL,
         'proto_version', '1', 'publication_names', 'p')}),
	'BRIUC true', 'pgoutput: the number comes as an update');
is( val($logical, q{
SELECT string_agg(data, E'\n' ORDER BY lsn)
  FROM pg_logical_slot_get_changes('t', NULL, NULL, 'include-xids', '0')
 WHERE data LIKE 'table %'}),
	"table public.lev: INSERT: id[integer]:1 seq[bigint]:0\n"
	  . "table public.lev: UPDATE: id[integer]:1 seq[bigint]:1",
	'test_decoding: the insert with the placeholder, then the update with the number');
SKIP:
{
	skip 'wal2json is not installed', 1 unless $wal2json;
	like( val($logical, q{
SELECT string_agg(data, ' ' ORDER BY lsn)
  FROM pg_logical_slot_get_changes('j', NULL, NULL, 'format-version', '2')}),
		qr/"action":"I".*"name":"seq".*"value":0.*"action":"U".*"name":"seq".*"value":1/,
		'wal2json: the insert with the placeholder, then the update with the number');
}
$logical->stop;

# The load of 030_write_load.pl with every row numbered by an update.
our $update_route = 1;
my $file = "$FindBin::Bin/030_write_load.pl";
do $file;
die "$file: $@" if $@;
