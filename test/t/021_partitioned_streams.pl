
# Copyright (c) stream_seq contributors
#
# 021_partitioned_streams.pl: a stream partitioned by day, its partitions
# made ahead by pg_partman and dropped by retention while writers and
# readers run, loses no row and numbers none twice.
#
# A stream "events" partitioned by range on ts, daily, by pg_partman
# (premake 3).  The test cannot wait for days, so the clock is
# test_now(), which reads a one-row table "clock" that the test moves one
# simulated day every 3 s; ts defaults to test_now(), and
# partman.run_maintenance() after each tick makes the partitions ahead
# (CREATE TABLE + ATTACH: the triggers must be cloned onto them).  The
# simulated days lie in the past (from 60 days ago on), so that
# pg_partman's retention, which counts from the real time, can be used at
# the end; the partitions create_parent() makes up to today are dropped
# before the run (empty: first() stays).
#
# Writers (psql sessions, one process each) insert rows whose payloads
# come from a sequence, and in the same transaction the payloads into the
# ordinary table "committed": the oracle of the committed set.  Some
# transactions roll a savepoint back, some abort (ROLLBACK, or an error);
# two "crossers" insert a row on day D and commit more than a simulated
# day later, after rows in day D+1's partition got their numbers.  A row
# refused by a sealed partition (55000: its INSERT routed by a clock read
# just before a tick, the partition sealed meanwhile) aborts its
# transaction, and is counted.
#
# Readers, as an ordinary role "reader": consumers c1 and c2 page with
# read() and advance() (c2 slowly), and a plain reader pages the parent
# with the reading query (seq > cursor AND seq < horizon() ORDER BY seq
# LIMIT 100), keeping its cursor in consumer "plain" so that retention
# waits for it too.  Each logs every row it reads.
#
# Retention (as the owner), every second:
#  - phase A: consumer "lag", created at the start and never advanced,
#    holds back drop_partitions(): it must return 0, even once the sealed
#    partitions are all read by the other readers;
#  - pause (the clock stops): a sealed partition refuses an INSERT
#    (55000); once the readers passed every sealed partition,
#    drop_partitions(force => true, keep_tables => true) detaches them,
#    first() moves past them, and read() of "lag" fails with 55000; "lag"
#    is dropped;
#  - phase C: drop_partitions() without force, alternately dropping and
#    detaching (keep_tables): it must take partitions out.
#
# Checked at the end: each reader read every committed row exactly once,
# in increasing seq, nothing uncommitted, and all three the same numbers
# for the same rows; the rows still in the stream and in the detached
# tables are the committed rows that were not dropped, no seq twice;
# first() - 1 is the highest number that left the stream; rows crossed
# day boundaries (seq order is not ts order); no DELETE happened in the
# partitions left (n_tup_del); and: ATTACH of a table with rows is
# refused (55000), an empty one is numbered; once the readers are done
# drop_partitions() takes out the last partition of the run; a direct
# DROP TABLE, pg_partman's retention (DROP), TRUNCATE and DETACH of a
# partition move first() past its highest number; a table detached by
# drop_partitions() is an ordinary table again; a number written by hand
# is refused (428C9), and PREPARE TRANSACTION after stream rows is
# refused (0A000).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time sleep);
use StreamSeqTest;

my $tick_seconds = 3;
my $phase_a_ticks = 4;
my $phase_c_ticks = 6;

my $node = new_node('partitioned',
	"max_connections = 40\nmax_prepared_transactions = 2\ntimezone = 'UTC'\n");

if ($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_partman'")
	ne '1')
{
	plan skip_all =>
	  'pg_partman is not installed; run: sudo apt-get install -y postgresql-15-partman (make test-18 builds it for 18)';
}

my $t_start = time();
my $logdir = $PostgreSQL::Test::Utils::log_path;
unlink glob "$logdir/021_run_*.log";

# day 0 of the simulated clock: 60 days ago, 01:00
my $day0 = $node->safe_psql('postgres',
	"SELECT date_trunc('day', now()) - interval '60 days'");

$node->safe_psql('postgres', qq{
CREATE EXTENSION stream_seq;
CREATE SCHEMA partman;
CREATE EXTENSION pg_partman SCHEMA partman;

CREATE TABLE clock (t timestamptz NOT NULL);
INSERT INTO clock VALUES ('$day0'::timestamptz + interval '1 hour');
CREATE FUNCTION test_now() RETURNS timestamptz LANGUAGE sql STABLE
  AS 'SELECT t FROM public.clock';
-- simulated day of a timestamp (0: the first)
CREATE FUNCTION day_of(timestamptz) RETURNS int LANGUAGE sql IMMUTABLE
  AS \$\$SELECT floor(extract(epoch FROM \$1 - '$day0'::timestamptz) / 86400)::int\$\$;

CREATE TABLE events (id bigserial, ts timestamptz NOT NULL DEFAULT test_now(),
                     payload int, seq bigint) PARTITION BY RANGE (ts);
CREATE INDEX ON events (seq);
SELECT stream_seq.enable('events');

CREATE SEQUENCE payload_seq;
CREATE TABLE committed (payload int PRIMARY KEY);

CREATE ROLE reader LOGIN;
GRANT USAGE ON SCHEMA stream_seq TO reader;
GRANT SELECT ON events, clock TO reader;
});

# partitions from day 0 (create_parent makes them up to today + premake),
# then all but days 0-3 dropped: run_maintenance makes the others as the
# data moves on.  pg_partman 5.x (built for PostgreSQL 18) names the
# interval where 4.x (Debian's package for 15) named the type and interval.
my $partman_major = $node->safe_psql('postgres',
	"SELECT split_part(extversion, '.', 1) FROM pg_extension WHERE extname = 'pg_partman'");
my $by_day = $partman_major >= 5 ? q{'1 day'} : q{'native', 'daily'};
$node->safe_psql('postgres', qq{
SELECT partman.create_parent('public.events', 'ts', $by_day,
                             p_premake := 3, p_start_partition := '$day0');
UPDATE partman.part_config SET inherit_privileges = true
 WHERE parent_table = 'public.events';
SELECT partman.reapply_privileges('public.events');
});
my $made = $node->safe_psql('postgres',
	"SELECT count(*) FROM partman.show_partitions('public.events')");
$node->safe_psql('postgres', q{
DO $$
DECLARE r record;
BEGIN
  FOR r IN SELECT partition_schemaname s, partition_tablename t
             FROM partman.show_partitions('public.events') LOOP
    IF (SELECT child_start_time
          FROM partman.show_partition_info(format('%I.%I', r.s, r.t),
                                           p_parent_table := 'public.events'))
       > (SELECT t FROM clock) + interval '3 days' THEN
      EXECUTE format('DROP TABLE %I.%I', r.s, r.t);
    END IF;
  END LOOP;
END $$;
});
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM partman.show_partitions('public.events')"),
	'4', "setup: days 0-3 kept of the $made partitions pg_partman made");
is($node->safe_psql('postgres', "SELECT stream_seq.first('events')"),
	'1', 'setup: dropping empty partitions leaves first() at 1');
my $partitions_at_start = $node->safe_psql('postgres',
	q{SELECT string_agg(partition_tablename, ',')
	    FROM partman.show_partitions('public.events')});

# consumers, created by the reader role
$node->safe_psql('postgres', q{
SET ROLE reader;
SELECT stream_seq.create_consumer('events', 'c1');
SELECT stream_seq.create_consumer('events', 'c2');
SELECT stream_seq.create_consumer('events', 'plain');
SELECT stream_seq.create_consumer('events', 'lag');
});

my $dir = $node->basedir;
my $stop_writers = "$dir/writers.stop";
my $stop_readers = "$dir/readers.stop";
my $owner_connstr = $node->connstr('postgres');
my $reader_connstr = $node->connstr('postgres') . ' user=reader';

my $ins = sub {
	my ($n) = @_;
	return qq{WITH e AS (INSERT INTO events (payload)
                 SELECT nextval('payload_seq') FROM generate_series(1, $n)
                 RETURNING payload)
INSERT INTO committed SELECT payload FROM e};
};

# A writer: transactions until the stop file; exits 0 unless an error
# other than a sealed partition's refusal happened.
sub writer
{
	my ($name, $crosser) = @_;
	my $s = session($node, $owner_connstr);
	my %n = (committed => 0, aborted => 0, savepoints => 0, sealed => 0,
		unexpected => 0);
	my $run = sub {
		my ($sql) = @_;
		my $r = $s->query($sql);
		return 1 unless defined $r->{sqlstate};
		if ($r->{sqlstate} eq '55000' && $r->{message} =~ /sealed/)
		{
			$n{sealed}++;
		}
		else
		{
			print "$name: unexpected error: $r->{sqlstate} $r->{message} in: $sql\n";
			$n{unexpected}++;
		}
		$s->query('ROLLBACK');
		return 0;
	};
	while (!-e $stop_writers)
	{
		my $r = int(rand(100));
		next unless $run->('BEGIN');
		next unless $run->($ins->($crosser ? 1 : 1 + int(rand(3))));
		if ($crosser)
		{
			# commit more than a simulated day later
			sleep($tick_seconds + 0.3 + rand(0.6));
		}
		elsif ($r < 8)
		{
			$s->query('ROLLBACK');
			$n{aborted}++;
			next;
		}
		elsif ($r < 12)
		{
			# an error aborts it
			my $e = $s->query('SELECT 1/0');
			print "$name: 1/0 did not fail\n" unless defined $e->{sqlstate};
			$s->query('ROLLBACK');
			$n{aborted}++;
			next;
		}
		if ($r < 30)
		{
			next unless $run->('SAVEPOINT s');
			next unless $run->($ins->(2));
			next unless $run->('ROLLBACK TO SAVEPOINT s');
			next unless $run->($ins->(1));
			$n{savepoints}++;
		}
		next unless $run->('COMMIT');
		$n{committed}++;
		usleep(2_000 + int(rand(8_000))) unless $crosser;
	}
	$s->close;
	print "$name: done: " . join(' ', map { "$_=$n{$_}" } sort keys %n) . "\n";
	return $n{unexpected} ? 1 : 0;
}

# A reader: pages until the stop file exists and a page is empty; logs
# "seq payload day" per row to its log file; exits 0 unless something
# failed or came out of order.
sub reader
{
	my ($name, $plain, $pause_us) = @_;
	my $s = session($node, $reader_connstr);
	open(my $out, '>', "$logdir/021_run_rows_$name.log") or die $!;
	my ($last, $pages, $rows, $bad) = (0, 0, 0, 0);
	while (1)
	{
		my $stop = -e $stop_readers;
		my $r = $s->query('BEGIN');
		my $page_sql =
		  $plain
		  ? qq{SELECT seq, payload, day_of(ts) FROM events
                WHERE seq > $last AND seq < stream_seq.horizon('events')
                ORDER BY seq LIMIT 100}
		  : qq{SELECT seq, "row"->>'payload', day_of(("row"->>'ts')::timestamptz)
                 FROM stream_seq.read('events', '$name', 100)};
		$r = $s->query($page_sql);
		if (defined $r->{sqlstate})
		{
			print "$name: page failed: $r->{sqlstate} $r->{message}\n";
			return 1;
		}
		my @page = map { [ split /\|/ ] } grep { $_ ne '' } split /\n/,
		  $r->{out};
		my $prev = $last;
		for my $row (@page)
		{
			if ($row->[0] <= $prev)
			{
				print "$name: seq $row->[0] after $prev\n";
				$bad++;
			}
			$prev = $row->[0];
		}
		if (@page)
		{
			$r = $s->query("SELECT stream_seq.advance('events', '$name', $prev)");
			if (defined $r->{sqlstate})
			{
				print "$name: advance failed: $r->{sqlstate} $r->{message}\n";
				return 1;
			}
		}
		$r = $s->query('COMMIT');
		if (defined $r->{sqlstate})
		{
			print "$name: commit failed: $r->{sqlstate} $r->{message}\n";
			return 1;
		}
		print $out join(' ', @$_), "\n" for @page;
		$last = $prev;
		$pages++ if @page;
		$rows += @page;
		last if $stop && !@page;
		usleep(@page ? $pause_us : 50_000);
	}
	close $out;
	$s->close;
	print "$name: done: pages=$pages rows=$rows last=$last bad=$bad\n";
	return $bad ? 1 : 0;
}

my %writers;
for my $w (1 .. 4)
{
	$writers{"w$w"} = bg_fork("$logdir/021_run_w$w.log", sub { writer("w$w", 0) });
}
for my $x (1 .. 2)
{
	$writers{"x$x"} = bg_fork("$logdir/021_run_x$x.log", sub { writer("x$x", 1) });
}
my %readers = (
	c1 => bg_fork("$logdir/021_run_c1.log", sub { reader('c1', 0, 0) }),
	c2 => bg_fork("$logdir/021_run_c2.log", sub { reader('c2', 0, 50_000) }),
	plain => bg_fork("$logdir/021_run_plain.log", sub { reader('plain', 1, 20_000) }),
);

my $owner = session($node, $owner_connstr);

sub owner_val
{
	my ($sql) = @_;
	my $r = $owner->query($sql);
	die "owner: $sql: $r->{sqlstate} $r->{message}" if defined $r->{sqlstate};
	return $r->{out};
}

my $ticks = 0;
sub tick
{
	owner_val("UPDATE clock SET t = t + interval '1 day'");
	owner_val("SELECT partman.run_maintenance('public.events', p_analyze := false, p_jobmon := false)");
	$ticks++;
}

# a retention call; returns how many partitions left the stream
my %retention = (calls => 0, left => 0, dropped => 0, detached => 0);
sub retention
{
	my ($keep, $force) = @_;
	my $n = owner_val(
		"SELECT stream_seq.drop_partitions('events', force => $force, keep_tables => $keep)");
	$retention{calls}++;
	$retention{left} += $n;
	$retention{$keep eq 'true' ? 'detached' : 'dropped'} += $n;
	return $n;
}

# runs "n" ticks, calling "each_second" every second in between
sub run_ticks
{
	my ($n, $each_second) = @_;
	for (1 .. $n)
	{
		my $next_tick = time() + $tick_seconds;
		while (time() < $next_tick)
		{
			my $next = time() + 1;
			$each_second->();
			my $rest = $next - time();
			sleep($rest) if $rest > 0;
		}
		tick();
	}
}

# the writers get going
$node->poll_query_until('postgres', 'SELECT count(*) >= 50 FROM events')
  or die 'writers did not get going';

# phase A: "lag" holds retention back
my @phase_a;
run_ticks($phase_a_ticks, sub { push @phase_a, retention('true', 'false') });
cmp_ok(scalar @phase_a, '>=', $phase_a_ticks, 'phase A: retention ran ' . scalar(@phase_a) . ' times');
is(join(',', grep { $_ != 0 } @phase_a), '',
	'phase A: drop_partitions() took nothing out while consumer "lag" lagged');

# pause: the clock stops.  Sealing covers the days before the newest one
# holding rows: wait until the writers have reached the last day, or a
# later call would seal one more than counted here.
ok( $node->poll_query_until('postgres', q{
SELECT EXISTS (SELECT FROM events
                WHERE ts >= date_trunc('day', test_now()))}),
	'pause: the writers reached the last day');
owner_val("SELECT stream_seq.seal_partitions('events')");
my ($sealed, $sealed_max, $oldest_sealed) = split /\|/, owner_val(q{
SELECT count(*), max(highest), min(partition::text)
  FROM stream_seq.partition_range WHERE stream = 'events'::regclass});
cmp_ok($sealed, '>=', 2, "pause: $sealed partitions sealed after $ticks ticks");
my $sealed_ts = owner_val(qq{
SELECT (child_start_time + interval '2 hours')
  FROM partman.show_partition_info('public.$oldest_sealed', p_parent_table := 'public.events')});
my $r = $owner->query(
	"INSERT INTO events (ts, payload) VALUES ('$sealed_ts', -1)");
is($r->{sqlstate}, '55000',
	"pause: INSERT into sealed partition $oldest_sealed fails with 55000");
like($r->{message} // '', qr/sealed/, 'pause: the message says it is sealed');

# the readers pass every sealed partition
ok( $node->poll_query_until('postgres', qq{
SELECT min(position) >= $sealed_max FROM stream_seq.consumers
 WHERE stream = 'events'::regclass AND consumer <> 'lag'}),
	"pause: c1, c2 and plain read past the sealed partitions (up to $sealed_max)");
is(retention('true', 'false'), 0,
	'pause: drop_partitions() still takes nothing out: "lag" is at 0');
is( $node->safe_psql('postgres',
		"SELECT position FROM stream_seq.consumers WHERE consumer = 'lag'"),
	'0', 'pause: "lag" never moved');
is($node->safe_psql('postgres', "SELECT stream_seq.first('events')"),
	'1', 'pause: first() is still 1');

is(owner_val("SELECT stream_seq.seal_partitions('events')"), '0',
	'pause: nothing more to seal while the clock stands');
my $forced = retention('true', 'true');
is($forced, $sealed,
	'pause: drop_partitions(force => true) detached every sealed partition');
is( $node->safe_psql('postgres', "SELECT stream_seq.first('events')"),
	$sealed_max + 1,
	'pause: first() is the highest number of the detached partitions + 1');
$r = psql_result($node, q{
SET ROLE reader;
SELECT * FROM stream_seq.read('events', 'lag', 10)});
is($r->{sqlstate}, '55000', 'pause: read() of "lag" fails with 55000');
like($r->{message} // '', qr/were trimmed/, 'pause: its rows were trimmed');
is( try_sql($node, q{
SET ROLE reader;
SELECT stream_seq.drop_consumer('events', 'lag')}),
	'ok', 'pause: "lag" dropped');

# phase C: retention drops, then detaches, then drops... (by the number
# of partitions taken out so far, so that the first one is dropped)
my $left_c = 0;
run_ticks($phase_c_ticks,
	sub { $left_c += retention($left_c % 2 ? 'true' : 'false', 'false') });
cmp_ok($left_c, '>', 0,
	"phase C: drop_partitions() took $left_c partitions out during the run");

# writers stop; readers read up to the horizon and stop
my $writers_stopped = time();
append_to_file($stop_writers, '1');
for my $w (sort keys %writers)
{
	is(wait_pid($writers{$w}, 60), 0, "writer $w ended cleanly");
}
ok( $node->poll_query_until('postgres', q{
SELECT stream_seq.horizon('events') > coalesce(max(seq), 0) FROM events}),
	'the horizon passed every row');
append_to_file($stop_readers, '1');
for my $name (sort keys %readers)
{
	is(wait_pid($readers{$name}, 90), 0, "reader $name ended cleanly");
}
$owner->close;
note sprintf('run: %d ticks, %.0f s of writes', $ticks, $writers_stopped - $t_start);

# the oracle
my %committed = map { $_ => 1 } split /\n/,
  $node->safe_psql('postgres', 'SELECT payload FROM committed');
my $ncommitted = keys %committed;
cmp_ok($ncommitted, '>', 1000, "$ncommitted rows committed");

my %writer_stats;
for my $w (sort keys %writers)
{
	my $log = slurp_file("$logdir/021_run_$w.log");
	if ($log =~ /done: (.*)/)
	{
		for (split / /, $1)
		{
			my ($k, $v) = split /=/;
			$writer_stats{$k} += $v;
		}
	}
	$writer_stats{"${w}_committed"} = $1 if $log =~ /committed=(\d+)/;
}
cmp_ok($writer_stats{aborted} // 0, '>', 0, 'writers aborted some transactions');
cmp_ok($writer_stats{savepoints} // 0, '>', 0,
	'writers rolled some savepoints back');
cmp_ok(($writer_stats{x1_committed} // 0) + ($writer_stats{x2_committed} // 0),
	'>=', $ticks / 2, 'the crossers committed transactions spanning a tick');

# every reader: every committed row once, nothing else
my %seen_by;    # reader => { payload => seq }
my @max_inversions;
for my $name (qw(c1 c2 plain))
{
	my @rows = map { [ split / / ] } split /\n/,
	  slurp_file("$logdir/021_run_rows_$name.log");
	my (%by_payload, $twice, $uncommitted, $order, $max_day, $inversions);
	my $prev = 0;
	for my $row (@rows)
	{
		my ($seq, $payload, $day) = @$row;
		$twice++ if exists $by_payload{$payload};
		$by_payload{$payload} = $seq;
		$uncommitted++ unless $committed{$payload};
		$order++ unless $seq > $prev;
		$prev = $seq;
		$inversions++ if defined $max_day && $day < $max_day;
		$max_day = $day if !defined $max_day || $day > $max_day;
	}
	my $missing = grep { !exists $by_payload{$_} } keys %committed;
	is($missing, 0, "$name: no committed row skipped");
	is($twice // 0, 0, "$name: no row read twice");
	is($uncommitted // 0, 0, "$name: no uncommitted row read");
	is($order // 0, 0, "$name: rows read in strictly increasing seq");
	is(scalar @rows, $ncommitted, "$name: read " . scalar(@rows) . " rows");
	$seen_by{$name} = \%by_payload;
	push @max_inversions, $inversions // 0;
	note "$name: $inversions rows came after a row of a later day" if $inversions;
}
my $disagree = grep { $seen_by{c1}{$_} != $seen_by{c2}{$_} || $seen_by{c1}{$_} != $seen_by{plain}{$_} }
  grep { exists $seen_by{c2}{$_} && exists $seen_by{plain}{$_} } keys %{ $seen_by{c1} };
is($disagree, 0, 'c1, c2 and plain saw the same number for every row');
cmp_ok($max_inversions[0], '>', 0,
	'boundary crossing: some rows of day D were numbered after rows of day D+1');
my $days = $node->safe_psql('postgres', 'SELECT day_of(test_now())');
cmp_ok($days, '>=', $phase_a_ticks + $phase_c_ticks, "the clock moved $days days");

# the table: what is left in the stream and in the detached tables
my $detached_list = $node->safe_psql('postgres', q{
SELECT string_agg(format('%I', c.relname), ',' ORDER BY c.relname)
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'public' AND c.relname LIKE 'events\_p%' AND c.relkind = 'r'
   AND NOT c.relispartition});
my @detached = split /,/, $detached_list;
cmp_ok(scalar @detached, '>=', $sealed, 'detached tables kept: ' . scalar @detached);
my $kept_sql = join(' UNION ALL ',
	'SELECT seq, payload FROM events',
	map { "SELECT seq, payload FROM $_" } @detached);
my %kept = map { my ($s, $p) = split /\|/; ($p => $s) } split /\n/,
  $node->safe_psql('postgres', "SELECT * FROM ($kept_sql) k");
my $kept_wrong = grep { !exists $seen_by{c1}{$_} || $seen_by{c1}{$_} != $kept{$_} } keys %kept;
is($kept_wrong, 0,
	'every row kept (in the stream or a detached table) is a committed row, with the number the readers read');
my $dropped_rows = grep { !exists $kept{$_} } keys %committed;
my $first_after_run = $node->safe_psql('postgres', "SELECT stream_seq.first('events')");
is( scalar(grep { !exists $kept{$_} && $seen_by{c1}{$_} >= $first_after_run } keys %committed),
	0, "every committed row numbered from first() ($first_after_run) on is still there");
cmp_ok($retention{dropped}, '>', 0,
	"drop_partitions() dropped $retention{dropped} partitions ($dropped_rows rows), detached $retention{detached}");
is( $node->safe_psql('postgres',
		'SELECT count(*) FROM (SELECT seq FROM events GROUP BY seq HAVING count(*) > 1) d'),
	'0', 'no seq twice across partitions');
check_unique($node, 'events', 'after the run');
my $in_stream = $node->safe_psql('postgres', 'SELECT string_agg(payload::text, \',\') FROM events');
my %in_stream = map { $_ => 1 } split /,/, $in_stream;
my $left_max = 0;
for my $p (keys %committed)
{
	next if $in_stream{$p};
	$left_max = $seen_by{c1}{$p} if $seen_by{c1}{$p} > $left_max;
}
is($node->safe_psql('postgres', "SELECT stream_seq.first('events')"),
	$left_max + 1, "first() is the highest number that left the stream + 1 ($left_max + 1)");

# pg_partman made partitions ahead during the run, and they were read
# directly (the reader may read each partition)
my $made_in_run = $node->safe_psql('postgres', qq{
SELECT count(*) FROM partman.show_partitions('public.events')
 WHERE partition_tablename <> ALL (string_to_array('$partitions_at_start', ','))});
cmp_ok($made_in_run, '>=', 3, "run_maintenance made $made_in_run partitions during the run");
like( $node->safe_psql('postgres', q{
SET ROLE reader;
SELECT stream_seq._page_source('events', 0)}),
	qr/UNION ALL/, 'the reader pages the partitions directly');

# no DELETE in the partitions left: retention only detached and dropped
my $partition_filter =
  q{(relid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = 'events'::regclass)}
  . join('', map { " OR relid = '$_'::regclass" } @detached) . ')';
my ($tup_del, $tup_ins) = row($node,
	"SELECT sum(n_tup_del), sum(n_tup_ins) FROM pg_stat_user_tables WHERE $partition_filter");
cmp_ok($tup_ins, '>', 0, "the partitions left and the detached tables had $tup_ins inserts");
is($tup_del, 0, 'no row was deleted from them (n_tup_del)');

# After the run the readers are done: retention takes out every sealed
# partition.  Then four more days with a few rows each, as the owner:
# their numbers are above every number of the run, in the order of the
# days; the partition left of the run is sealed and goes too.
my $run_max = $node->safe_psql('postgres', 'SELECT max(seq) FROM events');
$node->safe_psql('postgres', "SELECT stream_seq.drop_partitions('events')");
for (1 .. 4)
{
	$node->safe_psql('postgres', q{
UPDATE clock SET t = t + interval '1 day';
SELECT partman.run_maintenance('public.events', p_analyze := false, p_jobmon := false);
INSERT INTO events (payload) SELECT -g FROM generate_series(1, 5) g;
});
}
cmp_ok($node->safe_psql('postgres', "SELECT stream_seq.drop_partitions('events')"),
	'>=', 1, 'after the run: drop_partitions() drops the last partition of the run');
is($node->safe_psql('postgres', "SELECT count(*) FROM events WHERE seq <= $run_max"),
	'0', 'after the run: no row of the run is left in the stream');
is($node->safe_psql('postgres', "SELECT stream_seq.first('events')"),
	$run_max + 1, 'after the run: first() is past the last number of the run');

# the oldest partition left with rows, and its highest number
sub oldest_with_rows
{
	my ($name, $start, $highest) = row($node, q{
SELECT p.partition_tablename, i.child_start_time,
       (SELECT max(seq) FROM events e WHERE e.tableoid = format('%I.%I', p.partition_schemaname, p.partition_tablename)::regclass)
  FROM partman.show_partitions('public.events') p,
       partman.show_partition_info(format('%I.%I', p.partition_schemaname, p.partition_tablename),
                                   p_parent_table := 'public.events') i
 WHERE EXISTS (SELECT FROM events e WHERE e.tableoid = format('%I.%I', p.partition_schemaname, p.partition_tablename)::regclass)
 ORDER BY i.child_start_time LIMIT 1});
	return ($name, $start, $highest);
}

# a direct DROP TABLE
my ($victim, $victim_start, $victim_highest) = oldest_with_rows();
write_ok($node, "DROP TABLE $victim", "DROP TABLE $victim");
is($node->safe_psql('postgres', "SELECT stream_seq.first('events')"),
	$victim_highest + 1,
	"DROP TABLE of $victim moves first() past its highest number");

# pg_partman's retention (it counts from the real time): the oldest
# partition left ends 30 to 31 hours before the threshold, the next one
# ends after it
($victim, $victim_start, $victim_highest) = oldest_with_rows();
my $partitions_sql =
  "SELECT partition_tablename FROM partman.show_partitions('public.events')";
my %before = map { $_ => 1 } split /\n/, $node->safe_psql('postgres', $partitions_sql);
write_ok($node, qq{
UPDATE partman.part_config
   SET retention = (floor(extract(epoch FROM now() - '$victim_start'::timestamptz) / 3600) - 30) || ' hours',
       retention_keep_table = false
 WHERE parent_table = 'public.events';
SELECT partman.run_maintenance('public.events', p_analyze := false, p_jobmon := false);
}, 'pg_partman retention ran');
is( $node->safe_psql('postgres', "SELECT to_regclass('public.$victim') IS NULL"),
	't', "pg_partman retention dropped $victim");
my %after = map { $_ => 1 } split /\n/, $node->safe_psql('postgres', $partitions_sql);
is(join(',', grep { !$after{$_} } sort keys %before), $victim,
	'pg_partman retention dropped only that partition');
is($node->safe_psql('postgres', "SELECT stream_seq.first('events')"),
	$victim_highest + 1,
	"pg_partman retention of $victim moves first() past its highest number");
$node->safe_psql('postgres',
	"UPDATE partman.part_config SET retention = NULL WHERE parent_table = 'public.events'");

# TRUNCATE of a partition
($victim, $victim_start, $victim_highest) = oldest_with_rows();
write_ok($node, "TRUNCATE $victim", "TRUNCATE $victim");
is($node->safe_psql('postgres', "SELECT stream_seq.first('events')"),
	$victim_highest + 1,
	"TRUNCATE of $victim moves first() past its highest number");

# ATTACH: a table with rows is refused, an empty one joins the stream
my $far = $node->safe_psql('postgres',
	"SELECT date_trunc('day', test_now()) + interval '100 days'");
$node->safe_psql('postgres', qq{
CREATE TABLE stray (LIKE events);
INSERT INTO stray (id, ts, payload) VALUES (0, '$far', 0);
CREATE TABLE spare (LIKE events);
});
is( sqlstate($node, qq{
ALTER TABLE events ATTACH PARTITION stray
  FOR VALUES FROM ('$far') TO ('$far'::timestamptz + interval '1 day')}),
	'55000', 'ATTACH of a table with rows fails with 55000');
write_ok($node, qq{
ALTER TABLE events ATTACH PARTITION spare
  FOR VALUES FROM ('$far') TO ('$far'::timestamptz + interval '1 day')},
	'ATTACH of an empty table');
write_ok($node, "INSERT INTO events (ts, payload) VALUES ('$far', -100)",
	'a row in the attached table');
my ($spare_seq, $head) = row($node,
	"SELECT (SELECT seq FROM spare), (SELECT max(seq) FROM events WHERE tableoid <> 'spare'::regclass)");
cmp_ok($spare_seq, '>', $head, 'the attached table\'s row got the next number at commit');
write_ok($node, 'ALTER TABLE events DETACH PARTITION spare', 'DETACH PARTITION spare');
is($node->safe_psql('postgres', "SELECT stream_seq.first('events')"),
	$spare_seq + 1, 'DETACH of spare moves first() past its highest number');

is(sqlstate($node, 'INSERT INTO events (payload, seq) VALUES (-200, 999999999)'),
	'428C9', 'a number written by hand fails with 428C9');
is( sqlstate($node, q{
BEGIN;
INSERT INTO events (payload) VALUES (-300);
PREPARE TRANSACTION 'p1';}),
	'0A000', 'PREPARE TRANSACTION after stream rows fails with 0A000');
is( $node->safe_psql('postgres', 'SELECT count(*) FROM pg_prepared_xacts'),
	'0', 'no transaction was prepared');
check_unique($node, 'events', 'at the end');

# a table drop_partitions() detached is an ordinary table again
my $first_now = $node->safe_psql('postgres', "SELECT stream_seq.first('events')");
is( try_sql($node, qq{
INSERT INTO $detached[0] (id, ts, payload, seq)
  SELECT 0, min(ts), 0, 0 FROM $detached[0];
TRUNCATE $detached[0];}),
	'ok', "detached table $detached[0] takes rows with numbers and can be truncated");
is($node->safe_psql('postgres', "SELECT stream_seq.first('events')"),
	$first_now, 'that leaves first() alone');

my $log = slurp_file($node->logfile);
unlike($log, qr/server process .* was terminated|PANIC|TRAP:/,
	'no server process crashed');
note sprintf('writers: %s; retention: %s; total %.0f s',
	join(' ', map { "$_=$writer_stats{$_}" } grep { !/_/ } sort keys %writer_stats),
	join(' ', map { "$_=$retention{$_}" } sort keys %retention), time() - $t_start);

done_testing();
