
# Copyright (c) stream_seq contributors
#
# 034_ddl_concurrency.pl: random DDL on stream tables while writers commit
# rows in every commit shape; the commit-time write must be made against
# the table's indexes as they are at each write (doc/how-it-works.md, "The
# heap-only commit-time write").
#
# - Writers, mostly as an ordinary role, commit rows into a plain stream
#   with a time column ("ev") and a partitioned one ("pv"): single
#   inserts; SET CONSTRAINTS ALL IMMEDIATE and then more rows (the writer
#   opened early); an outbox table whose deferred trigger inserts into the
#   stream at commit; a deferred user trigger on the stream; savepoints
#   rolled back and released; more than 64 subtransactions with xids.
# - A reader, as the ordinary role, pages below the horizon with page()
#   and records what it saw.
# - One session runs rounds of random DDL: CREATE INDEX CONCURRENTLY,
#   REINDEX INDEX CONCURRENTLY and DROP INDEX CONCURRENTLY on the stream
#   column, the time column, partial indexes and other columns (of the
#   plain stream and of a partition), ATTACH and DETACH PARTITION, ALTER
#   TABLE ADD/DROP COLUMN; PREPARE TRANSACTION of a transaction that wrote
#   stream rows (refused, 0A000) and of one that did not (fine).  After
#   each round: amcheck (heapallindexed) over the database, and every
#   index-scan query returns what a sequential scan returns, under one
#   snapshot.
#
# At the end the reader skipped no row below its cursor, and every
# committed row has a number, once.  Bounded: at most $max_rounds rounds
# and $duration seconds of writes.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use StreamSeqTest;

my $duration = 40;      # seconds of write load
my $max_rounds = 40;    # DDL rounds, at most

my $node = new_node('primary',
	"max_prepared_transactions = 5\nautovacuum = off\n");
$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE EXTENSION amcheck;
CREATE ROLE app LOGIN;
GRANT USAGE ON SCHEMA stream_seq TO app;
CREATE TABLE ev (id bigserial PRIMARY KEY, k int NOT NULL, payload text,
                 seq bigint, at timestamptz);
SELECT stream_seq.enable('ev', 'seq', 'at');
CREATE TABLE pv (id bigserial, k int NOT NULL, payload text, seq bigint,
                 PRIMARY KEY (id, k)) PARTITION BY LIST (k);
CREATE TABLE pv_1 PARTITION OF pv FOR VALUES IN (1, 2);
CREATE TABLE pv_2 PARTITION OF pv FOR VALUES IN (3, 4);
SELECT stream_seq.enable('pv');
CREATE TABLE outbox (k int);
CREATE FUNCTION outbox_flush() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO ev (k, payload) VALUES (NEW.k, 'outbox');
	RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER outbox_flush AFTER INSERT ON outbox
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION outbox_flush();
CREATE TABLE audit (ev_id bigint);
CREATE FUNCTION audit_ev() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO audit VALUES (NEW.id);
	RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER audit_ev AFTER INSERT ON ev
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION audit_ev();
CREATE TABLE seen (seq bigint);
CREATE TABLE cursor_pos (pos bigint);
INSERT INTO cursor_pos VALUES (0);
CREATE TABLE two_phase (x int);
GRANT SELECT, INSERT ON ev, pv, outbox, audit, seen, two_phase TO app;
GRANT SELECT, UPDATE ON cursor_pos TO app;
GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO app;
});

my $writer_sql = q{
\set shape random(1, 7)
\set k random(1, 4)
\if :shape = 1
INSERT INTO ev (k, payload) VALUES (:k, 'plain');
\elif :shape = 2
BEGIN;
INSERT INTO ev (k, payload) VALUES (:k, 'early');
SET CONSTRAINTS ALL IMMEDIATE;
SET CONSTRAINTS ALL DEFERRED;
SELECT pg_sleep(random() * 0.3);
INSERT INTO ev (k, payload) VALUES (:k, 'late'), (:k, 'late');
INSERT INTO outbox VALUES (:k);
COMMIT;
\elif :shape = 3
BEGIN;
INSERT INTO outbox VALUES (:k), (:k);
COMMIT;
\elif :shape = 4
BEGIN;
INSERT INTO ev (k, payload) VALUES (:k, 'sp');
SAVEPOINT a;
INSERT INTO ev (k, payload) VALUES (:k, 'gone');
ROLLBACK TO a;
SAVEPOINT b;
INSERT INTO ev (k, payload) VALUES (:k, 'kept');
RELEASE b;
COMMIT;
\elif :shape = 5
DO $$ BEGIN FOR i IN 1..70 LOOP BEGIN INSERT INTO ev (k, payload) VALUES (1, 'sub'); IF i % 7 = 0 THEN RAISE EXCEPTION 'undo'; END IF; EXCEPTION WHEN raise_exception THEN NULL; END; END LOOP; END $$;
\elif :shape = 6
BEGIN;
INSERT INTO pv (k, payload) VALUES (:k, 'early');
SET CONSTRAINTS ALL IMMEDIATE;
SET CONSTRAINTS ALL DEFERRED;
SELECT pg_sleep(random() * 0.3);
INSERT INTO pv (k, payload) VALUES (:k, 'late'), (:k, 'late');
COMMIT;
\else
INSERT INTO pv (k, payload) VALUES (:k, 'plain');
\endif
};
my $reader_sql = q{
BEGIN;
INSERT INTO seen SELECT seq FROM stream_seq.page('ev', (SELECT pos FROM cursor_pos), 500);
UPDATE cursor_pos SET pos = coalesce((SELECT max(seq) FROM seen), 0);
COMMIT;
};
my $dir = PostgreSQL::Test::Utils::tempdir;
open my $fh, '>', "$dir/writer.sql" or die;
print $fh $writer_sql;
close $fh;
open $fh, '>', "$dir/reader.sql" or die;
print $fh $reader_sql;
close $fh;

my @jobs = (
	bg_pgbench($node, undef, '-U', 'app', '-c', '2', '-T', $duration,
		'--max-tries=10', '-f', "$dir/writer.sql"),
	bg_pgbench($node, undef, '-c', '1', '-T', $duration, '--max-tries=10',
		'-f', "$dir/writer.sql"),
	bg_pgbench($node, undef, '-U', 'app', '-c', '1', '-T', $duration,
		'-R', '20', '-f', "$dir/reader.sql"));

# What a round may do; each returns the SQL to run (one statement each,
# CONCURRENTLY cannot run in a transaction block).
my $n = 0;
my %extra;    # the extra indexes that exist: name => 1
my @create = (
	[ 'ev', '(seq)' ], [ 'ev', '(at)' ], [ 'ev', '(seq) WHERE k > 1' ],
	[ 'ev', '(at) WHERE payload <> \'x\'' ], [ 'ev', '(k, seq)' ],
	[ 'ev', '(payload)' ], [ 'pv_1', '(seq)' ], [ 'pv_2', '(seq) WHERE k = 3' ]);
my $attached = 0;
my $columns = 0;
my %failed;
my $rounds = 0;
my $start = time();
my @plan;

while ($rounds < $max_rounds && time() - $start < $duration - 3)
{
	my $pick = int(rand(6));
	my @sql;
	if ($pick <= 1 || !%extra)
	{
		my ($tab, $def) = @{ $create[ int(rand(@create)) ] };
		my $name = "${tab}_x" . $n++;
		@sql = ("CREATE INDEX CONCURRENTLY $name ON $tab $def");
		$extra{$name} = 1;
	}
	elsif ($pick == 2)
	{
		my @names = sort keys %extra;
		my $name = $names[ int(rand(@names)) ];
		@sql = ("REINDEX INDEX CONCURRENTLY $name");
	}
	elsif ($pick == 3)
	{
		my @names = sort keys %extra;
		my $name = $names[ int(rand(@names)) ];
		@sql = ("DROP INDEX CONCURRENTLY $name");
		delete $extra{$name};
	}
	elsif ($pick == 4)
	{
		if ($attached)
		{
			@sql = ("ALTER TABLE pv DETACH PARTITION pv_extra",
				"DROP TABLE pv_extra");
		}
		else
		{
			@sql = (
				"CREATE TABLE pv_extra (LIKE pv)",
				"ALTER TABLE pv ATTACH PARTITION pv_extra FOR VALUES IN (100)");
		}
		$attached = !$attached;
	}
	else
	{
		$columns++;
		@sql = $columns % 2
		  ? ("ALTER TABLE ev ADD COLUMN extra_$columns int")
		  : ("ALTER TABLE ev DROP COLUMN extra_" . ($columns - 1));
	}
	for my $stmt (@sql)
	{
		my $r = try_sql($node, $stmt);
		if ($r ne 'ok')
		{
			$failed{$stmt} = $r;
			# a CONCURRENTLY that failed leaves an invalid index behind
			$node->psql('postgres', q{
DO $$ DECLARE i regclass; BEGIN
  FOR i IN SELECT indexrelid FROM pg_index WHERE NOT indisvalid LOOP
    EXECUTE format('DROP INDEX %s', i);
  END LOOP; END $$});
		}
	}

	# two-phase commit: refused once the transaction wrote stream rows,
	# fine when it did not
	my $r = psql_result($node, qq{
SET ROLE app;
BEGIN;
INSERT INTO ev (k, payload) VALUES (1, '2pc');
PREPARE TRANSACTION 'with_rows_$rounds';});
	push @plan, "2pc with stream rows: " . ($r->{sqlstate} // 'none');
	is( try_sql($node, qq{
BEGIN; INSERT INTO two_phase VALUES ($rounds);
PREPARE TRANSACTION 'no_rows_$rounds';
COMMIT PREPARED 'no_rows_$rounds';}),
		'ok', "round $rounds: a two-phase transaction without stream rows commits");

	is(amcheck_problems($node), '', "round $rounds (@sql): amcheck finds nothing");
	is( val($node, q{
BEGIN ISOLATION LEVEL REPEATABLE READ;
CREATE TEMP TABLE q (sql text);
INSERT INTO q VALUES
 ('SELECT string_agg(id::text, '','' ORDER BY id) FROM ev WHERE seq > 0'),
 ('SELECT string_agg(id::text, '','' ORDER BY id) FROM ev WHERE seq IS NULL'),
 ('SELECT string_agg(id::text, '','' ORDER BY id) FROM ev WHERE at > ''-infinity'''),
 ('SELECT string_agg(id::text, '','' ORDER BY id) FROM ev WHERE seq > 0 AND k > 1'),
 ('SELECT string_agg(id::text, '','' ORDER BY id) FROM ev WHERE at > ''-infinity'' AND payload <> ''x'''),
 ('SELECT string_agg(id::text, '','' ORDER BY id) FROM pv WHERE seq > 0'),
 ('SELECT string_agg(id::text, '','' ORDER BY id) FROM pv WHERE seq > 0 AND k = 3');
CREATE FUNCTION pg_temp.differ() RETURNS text LANGUAGE plpgsql AS $$
DECLARE s text; a text; b text; bad text := '';
BEGIN
  FOR s IN SELECT sql FROM q LOOP
    PERFORM set_config('enable_seqscan', 'off', true);
    PERFORM set_config('enable_bitmapscan', 'off', true);
    EXECUTE s INTO a;
    PERFORM set_config('enable_seqscan', 'on', true);
    PERFORM set_config('enable_bitmapscan', 'on', true);
    PERFORM set_config('enable_indexscan', 'off', true);
    PERFORM set_config('enable_indexonlyscan', 'off', true);
    EXECUTE s INTO b;
    PERFORM set_config('enable_indexscan', 'on', true);
    PERFORM set_config('enable_indexonlyscan', 'on', true);
    IF a IS DISTINCT FROM b THEN bad := bad || s || '; '; END IF;
  END LOOP;
  RETURN bad;
END $$;
SELECT pg_temp.differ();
COMMIT;}), '', "round $rounds: index scans return what sequential scans do");
	$rounds++;
}

for my $job (@jobs)
{
	is(wait_done($job, $duration + 60), 0, 'pgbench finished without errors')
	  or diag ${ $job->{err} };
}
is(join(', ', map { "$_: $failed{$_}" } sort keys %failed), '',
	'every DDL statement succeeded');
is_deeply([ sort { $a cmp $b } keys %{ { map { $_ => 1 } @plan } } ],
	['2pc with stream rows: 0A000'],
	'PREPARE TRANSACTION after stream rows is refused (0A000)');
is($node->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'), '0',
	'no prepared transaction is left');

# a last page, then: no row below the cursor was skipped
$node->safe_psql('postgres', $reader_sql) for 1 .. 3;
my ($skipped, $cursor) = row($node, q{
SELECT (SELECT count(*) FROM (SELECT seq FROM ev WHERE seq <= (SELECT pos FROM cursor_pos)
                               EXCEPT SELECT seq FROM seen) missing),
       (SELECT pos FROM cursor_pos)});
is($skipped, 0, "the reader skipped no row below its cursor $cursor");
cmp_ok($cursor, '>', 0, 'the reader read rows');
is($node->safe_psql('postgres', 'SELECT count(*) - count(DISTINCT seq) FROM seen'),
	'0', 'the reader saw no number twice');
check_unique($node, 'ev', 'after the DDL');
check_unique($node, 'pv', 'after the DDL');
is(amcheck_problems($node), '', 'amcheck finds nothing at the end');
note "rounds: $rounds; rows: "
  . $node->safe_psql('postgres', 'SELECT (SELECT count(*) FROM ev) || \' + \' || (SELECT count(*) FROM pv)');

$node->stop;
done_testing();
