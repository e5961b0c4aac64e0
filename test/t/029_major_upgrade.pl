# Copyright (c) stream_seq contributors
#
# 029_major_upgrade.pl: pg_upgrade from an older major version of
# PostgreSQL (15) to the one under test.  The old cluster, run by the old
# server's binaries with stream_seq built for them, holds the database of
# the operations tests (StreamSeqTest::build_ops_scenario: an ordinary
# role's plain and partitioned streams, sealed partitions, consumers and
# their positions, a group with a leased slot and a parked row, a group
# keeping per-key order with held keys) and rows
# written in transactions with savepoints rolled back, and rows numbered
# in the version they were stored as (the commit-time page write).  After pg_upgrade (--check, then the
# copy) the new cluster has every row, number, consumer, position, slot,
# parked row, seal and trigger as before, the same extension version, and
# numbers every new row above every old one.
#
# Runs in "make test-18", where test/run-tests.sh installs stream_seq into
# the old server too and names its pg_config in STREAM_SEQ_OLD_PG_CONFIG;
# skipped in "make test" (one server only).

use strict;
use warnings;

use File::Basename qw(dirname);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

my $old_pg_config = $ENV{STREAM_SEQ_OLD_PG_CONFIG};
plan skip_all =>
  'needs an older server: runs in "make test-18" (STREAM_SEQ_OLD_PG_CONFIG)'
  unless $old_pg_config;

my $old_bindir = `$old_pg_config --bindir`;
chomp $old_bindir;

my $old = PostgreSQL::Test::Cluster->new('old', install_path => dirname($old_bindir));
$old->init;
$old->append_conf('postgresql.conf',
	"shared_preload_libraries = 'stream_seq'\n");
$old->start;
my $new = PostgreSQL::Test::Cluster->new('new');
cmp_ok($old->pg_version->major, '<', $new->pg_version->major,
	'the old server is an older major version (' . $old->pg_version . ' to '
	  . $new->pg_version . ')');

build_ops_scenario($old);
# more rows, from transactions that roll savepoints back
$old->safe_psql('postgres', q{
SET ROLE app;
DO $$
BEGIN
    FOR i IN 1..200 LOOP
        BEGIN
            INSERT INTO events (payload) VALUES ('kept ' || i);
            INSERT INTO pevents (day, payload) VALUES (3, 'kept ' || i);
            IF i % 3 = 0 THEN
                RAISE EXCEPTION 'rolled back';
            END IF;
        EXCEPTION WHEN raise_exception THEN
            NULL;
        END;
    END LOOP;
END $$;
});
# rows numbered in the version they were stored as (the page write): one
# row version each, which pg_upgrade carries over as it is
$old->safe_psql('postgres', q{
CREATE EXTENSION pageinspect;
SET ROLE app;
CREATE TABLE inplace_ev (id bigserial PRIMARY KEY, k int, seq bigint, at timestamptz);
SELECT stream_seq.enable('inplace_ev', 'seq', 'at');
INSERT INTO inplace_ev (k) SELECT g FROM generate_series(1, 20) g;
BEGIN;
INSERT INTO inplace_ev (k) SELECT g FROM generate_series(21, 30) g;
SAVEPOINT s;
INSERT INTO inplace_ev (k) VALUES (-1);
ROLLBACK TO SAVEPOINT s;
INSERT INTO inplace_ev (k) VALUES (31);
COMMIT;
});
my $inplace_state = q{
SELECT count(*) || ' ' || count(*) FILTER (WHERE seq > 0) || ' ' || count(*) FILTER (WHERE at > '-infinity') || ' '
       || md5(string_agg(id || ':' || k || ':' || seq || ':' || at, ',' ORDER BY id))
  FROM inplace_ev};
my $inplace_before = val($old, $inplace_state);
like($inplace_before, qr/^31 31 31 /, 'old cluster: the rows written in place are numbered');
is( val($old, q{
SELECT count(*) FROM heap_page_items(get_raw_page('inplace_ev', 0))
 WHERE t_xmin IN (SELECT xmin FROM inplace_ev)}),
	'31', 'old cluster: one row version each, numbered in place');
$old->safe_psql('postgres', 'DROP EXTENSION pageinspect');
check_unique($old, 'events', 'old cluster');
check_unique($old, 'pevents', 'old cluster');
is(amcheck_problems($old), '', 'old cluster: amcheck finds indexes and heaps sound');
my $before = ops_state($old, 'postgres');
my ($last_events, $last_pevents, $old_version) = row($old,
	q{SELECT (SELECT max(seq) FROM events), (SELECT max(seq) FROM pevents),
	         (SELECT extversion FROM pg_extension WHERE extname = 'stream_seq')});
is(val($old, q{SELECT count(*) FROM events WHERE seq IS NULL OR seq <= 0}), '0',
	'old cluster: every row numbered');

# This machine's PostgreSQL 15 (Debian's 15.20-0+deb12u1) writes an
# attribute option "pg_attver" on every column it creates, with or without
# stream_seq; its own pg_dump leaves the option out, 18.6's copies it, and
# 18.6 refuses it ("unrecognized parameter"), so pg_upgrade stops at the
# first table.  Upstream 15.18 has no such option.  As doc/operations.md
# says, it is removed from the old cluster's catalogs last, in every
# database.
my $strip = q{
SET allow_system_table_mods = on;
UPDATE pg_catalog.pg_attribute
   SET attoptions = (SELECT NULLIF(array_agg(o), '{}') FROM unnest(attoptions) o
                      WHERE o NOT LIKE 'pg\_attver=%')
 WHERE attoptions::text LIKE '%pg\_attver=%';
};
my $stamped = val($old,
	q{SELECT count(*) FROM pg_attribute WHERE attoptions::text LIKE '%pg\_attver=%'});
if ($stamped > 0)
{
	note "the old server stamps pg_attver on columns ($stamped here): removing it";
	foreach my $db (split /\n/,
		$old->safe_psql('postgres', 'SELECT datname FROM pg_database WHERE datallowconn'))
	{
		$old->safe_psql($db, $strip);
		is($old->safe_psql($db, q{SELECT count(*) FROM pg_attribute WHERE attoptions::text LIKE '%pg\_attver=%'}),
			'0', "pg_attver removed in database $db");
	}
}
$old->stop;

# 18's initdb turns data checksums on by default, and pg_upgrade needs
# the old cluster's setting (doc/operations.md)
$new->init(extra => $new->pg_version >= 18 ? [ '--no-data-checksums' ] : []);
$new->append_conf('postgresql.conf',
	"shared_preload_libraries = 'stream_seq'\n");
my $workdir = PostgreSQL::Test::Utils::tempdir;
my @upgrade = (
	'pg_upgrade', '--no-sync', '-d', $old->data_dir, '-D', $new->data_dir,
	'-b', $old_bindir, '-B', $new->config_data('--bindir'),
	'-s', $new->host, '-p', $old->port, '-P', $new->port);
foreach my $step ([ 'pg_upgrade --check', '--check' ], [ 'pg_upgrade', () ])
{
	my ($name, @opts) = @$step;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ @upgrade, @opts ], '>', \$out, '2>', \$err,
		init => sub { chdir $workdir });
	ok($ok, "$name from " . $old->pg_version . ' to ' . $new->pg_version)
	  or diag "$out\n$err";
}
$new->start;

my $after = ops_state($new, 'postgres');
is($after->{$_}, $before->{$_}, "after the upgrade: $_ as before")
  foreach ops_state_parts();
is(val($new, q{SELECT extversion FROM pg_extension WHERE extname = 'stream_seq'}),
	$old_version, 'after the upgrade: the same extension version');
is(try_sql($new, 'ALTER EXTENSION stream_seq UPDATE'), 'ok',
	'after the upgrade: ALTER EXTENSION stream_seq UPDATE');

# numbering goes on above every old number
$new->safe_psql('postgres', q{
SET ROLE app;
INSERT INTO events (payload) VALUES ('after upgrade');
INSERT INTO pevents (day, payload) VALUES (3, 'after upgrade');
BEGIN;
SAVEPOINT s;
INSERT INTO events (payload) VALUES ('after upgrade, savepoint');
RELEASE SAVEPOINT s;
SAVEPOINT t;
INSERT INTO events (payload) VALUES ('rolled back');
ROLLBACK TO SAVEPOINT t;
INSERT INTO events (payload) VALUES ('after upgrade, top level');
COMMIT;
});
is(val($new, qq{SELECT count(*) FROM events
                WHERE payload LIKE 'after upgrade%' AND seq > $last_events}),
	'3', 'after the upgrade: new events rows numbered above every old one');
is(val($new, qq{SELECT count(*) FROM pevents
                WHERE payload = 'after upgrade' AND seq > $last_pevents}),
	'1', 'after the upgrade: new pevents rows numbered above every old one');
is(val($new, $inplace_state), $inplace_before,
	'after the upgrade: the rows numbered in place, with their numbers and times');
$new->safe_psql('postgres', q{
SET ROLE app;
INSERT INTO inplace_ev (k) VALUES (32);
});
is( val($new, q{
SELECT (SELECT seq FROM inplace_ev WHERE k = 32) > (SELECT max(seq) FROM inplace_ev WHERE k <> 32)}),
	't', 'after the upgrade: a row written in place is numbered above every old one');
check_unique($new, 'events', 'after the upgrade');
check_unique($new, 'pevents', 'after the upgrade');
is(amcheck_problems($new), '', 'after the upgrade: amcheck finds indexes and heaps sound');
cmp_ok(val($new, q{SELECT stream_seq.horizon('events')}), '>',
	val($new, q{SELECT max(seq) FROM events}),
	'after the upgrade: the horizon is above every committed number');

# consumers go on from their positions, and the group's worker from its
# slots
is(try_sql($new, q{SET ROLE app;
                   SELECT stream_seq.advance('events', 'billing', 30)}), 'ok',
	'after the upgrade: a consumer advances');
is(val($new, q{SELECT position FROM stream_seq.consumer WHERE consumer = 'billing'}),
	'30', 'after the upgrade: its position is stored');
is(val($new, q{SET ROLE app;
               SELECT count(*) FROM stream_seq.claim('events', 'workers', 'w1', '1 minute')}),
	'2', 'after the upgrade: the worker holding the lease renews it, both slots');
is(try_sql($new, q{SET ROLE app;
                   SELECT count(*) FROM stream_seq.claim('events', 'workers', 'w1', '1 minute') c,
                          stream_seq.read_slot('events', 'workers', c.slot, c.token, 10)}),
	'ok', 'after the upgrade: and reads its slots with the tokens it had');
is(ops_key_order_read($new, 'postgres'), '9 held 4,5,7,8',
	'after the upgrade: per-key order holds the same keys');

done_testing();
