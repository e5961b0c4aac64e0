# Copyright (c) stream_seq contributors
#
# 025_operations.pl: what a DBA's tools do to a database with streams,
# built as an ordinary role ("app") that owns a plain stream (events), a
# partitioned stream with sealed ranges (pevents), plain consumers, a
# consumer group with a lease held and a parked row, and a group keeping
# per-key order whose failed row and dead letter hold their keys.
#
#  1. pg_dump -Fc, restored serially and in parallel (pre-data and data
#     with pg_restore -j 4, then post-data in one session), as a
#     superuser, as doc/operations.md says: rows and numbers, consumers
#     and positions, owners, slots, parked and held rows and sealed
#     ranges compare equal to the source, the held keys stay held, and new
#     rows are numbered above every old number.
#  2. pg_repack -t events with writers running (savepoints, and more than
#     64 subtransactions in some transactions) is refused before it copies
#     anything; VACUUM FULL under the same writers keeps every row numbered
#     with no number used twice.
#  3. pglogical: a stream table in the default_insert_only replication set
#     (inserts without updates) is refused at the first insert (55000);
#     back in the "default" set it takes rows again.
#  4. Cut-over from a native subscription: the subscriber's own stream
#     table asks horizon() before any row arrives (which starts its
#     counter), writers run on the publisher until the cut, the subscriber
#     catches up, the subscription is dropped, and writers run on the
#     subscriber: every number is used once, and every number the
#     subscriber hands out is above every replicated one.
#  5. Roles: DROP ROLE of a consumer's owner is refused in the database of
#     the consumer; from another database (where PostgreSQL cannot see
#     it) it succeeds, and the table's owner still gives the orphaned
#     consumer to a role or drops it, so retention is not blocked for good.
#  6. pg_upgrade --link of the cluster keeps all of the above, and numbering
#     continues above every old number.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

my $conf = qq{
shared_preload_libraries = 'stream_seq,pglogical'
max_prepared_transactions = 10
wal_retrieve_retry_interval = 100ms
};
my $node = new_node('ops', $conf, allows_streaming => 'logical');

build_ops_scenario($node);

my $source = ops_state($node, 'postgres');
ok($source->{slots} =~ /w1/, 'source: a slot of the group is leased by w1')
  or diag $source->{slots};
ok($source->{ranges} ne '', 'source: pevents has sealed ranges')
  or diag $source->{ranges};
my ($max_events, $max_pevents) = row($node,
	'SELECT (SELECT max(seq) FROM events), (SELECT max(seq) FROM pevents)');

# 1. dump and restore, serially and in parallel
my $dump = $node->basedir . '/ops.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', 'postgres' ],
	'pg_dump -Fc as a superuser');
# in parallel as doc/operations.md says: tables and rows with -j 4, then
# indexes, constraints and triggers in one session, in the dump's order
foreach my $how (
	[ 'serial', [ [] ] ],
	[ 'parallel',
		[ [ '-j', '4', '--section=pre-data', '--section=data' ],
		  [ '--section=post-data' ] ] ])
{
	my ($name, $steps) = @$how;
	my $db = "restored_$name";
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->command_ok(
		[ 'pg_restore', '--exit-on-error', @$_, '-d', $db, $dump ],
		"pg_restore @$_ ($name)")
	  foreach @$steps;
	my $restored = ops_state($node, $db);
	is($restored->{$_}, $source->{$_}, "$name restore: $_ as in the source")
	  foreach ops_state_parts();
	is(amcheck_problems($node, $db), '', "$name restore: amcheck finds indexes and heaps sound");
	is(ops_key_order_read($node, $db), '9 held 4,5,7,8',
		"$name restore: per-key order holds the same keys");
	$node->safe_psql($db, q{
SET ROLE app;
INSERT INTO events (payload) VALUES ('after restore');
INSERT INTO pevents (day, payload) VALUES (3, 'after restore');
});
	my ($new_events, $new_pevents) = split /\|/, $node->safe_psql($db,
		q{SELECT (SELECT seq FROM events WHERE payload = 'after restore'),
		         (SELECT seq FROM pevents WHERE payload = 'after restore')});
	cmp_ok($new_events, '>', $max_events,
		"$name restore: events numbers above every old one");
	cmp_ok($new_pevents, '>', $max_pevents,
		"$name restore: pevents numbers above every old one");
	$node->safe_psql($db, q{SET ROLE app; INSERT INTO audit (action) VALUES ('after restore')});
	is( $node->safe_psql($db, q{
SELECT a.seq > (SELECT max(seq) FROM audit WHERE action <> 'after restore')
   AND a.committed_at >= (SELECT max(committed_at) FROM audit WHERE action <> 'after restore')
  FROM audit a WHERE action = 'after restore'}),
		't', "$name restore: the time column is written, after the restored times");
	is( $node->safe_psql($db, q{
SELECT stream_seq.position_at('audit', (SELECT committed_at FROM audit WHERE action = 'c'))
     = (SELECT seq - 1 FROM audit WHERE action = 'c')}),
		't', "$name restore: position_at() finds the restored rows by time");	# (not DROP DATABASE: pglogical's supervisor, preloaded here, does not
	# answer the barrier it waits for)
	$node->safe_psql($db, 'REVOKE ALL ON events, pevents FROM reader; '
		  . 'REVOKE ALL ON SCHEMA stream_seq FROM reader');
}

# Writers for the rest: each transaction inserts into both streams, rolls
# a savepoint back, and one in ten runs more than 64 subtransactions.
my $plain = $node->basedir . '/writer.sql';
append_to_file($plain, q{
BEGIN;
INSERT INTO events (payload) VALUES ('w');
SAVEPOINT s;
INSERT INTO events (payload) VALUES ('rolled back');
ROLLBACK TO SAVEPOINT s;
INSERT INTO pevents (day, payload) VALUES (3, 'w');
COMMIT;
});
my $overflow = $node->basedir . '/overflow.sql';
append_to_file($overflow, q{
DO $$
BEGIN
    FOR i IN 1..70 LOOP
        BEGIN
            INSERT INTO events (payload) VALUES ('sub');
        EXCEPTION WHEN others THEN RAISE;
        END;
    END LOOP;
END $$;
});
$node->safe_psql('postgres', q{
GRANT INSERT ON events, pevents TO reader;
GRANT USAGE ON SEQUENCE events_id_seq, pevents_id_seq TO reader;
});

# 2. pg_repack under writers
$node->safe_psql('postgres', 'CREATE EXTENSION pg_repack');
my $writers = bg_pgbench($node, '-c role=reader', '-c', '3', '-T', '6',
	'-f', "$plain\@9", '-f', "$overflow\@1");
my ($repack_out, $repack_err) = ('', '');
my $repack_ok = IPC::Run::run(
	[ 'pg_repack', '-h', $node->host, '-p', $node->port, '-d', 'postgres',
		'-t', 'events' ], '>', \$repack_out, '2>', \$repack_err);
ok(!$repack_ok, 'pg_repack -t events fails');
like($repack_err, qr/pg_repack cannot repack stream table "events"/,
	'pg_repack stops at its trigger, with stream_seq\'s message');
is(val($node, q{SELECT count(*) FROM pg_trigger WHERE tgname LIKE '%repack%'}),
	'0', 'pg_repack left no trigger behind');
$node->safe_psql('postgres', 'VACUUM FULL events');
$node->safe_psql('postgres', 'CLUSTER events USING events_pkey');
is(wait_done($writers), 0, 'writers ran through pg_repack, VACUUM FULL and CLUSTER')
  or diag ${ $writers->{err} };
check_unique($node, 'events', 'after pg_repack and VACUUM FULL');
check_unique($node, 'pevents', 'after pg_repack and VACUUM FULL');
is(amcheck_problems($node), '',
	'after VACUUM FULL and CLUSTER under writers: amcheck finds indexes and heaps sound');

# 3. pglogical's insert-only replication set
$node->safe_psql('postgres', q{
CREATE EXTENSION pglogical;
SELECT pglogical.create_node('ops', 'dbname=postgres');
SELECT pglogical.replication_set_add_table('default_insert_only', 'events');
});
my $r = psql_result($node, q{SET ROLE app; INSERT INTO events (payload) VALUES ('insert-only')});
is($r->{sqlstate}, '55000', 'insert into a stream in default_insert_only: 55000');
like($r->{message} // '', qr/replication set "default_insert_only"/,
	'the message names the set');
is(val($node, q{SELECT count(*) FROM events WHERE payload = 'insert-only'}), '0',
	'nothing committed');
$node->safe_psql('postgres', q{
SELECT pglogical.replication_set_remove_table('default_insert_only', 'events');
SELECT pglogical.replication_set_add_table('default', 'events');
});
is(try_sql($node, q{SET ROLE app; INSERT INTO events (payload) VALUES ('default set')}),
	'ok', 'in the "default" set (updates too) it takes rows');
$node->safe_psql('postgres', q{
SELECT pglogical.replication_set_remove_table('default', 'events');
DROP EXTENSION pglogical;
});

# 4. cut-over from a native subscription
my $sub = new_node('ops_sub', $conf);
$node->safe_psql('postgres', 'CREATE PUBLICATION ops_pub FOR TABLE events');
$sub->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE events (id bigserial PRIMARY KEY, payload text);
SELECT stream_seq.enable('events');
ALTER SEQUENCE events_id_seq RESTART WITH 1000000000;
});
# the counter starts here, before any row arrives
is(val($sub, q{SELECT stream_seq.horizon('events')}), '1',
	'subscriber: horizon() before the subscription');
$sub->safe_psql('postgres',
	"CREATE SUBSCRIPTION ops_sub CONNECTION '" . $node->connstr . " dbname=postgres'"
	  . " PUBLICATION ops_pub");
$node->wait_for_catchup('ops_sub');
$writers = bg_pgbench($node, '-c role=reader', '-c', '3', '-T', '4',
	'-f', "$plain\@9", '-f', "$overflow\@1");
is(wait_done($writers), 0, 'publisher writers until the cut')
  or diag ${ $writers->{err} };
$node->wait_for_catchup('ops_sub');
is($sub->safe_psql('postgres', 'SELECT count(*), max(seq) FROM events'),
	$node->safe_psql('postgres', 'SELECT count(*), max(seq) FROM events'),
	'subscriber caught up');
my $replicated_max = val($sub, 'SELECT max(seq) FROM events');
$sub->safe_psql('postgres', 'DROP SUBSCRIPTION ops_sub');
my $sub_writer = $sub->basedir . '/sub_writer.sql';
append_to_file($sub_writer, q{
BEGIN;
INSERT INTO events (payload) VALUES ('local');
SAVEPOINT s;
INSERT INTO events (payload) VALUES ('local rolled back');
ROLLBACK TO SAVEPOINT s;
COMMIT;
});
$writers = bg_pgbench($sub, undef, '-c', '3', '-T', '3', '-f', "$sub_writer\@9",
	'-f', "$overflow\@1");
is(wait_done($writers), 0, 'subscriber writers after the cut')
  or diag ${ $writers->{err} };
check_unique($sub, 'events', 'after the cut-over');
is(val($sub, qq{SELECT count(*) FROM events WHERE payload IN ('local', 'sub')
                  AND id >= 1000000000 AND seq <= $replicated_max}),
	'0', 'every number the subscriber hands out is above every replicated one');
cmp_ok(val($sub, q{SELECT count(*) FROM events WHERE id >= 1000000000}), '>', 0,
	'the subscriber wrote rows of its own');

# 5. roles that own consumers
$r = psql_result($node, 'DROP ROLE reader');
is($r->{sqlstate}, '2BP01', 'DROP ROLE of a consumer\'s owner: 2BP01');
$node->safe_psql('postgres', q{
REVOKE ALL ON events, pevents FROM reader;
REVOKE ALL ON SEQUENCE events_id_seq, pevents_id_seq FROM reader;
REVOKE ALL ON SCHEMA stream_seq FROM reader;
});
$r = psql_result($node, 'DROP ROLE reader');
like($r->{err}, qr/owner of consumer "reporting" of stream table/,
	'the refusal names the consumer');
# from another database, the consumer is out of sight
$node->safe_psql('postgres', 'CREATE DATABASE other');
is(try_sql($node, 'DROP ROLE reader', 'other'), 'ok',
	'DROP ROLE from another database succeeds');
is(sqlstate($node, q{SET ROLE app; SELECT stream_seq.trim('events', 30)}),
	'55000', 'the orphaned consumer holds trim() back');
is(try_sql($node, q{SET ROLE app; SELECT stream_seq.alter_consumer_owner('events', 'reporting', 'app')}),
	'ok', 'the table\'s owner gives the orphaned consumer to itself');
is(val($node, q{SELECT owner::regrole FROM stream_seq.consumer WHERE consumer = 'reporting'}),
	'app', 'the consumer belongs to app');
is(try_sql($node, q{SET ROLE app; SELECT stream_seq.drop_consumer('events', 'reporting');
                    SELECT stream_seq.drop_consumer('events', 'billing');
                    SELECT stream_seq.drop_consumer('events', 'workers');
                    SELECT stream_seq.drop_consumer('events', 'ordered')}),
	'ok', 'and drops it');
is(try_sql($node, q{SET ROLE app; SELECT stream_seq.trim('events', 30)}), 'ok',
	'trim() is no longer held back');

# 6. pg_upgrade --link of the whole cluster: everything above is kept, and
# numbering continues above every number handed out before
my $before = ops_state($node, 'postgres');
my ($last_events, $last_pevents) = row($node,
	'SELECT (SELECT max(seq) FROM events), (SELECT max(seq) FROM pevents)');
my $bindir = $node->config_data('--bindir');
$node->stop;
my $upgraded = PostgreSQL::Test::Cluster->new('ops_upgraded');
$upgraded->init;
$upgraded->append_conf('postgresql.conf', $conf);
my $workdir = PostgreSQL::Test::Utils::tempdir;
my ($upgrade_out, $upgrade_err) = ('', '');
my $upgrade_ok = IPC::Run::run(
	[ 'pg_upgrade', '--no-sync', '--link', '-d', $node->data_dir,
		'-D', $upgraded->data_dir, '-b', $bindir, '-B', $bindir,
		'-s', $upgraded->host, '-p', $node->port, '-P', $upgraded->port ],
	'>', \$upgrade_out, '2>', \$upgrade_err, init => sub { chdir $workdir });
ok($upgrade_ok, 'pg_upgrade --link') or diag "$upgrade_out\n$upgrade_err";
$upgraded->start;
my $after = ops_state($upgraded, 'postgres');
is($after->{$_}, $before->{$_}, "after pg_upgrade: $_ as before")
  foreach ops_state_parts();
$upgraded->safe_psql('postgres', q{
SET ROLE app;
INSERT INTO events (payload) VALUES ('after upgrade');
INSERT INTO pevents (day, payload) VALUES (3, 'after upgrade');
});
my ($up_events, $up_pevents) = row($upgraded,
	q{SELECT (SELECT seq FROM events WHERE payload = 'after upgrade'),
	         (SELECT seq FROM pevents WHERE payload = 'after upgrade')});
cmp_ok($up_events, '>', $last_events,
	'after pg_upgrade: events numbers above every old one');
cmp_ok($up_pevents, '>', $last_pevents,
	'after pg_upgrade: pevents numbers above every old one');
check_unique($upgraded, 'events', 'after pg_upgrade');
is(amcheck_problems($upgraded), '', 'after pg_upgrade: amcheck finds indexes and heaps sound');

done_testing();
