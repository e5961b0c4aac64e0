
# Copyright (c) stream_seq contributors
#
# 002_stress.pl: under adversarial concurrent writers and DDL, every reader
# paging
#
#   WHERE seq > $cursor AND seq < stream_seq.horizon('tN') ORDER BY seq LIMIT 100
#
# (or reading all of "seq > $cursor AND seq < horizon" through a cursor)
# reads every committed row of every stream exactly once, in strictly
# increasing order, no server process crashes, and afterwards amcheck
# finds every index in agreement with its heap (the commit-time writes are
# heap-only where they can be).
#
# The run is done twice, each in its own cluster: once with the writers'
# commits synchronous, once with synchronous_commit = off (the horizon then
# also waits for the commit records to be flushed).  In each run:
#
# - Ten stream tables t1..t10 are written, so that a reader going round all
#   of them needs horizons for more streams and snapshots in one transaction
#   than a small per-backend cache would hold.  Three of them (t2, t9, t10)
#   are partitioned (by hash of id, three partitions each): a transaction's
#   rows go to several partitions, numbered from the stream's one counter.  Eight pgbench clients run
#   short random transactions of 1-5 rows into a random table, most
#   sleeping a few ms before COMMIT, some ending in ROLLBACK.  Some write a
#   second statement or a second table; some roll back a savepoint; some
#   release savepoints, keeping subtransactions with xids until COMMIT;
#   some run a PL/pgSQL loop of 80 EXCEPTION blocks that insert (some into
#   the stream), every tenth rolled back, so that more than 64
#   subtransactions with xids are open: snapshots taken meanwhile are
#   suboverflowed, and their copies carry no subxip array even when other
#   sessions' subtransaction xids are counted in them.  Every
#   (sub)transaction writes the same rows to the plain bigserial table "p".
#
# - One more pgbench client repeatedly runs stream_seq.disable('t1') or
#   DROP TABLE t2 (or both) inside a SAVEPOINT, holds it a few ms, rolls it
#   back with ROLLBACK TO SAVEPOINT, writes to the table and commits, while
#   the others write and read those tables.  A rolled-back disable or drop
#   must leave the stream fully working.
#
# - Four stream readers go round all ten tables: one READ COMMITTED; one
#   REPEATABLE READ that reads a page of every table with one snapshot,
#   taken 2 ms before the first horizon call; one READ COMMITTED with index
#   scans disabled, so that "seq < horizon()" is a filter of a sequential
#   scan and evaluated per row; and one that opens a cursor (DECLARE ...
#   CURSOR) on every table at once, sequential scans without ORDER BY, and
#   FETCHes one row at a time from each in turn, so that horizon() is
#   evaluated per row over many FETCHes of a statement while other
#   statements compute other horizons in between.  The horizon must keep
#   one value for each statement.  A fifth reader pages "p" by id, the
#   usual recipe, and the rows it missed are reported (not asserted: it is
#   timing dependent) to show what the streams prevent.
#
# - The list of tracked transactions is kept small and, for a few seconds
#   in the middle of the run, a REPEATABLE READ snapshot holds back the
#   oldest xmin so entries cannot be pruned: the lists fill up and entries
#   are evicted or folded into the conservative floor (shmem.c) while the
#   readers run.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use StreamSeqTest;

my $duration = 10;    # seconds of write load in each run
my $ntables = 10;
my @tables = map { "t$_" } 1 .. $ntables;
my $tables_sql = 'ARRAY[' . join(', ', map { "'$_'" } @tables) . ']';

# Transactions a finished pgbench reports.
sub pgbench_xacts
{
	my ($job) = @_;
	my ($n) = ${ $job->{out} } =~ /number of transactions actually processed: (\d+)/;
	return $n // 0;
}

# The schema, the readers and the writers' helper, in a fresh database.
my $setup = q{
CREATE EXTENSION stream_seq;
DO $$
BEGIN
    FOR i IN 1 .. %NTABLES% LOOP
        IF i IN (2, 9, 10) THEN
            -- partitioned streams: rows of one transaction go to several
            -- partitions; t2 is also the one dropped and restored
            EXECUTE format('CREATE TABLE %I (id bigserial PRIMARY KEY, payload text)
                            PARTITION BY HASH (id)', 't' || i);
            FOR j IN 0 .. 2 LOOP
                EXECUTE format('CREATE TABLE %I PARTITION OF %I
                                FOR VALUES WITH (MODULUS 3, REMAINDER %s)',
                               't' || i || '_' || j, 't' || i, j);
            END LOOP;
        ELSE
            EXECUTE format('CREATE TABLE %I (id bigserial PRIMARY KEY, payload text)', 't' || i);
        END IF;
        PERFORM stream_seq.enable(('t' || i)::regclass);
    END LOOP;
END;
$$;
CREATE TABLE p (id bigserial PRIMARY KEY, payload text);

CREATE TABLE control (writers_done boolean NOT NULL);
INSERT INTO control VALUES (false);
-- what each reader read, in the order it read it (the cursor reader: in
-- number order within each transaction)
CREATE TABLE seen (reader text, ord bigint, tbl text NOT NULL,
                   seq bigint NOT NULL, id bigint NOT NULL,
                   iso text DEFAULT current_setting('transaction_isolation'),
                   PRIMARY KEY (reader, ord));
CREATE TABLE seen_p (ord bigint PRIMARY KEY, id bigint NOT NULL);

-- A writer's transaction with more than 64 subtransactions that have
-- xids: 80 EXCEPTION blocks, each inserting a row into "scratch" (which
-- gives it an xid), every fourth also into stream table t<k> and into p;
-- every tenth block is rolled back, 72 stay.
CREATE TABLE scratch (i int);
CREATE FUNCTION write_many(k int) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    FOR i IN 1 .. 80 LOOP
        BEGIN
            INSERT INTO scratch VALUES (i);
            IF i % 4 = 0 THEN
                EXECUTE format('INSERT INTO %I (payload) VALUES ($1)', 't' || k)
                  USING 'sub ' || i;
                INSERT INTO p (payload) VALUES ('sub ' || i);
            END IF;
            IF i % 10 = 0 THEN
                RAISE EXCEPTION 'undo' USING ERRCODE = 'SQ001';
            END IF;
        EXCEPTION WHEN SQLSTATE 'SQ001' THEN
            NULL;
        END;
    END LOOP;
END;
$$;

-- Whether the reader is done with "tbl": the writers had finished when the
-- calling transaction started ("done"), no row beyond the cursor exists
-- and the horizon is idle.
CREATE FUNCTION drained(tbl text, cur bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    result boolean;
BEGIN
    EXECUTE format('SELECT NOT EXISTS (SELECT FROM %I WHERE seq > $1)
                           AND stream_seq.horizon(%L) = coalesce(stream_seq.head(%L), 0) + 1',
                   tbl, tbl, tbl)
      INTO result USING cur;
    RETURN result;
END;
$$;

-- Page through every table in "tables", a page of at most 100 rows from
-- each in turn, until the writers are done and nothing is left to read
-- (or a deadline passes).  Under READ COMMITTED every page is its own
-- transaction; under REPEATABLE READ one snapshot serves a page of every
-- table, and "nap" sleeps between taking it and the first page query, so
-- that the pages are read with a snapshot older than the horizon
-- computations.
CREATE PROCEDURE read_streams(reader text, tables text[], nap float8,
                              give_up_after interval)
LANGUAGE plpgsql AS $$
DECLARE
    nt int := cardinality(tables);
    cur bigint[] := array_fill(0::bigint, ARRAY[nt]);
    k bigint := 0;
    n int;
    r record;
    done boolean;
    done_since timestamptz;
    finished boolean;
BEGIN
    LOOP
        SELECT writers_done INTO done FROM control;
        IF nap > 0 THEN
            PERFORM pg_sleep(nap);
        END IF;
        n := 0;
        FOR i IN 1 .. nt LOOP
            FOR r IN EXECUTE format(
                'SELECT seq, id FROM %I
                  WHERE seq > $1 AND seq < stream_seq.horizon(%L)
                  ORDER BY seq LIMIT 100', tables[i], tables[i]) USING cur[i]
            LOOP
                k := k + 1;
                INSERT INTO seen (reader, ord, tbl, seq, id)
                  VALUES (reader, k, tables[i], r.seq, r.id);
                cur[i] := r.seq;
                n := n + 1;
            END LOOP;
            IF current_setting('transaction_isolation') = 'read committed' THEN
                COMMIT;
            END IF;
        END LOOP;
        IF n = 0 AND done THEN
            finished := true;
            FOR i IN 1 .. nt LOOP
                finished := finished AND drained(tables[i], cur[i]);
            END LOOP;
        END IF;
        COMMIT;
        IF n = 0 THEN
            IF done THEN
                EXIT WHEN finished;
                done_since := coalesce(done_since, clock_timestamp());
                IF clock_timestamp() - done_since > give_up_after THEN
                    RAISE WARNING '% stream reader gave up at cursors %', reader, cur;
                    EXIT;
                END IF;
            END IF;
            PERFORM pg_sleep(0.001);
            COMMIT;
        END IF;
    END LOOP;
END;
$$;

-- Read through cursors: in each transaction, DECLARE a cursor on every
-- table at once for all rows beyond the reader's position in it and below
-- the horizon, in no particular order, then FETCH one row from each open
-- cursor in turn until all are exhausted.  Each FETCH continues its
-- statement, after horizon() calls for the other cursors' statements and
-- for a statement of its own that computes every table's horizon.  The
-- rows are recorded in number order per table, and the reader's position
-- in each table moves to the highest number read there: safe only if the
-- statement returned every row below it.
CREATE PROCEDURE read_cursors(reader text, tables text[],
                              give_up_after interval)
LANGUAGE plpgsql AS $$
DECLARE
    nt int := cardinality(tables);
    cur bigint[] := array_fill(0::bigint, ARRAY[nt]);
    is_open boolean[];
    got_tbl text[];
    got_seq bigint[];
    got_id bigint[];
    k bigint := 0;
    n int;
    top bigint;
    c refcursor;
    r record;
    more boolean;
    done boolean;
    done_since timestamptz;
    finished boolean;
BEGIN
    LOOP
        SELECT writers_done INTO done FROM control;
        FOR i IN 1 .. nt LOOP
            EXECUTE format(
                'DECLARE %I NO SCROLL CURSOR FOR
                 SELECT seq, id FROM %I
                  WHERE seq > %s AND seq < stream_seq.horizon(%L)',
                reader || '_' || i, tables[i], cur[i], tables[i]);
        END LOOP;
        is_open := array_fill(true, ARRAY[nt]);
        got_tbl := '{}';
        got_seq := '{}';
        got_id := '{}';
        LOOP
            more := false;
            FOR i IN 1 .. nt LOOP
                CONTINUE WHEN NOT is_open[i];
                c := reader || '_' || i;
                FETCH c INTO r;
                IF FOUND THEN
                    got_tbl := got_tbl || tables[i];
                    got_seq := got_seq || r.seq;
                    got_id := got_id || r.id;
                    more := true;
                ELSE
                    CLOSE c;
                    is_open[i] := false;
                END IF;
            END LOOP;
            EXIT WHEN NOT more;
            -- horizons of every table for yet another snapshot, between
            -- two FETCHes of each cursor
            PERFORM stream_seq.horizon(u::regclass) FROM unnest(tables) AS u;
        END LOOP;
        n := cardinality(got_seq);
        INSERT INTO seen (reader, ord, tbl, seq, id)
          SELECT reader, k + row_number() OVER (ORDER BY u.tbl, u.seq), u.tbl, u.seq, u.id
            FROM unnest(got_tbl, got_seq, got_id) AS u(tbl, seq, id);
        k := k + n;
        FOR i IN 1 .. nt LOOP
            SELECT max(u.seq) INTO top
              FROM unnest(got_tbl, got_seq) AS u(tbl, seq)
             WHERE u.tbl = tables[i];
            cur[i] := greatest(cur[i], top);
        END LOOP;
        IF n = 0 AND done THEN
            finished := true;
            FOR i IN 1 .. nt LOOP
                finished := finished AND drained(tables[i], cur[i]);
            END LOOP;
        END IF;
        COMMIT;
        IF n = 0 THEN
            IF done THEN
                EXIT WHEN finished;
                done_since := coalesce(done_since, clock_timestamp());
                IF clock_timestamp() - done_since > give_up_after THEN
                    RAISE WARNING '% stream reader gave up at cursors %', reader, cur;
                    EXIT;
                END IF;
            END IF;
            PERFORM pg_sleep(0.001);
            COMMIT;
        END IF;
    END LOOP;
END;
$$;

-- The same reader on the bigserial table, paging by id.
CREATE PROCEDURE read_plain()
LANGUAGE plpgsql AS $$
DECLARE
    cur bigint := 0;
    k bigint := 0;
    n int;
    r record;
    done boolean;
BEGIN
    LOOP
        SELECT writers_done INTO done FROM control;
        n := 0;
        FOR r IN SELECT id FROM p WHERE id > cur ORDER BY id LIMIT 100
        LOOP
            k := k + 1;
            INSERT INTO seen_p VALUES (k, r.id);
            cur := r.id;
            n := n + 1;
        END LOOP;
        COMMIT;
        IF n = 0 THEN
            EXIT WHEN done;
            PERFORM pg_sleep(0.001);
        END IF;
    END LOOP;
END;
$$;
};
$setup =~ s/%NTABLES%/$ntables/g;

# The writers.  Every branch writes the same rows to a stream table and to
# p in the same (sub)transaction, so that p ends with as many committed
# rows as all stream tables together.  "k" and "j" pick the tables.
my $writer_sql = qq{
\\set k random(1, $ntables)
\\set j random(1, $ntables)
} . q{
\set n random(1, 5)
\set nap random(0, 4000)
\set outcome random(1, 10)
\set shape random(1, 8)
BEGIN;
INSERT INTO p (payload) SELECT 'w' FROM generate_series(1, :n);
INSERT INTO t:k (payload) SELECT 'w' FROM generate_series(1, :n);
\if :shape = 1
-- a second statement after a pause
\sleep :nap us
INSERT INTO p (payload) VALUES ('second statement');
INSERT INTO t:k (payload) VALUES ('second statement');
\elif :shape = 2
-- a rolled-back savepoint
SAVEPOINT s;
INSERT INTO p (payload) SELECT 'undone' FROM generate_series(1, :n);
INSERT INTO t:k (payload) SELECT 'undone' FROM generate_series(1, :n);
ROLLBACK TO SAVEPOINT s;
\elif :shape = 3
-- subtransactions with xids kept until COMMIT, one nested rolled back
SAVEPOINT a;
INSERT INTO p (payload) VALUES ('kept savepoint');
INSERT INTO t:j (payload) VALUES ('kept savepoint');
SAVEPOINT b;
INSERT INTO p (payload) VALUES ('undone');
INSERT INTO t:k (payload) VALUES ('undone');
ROLLBACK TO SAVEPOINT b;
SAVEPOINT c;
INSERT INTO p (payload) VALUES ('kept savepoint');
INSERT INTO t:k (payload) VALUES ('kept savepoint');
RELEASE SAVEPOINT a;
\elif :shape = 4
-- more than 64 subtransactions with xids
SELECT write_many(:k);
\elif :shape = 5
-- a second stream table
INSERT INTO p (payload) SELECT 'second table' FROM generate_series(1, :n);
INSERT INTO t:j (payload) SELECT 'second table' FROM generate_series(1, :n);
\endif
\if :nap < 3000
\sleep :nap us
\endif
\if :outcome = 1
ROLLBACK;
\else
COMMIT;
\endif
};

# The DDL that must change nothing: disable t1, drop t2, or both, each in
# a savepoint rolled back after a few ms; then the same transaction writes
# to the table and commits.
my $ddl_sql = q{
\sleep 150 ms
\set what random(1, 3)
BEGIN;
\if :what != 2
SAVEPOINT d;
SELECT stream_seq.disable('t1');
\sleep 5 ms
ROLLBACK TO SAVEPOINT d;
INSERT INTO p (payload) VALUES ('after disable');
INSERT INTO t1 (payload) VALUES ('after disable');
\endif
\if :what != 1
SAVEPOINT d;
DROP TABLE t2;
\sleep 5 ms
ROLLBACK TO SAVEPOINT d;
INSERT INTO p (payload) VALUES ('after drop');
INSERT INTO t2 (payload) VALUES ('after drop');
\endif
COMMIT;
};

# One run in a fresh cluster; "label" names it, "writer_options" are the
# writers' session settings, which give them "writer_sync" as their
# synchronous_commit.
sub run_phase
{
	my ($label, $writer_options, $writer_sync) = @_;

	my $node = new_node("stress_$label", q{
max_connections = 30
stream_seq.max_tracked_xacts = 16
});
	$node->safe_psql('postgres', $setup);
	{
		local $ENV{PGOPTIONS} = $writer_options;
		is($node->safe_psql('postgres', 'SHOW synchronous_commit'),
			$writer_sync, "$label: writers run with synchronous_commit = $writer_sync");
	}

	my $writer_script = $node->basedir . '/writer.sql';
	my $ddl_script = $node->basedir . '/ddl.sql';
	append_to_file($writer_script, $writer_sql);
	append_to_file($ddl_script, $ddl_sql);

	# The readers that filter with a sequential scan do evaluate horizon()
	# per row.
	my $seqscan = 'SET enable_indexscan = off; SET enable_bitmapscan = off; ';
	my $plan = $node->safe_psql('postgres', $seqscan . q{
EXPLAIN (COSTS OFF) SELECT seq, id FROM t3
 WHERE seq > 5 AND seq < stream_seq.horizon('t3') ORDER BY seq LIMIT 100});
	like($plan, qr/Seq Scan on t3\s+Filter: .*horizon/,
		"$label: with index scans off, horizon() filters a sequential scan");

	my %readers = (
		rc => bg_psql($node,
			"CALL read_streams('rc', $tables_sql, 0, '15 seconds')"),
		rr => bg_psql($node,
			"SET default_transaction_isolation = 'repeatable read'",
			"CALL read_streams('rr', $tables_sql, 0.002, '15 seconds')"),
		rc_seqscan => bg_psql($node,
			'SET enable_indexscan = off', 'SET enable_bitmapscan = off',
			"CALL read_streams('rc_seqscan', $tables_sql, 0, '15 seconds')"),
		cursor => bg_psql($node,
			'SET enable_indexscan = off', 'SET enable_bitmapscan = off',
			"CALL read_cursors('cursor', $tables_sql, '15 seconds')"));
	my $reader_p = bg_psql($node, 'CALL read_plain()');

	my $start = time();
	my $writers = bg_pgbench($node, $writer_options,
		'-c', '8', '-j', '4', '-T', $duration, '-f', $writer_script);
	my $ddl = bg_pgbench($node, $writer_options,
		'-c', '1', '-T', $duration, '-f', $ddl_script);

	# Hold an old snapshot for a while in the middle of the run: nothing
	# can be pruned meanwhile, so the tracked lists overflow.  It reads a
	# table the DDL leaves alone: a lock held on t1 or t2 for seconds would
	# queue the DDL, and everyone behind it.
	usleep(3_000_000);
	my $holder = bg_psql($node,
		'BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM t3; '
		  . 'SELECT pg_sleep(4); COMMIT;');

	my $holder_rc = wait_done($holder, 60);
	my $writers_rc = wait_done($writers, $duration + 60);
	my $ddl_rc = wait_done($ddl, $duration + 60);
	my $elapsed = time() - $start;
	my $up = $node->psql('postgres', 'UPDATE control SET writers_done = true') == 0;
	my %reader_rc = map { $_ => wait_done($readers{$_}, 60) } keys %readers;
	my $reader_p_rc = wait_done($reader_p, 60);

	# No crash first: everything else fails after one.  A crashed server is
	# down (restart_after_crash is off in TAP clusters).
	my $log = slurp_file($node->logfile);
	my @crashes = $log =~
	  /^.*(?:terminated by signal|terminated by exception|server process \(PID \d+\) exited|PANIC:).*$/mg;
	is(scalar(@crashes), 0, "$label: no server process crashed")
	  or diag join("\n", @crashes);
	$up &&= $node->psql('postgres', 'SELECT 1') == 0;
	ok($up, "$label: server still running after the load");
	if (!$up)
	{
		$node->stop('immediate', fail_ok => 1);
		return;
	}

	is($holder_rc, 0, "$label: snapshot holder finished")
	  or diag ${ $holder->{err} };
	is($writers_rc, 0, "$label: pgbench writers ran cleanly")
	  or diag ${ $writers->{err} };
	is($ddl_rc, 0, "$label: rolled-back disable and drop ran cleanly")
	  or diag ${ $ddl->{err} };
	my $ddl_xacts = pgbench_xacts($ddl);
	cmp_ok($ddl_xacts, '>=', 5,
		"$label: disable and drop were rolled back repeatedly ($ddl_xacts times)");
	note "$label: writer transactions: " . pgbench_xacts($writers) . ' in '
	  . sprintf('%.1f', $elapsed) . ' s';
	for my $name (sort keys %readers)
	{
		my $r = $readers{$name};
		is($reader_rc{$name}, 0, "$label: $name stream reader finished")
		  or diag ${ $r->{err} };
		unlike(${ $r->{err} }, qr/gave up/, "$label: $name stream reader did not give up");
	}
	is($reader_p_rc, 0, "$label: bigserial reader finished")
	  or diag ${ $reader_p->{err} };

	$node->safe_psql('postgres',
		'CREATE VIEW all_t AS '
		  . join(' UNION ALL ',
			map { "SELECT '$_'::text AS tbl, id, seq, payload FROM $_" } @tables));

	# The stream tables: committed rows, all numbered, numbers unique.
	my ($committed, $numbered, $dups, $many) = row($node, q{
SELECT count(*), count(seq), count(seq) - count(DISTINCT (tbl, seq)),
       count(*) FILTER (WHERE payload LIKE 'sub %')
  FROM all_t});
	cmp_ok($committed, '>', 1000, "$label: writers committed rows");
	cmp_ok($many, '>', 0,
		"$label: transactions with more than 64 subtransactions committed rows");
	is($numbered, $committed, "$label: every committed row has a number");
	is($dups, 0, "$label: no number is used twice in any stream");
	my ($committed_p) = row($node, 'SELECT count(*) FROM p');
	is($committed_p, $committed,
		"$label: p holds as many committed rows as all streams together");
	my ($tables_used) = row($node,
		q{SELECT count(DISTINCT tbl) FROM all_t WHERE seq IS NOT NULL});
	is($tables_used, $ntables, "$label: every stream table was written");

	# What each stream reader read.
	my %figures;
	for my $name (sort keys %readers)
	{
		my ($read, $twice, $missed, $bogus, $out_of_order) = row($node, qq{
WITH s AS MATERIALIZED (SELECT * FROM seen WHERE reader = '$name')
SELECT (SELECT count(*) FROM s),
       (SELECT count(*) - count(DISTINCT (tbl, seq)) FROM s),
       (SELECT count(*) FROM all_t t
         WHERE NOT EXISTS (SELECT FROM s
                            WHERE s.tbl = t.tbl AND s.id = t.id AND s.seq = t.seq)),
       (SELECT count(*) FROM s
         WHERE NOT EXISTS (SELECT FROM all_t t
                            WHERE t.tbl = s.tbl AND t.id = s.id AND t.seq = s.seq)),
       (SELECT count(*)
          FROM (SELECT seq, lag(seq) OVER (PARTITION BY tbl ORDER BY ord) AS prev
                  FROM s) o
         WHERE seq <= prev)});

		is($missed, 0, "$label: $name stream reader missed no committed row")
		  or diag "$label: $name stream reader missed, by table: "
		  . $node->safe_psql('postgres', qq{
SELECT string_agg(tbl || ': ' || n, ', ' ORDER BY tbl)
  FROM (SELECT tbl, count(*) AS n FROM all_t t
         WHERE NOT EXISTS (SELECT FROM seen s
                            WHERE s.reader = '$name' AND s.tbl = t.tbl
                              AND s.id = t.id AND s.seq = t.seq)
         GROUP BY tbl) m});
		is($twice, 0, "$label: $name stream reader read no row twice");
		is($bogus, 0,
			"$label: $name stream reader read only committed rows, with their final numbers");
		is($read, $committed,
			"$label: $name stream reader read every committed row exactly once");
		is($out_of_order, 0,
			"$label: $name stream reader read each table's numbers in strictly increasing order");
		$figures{$name} = [ $read, $missed ];
	}
	is( $node->safe_psql('postgres',
			"SELECT string_agg(DISTINCT reader || ':' || iso, ',') FROM seen"),
		'cursor:read committed,rc:read committed,rc_seqscan:read committed,'
		  . 'rr:repeatable read',
		"$label: readers ran at the intended isolation levels");

	# Every stream is idle and still a stream, t1 and t2 included after
	# their rolled-back disable and drop: new rows get numbers above all.
	is( $node->safe_psql('postgres', qq{
SELECT coalesce(string_agg(tbl, ', '), 'none') FROM unnest($tables_sql) AS tbl
 WHERE stream_seq.horizon(tbl::regclass) <> stream_seq.head(tbl::regclass) + 1}),
		'none', "$label: idle horizon is head + 1 in every stream after the run");
	for my $tab ('t1', 't2')
	{
		$node->safe_psql('postgres',
			"INSERT INTO $tab (payload) VALUES ('after the run')");
		my ($listed, $above) = row($node, qq{
SELECT (SELECT count(*) FROM stream_seq.streams WHERE stream = '$tab'::regclass),
       (SELECT seq > (SELECT max(seq) FROM $tab WHERE payload <> 'after the run')
          FROM $tab WHERE payload = 'after the run')});
		is($listed, 1, "$label: $tab is still a stream after rolled-back DDL");
		is($node->safe_psql('postgres', "SELECT stream_seq.first('$tab')"), '1',
			"$label: $tab starts at 1: no rolled-back drop of it or of its partitions recorded a trim");
		is($above, 't', "$label: $tab numbers new rows after rolled-back DDL");
	}

	# The commit-time writes, heap-only or not, left every index in
	# agreement with its heap.
	is(amcheck_problems($node), '',
		"$label: amcheck finds every index and heap sound after the run");

	my ($evicted, $assigned) = row($node, q{
SELECT sum(evicted), sum(assigned_xacts) FROM stream_seq.streams});
	diag "$label: $assigned transactions assigned numbers, $evicted entries evicted";

	# The control: what paging a bigserial table by id misses.
	my ($read_p) = row($node, 'SELECT count(DISTINCT id) FROM seen_p');
	my ($missed_p) = row($node,
		'SELECT count(*) FROM p WHERE NOT EXISTS (SELECT FROM seen_p s WHERE s.id = p.id)');
	my ($dup_p) = row($node, 'SELECT count(*) - count(DISTINCT id) FROM seen_p');
	is($dup_p, 0, "$label: bigserial reader read no row twice");

	for my $name (sort keys %figures)
	{
		diag sprintf('%s: streams (%s reader): committed %d, read %d, missed %d',
			$label, $name, $committed, @{ $figures{$name} });
	}
	diag sprintf('%s: bigserial control: committed %d, read %d, missed %d (%.1f %%)',
		$label, $committed_p, $read_p, $missed_p,
		$committed_p ? 100.0 * $missed_p / $committed_p : 0);

	$node->stop;
	return;
}

run_phase('sync', '', 'on');
run_phase('async', '-c synchronous_commit=off', 'off');

done_testing();
