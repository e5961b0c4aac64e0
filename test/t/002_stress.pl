
# Copyright (c) stream_seq contributors
#
# 002_stress.pl: under concurrent writers, a reader paging
#
#   WHERE seq > $cursor AND seq < stream_seq.horizon('t') ORDER BY seq LIMIT 100
#
# in separate transactions reads every committed row exactly once, in
# strictly increasing order.
#
# Eight pgbench clients run short random transactions of 1-5 rows (some
# split over two statements, some with a rolled-back savepoint, some ending
# in ROLLBACK, most sleeping a few ms before COMMIT).  Every transaction
# writes the same rows to the stream table "t" and to a plain bigserial
# table "p".  Two stream readers run: one READ COMMITTED, one REPEATABLE
# READ that sleeps 2 ms between taking its snapshot and computing the
# horizon (the snapshot is older than the horizon call).  A third reader
# pages "p" by id, the usual recipe, and the rows it missed are reported
# (not asserted: it is timing dependent) to show what the stream prevents.
#
# The list of tracked transactions is kept small and, for a few seconds in
# the middle of the run, a REPEATABLE READ snapshot holds back the oldest
# xmin so entries cannot be pruned: the list fills up and entries are
# folded into the conservative floor (shmem.c) while the reader runs.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(usleep time);

my $duration = 12;    # seconds of write load

my $node = PostgreSQL::Test::Cluster->new('stress');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'stream_seq'
max_connections = 30
stream_seq.max_tracked_xacts = 16
});
$node->start;

$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE t (id bigserial PRIMARY KEY, payload text);
SELECT stream_seq.enable('t');
CREATE TABLE p (id bigserial PRIMARY KEY, payload text);

CREATE TABLE control (writers_done boolean NOT NULL);
INSERT INTO control VALUES (false);
-- what each reader read, in the order it read it
CREATE TABLE seen (reader text, ord bigint, seq bigint NOT NULL, id bigint NOT NULL,
                   iso text DEFAULT current_setting('transaction_isolation'),
                   PRIMARY KEY (reader, ord));
CREATE TABLE seen_p (ord bigint PRIMARY KEY, id bigint NOT NULL);

-- Page through the stream, one page per transaction, until the writers
-- are done and nothing is left to read (or a deadline passes).  "nap"
-- sleeps between the first statement of the transaction and the page
-- query: under REPEATABLE READ the page is then read with a snapshot older
-- than the horizon computation, which must still be safe.
CREATE PROCEDURE read_stream(reader text, nap float8, give_up_after interval)
LANGUAGE plpgsql AS $$
DECLARE
    cur bigint := 0;
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
        FOR r IN SELECT seq, id FROM t
                  WHERE seq > cur AND seq < stream_seq.horizon('t')
                  ORDER BY seq LIMIT 100
        LOOP
            k := k + 1;
            INSERT INTO seen (reader, ord, seq, id) VALUES (reader, k, r.seq, r.id);
            cur := r.seq;
            n := n + 1;
        END LOOP;
        COMMIT;
        IF n = 0 THEN
            IF done THEN
                SELECT NOT EXISTS (SELECT FROM t WHERE seq > cur)
                       AND stream_seq.horizon('t') = stream_seq.head('t') + 1
                  INTO finished;
                EXIT WHEN finished;
                done_since := coalesce(done_since, clock_timestamp());
                IF clock_timestamp() - done_since > give_up_after THEN
                    RAISE WARNING '% stream reader gave up at cursor %, horizon %, head %',
                        reader, cur, stream_seq.horizon('t'), stream_seq.head('t');
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
});

# The writers.  Every branch writes the same rows to t and p in the same
# (sub)transaction, so both tables end with the same committed rows.
my $script = $node->basedir . '/writer.sql';
append_to_file($script, q{
\set n random(1, 5)
\set nap random(0, 4000)
\set outcome random(1, 10)
\set shape random(1, 6)
BEGIN;
INSERT INTO p (payload) SELECT 'w' FROM generate_series(1, :n);
INSERT INTO t (payload) SELECT 'w' FROM generate_series(1, :n);
\if :shape = 1
\sleep :nap us
INSERT INTO p (payload) VALUES ('second statement');
INSERT INTO t (payload) VALUES ('second statement');
\elif :shape = 2
SAVEPOINT s;
INSERT INTO p (payload) SELECT 'undone' FROM generate_series(1, :n);
INSERT INTO t (payload) SELECT 'undone' FROM generate_series(1, :n);
ROLLBACK TO SAVEPOINT s;
\endif
\if :nap < 3000
\sleep :nap us
\endif
\if :outcome = 1
ROLLBACK;
\else
COMMIT;
\endif
});

# Start a command in the background; returns the handle and its output.
sub bg_run
{
	my (@cmd) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(\@cmd, '<', \undef, '>', \$out, '2>', \$err);
	return { handle => $h, out => \$out, err => \$err };
}

# psql in the background, each statement sent on its own (-c).
sub bg_psql
{
	my (@sql) = @_;
	return bg_run($node->installed_command('psql'), '-XAtq', '-v',
		'ON_ERROR_STOP=1', '-d', $node->connstr('postgres'),
		map { ('-c', $_) } @sql);
}

sub wait_done
{
	my ($job, $limit) = @_;
	my $h = $job->{handle};
	my $deadline = time() + $limit;
	while ($h->pumpable && time() < $deadline)
	{
		$h->pump_nb;
		usleep(50_000);
	}
	my $timed_out = $h->pumpable;
	$h->kill_kill if $timed_out;
	$h->finish;
	return $timed_out ? -1 : $h->result(0);
}

sub row
{
	my ($sql) = @_;
	return split /\|/, $node->safe_psql('postgres', $sql);
}

my %readers = (
	rc => bg_psql("CALL read_stream('rc', 0, '30 seconds')"),
	rr => bg_psql(
		"SET default_transaction_isolation = 'repeatable read'",
		"CALL read_stream('rr', 0.002, '30 seconds')"));
my $reader_p = bg_psql('CALL read_plain()');

my $start = time();
my $writers = bg_run(
	$node->installed_command('pgbench'), '-n',
	'-h', $node->host, '-p', $node->port,
	'-c', '8', '-j', '4', '-T', $duration,
	'-f', $script, 'postgres');

# Hold an old snapshot for a while in the middle of the run: nothing can be
# pruned meanwhile, so the tracked list overflows into the floor.
usleep(3_000_000);
my $holder = bg_psql(
	'BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM t; '
	  . 'SELECT pg_sleep(4); COMMIT;');

is(wait_done($holder, 60), 0, 'snapshot holder finished');
is(wait_done($writers, $duration + 60), 0, 'pgbench writers ran cleanly')
  or diag ${ $writers->{err} };
my ($xacts) = ${ $writers->{out} } =~ /number of transactions actually processed: (\d+)/;
note 'writer transactions: ' . ($xacts // '?') . ' in ' . sprintf('%.1f', time() - $start) . ' s';

$node->safe_psql('postgres', 'UPDATE control SET writers_done = true');

for my $name (sort keys %readers)
{
	my $r = $readers{$name};
	is(wait_done($r, 60), 0, "$name stream reader finished")
	  or diag ${ $r->{err} };
	unlike(${ $r->{err} }, qr/gave up/, "$name stream reader did not give up");
}
is(wait_done($reader_p, 60), 0, 'bigserial reader finished')
  or diag ${ $reader_p->{err} };

# The stream table: committed rows, all numbered, numbers unique.
my ($committed, $numbered, $distinct) =
  row('SELECT count(*), count(seq), count(DISTINCT seq) FROM t');
cmp_ok($committed, '>', 1000, 'writers committed rows');
is($numbered, $committed, 'every committed row has a number');
is($distinct, $committed, 'no number is used twice');

my ($committed_p) = row('SELECT count(*) FROM p');
is($committed_p, $committed, 'both tables hold the same committed rows');

# What each stream reader read.
my %figures;
for my $name (sort keys %readers)
{
	my ($read, $read_distinct) = row(
		"SELECT count(*), count(DISTINCT seq) FROM seen WHERE reader = '$name'");
	my ($missed) = row(qq{
SELECT count(*) FROM t
 WHERE NOT EXISTS (SELECT FROM seen s
                    WHERE s.reader = '$name' AND s.id = t.id AND s.seq = t.seq)});
	my ($bogus) = row(qq{
SELECT count(*) FROM seen s
 WHERE s.reader = '$name'
   AND NOT EXISTS (SELECT FROM t WHERE t.id = s.id AND t.seq = s.seq)});
	my ($out_of_order) = row(qq{
SELECT count(*)
  FROM (SELECT seq, lag(seq) OVER (ORDER BY ord) AS prev
          FROM seen WHERE reader = '$name') s
 WHERE seq <= prev});

	is($missed, 0, "$name stream reader missed no committed row");
	is($read_distinct, $read, "$name stream reader read no row twice");
	is($bogus, 0,
		"$name stream reader read only committed rows, with their final numbers");
	is($read, $committed,
		"$name stream reader read every committed row exactly once");
	is($out_of_order, 0,
		"$name stream reader read numbers in strictly increasing order");
	$figures{$name} = [ $read, $missed ];
}
is( $node->safe_psql('postgres',
		"SELECT string_agg(DISTINCT reader || ':' || iso, ',') FROM seen"),
	'rc:read committed,rr:repeatable read',
	'readers ran at the intended isolation levels');

my ($horizon, $head) = row("SELECT stream_seq.horizon('t'), stream_seq.head('t')");
is($horizon, $head + 1, 'idle horizon is head + 1 after the run');

my ($evicted, $assigned) =
  row("SELECT evicted, assigned_xacts FROM stream_seq.streams WHERE stream = 't'::regclass");
diag "stream: $assigned transactions assigned numbers, $evicted entries folded into the floor";

# The control: what paging a bigserial table by id misses.
my ($read_p) = row('SELECT count(DISTINCT id) FROM seen_p');
my ($missed_p) =
  row('SELECT count(*) FROM p WHERE NOT EXISTS (SELECT FROM seen_p s WHERE s.id = p.id)');
my ($dup_p) = row('SELECT count(*) - count(DISTINCT id) FROM seen_p');
is($dup_p, 0, 'bigserial reader read no row twice');

for my $name (sort keys %figures)
{
	diag sprintf('stream table (%s reader): committed %d, read %d, missed %d',
		$name, $committed, @{ $figures{$name} });
}
diag sprintf('bigserial control       : committed %d, read %d, missed %d (%.1f %%)',
	$committed_p, $read_p, $missed_p,
	$committed_p ? 100.0 * $missed_p / $committed_p : 0);

$node->stop;
done_testing();
