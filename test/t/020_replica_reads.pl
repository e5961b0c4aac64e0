
# Copyright (c) stream_seq contributors
#
# 020_replica_reads.pl: readers page a stream on two hot standbys with
# horizon() while eight writers on the primary commit slowly (each waits
# inside its commit, after its rows have their numbers: pulse_commits), use
# savepoints, overflow the subtransaction cache and abort.  Readers run as
# an ordinary role, in READ COMMITTED and in REPEATABLE READ (several pages
# per snapshot).  During the run one standby restarts (its readers retry
# while it does not yet know every reservation), the primary crashes with
# a transaction stopped inside its commit (the standby's horizon must pass
# the numbers it held once the primary is back), and at the end a standby
# is promoted and the writers move to it.  Every reader must read exactly
# the committed rows, in order, none skipped, none twice, with a horizon
# that never goes down within a session.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use StreamSeqTest;

my $run_seconds = $ENV{REPLICA_READ_SECONDS} // 60;

my $primary = new_node('primary',
	"stream_seq.round_interval = 300ms\nmax_connections = 40\n",
	allows_streaming => 1);
$primary->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE ev (id bigserial PRIMARY KEY, client int NOT NULL,
                 phase int NOT NULL, pad text);
SELECT stream_seq.enable('ev');
-- a stream written only now
CREATE TABLE quiet (payload int);
SELECT stream_seq.enable('quiet');
INSERT INTO quiet SELECT g FROM generate_series(1, 5) g;


-- a writer transaction: savepoints, sometimes more than 64 of them
CREATE FUNCTION write_some(c int, ph int, n int, deep boolean) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE i int;
BEGIN
  FOR i IN 1 .. CASE WHEN deep THEN 70 ELSE n END LOOP
    BEGIN
      INSERT INTO ev (client, phase) VALUES (c, ph);
      IF random() < 0.1 THEN
        RAISE EXCEPTION 'roll this one back';
      END IF;
    EXCEPTION WHEN raise_exception THEN
      NULL;
    END;
  END LOOP;
END $$;

CREATE ROLE reader LOGIN;
GRANT USAGE ON SCHEMA stream_seq TO reader;
GRANT SELECT ON ev TO reader;

-- a reader: pages after "cur" for "secs" seconds, "per_xact" pages per
-- transaction, reporting each page as a notice: the horizon of the page's
-- snapshot, then the numbers read
CREATE PROCEDURE read_pages(cur bigint, secs float8, per_xact int)
LANGUAGE plpgsql AS $$
DECLARE
  deadline timestamptz := clock_timestamp() + secs * interval '1 second';
  h bigint;
  got text;
  last bigint;
  i int;
BEGIN
  LOOP
    FOR i IN 1 .. per_xact LOOP
      SELECT stream_seq.horizon('ev'), string_agg(seq::text, ',' ORDER BY seq),
             max(seq)
        INTO h, got, last
        FROM (SELECT seq FROM ev
               WHERE seq > cur AND seq < stream_seq.horizon('ev')
               ORDER BY seq LIMIT 200) page;
      IF h IS NULL THEN
        SELECT stream_seq.horizon('ev') INTO h;
      END IF;
      RAISE NOTICE 'page % %', h, coalesce(got, '-');
      cur := coalesce(last, cur);
    END LOOP;
    COMMIT;
    EXIT WHEN clock_timestamp() > deadline;
    IF last IS NULL THEN
      PERFORM pg_sleep(0.01);
    END IF;
  END LOOP;
END $$;
});
my $dir = $primary->basedir;
my $writer = "$dir/writer.sql";
append_to_file($writer, q{
\set n random(1, 4)
\set deep random(1, 20)
\set fate random(1, 10)
BEGIN;
SELECT write_some(:client_id, :phase, :n, :deep = 1);
\if :fate = 1
ROLLBACK;
\else
COMMIT;
\endif
});

my $standby_a = new_standby($primary, 'standby_a');
ok( $standby_a->poll_query_until('postgres',
		"SELECT stream_seq.horizon('ev') = 1"),
	'standby_a: horizon() of the empty stream is 1');

# Standby b starts replaying after the primary's last listing, which the
# primary is told to write only hourly, and after a transaction took a
# number that it commits only later: b does not know that reservation, so
# horizon() there fails with 55000 until the next listing.  A snapshot
# taken meanwhile sees that transaction running; it commits before the
# listing, so the listing does not name it, and the snapshot is refused
# afterwards (given a horizon, it would pass that transaction's row,
# which it cannot see).
$primary->safe_psql('postgres', q{
ALTER SYSTEM SET stream_seq.round_interval = '1h';
SELECT pg_reload_conf();
});
sleep 2;		# the lister's last wait with the old interval ends

# Meanwhile no round names what a transaction holds, so the standby knows
# it from the record of the commit-time write alone.  A transaction whose
# row was stored before a checkpoint and numbered after it writes that
# record with a full-page image; the reservation it carries must reach the
# standby all the same, or the standby's horizon passes the held number as
# soon as a later transaction's numbers are replayed.
$primary->safe_psql('postgres', q{
CREATE TABLE paged (payload int);
SELECT stream_seq.enable('paged');
INSERT INTO paged VALUES (1);
});
my $image_gate = session($primary, $primary->connstr('postgres'));
$image_gate->query('SELECT pg_advisory_lock(4244)');
my $imaged = bg_psql($primary, 'SET stream_seq.hold_after_numbering = 4244',
	'BEGIN', 'INSERT INTO paged VALUES (2)', 'CHECKPOINT', 'COMMIT');
ok( $primary->poll_query_until('postgres', q{
SELECT count(*) = 1 FROM stream_seq.holders WHERE stream = 'paged'::regclass}),
	'full-page image: a transaction holds a number inside its commit');
my $imaged_number = $primary->safe_psql('postgres', q{
SELECT first_number FROM stream_seq.holders WHERE stream = 'paged'::regclass});
$primary->safe_psql('postgres', 'INSERT INTO paged VALUES (3)');
$primary->wait_for_catchup($standby_a, 'replay');
my $imaged_horizon = $standby_a->safe_psql('postgres',
	"SELECT stream_seq.horizon('paged')");
cmp_ok($imaged_horizon, '<=', $imaged_number,
	"full-page image: the standby's horizon stays at or below the held number "
	  . "($imaged_horizon <= $imaged_number)");
$image_gate->query('SELECT pg_advisory_unlock(4244)');
$image_gate->close;
is(wait_done($imaged, 60), 0, 'full-page image: that transaction committed');
$primary->wait_for_catchup($standby_a, 'replay');
is( $standby_a->safe_psql('postgres', q{
SELECT string_agg(payload::text, ',' ORDER BY seq)
  FROM paged WHERE seq < stream_seq.horizon('paged')}),
	'1,2,3', 'full-page image: then the standby reads every row below the horizon');

my $gate = session($primary, $primary->connstr('postgres'));
$gate->query('SELECT pg_advisory_lock(4242)');
my $unknown = bg_psql($primary, 'SET stream_seq.hold_after_numbering = 4242',
	'INSERT INTO ev (client, phase) VALUES (-2, 0)');
ok( $primary->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM stream_seq.holders"),
	'standby_b: a transaction holds a number inside its commit');
my $standby_b = new_standby($primary, 'standby_b');
like(try_sql($standby_b, "SELECT stream_seq.horizon('ev')"),
	qr/^55000: .*not yet available/,
	'standby_b: horizon() fails with 55000 before a listing was replayed');
is( $standby_b->safe_psql('postgres',
		"SELECT horizon IS NULL FROM stream_seq.streams WHERE stream = 'ev'::regclass"),
	't', 'standby_b: the streams view shows the horizon as unknown meanwhile');
my $old_snapshot = session($standby_b, $standby_b->connstr('postgres'));
$old_snapshot->query('BEGIN ISOLATION LEVEL REPEATABLE READ');
$old_snapshot->query('SELECT count(*) FROM ev');
$gate->query('SELECT pg_advisory_unlock(4242)');
$gate->close;
is(wait_done($unknown, 60), 0, 'standby_b: that transaction committed');
$primary->safe_psql('postgres', q{
ALTER SYSTEM RESET stream_seq.round_interval;
SELECT pg_reload_conf();
});
ok( $standby_b->poll_query_until('postgres',
		"SELECT stream_seq.horizon('ev') = 2"),
	'standby_b: horizon() answers once a listing was replayed');
like($old_snapshot->query("SELECT stream_seq.horizon('ev')")->{message},
	qr/snapshot taken before this standby knew/,
	'standby_b: a snapshot older than the listing is refused');
$old_snapshot->query('ROLLBACK');
is( $old_snapshot->query(
		"SELECT stream_seq.horizon('ev') || ' ' || (SELECT string_agg(seq::text, ',') FROM ev)"
	)->{out},
	'2 1',
	'standby_b: a new snapshot gets the horizon and sees the row');
is( $standby_b->safe_psql('postgres',
		"SELECT horizon FROM stream_seq.streams WHERE stream = 'ev'::regclass"),
	'2', 'standby_b: the streams view shows it');
$old_snapshot->close;
# and requires SELECT there as on the primary
$primary->safe_psql('postgres', 'CREATE ROLE nobody LOGIN');
$primary->wait_for_catchup($standby_a, 'replay');
like(
	try_sql($standby_a, "SET ROLE nobody; SELECT stream_seq.horizon('ev')"),
	qr/^42501: /, 'standby: horizon() without SELECT fails with 42501');

# A reader process: calls read_pages on "node" as role reader until the
# file "stop" names the number to read up to and that number was read,
# logging pages to its log; retries after the retryable errors
# (55000: the standby does not know every reservation yet, or the
# snapshot predates that; 0A000: a snapshot of a promoted server taken
# during recovery) and lost connections (restart, promotion).
sub start_reader
{
	my ($node, $name, $isolation, $per_xact) = @_;
	my $log = "$dir/reader_$name.log";
	my $stop = "$dir/reader_$name.stop";
	my $pid = bg_fork("$dir/reader_$name.out", sub {
		my $cur = 0;
		open(my $out, '>', $log) or die "open $log: $!";
		$out->autoflush(1);
		my $session = 0;
		while (1)
		{
			my $target;
			if (-e $stop)
			{
				$target = slurp_file($stop);
				chomp $target;
				last if $cur >= $target;
			}
			$session++;
			local %ENV = %ENV;
			(my $level = $isolation) =~ s/ /\\ /g;
			$ENV{PGOPTIONS} = "-c default_transaction_isolation=$level";
			my ($stdout, $stderr) = ('', '');
			IPC::Run::run(
				[
					$node->installed_command('psql'), '-X', '-q',
					'-v', 'ON_ERROR_STOP=1', '-v', 'VERBOSITY=verbose',
					'-h', $node->host, '-p', $node->port,
					'-U', 'reader', '-d', 'postgres',
					'-c', "CALL read_pages($cur, 2, $per_xact)"
				],
				'>', \$stdout, '2>', \$stderr);
			for my $line (split /\n/, $stderr)
			{
				if ($line =~ /^NOTICE:\s+00000: page (\d+) (\S+)/)
				{
					my ($h, $got) = ($1, $2);
					print $out "S $session H $h\n";
					next if $got eq '-';
					print $out "R $got\n";
					my @seqs = split /,/, $got;
					$cur = $seqs[-1];
				}
				elsif ($line =~ /^ERROR:\s+(\w{5}):/)
				{
					print $out "E $1 $line\n";
				}
			}
			if ($stderr =~ /ERROR|FATAL|could not connect|terminat/)
			{
				print $out "E other $1\n"
				  if $stderr =~ /^((?:psql|FATAL)[^\n]*)/m
				  && $stderr !~
			  /could not connect|terminat|shut|starting up|recovery|closed/;
				usleep(50_000);
			}
		}
		close $out;
		return 0;
	});
	return { pid => $pid, log => $log, stop => $stop, name => $name,
		node => $node };
}

my @readers = (
	start_reader($standby_a, 'a_rc', 'read committed', 1),
	start_reader($standby_a, 'a_rr', 'repeatable read', 3),
	start_reader($standby_b, 'b_rc', 'read committed', 1),
	start_reader($standby_b, 'b_rr', 'repeatable read', 3));

my $start = time();
my $pulse = pulse_commits($primary, $run_seconds);
my $load = bg_pgbench($primary, slow_commit_options(), '-c', '8', '-j', '2', '-T',
	$run_seconds, '-D', 'phase=1', '-f', $writer);

# a third into the run: restart standby b
usleep(1_000_000 * $run_seconds / 3);
$standby_b->restart;
note 'standby_b restarted at ' . sprintf('%.1f', time() - $start) . ' s';

# two thirds in: a transaction stopped inside its commit, holding numbers;
# the primary crashes and comes back
usleep(1_000_000 * ($run_seconds / 3 - 2));
my $held_gate = session($primary, $primary->connstr('postgres'));
$held_gate->query('SELECT pg_advisory_lock(4241)');
my $held = bg_psql($primary, 'SET stream_seq.hold_after_numbering = 4241',
	"INSERT INTO ev (client, phase) VALUES (-1, 1)");
my $held_query = q{
SELECT h.first_number FROM stream_seq.holders h
  JOIN pg_stat_activity a USING (pid)
 WHERE a.query LIKE '%VALUES (-1, 1)%'};
ok($primary->poll_query_until('postgres', "SELECT count(*) = 1 FROM ($held_query) h"),
	'crash: a transaction holds a number inside its commit');
my $held_number = $primary->safe_psql('postgres', $held_query);
$primary->wait_for_catchup($standby_a, 'replay');
# after a checkpoint, crash recovery does not replay stream "quiet"'s
# records: its counter stays unstarted on the restarted primary
$primary->safe_psql('postgres', 'CHECKPOINT');
my $sb_horizon = $standby_a->safe_psql('postgres',
	"SELECT stream_seq.horizon('ev')");
cmp_ok($sb_horizon, '<=', $held_number,
	"crash: the standby's horizon stays at or below the held number "
	  . "($sb_horizon <= $held_number)");
$primary->stop('immediate');
wait_done($held, 10);
wait_done($pulse, 10);
$held_gate->close;
$primary->start;
note 'primary crashed and restarted at '
  . sprintf('%.1f', time() - $start) . ' s';
my $pulse2 = pulse_commits($primary, int($run_seconds - (time() - $start)) + 1);
my $load2 = bg_pgbench($primary, slow_commit_options(), '-c', '8', '-j', '2', '-T',
	int($run_seconds - (time() - $start)) + 1,
	'-D', 'phase=1', '-f', $writer);
ok( $standby_a->poll_query_until('postgres',
		"SELECT stream_seq.horizon('ev') > $held_number"),
	'crash: the standby horizon passes the number of the transaction '
	  . 'that vanished');
ok( $standby_b->poll_query_until('postgres',
		"SELECT stream_seq.horizon('ev') > $held_number"),
	'crash: so does the restarted standby\'s');

# the first load died with the primary; the second runs to the end
wait_done($load, 10);
is(wait_done($load2, $run_seconds + 60), 0, 'load after the crash ran cleanly');
wait_done($pulse2, 60);
$primary->wait_for_catchup($standby_a, 'replay');
$primary->wait_for_catchup($standby_b, 'replay');

# Standby b restarts now, and must know nothing of stream "quiet": its
# horizon then comes from the rows the snapshot sees.  Neither the crash
# nor a checkpoint guarantees that: crash recovery replays the primary's
# last listings before the crash, which name "quiet" if one came after the
# checkpoint, and the primary then keeps listing it.  So the primary
# restarts cleanly (no redo; nothing starts the counter of "quiet" after
# that), checkpoints, and standby b makes its restartpoint at that
# checkpoint: nothing it replays from there names "quiet".  Without the
# restartpoint it would resume from whichever one it made last.
$primary->restart;
$primary->safe_psql('postgres', 'CHECKPOINT');
my $checkpoint_lsn = $primary->safe_psql('postgres',
	'SELECT checkpoint_lsn FROM pg_control_checkpoint()');
$primary->wait_for_catchup($standby_b, 'replay');
$standby_b->safe_psql('postgres', 'CHECKPOINT');
is( $standby_b->safe_psql('postgres',
		'SELECT checkpoint_lsn FROM pg_control_checkpoint()'),
	$checkpoint_lsn,
	'standby_b: its restartpoint is the checkpoint made after the crash');
$standby_b->restart;
ok( $standby_b->poll_query_until('postgres',
		"SELECT stream_seq.horizon('ev') > 0"),
	'standby_b: horizon() answers again after its second restart');
is( $standby_b->safe_psql('postgres', q{
SELECT stream_seq.horizon('quiet') || '|' || horizon || '|' ||
       coalesce(head::text, 'not started')
  FROM stream_seq.streams WHERE stream = 'quiet'::regclass}),
	'6|6|not started',
	'standby_b: a stream with nothing replayed: highest number seen + 1');

my $phase1 = $primary->safe_psql('postgres',
	'SELECT string_agg(seq::text, \',\' ORDER BY seq) FROM ev');
my @phase1 = split /,/, $phase1;
is($primary->safe_psql('postgres',
		"SELECT count(*) FROM ev WHERE seq = $held_number"),
	0, 'crash: the vanished transaction left no row');
note scalar(@phase1) . ' rows committed on the primary';

# standby b's readers read everything the primary committed
for my $r (@readers[2, 3])
{
	append_to_file($r->{stop}, "$phase1[-1]\n");
}

# promote standby a; the writers move to it
$primary->stop;
$standby_a->promote;
$standby_a->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'standby_a was not promoted';
my $load3 = bg_pgbench($standby_a, undef, '-c', '8', '-j', '2', '-T', '5',
	'-D', 'phase=2', '-f', $writer);
is(wait_done($load3, 60), 0, 'writers on the promoted standby ran cleanly');
my $all = $standby_a->safe_psql('postgres',
	'SELECT string_agg(seq::text, \',\' ORDER BY seq) FROM ev');
my @all = split /,/, $all;
cmp_ok(scalar(@all), '>', scalar(@phase1), 'promoted: new rows');
for my $r (@readers[0, 1])
{
	append_to_file($r->{stop}, "$all[-1]\n");
}

# each reader read exactly the committed rows, in order, once
for my $r (@readers)
{
	my $rc = wait_pid($r->{pid}, 120);
	is($rc, 0, "$r->{name}: reader finished");
	my @expected = $r->{name} =~ /^a/ ? @all : @phase1;
	my (@read, %horizon, $down, %errors);
	for my $line (split /\n/, slurp_file($r->{log}))
	{
		if ($line =~ /^R (\S+)/)
		{
			push @read, split /,/, $1;
		}
		elsif ($line =~ /^S (\d+) H (\d+)/)
		{
			$down++ if defined $horizon{$1} && $2 < $horizon{$1};
			$horizon{$1} = $2;
		}
		elsif ($line =~ /^E (\w+) /)
		{
			$errors{$1}++;
		}
	}
	my $unexpected = join(',', grep { $_ ne '55000' && $_ ne '0A000' }
		  sort keys %errors);
	is($unexpected, '', "$r->{name}: no errors but the retryable ones");
	note "$r->{name}: " . scalar(@read) . ' rows in '
	  . scalar(keys %horizon) . ' sessions; retryable errors: '
	  . join(', ', map { "$_ x $errors{$_}" } sort keys %errors);
	is($down // 0, 0, "$r->{name}: horizon never went down within a session");
	my $out_of_order = 0;
	for my $i (1 .. $#read)
	{
		$out_of_order++ if $read[$i] <= $read[$i - 1];
	}
	is($out_of_order, 0, "$r->{name}: read in order, none twice");
	my %seen = map { $_ => 1 } @read;
	my @missed = grep { !$seen{$_} } @expected;
	is(scalar(@missed), 0,
		"$r->{name}: no committed row skipped"
		  . (@missed ? " (missed @missed[0 .. ($#missed < 9 ? $#missed : 9)])" : ''));
	my %committed = map { $_ => 1 } @expected;
	is(scalar(grep { !$committed{$_} } @read), 0,
		"$r->{name}: nothing read that did not commit");
}

done_testing();
