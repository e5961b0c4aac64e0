
# Copyright (c) stream_seq contributors
#
# 005_dump_restore.pl: streams and consumers survive pg_dump -Fc and
# pg_restore, into a new database of the same cluster (with the original
# still in use next to it; plain, --single-transaction, --schema-only
# followed by --data-only --disable-triggers, and parallel with -j 4) and
# into a new cluster.  After
# the restore:
#
#  - stream_seq.streams lists the same streams, with their columns;
#  - consumers keep their positions and owners, and read() / advance() /
#    wait() work with them;
#  - the triggers are back: new inserts are numbered, above every number
#    handed out before the dump (including that of a deleted newest row, at
#    which a consumer stands), with no duplicates, and hand-written numbers
#    are refused;
#  - the restored copy and the original number independently.
#
# The source holds two streams: public.ev (column "seq", owned by a
# non-superuser role "app") and "S"."Ev 2" (column "n").

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

my $node = new_node('dump_src');

$node->safe_psql('postgres', q{
CREATE ROLE app LOGIN;
CREATE DATABASE src OWNER app;
});
$node->safe_psql('src', q{
CREATE EXTENSION stream_seq;
GRANT USAGE ON SCHEMA stream_seq TO app;
SET ROLE app;
CREATE TABLE ev (id bigserial PRIMARY KEY, payload text);
SELECT stream_seq.enable('ev');
RESET ROLE;
CREATE SCHEMA "S";
CREATE TABLE "S"."Ev 2" (k int, payload text);
SELECT stream_seq.enable('"S"."Ev 2"', 'n');
});
# ten transactions of one row, then a transaction of three
$node->safe_psql('src',
	"INSERT INTO ev (payload) VALUES ('row $_')") for 1 .. 10;
$node->safe_psql('src', q{
INSERT INTO "S"."Ev 2" (k, payload) SELECT g, 'x' FROM generate_series(1, 3) g;
SET ROLE app;
SELECT stream_seq.create_consumer('ev', 'slow');
SELECT stream_seq.advance('ev', 'slow', 3);
-- a group: its index is created after the data is restored
SELECT stream_seq.create_group('ev', 'grp', 'id', 2);
RESET ROLE;
SELECT stream_seq.create_consumer('ev', 'fast');
SELECT stream_seq.advance('ev', 'fast', 10);
SELECT stream_seq.create_consumer('"S"."Ev 2"', 'other', 2);
-- the newest row goes; its number must not come back
DELETE FROM ev WHERE seq = 10;
});

my $old_head = $node->safe_psql('src', q{SELECT stream_seq.head('ev')});
is($old_head, 10, 'source: head of ev is 10 (row 10 deleted)');
is($node->safe_psql('src', q{SELECT string_agg(seq::text, ',' ORDER BY seq) FROM ev}),
	'1,2,3,4,5,6,7,8,9', 'source: rows 1-9 remain');

my $has_trim = $node->safe_psql('src',
	q{SELECT to_regprocedure('stream_seq.first(regclass)') IS NOT NULL}) eq 't';
if ($has_trim)
{
	# where trimming left a stream's start is part of the state to keep
	$node->safe_psql('src', q{SELECT stream_seq.trim('"S"."Ev 2"', 2)});
}

# What the restored database must show, before any new write.
my $streams_expected = "\"S\".\"Ev 2\"|n\nev|seq";
my $consumers_expected = "\"S\".\"Ev 2\"|other|2|postgres\nev|fast|10|postgres\nev|grp|0|app\nev|slow|3|app";

my $dump = $node->basedir . '/src.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', 'src' ],
	'pg_dump -Fc of the source database');

# The checks of a restored copy, database "db" of node "n".  They use
# query() and sqlstate(), not safe_psql, so that a broken restore fails the
# checks instead of ending the script.
sub check_restored
{
	my ($n, $db, $label) = @_;

	is( query($n, q{
SELECT stream::text, seq_column FROM stream_seq.streams
 ORDER BY stream::text COLLATE "C"}, $db),
		$streams_expected,
		"$label: stream_seq.streams lists both streams with their columns");
	is( query($n, q{
SELECT string_agg(line, E'\n' ORDER BY line COLLATE "C") FROM
  (SELECT stream::text || '|' || consumer || '|' || position || '|' || owner::text AS line
     FROM stream_seq.consumer) c}, $db),
		$consumers_expected,
		"$label: consumers keep their positions and owners");
	is( query($n, q{
SELECT stream_seq.position('ev', 'slow') || ',' || stream_seq.position('ev', 'fast')}, $db),
		'3,10', "$label: position() of both consumers");
	is( query($n, q{
SELECT count(*) || ',' || bool_and(to_regclass(c.slot_index::text) IS NOT NULL)
  FROM stream_seq.consumer_slot s JOIN stream_seq.consumer c USING (stream, consumer)
 WHERE consumer = 'grp'}, $db),
		'2,true', "$label: the group keeps its slots and finds its index");
	is( query($n, q{
SET ROLE app;
SELECT count(*) FROM stream_seq.claim('ev', 'grp', 'w') c,
       stream_seq.read_slot('ev', 'grp', c.slot, c.token, 100)}, $db),
		'9', "$label: the group's slots read every row");
	is(query($n, q{SELECT string_agg(seq::text, ',' ORDER BY seq) FROM ev}, $db),
		'1,2,3,4,5,6,7,8,9', "$label: the rows and their numbers are restored");
	is( query($n, q{
SELECT (SELECT count(*) FROM pg_trigger
         WHERE tgname = 'stream_seq_guard'
           AND tgrelid IN ('ev'::regclass, '"S"."Ev 2"'::regclass))
       || ',' ||
       (SELECT count(*) FROM pg_index i
          JOIN pg_class c ON c.oid = i.indexrelid
          JOIN pg_am a ON a.oid = c.relam
         WHERE a.amname = 'stream_seq_capture'
           AND i.indrelid IN ('ev'::regclass, '"S"."Ev 2"'::regclass))}, $db),
		'2,2', "$label: the guard trigger and the capture index of both streams are restored");
	is( query($n, q{
SELECT string_agg(seq::text, ',' ORDER BY seq) FROM stream_seq.read('ev', 'slow', 100)}, $db),
		'4,5,6,7,8,9', "$label: read() for the slow consumer");
	is( query($n, q{SELECT count(*) FROM stream_seq.read('ev', 'fast', 100)}, $db),
		'0', "$label: read() for the fast consumer finds nothing yet");
	if ($has_trim)
	{
		is(query($n, q{SELECT stream_seq.first('"S"."Ev 2"')}, $db),
			'2', "$label: where trimming left the stream's start is restored");
	}

	# hand-written numbers are refused; one that another row has fails with
	# 23505 instead when the stream's unique index sees the row before its
	# capture index: a restore creates the two in an order of its own
	# (doc/applications.md "The rules")
	is( sqlstate($n, q{INSERT INTO ev (payload, seq) VALUES ('x', 1000)}, $db),
		'428C9', "$label: an INSERT that gives seq a value still fails with 428C9");
	like( sqlstate($n, q{INSERT INTO ev (payload, seq) VALUES ('x', 5)}, $db),
		qr/^(428C9|23505)$/, "$label: ... or with 23505 when the number is another row's");

	# new writes: numbered above everything handed out before the dump
	is( query($n, q{
INSERT INTO ev (payload) VALUES ('new 1');
BEGIN;
INSERT INTO ev (payload) SELECT 'new ' || g FROM generate_series(2, 4) g;
COMMIT;
SET ROLE app;
INSERT INTO ev (payload) VALUES ('new by app');
RESET ROLE;
INSERT INTO "S"."Ev 2" (k, payload) VALUES (4, 'new');
}, $db),
		'', "$label: inserts into the restored streams succeed");
	is( query($n, qq{
SELECT count(*) || ',' || count(seq) || ',' || count(DISTINCT seq) || ',' ||
       bool_and(seq > $old_head)
  FROM ev WHERE payload LIKE 'new%'}, $db),
		'5,5,5,true',
		"$label: new rows are numbered, distinct, above the old head ($old_head)");
	is( query($n, q{SELECT count(*) = count(DISTINCT seq) FROM ev}, $db),
		't', "$label: no duplicate numbers in ev");
	is( query($n, q{
SELECT bool_and(n > 3) FROM "S"."Ev 2" WHERE payload = 'new'}, $db),
		't', "$label: new row of the second stream numbered above its old ones");
	is( query($n, q{
SELECT stream_seq.horizon('ev') = stream_seq.head('ev') + 1
   AND stream_seq.head('ev') = (SELECT max(seq) FROM ev)}, $db),
		't', "$label: horizon is head + 1, head is the newest number");

	# consumers move on from where they were
	is( query($n, q{
SELECT string_agg(seq::text, ',' ORDER BY seq) = '4,5,6,7,8,9,' ||
       (SELECT string_agg(seq::text, ',' ORDER BY seq) FROM ev WHERE payload LIKE 'new%')
  FROM stream_seq.read('ev', 'slow', 100)}, $db),
		't', "$label: read() for the slow consumer returns old and new rows in order");
	is( query($n, q{
SELECT count(*) FROM stream_seq.read('ev', 'fast', 100)}, $db),
		'5', "$label: read() for the fast consumer returns the 5 new rows");
	is( query($n, q{
SELECT stream_seq.wait('ev', stream_seq.position('ev', 'fast'), '5 s')
       = stream_seq.horizon('ev')}, $db),
		't', "$label: wait() for the fast consumer returns at once");
	is( query($n, q{
SELECT stream_seq.advance('ev', 'fast', (SELECT max(seq) FROM ev));
SELECT stream_seq.position('ev', 'fast') = (SELECT max(seq) FROM ev)}, $db),
		't', "$label: advance() works after the restore");
	is( query($n, q{
SET ROLE app;
SELECT stream_seq.advance('ev', 'slow', 9);
SELECT stream_seq.position('ev', 'slow')}, $db),
		'9', "$label: the restored owner of a consumer can advance it");
	# lag counts numbers, not rows: the new rows start a fresh block
	is( query($n, q{
SELECT lag = stream_seq.horizon('ev') - 1 - 9 AND lag > 0
  FROM stream_seq.consumers WHERE consumer = 'slow'}, $db),
		't', "$label: stream_seq.consumers shows the lag up to the horizon");
}

# --- a dump by the database's owner (app), who is not a superuser: it
# reads the extension's tables and head sequences (0.4.2); the other
# schema's table is a superuser's, so app is let read it, as any dump of a
# whole database needs
$node->safe_psql('src', q{
GRANT USAGE ON SCHEMA "S" TO app;
GRANT SELECT ON "S"."Ev 2" TO app;
});
my $owner_dump = $node->basedir . '/src_by_owner.dump';
$node->command_ok(
	[ 'pg_dump', '-Fc', '-U', 'app', '-f', $owner_dump, '-d', 'src' ],
	'pg_dump -Fc -U app (the database\'s owner) of the source database');
$node->safe_psql('postgres', 'CREATE DATABASE restored_owner_dump OWNER app');
$node->command_ok(
	[ 'pg_restore', '--exit-on-error', '-d', 'restored_owner_dump', $owner_dump ],
	'pg_restore of the owner\'s dump');
check_restored($node, 'restored_owner_dump', 'dump by the owner');
# a new owner of the database gets the same, when the owner is changed
# from the database itself (from another one, _grant_dump_access() in it
# does it)
$node->safe_psql('postgres', 'CREATE ROLE new_owner LOGIN');
$node->safe_psql('restored_owner_dump', q{
ALTER DATABASE restored_owner_dump OWNER TO new_owner;
GRANT USAGE ON SCHEMA "S" TO new_owner;
GRANT SELECT ON ALL TABLES IN SCHEMA public, "S" TO new_owner;
GRANT SELECT ON ALL SEQUENCES IN SCHEMA public TO new_owner;
});
$node->command_ok(
	[ 'pg_dump', '-Fc', '-U', 'new_owner', '-f', $node->basedir . '/new_owner.dump',
		'-d', 'restored_owner_dump' ],
	'pg_dump -U new_owner after ALTER DATABASE ... OWNER TO new_owner');

# --- a new database in the same cluster, the source still in use
$node->safe_psql('postgres', 'CREATE DATABASE restored OWNER app');
$node->command_ok(
	[ 'pg_restore', '--exit-on-error', '-d', 'restored', $dump ],
	'pg_restore into a new database of the same cluster');
check_restored($node, 'restored', 'same cluster');

# the two copies number independently
$node->safe_psql('src', q{INSERT INTO ev (payload) VALUES ('src after')});
is( $node->safe_psql('src',
		q{SELECT seq > 10 FROM ev WHERE payload = 'src after'}),
	't', 'the source keeps numbering above its old head');
is( $node->safe_psql('src', q{
SELECT count(*) = count(DISTINCT seq) AND stream_seq.horizon('ev') = stream_seq.head('ev') + 1
  FROM ev}),
	't', 'the source has no duplicate numbers and an idle horizon of head + 1');
is( $node->safe_psql('restored', q{SELECT count(*) FROM ev WHERE payload = 'src after'}),
	'0', 'a write to the source does not appear in the restored copy');

$node->safe_psql('postgres', 'CREATE DATABASE restored_1 OWNER app');
$node->command_ok(
	[
		'pg_restore', '--exit-on-error', '--single-transaction',
		'-d', 'restored_1', $dump
	],
	'pg_restore --single-transaction into another new database');
check_restored($node, 'restored_1', 'single transaction');

# Schema, then data with --disable-triggers (as a data-only restore of a
# table with triggers needs: the guard trigger refuses rows that come with
# their numbers).
$node->safe_psql('postgres', 'CREATE DATABASE restored_2 OWNER app');
$node->command_ok(
	[ 'pg_restore', '--exit-on-error', '--schema-only', '-d', 'restored_2', $dump ],
	'pg_restore --schema-only into another new database');
$node->command_ok(
	[
		'pg_restore', '--exit-on-error', '--data-only', '--disable-triggers',
		'-d', 'restored_2', $dump
	],
	'pg_restore --data-only --disable-triggers into it');
check_restored($node, 'restored_2', 'schema then data');

# Parallel restores: pg_restore -j loads the extension's tables in any
# order (consumers could come before their streams), twice
for my $run (1 .. 2)
{
	$node->safe_psql('postgres', "CREATE DATABASE restored_j$run OWNER app");
	$node->command_ok(
		[ 'pg_restore', '--exit-on-error', '-j', '4', '-d', "restored_j$run", $dump ],
		"pg_restore -j 4 into another new database ($run)");
	check_restored($node, "restored_j$run", "parallel restore $run");
}

# --- a new cluster
my $dst = new_node('dump_dst');
$dst->safe_psql('postgres', q{
CREATE ROLE app LOGIN;
CREATE DATABASE restored OWNER app;
});
$dst->command_ok([ 'pg_restore', '--exit-on-error', '-d', 'restored', $dump ],
	'pg_restore into a new cluster');
check_restored($dst, 'restored', 'new cluster');

# and the restored copy survives a restart of the new cluster
$dst->restart;
is( query($dst, q{
INSERT INTO ev (payload) VALUES ('after restart');
SELECT count(*) = count(DISTINCT seq) AND
       (SELECT seq FROM ev WHERE payload = 'after restart') =
       (SELECT max(seq) FROM ev)
  FROM ev}, 'restored'),
	't', 'new cluster: after a restart, numbering continues above, no duplicates');

$dst->stop;
$node->stop;
done_testing();
