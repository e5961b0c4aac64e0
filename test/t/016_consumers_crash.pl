
# Copyright (c) stream_seq contributors
#
# 016_consumers_crash.pl: consumers running the loop of doc/consumers.md (read,
# apply, advance in one transaction) under write load, crashed and
# restarted, end with every committed row applied exactly once and nothing
# applied that the crash took back.
#
# The writers are synchronous and asynchronous (the WAL writer is slowed
# to its maximum delay, so asynchronous commits stay unflushed and a crash
# takes them back), and the writers wait inside their commits after
# numbering (pulse_commits), which widens the window between numbering and
# commit.  Two streams: "c" with the default head interval
# and two consumers, "c7" with an interval of 7 and one consumer.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

my $node = new_node('consumers', "max_connections = 40\n" . slow_wal_conf());

$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE c (id bigserial PRIMARY KEY, phase int NOT NULL, client int);
SELECT stream_seq.enable('c');
SET stream_seq.head_interval = 7;
CREATE TABLE c7 (id bigserial PRIMARY KEY, phase int NOT NULL, client int);
SELECT stream_seq.enable('c7');
CREATE TABLE control (writers_done boolean NOT NULL);
INSERT INTO control VALUES (false);
CREATE TABLE applied (consumer text NOT NULL, stream text NOT NULL,
                      seq bigint NOT NULL, id bigint NOT NULL);
SELECT stream_seq.create_consumer('c', 'fast');
SELECT stream_seq.create_consumer('c', 'slow');
SELECT stream_seq.create_consumer('c7', 'fast');

-- The consumer loop of doc/consumers.md: read a page, apply it, advance, all in
-- one transaction; wait() when there is nothing to read.  Ends when the
-- writers are done and nothing is left.
CREATE PROCEDURE consume(stream regclass, cname text, page_size int, nap float8)
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
    top bigint;
    done boolean;
    deadline timestamptz := clock_timestamp() + interval '60 s';
BEGIN
    LOOP
        SELECT writers_done INTO done FROM control;
        CREATE TEMP TABLE page ON COMMIT DROP AS
          SELECT * FROM stream_seq.read(stream, cname, page_size);
        INSERT INTO applied
          SELECT cname, stream::text, seq, ("row"->>'id')::bigint FROM page;
        SELECT count(*), max(seq) INTO n, top FROM page;
        IF n > 0 THEN
            PERFORM stream_seq.advance(stream, cname, top);
            -- gives up after 60 s without a row, not 60 s in all: a slow
            -- machine may take longer than that to write and read them
            deadline := clock_timestamp() + interval '60 s';
        END IF;
        COMMIT;
        IF n = 0 THEN
            EXIT WHEN done;
            IF clock_timestamp() > deadline THEN
                RAISE EXCEPTION 'consumer % of % gave up at %, horizon %',
                    cname, stream, stream_seq.position(stream, cname),
                    stream_seq.horizon(stream);
            END IF;
            PERFORM stream_seq.wait(stream, stream_seq.position(stream, cname), '200 ms');
            COMMIT;
        ELSIF nap > 0 THEN
            PERFORM pg_sleep(nap);
        END IF;
    END LOOP;
END;
$$;
});

my $load_script = $node->basedir . '/load.sql';
append_to_file($load_script, q{
\set n random(1, 5)
\set outcome random(1, 8)
BEGIN;
INSERT INTO c (phase, client) SELECT :phase, :client_id FROM generate_series(1, :n);
INSERT INTO c7 (phase, client) SELECT :phase, :client_id FROM generate_series(1, :n);
\if :outcome = 1
ROLLBACK;
\else
COMMIT;
\endif
});

# Writers of load "phase" in the background: three synchronous ones, and
# three asynchronous ones whose commits are lost in a crash unless
# something flushed them; their commits are slowed for "pulse" seconds.
sub start_writers
{
	my ($phase, $pulse, @limit) = @_;
	return (pulse_commits($node, $pulse), map {
		bg_pgbench($node, "-c synchronous_commit=$_ " . slow_commit_options(),
			'-c', '3', '-j', '1', @limit, '-D', "phase=$phase",
			'-f', $load_script)
	} ('on', 'off'));
}

# The consumers in the background: "fast" and "slow" on "c", "fast" on
# "c7", with different page sizes.
sub start_consumers
{
	return (
		bg_psql($node, "CALL consume('c', 'fast', 50, 0)"),
		bg_psql($node, "CALL consume('c', 'slow', 10, 0.001)"),
		bg_psql($node, "CALL consume('c7', 'fast', 20, 0)"));
}

my @writers = start_writers(1, 60, '-T', '60');
my @consumers = start_consumers();
$node->poll_query_until('postgres', q{
SELECT (SELECT count(*) FROM c) > 1500
   AND (SELECT count(*) FROM applied WHERE consumer = 'slow') > 300})
  or die 'consumers did not get going';
$node->stop('immediate');
wait_done($_, 30) for @writers, @consumers;
$node->start;

my ($pos_after_crash) = row($node, "SELECT stream_seq.position('c', 'slow')");
cmp_ok($pos_after_crash, '>', 0, "consumers: positions survive the crash ($pos_after_crash)");

@writers = start_writers(2, 10, '-t', '60');
@consumers = start_consumers();
for my $w (@writers)
{
	is(wait_done($w, 60), 0, 'consumers: writers after the crash ran cleanly')
	  or diag ${ $w->{err} };
}
# a synchronous commit: flushes the asynchronous writers' last commits too
$node->safe_psql('postgres', 'UPDATE control SET writers_done = true');
for my $cons (@consumers)
{
	is(wait_done($cons, 60), 0, 'consumers: consumer ran to the end')
	  or diag ${ $cons->{err} };
}

for my $case (['c', 'fast'], ['c', 'slow'], ['c7', 'fast'])
{
	my ($tab, $name) = @$case;
	my $what = "consumer $name of $tab";
	check_unique($node, $tab, "consumers");
	my ($committed, $applied, $distinct, $missed, $phantom, $pos, $max) = row($node, qq{
SELECT (SELECT count(*) FROM $tab),
       (SELECT count(*) FROM applied WHERE consumer = '$name' AND stream = '$tab'),
       (SELECT count(DISTINCT seq) FROM applied WHERE consumer = '$name' AND stream = '$tab'),
       (SELECT count(*) FROM $tab t WHERE NOT EXISTS (
          SELECT FROM applied a WHERE a.consumer = '$name' AND a.stream = '$tab'
                                  AND a.id = t.id AND a.seq = t.seq)),
       (SELECT count(*) FROM applied a WHERE a.consumer = '$name' AND a.stream = '$tab'
          AND NOT EXISTS (SELECT FROM $tab t WHERE a.id = t.id AND a.seq = t.seq)),
       stream_seq.position('$tab', '$name'),
       (SELECT max(seq) FROM $tab)});
	cmp_ok($committed, '>', 1500, "$what: rows committed across the crash");
	is($distinct, $applied, "$what: no row applied twice");
	is($missed, 0, "$what: no committed row missed");
	is($phantom, 0, "$what: nothing applied that did not survive, or with another number");
	is($applied, $committed, "$what: applied = committed ($committed)");
	is($pos, $max, "$what: position ends at the last number");
}


$node->stop;
done_testing();
