
# Copyright (c) stream_seq contributors
#
# 010_slots.pl: the shared slots of streams (stream_seq.max_streams of them,
# for all databases) are given back whenever the stream that held one is
# gone, however it went, so that new streams can be enabled:
#
#  a. enable() rolled back (ROLLBACK of the transaction, and ROLLBACK TO
#     SAVEPOINT of a transaction that then commits);
#  b. DROP DATABASE of a database that had a stream in use;
#  c. disable() and DROP TABLE in prepared transactions, once COMMIT
#     PREPARED has run (and a disable() undone by ROLLBACK PREPARED leaves its
#     stream working).
#
# With max_streams = 2, each part must then be able to enable two streams
# (or one, where a stream stays in use) and use them: insert, horizon.
# Each part starts from a clean state: what the previous part left is
# disabled or dropped, and the server is restarted, which empties shared
# memory, so that a slot a previous part failed to give back cannot make a
# later part fail.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

my $node = new_node('slots', q{
stream_seq.max_streams = 2
max_prepared_transactions = 10
});
$node->safe_psql('postgres', 'CREATE EXTENSION stream_seq');
is($node->safe_psql('postgres', 'SHOW stream_seq.max_streams'), '2',
	'two stream slots');

# Check that stream "t" is in use and works: one more row is numbered
# "expect_seq" and the horizon is the number after it.
sub works
{
	my ($t, $expect_seq, $what, $db) = @_;
	is( query($node, qq{INSERT INTO $t (x) VALUES ($expect_seq);
SELECT max(seq) || ',' || stream_seq.horizon('$t') FROM $t}, $db),
		"$expect_seq," . ($expect_seq + 1), "$what: \"$t\" numbers a new row and gives its horizon");
}

# Start a part: disable every stream and drop the tables the previous part
# created, then restart: nothing is a stream, and shared memory is fresh.
sub clean_start
{
	my ($part, @tables) = @_;
	$node->safe_psql('postgres', 'SELECT stream_seq.disable(relid) FROM stream_seq.stream');
	$node->safe_psql('postgres', 'DROP TABLE IF EXISTS ' . join(', ', @tables))
	  if @tables;
	$node->restart;
	is(query($node, 'SELECT count(*) FROM stream_seq.stream'), '0',
		"$part: starts with no stream");
}

###########################################################################
# a. enable() rolled back.
###########################################################################

clean_start('rollback');
$node->safe_psql('postgres', q{
CREATE TABLE a1 (x int); CREATE TABLE a2 (x int);
CREATE TABLE b1 (x int); CREATE TABLE b2 (x int);
});
is(try_sql($node, q{BEGIN; SELECT stream_seq.enable('a1'); ROLLBACK;}), 'ok',
	'rollback: enable() of a1 rolled back');
is(try_sql($node, q{BEGIN; SELECT stream_seq.enable('a2'); ROLLBACK;}), 'ok',
	'rollback: enable() of a2 rolled back');
is( query($node, q{SELECT count(*) FROM stream_seq.stream}) . ','
	  . query($node, q{SELECT count(*) FROM pg_attribute
                 WHERE attrelid IN ('a1'::regclass, 'a2'::regclass) AND attname = 'seq'}),
	'0,0', 'rollback: a1 and a2 are not streams');
is(try_sql($node, q{SELECT stream_seq.enable('b1')}), 'ok', 'rollback: first stream enabled afterwards');
is(try_sql($node, q{SELECT stream_seq.enable('b2')}), 'ok', 'rollback: second stream enabled afterwards');
works('b1', 1, 'rollback');
works('b2', 1, 'rollback');
works('b1', 2, 'rollback');

# the same with savepoints, in transactions that commit
clean_start('savepoint', qw(a1 a2 b1 b2));
$node->safe_psql('postgres', q{
CREATE TABLE a1 (x int); CREATE TABLE a2 (x int);
CREATE TABLE b1 (x int); CREATE TABLE b2 (x int);
});
is( try_sql($node, q{BEGIN; SAVEPOINT s; SELECT stream_seq.enable('a1'); ROLLBACK TO s; COMMIT;}),
	'ok', 'savepoint: enable() of a1 rolled back to a savepoint');
is( try_sql($node, q{BEGIN; SAVEPOINT s; SELECT stream_seq.enable('a2'); ROLLBACK TO s; COMMIT;}),
	'ok', 'savepoint: enable() of a2 rolled back to a savepoint');
is(query($node, q{SELECT count(*) FROM stream_seq.stream}), '0',
	'savepoint: a1 and a2 are not streams');
is(try_sql($node, q{SELECT stream_seq.enable('b1')}), 'ok', 'savepoint: first stream enabled afterwards');
is(try_sql($node, q{SELECT stream_seq.enable('b2')}), 'ok', 'savepoint: second stream enabled afterwards');
works('b1', 1, 'savepoint');
works('b2', 1, 'savepoint');

###########################################################################
# b. DROP DATABASE.
###########################################################################

clean_start('drop database', qw(a1 a2 b1 b2));
$node->safe_psql('postgres', 'CREATE DATABASE db2');
$node->safe_psql('db2', q{
CREATE EXTENSION stream_seq;
CREATE TABLE e (x int);
SELECT stream_seq.enable('e');
});
works('e', 1, 'drop database: in db2', 'db2');
$node->safe_psql('postgres', 'DROP DATABASE db2');
$node->safe_psql('postgres', q{CREATE TABLE c1 (x int); CREATE TABLE c2 (x int);});
is(try_sql($node, q{SELECT stream_seq.enable('c1')}), 'ok',
	'drop database: first stream enabled afterwards');
is(try_sql($node, q{SELECT stream_seq.enable('c2')}), 'ok',
	'drop database: second stream enabled afterwards');
works('c1', 1, 'drop database');
works('c2', 1, 'drop database');

###########################################################################
# c. Prepared transactions.
###########################################################################

clean_start('prepared', qw(c1 c2));
$node->safe_psql('postgres', q{
CREATE TABLE x (x int); CREATE TABLE y (x int);
CREATE TABLE z1 (x int); CREATE TABLE z2 (x int);
SELECT stream_seq.enable('x'); SELECT stream_seq.enable('y');
});
works('x', 1, 'prepared');
works('y', 1, 'prepared');

# a disable() undone by ROLLBACK PREPARED keeps the stream and its slot
is( try_sql($node, q{BEGIN; SELECT stream_seq.disable('x'); PREPARE TRANSACTION 'p0';}),
	'ok', 'prepared: disable() of x prepared');
is(try_sql($node, q{ROLLBACK PREPARED 'p0'}), 'ok', '... and rolled back');
is(query($node, q{SELECT count(*) FROM stream_seq.stream WHERE relid = 'x'::regclass}), '1',
	'prepared, after ROLLBACK PREPARED: x is still a stream');
works('x', 2, 'prepared, after ROLLBACK PREPARED');

# disable() committed by COMMIT PREPARED frees the slot of x
is( try_sql($node, q{BEGIN; SELECT stream_seq.disable('x'); PREPARE TRANSACTION 'p1';}),
	'ok', 'prepared: disable() of x prepared');
is(try_sql($node, q{COMMIT PREPARED 'p1'}), 'ok', '... and committed');
is(query($node, q{SELECT count(*) FROM stream_seq.stream WHERE relid = 'x'::regclass}), '0',
	'prepared: x is no longer a stream');
is(try_sql($node, q{SELECT stream_seq.enable('z1')}), 'ok',
	'prepared: a stream enabled in the slot disable() freed');
works('z1', 1, 'prepared, after disable()');
works('y', 2, 'prepared, after disable()');

# DROP TABLE committed by COMMIT PREPARED frees the slot of y
is(try_sql($node, q{BEGIN; DROP TABLE y; PREPARE TRANSACTION 'p2';}), 'ok',
	'prepared: DROP TABLE y prepared');
is(try_sql($node, q{COMMIT PREPARED 'p2'}), 'ok', '... and committed');
is(try_sql($node, q{SELECT stream_seq.enable('z2')}), 'ok',
	'prepared: a stream enabled in the slot DROP TABLE freed');
works('z2', 1, 'prepared, after DROP TABLE');
works('z1', 2, 'prepared, after DROP TABLE');
is(query($node, q{SELECT count(*) FROM pg_prepared_xacts}), '0', 'prepared: none left');

$node->stop;
done_testing();
