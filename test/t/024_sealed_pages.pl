
# Copyright (c) stream_seq contributors
#
# 024_sealed_pages.pl: readers page a stream partitioned by day with page()
# and with a consumer's read() while writers keep adding rows to the
# current day and late rows to the two days before it, the day moves on,
# and a sealer seals the partitions behind the newest one holding rows.
# Late rows widen a partition's number range over the ranges sealed after
# it, so sealed ranges overlap, and page() and read() must still read every
# committed row: they choose which sealed partitions a page can need.
# Writers use savepoints (a late row refused by a sealed partition is
# rolled back to its savepoint) and, now and then, more than 64
# subtransactions with xids.  The readers run as an ordinary role.  Every
# reader must read exactly the committed rows, in order, once.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use StreamSeqTest;

my $seconds = $ENV{SEALED_PAGES_SECONDS} // 8;
my $days = 60;

my $node = new_node('sealed', "max_connections = 30\n");
$node->safe_psql('postgres', qq{
CREATE EXTENSION stream_seq;
CREATE ROLE reader LOGIN;
GRANT USAGE ON SCHEMA stream_seq TO reader;
CREATE TABLE ev (day int NOT NULL, writer int, seq bigint) PARTITION BY RANGE (day);
SELECT stream_seq.enable('ev');
DO \$\$
BEGIN
    FOR d IN 1 .. $days LOOP
        EXECUTE format('CREATE TABLE ev_%s PARTITION OF ev FOR VALUES FROM (%s) TO (%s)',
                       d, d, d + 1);
        EXECUTE format('GRANT SELECT ON ev_%s TO reader', d);
    END LOOP;
END \$\$;
GRANT SELECT ON ev TO reader;
CREATE TABLE clock (today int NOT NULL, writers_done boolean NOT NULL);
INSERT INTO clock VALUES (3, false);
GRANT SELECT ON clock TO reader;
CREATE TABLE seen (reader text, ord bigint, seq bigint NOT NULL,
                   PRIMARY KEY (reader, ord));
GRANT INSERT ON seen TO reader;

-- overlapping sealed ranges from the start: day 1 gets 1 and 4, day 2
-- gets 2, day 3 gets 3 (sealed below)
INSERT INTO ev VALUES (1, 0);
INSERT INTO ev VALUES (2, 0);
INSERT INTO ev VALUES (3, 0);
INSERT INTO ev VALUES (1, 0);
INSERT INTO ev VALUES (4, 0);
SELECT stream_seq.seal_partitions('ev');
UPDATE clock SET today = 4;

-- a writer's transaction: n rows, each in a savepoint; most for today,
-- some late, for one of the two days before (refused if that day is
-- sealed: rolled back to the savepoint); "deep": 70 savepoints that
-- insert, so that more than 64 subtransactions with xids are open.  The
-- rows go in day order, as seal_partitions() locks the partitions, so
-- that a writer and the sealer never wait for each other in a circle.
CREATE FUNCTION write_rows(w int, n int, deep boolean) RETURNS void
LANGUAGE plpgsql AS \$\$
DECLARE
    today int := (SELECT today FROM clock);
    d int;
BEGIN
    FOR d IN SELECT CASE WHEN random() < 0.3 THEN today - 1 - floor(random() * 2)::int
                         ELSE today END AS day
               FROM generate_series(1, CASE WHEN deep THEN 70 ELSE n END)
              ORDER BY 1 LOOP
        BEGIN
            INSERT INTO ev VALUES (d, w);
            IF random() < 0.05 THEN
                RAISE EXCEPTION 'roll this one back' USING ERRCODE = 'SQ001';
            END IF;
        EXCEPTION
            WHEN object_not_in_prerequisite_state OR SQLSTATE 'SQ001' THEN
                NULL;
        END;
    END LOOP;
    PERFORM pg_sleep(random() * 0.003);
END \$\$;

-- a reader: pages with page() after its cursor, or reads with the
-- consumer "c" and advances past each page in the same transaction
CREATE PROCEDURE read_all(reader text, consumer boolean, page_size int)
LANGUAGE plpgsql AS \$\$
DECLARE
    cur bigint := 0;
    k bigint := 0;
    got int;
    r record;
BEGIN
    LOOP
        got := 0;
        IF consumer THEN
            FOR r IN SELECT seq FROM stream_seq.read('ev', 'c', page_size) ORDER BY seq LOOP
                k := k + 1;
                INSERT INTO seen VALUES (reader, k, r.seq);
                got := got + 1;
                cur := r.seq;
            END LOOP;
            IF got > 0 THEN
                PERFORM stream_seq.advance('ev', 'c', cur);
            END IF;
        ELSE
            FOR r IN SELECT seq FROM stream_seq.page('ev', cur, page_size) ORDER BY seq LOOP
                k := k + 1;
                INSERT INTO seen VALUES (reader, k, r.seq);
                got := got + 1;
                cur := r.seq;
            END LOOP;
        END IF;
        COMMIT;
        IF got = 0 THEN
            EXIT WHEN (SELECT writers_done FROM clock)
                  AND cur >= (SELECT coalesce(max(seq), 0) FROM ev);
            PERFORM pg_sleep(0.005);
        END IF;
    END LOOP;
END \$\$;
GRANT EXECUTE ON PROCEDURE read_all(text, boolean, int) TO reader;
});
$node->safe_psql('postgres', q{
SET ROLE reader;
SELECT stream_seq.create_consumer('ev', 'c');
});

my $writer = $node->basedir . '/writer.sql';
append_to_file($writer, q{
\set n random(1, 4)
\set deep random(1, 20)
SELECT write_rows(:client_id, :n, :deep = 1);
});

my @readers = map {
	bg_psql($node, 'SET ROLE reader', "CALL read_all($_)")
} ("'page_3', false, 3", "'page_50', false, 50", "'consumer', true, 7");
my $load = bg_pgbench($node, undef, '-c', '4', '-j', '2', '-T', $seconds,
	'-f', $writer);

# while the writers run, the day moves on every other round, and the
# sealer seals behind the newest day with rows
my $rounds = 0;
my $sealed = 0;
my $until = Time::HiRes::time() + $seconds - 0.5;
while (Time::HiRes::time() < $until)
{
	$rounds++;
	$sealed += $node->safe_psql('postgres', qq{
UPDATE clock SET today = least(today + 1, $days) WHERE $rounds % 2 = 0;
SELECT stream_seq.seal_partitions('ev');});
	usleep(100_000);
}
is(wait_done($load, $seconds + 60), 0, 'writers ran cleanly')
  or diag ${ $load->{err} };
$node->safe_psql('postgres', 'UPDATE clock SET writers_done = true');
for my $r (@readers)
{
	is(wait_done($r, 120), 0, 'reader finished') or diag ${ $r->{err} };
}

my $committed = $node->safe_psql('postgres',
	q{SELECT string_agg(seq::text, ',' ORDER BY seq) FROM ev});
my @committed = split /,/, $committed;
my $overlaps = $node->safe_psql('postgres', q{
SELECT count(*) FROM stream_seq.partition_range a
  JOIN stream_seq.partition_range b
    ON a.partition <> b.partition AND b.lowest BETWEEN a.lowest AND a.highest});
cmp_ok($overlaps, '>=', 1, 'sealed number ranges overlap');
my ($today, $sealed_total) = split /\|/, $node->safe_psql('postgres',
	q{SELECT today, (SELECT count(*) FROM stream_seq.partition_range) FROM clock});
note scalar(@committed) . " rows committed up to day $today, $sealed_total "
  . "partitions sealed ($sealed in the $rounds rounds of the run), $overlaps "
  . 'overlapping pairs of sealed ranges';

for my $reader ('page_3', 'page_50', 'consumer')
{
	my $read = $node->safe_psql('postgres',
		"SELECT string_agg(seq::text, ',' ORDER BY ord) FROM seen WHERE reader = '$reader'");
	my @read = split /,/, $read;
	my $out_of_order = grep { $read[$_] <= $read[$_ - 1] } 1 .. $#read;
	is($out_of_order, 0, "$reader: read in order, none twice");
	my %seen = map { $_ => 1 } @read;
	my @missed = grep { !$seen{$_} } @committed;
	is(scalar(@missed), 0, "$reader: no committed row skipped"
		  . (@missed ? " (missed @missed[0 .. ($#missed < 9 ? $#missed : 9)])" : ''));
	my %committed = map { $_ => 1 } @committed;
	is(scalar(grep { !$committed{$_} } @read), 0,
		"$reader: nothing read that did not commit");
}

done_testing();
