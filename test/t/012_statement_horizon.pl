
# Copyright (c) stream_seq contributors
#
# 012_statement_horizon.pl: horizon() has one value for the whole life of
# a snapshot, however many other snapshots the statement goes through.
#
# Rows 1-6 are committed asynchronously and stay unflushed (the WAL writer
# is slowed to its maximum delay), so the durable horizon is 1.  A reader's
# statement scans the table sequentially and evaluates horizon() per row;
# for each row it first calls a function that takes a dozen snapshots of
# its own (each calling horizon()), and on the second row it flushes the
# WAL.  If the horizon of the statement's snapshot were recomputed after
# the flush, rows 2-6 would pass the filter and row 1 would not: a reader
# moving its cursor to 6 would never read 1.  The statement must return
# either nothing or every row below the highest it returns; once a later
# statement sees the flush, it returns all six.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

# Asynchronous commits stay unflushed until the test flushes the WAL.
my $node = new_node('statement', slow_wal_conf());

$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE t (id int NOT NULL, seq bigint);
SELECT stream_seq.enable('t');
CREATE TABLE scratch (i int);

-- Takes a new snapshot per statement (a volatile function in READ
-- COMMITTED), each with a new command id, and computes the horizon in each;
-- flushes the WAL on its second call.
CREATE FUNCTION churn() RETURNS boolean LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    calls int := coalesce(nullif(current_setting('churn.calls', true), ''), '0')::int + 1;
BEGIN
    PERFORM set_config('churn.calls', calls::text, false);
    FOR i IN 1..12 LOOP
        INSERT INTO scratch VALUES (i);
        PERFORM stream_seq.horizon('t');
    END LOOP;
    IF calls = 2 THEN
        PERFORM pg_switch_wal();
    END IF;
    RETURN true;
END $$;
});

# The six asynchronous commits must stay unflushed: one whose record
# starts a new WAL page wakes the WAL writer, which flushes the commits
# before it.  Where they fall in the WAL depends on what initdb and the
# set-up wrote, so they start at the first page of a new segment.
$node->safe_psql('postgres', 'SELECT pg_switch_wal()');
for my $i (1 .. 6)
{
	$node->safe_psql('postgres',
		"SET synchronous_commit = off; INSERT INTO t (id) VALUES ($i);");
}
is($node->safe_psql('postgres', 'SELECT string_agg(seq::text, \',\' ORDER BY seq) FROM t'),
	'1,2,3,4,5,6', 'six rows committed, numbered 1-6 in physical order');
cmp_ok(
	$node->safe_psql('postgres',
		"SELECT pg_current_wal_flush_lsn() < pg_current_wal_insert_lsn()"),
	'eq', 't', 'their commits are not flushed yet');
is($node->safe_psql('postgres', "SELECT stream_seq.horizon('t')"),
	'1', 'the durable horizon is 1 while the commits are unflushed');

my $got = $node->safe_psql('postgres', q{
SET enable_indexscan = off;
SET enable_bitmapscan = off;
SELECT coalesce(string_agg(seq::text, ',' ORDER BY seq), '')
  FROM t
 WHERE seq > 0
   AND seq < CASE WHEN churn() THEN stream_seq.horizon('t') END;
});
note "the churning statement returned: '$got'";
my @got = grep { length } split /,/, $got;
my $max = @got ? $got[-1] : 0;
is(join(',', @got), join(',', 1 .. $max),
	'the statement returned every row below the highest it returned');
is($node->safe_psql('postgres', 'SELECT count(*) > 12 FROM scratch'),
	't', 'the statement took more than a dozen other snapshots');
is($node->safe_psql('postgres',
		"SELECT pg_current_wal_flush_lsn() >= pg_current_wal_insert_lsn() - 1024 * 1024"),
	't', 'the WAL was flushed during the statement');

is($node->safe_psql('postgres', q{
SELECT string_agg(seq::text, ',' ORDER BY seq)
  FROM t WHERE seq > 0 AND seq < stream_seq.horizon('t');
}), '1,2,3,4,5,6', 'a later statement sees the flush and returns all six');

$node->stop;
done_testing();
