
# Copyright (c) stream_seq contributors
#
# 038_restore_order.pl: a one-step parallel pg_restore runs the post-data
# items (indexes, constraints, triggers) in any order.  Restored with the
# stream's triggers before its unique index on the number and its capture
# index, as a pg_restore -j may run them, a dump restores without error,
# and the indexes get back the protection enable() gave them (the guard
# trigger depends on both, so DROP INDEX is refused).  The order is made
# deterministic with pg_restore -l / -L: the list is reordered so that
# every INDEX, INDEX ATTACH and CONSTRAINT item comes after the triggers.
#
# Three streams: ev (its index created by enable()), evu (its own UNIQUE
# constraint on the column, restored by ALTER TABLE ... ADD CONSTRAINT)
# and pev (partitioned, its index created ON ONLY the parent and attached
# to the partitions' indexes).  A serial restore must give each index one
# dependency, not two (before 0.5.1 it gave none: the trigger that
# depended on it was restored before the guard trigger that tells its
# column).  The refusal of ALTER TABLE ... DROP CONSTRAINT of
# a stream's unique constraint stays where the dependency is missing.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

my $node = new_node('restore_order');

$node->safe_psql('postgres', 'CREATE DATABASE src');
$node->safe_psql('src', q{
CREATE EXTENSION stream_seq;
CREATE TABLE ev (id bigserial PRIMARY KEY, payload text);
SELECT stream_seq.enable('ev');
CREATE TABLE evu (id int, seq bigint UNIQUE);
SELECT stream_seq.enable('evu');
CREATE TABLE pev (id int, seq bigint) PARTITION BY RANGE (id);
CREATE TABLE pev_1 PARTITION OF pev FOR VALUES FROM (0) TO (10);
CREATE TABLE pev_2 PARTITION OF pev FOR VALUES FROM (10) TO (20);
SELECT stream_seq.enable('pev');
INSERT INTO ev (payload) VALUES ('a'), ('b');
INSERT INTO evu (id) VALUES (1), (2);
INSERT INTO pev (id) VALUES (1), (11);
});

my $dump = $node->basedir . '/src.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', 'src' ],
	'pg_dump -Fc of the source database');

# the list, with the indexes and constraints moved after the triggers
my ($list, $err);
IPC::Run::run([ 'pg_restore', '-l', $dump ], '>', \$list, '2>', \$err)
  or die "pg_restore -l failed: $err";
my @items = grep { !/^;/ && /\S/ } split /\n/, $list;
my @late = grep { / (INDEX|INDEX ATTACH|CONSTRAINT) / } @items;
my @early = grep { !/ (INDEX|INDEX ATTACH|CONSTRAINT) / } @items;
ok(scalar(grep { / TRIGGER public ev stream_seq_guard / } @early) == 1
	  && scalar(grep { / INDEX public ev_seq_idx / } @late) == 1
	  && scalar(grep { / INDEX public ev_stream_seq_capture / } @late) == 1,
	'the list puts the guard trigger of ev before its indexes');
my $reordered = $node->basedir . '/reordered.list';
PostgreSQL::Test::Utils::append_to_file($reordered,
	join("\n", @early, @late) . "\n");

# The number of dependencies of each stream's guard trigger on an index
# (its unique index and its capture index), in database "db", as
# "ev|evu|pev".
sub protections
{
	my ($db) = @_;
	return query($node, q{
SELECT string_agg(n::text, '|' ORDER BY t) FROM (
  SELECT t, (SELECT count(*) FROM pg_depend d JOIN pg_class i ON i.oid = d.refobjid
              WHERE d.classid = 'pg_trigger'::regclass
                AND d.objid = (SELECT oid FROM pg_trigger
                                WHERE tgrelid = t::regclass AND tgname = 'stream_seq_guard')
                AND d.refclassid = 'pg_class'::regclass AND i.relkind IN ('i', 'I')) AS n
    FROM unnest(ARRAY['ev', 'evu', 'pev']) t) s}, $db);
}

# --- the triggers first, as a parallel restore may run them
$node->safe_psql('postgres', 'CREATE DATABASE dst');
my ($rc, $out);
$rc = IPC::Run::run(
	[ 'pg_restore', '--exit-on-error', '-L', $reordered, '-d', 'dst',
		'-h', $node->host, '-p', $node->port, $dump ],
	'>', \$out, '2>', \$err);
ok($rc, 'pg_restore with the triggers before the indexes succeeds')
  or diag $err;
unlike($err, qr/cannot drop the unique index/,
	'no "cannot drop the unique index" during the restore');
is(protections('dst'), '2|2|2',
	'every stream\'s guard trigger depends on its unique index and its capture index again');
is(sqlstate($node, 'DROP INDEX ev_stream_seq_capture', 'dst'), '2BP01',
	'DROP INDEX of the restored capture index of ev is refused');
is(sqlstate($node, 'DROP INDEX ev_seq_idx', 'dst'), '2BP01',
	'DROP INDEX of the restored index of ev is refused');
is(sqlstate($node, 'ALTER TABLE evu DROP CONSTRAINT evu_seq_key', 'dst'), '2BP01',
	'dropping the restored UNIQUE constraint of evu is refused');
is(sqlstate($node, 'DROP INDEX pev_seq_idx', 'dst'), '2BP01',
	'DROP INDEX of the restored partitioned index of pev is refused');
is( query($node, q{
INSERT INTO ev (payload) VALUES ('c');
INSERT INTO evu (id) VALUES (3);
INSERT INTO pev (id) VALUES (12);
SELECT (SELECT seq FROM ev WHERE payload = 'c') > 2 AND
       (SELECT seq FROM evu WHERE id = 3) > 2 AND
       (SELECT seq FROM pev WHERE id = 12) > 2}, 'dst'),
	't', 'new rows are numbered above the restored ones');
is( query($node, q{
SELECT (SELECT count(*) FROM ev WHERE seq IS NULL OR seq <= 0) +
       (SELECT count(*) FROM evu WHERE seq IS NULL OR seq <= 0) +
       (SELECT count(*) FROM pev WHERE seq IS NULL OR seq <= 0)}, 'dst'),
	'0', 'every restored and new row has a number');

# --- the guard triggers (which tell the column) last of all
my @guards = grep { / TRIGGER public \S+ stream_seq_guard / } @early;
ok(scalar(@guards) == 3, 'the list has the guard trigger of each stream');
my $guard_last = $node->basedir . '/guard_last.list';
PostgreSQL::Test::Utils::append_to_file($guard_last,
	join("\n", (grep { !/ TRIGGER public \S+ stream_seq_guard / } @early),
		@late, @guards) . "\n");
$node->safe_psql('postgres', 'CREATE DATABASE dst_guard_last');
$rc = IPC::Run::run(
	[ 'pg_restore', '--exit-on-error', '-L', $guard_last, '-d', 'dst_guard_last',
		'-h', $node->host, '-p', $node->port, $dump ],
	'>', \$out, '2>', \$err);
ok($rc, 'pg_restore with the guard triggers after everything else succeeds')
  or diag $err;
is(protections('dst_guard_last'), '2|2|2',
	'with the guard triggers last, the indexes are protected too');

# --- the dump's own order: one dependency each, not two
$node->safe_psql('postgres', 'CREATE DATABASE dst_serial');
$node->command_ok(
	[ 'pg_restore', '--exit-on-error', '-d', 'dst_serial', $dump ],
	'pg_restore in the dump\'s order');
is(protections('dst_serial'), '2|2|2',
	'a serial restore gives each trigger one dependency on each index');
$node->safe_psql('dst_serial', 'ALTER TABLE ev ADD COLUMN note text');
is(protections('dst_serial'), '2|2|2',
	'later ALTER TABLE adds no second dependency');

# --- a database restored before 0.5.1: the documented ALTER TABLE
# records the missing dependency
is( sqlstate($node, q{
DELETE FROM pg_depend
 WHERE classid = 'pg_trigger'::regclass
   AND objid = (SELECT oid FROM pg_trigger
                 WHERE tgrelid = 'ev'::regclass AND tgname = 'stream_seq_guard')
   AND refobjid = 'ev_seq_idx'::regclass;
ALTER TABLE ev ENABLE REPLICA TRIGGER stream_seq_replica}, 'dst_serial'),
	'ok', 'ALTER TABLE ... ENABLE REPLICA TRIGGER stream_seq_replica runs');
is(protections('dst_serial'), '2|2|2',
	'and gives the index its dependency back');

# --- where the dependency is missing, ALTER TABLE still refuses the drop
is( sqlstate($node, q{
DELETE FROM pg_depend
 WHERE classid = 'pg_trigger'::regclass
   AND objid = (SELECT oid FROM pg_trigger
                 WHERE tgrelid = 'evu'::regclass AND tgname = 'stream_seq_guard')
   AND refobjid = 'evu_seq_key'::regclass;
ALTER TABLE evu DROP CONSTRAINT evu_seq_key}, 'dst_serial'),
	'2BP01',
	'without the dependency, ALTER TABLE ... DROP CONSTRAINT of the index is refused');
is(query($node, q{SELECT to_regclass('evu_seq_key') IS NOT NULL}, 'dst_serial'),
	't', 'and the index stays');

$node->stop;
done_testing();
