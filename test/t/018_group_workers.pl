
# Copyright (c) stream_seq contributors
#
# 018_group_workers.pl: a consumer group worked by several workers through
# pgbouncer in transaction pooling mode, some of them killed, applies every
# committed row exactly once, the rows of each key in order, and a worker
# that lost its slot cannot commit work for it.
#
# A stream table "ev" with a key column k (1,000 keys) and a group "g" of 8
# slots keyed by it; 8 pgbench writers insert rows with random keys in
# short transactions, some rolled back whole, some in part (to a
# savepoint).  Workers are psql sessions through a pgbouncer of the test's
# own (pool_mode = transaction, simple protocol, one round trip per
# statement), each in a process of its own that loops:
#   claim (lease 2 s, renewed every loop); then for each slot it holds, one
#   transaction: BEGIN; read a page with read_slot() and insert its rows
#   into the oracle table "applied" (primary key seq; "ord" from a sequence
#   records the order rows were applied in); advance_slot() to the page's
#   last row; COMMIT.
# Every few seconds one worker is killed with SIGKILL, client and all, and
# a new one joins.  The first to join this way ("doomed") is killed in the
# middle of a transaction, deterministically: it applies a page and waits
# before advancing; its server connection must go (not back to the pool
# with the transaction open), and its page be applied by another worker.
#
# Fencing, made deterministic: before the workers start, a worker
# "stalled" claims every slot, reads a page of one and applies it, then
# stalls, its transaction open, until its lease has run out and another
# worker has taken the slot over; its advance_slot() must then fail with
# SQLSTATE SS001 and its work roll back (the new holder, blocked on the
# stalled worker's uncommitted rows in the oracle, applies them once it has
# rolled back).
#
# Checked once the writers are done and the workers have drained the
# group: the oracle holds exactly the committed rows (none missing, none
# extra; the primary key allows none twice), per key in increasing seq;
# each slot's position is its last row; the workers still running ended
# cleanly; no server process crashed.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use StreamSeqTest;

my $pgbouncer = '/usr/sbin/pgbouncer';
if (!-x $pgbouncer)
{
	# test/run-tests.sh installs it when run as root (as CI does)
	die "$pgbouncer is missing; test/run-tests.sh installs it as root"
	  if $> == 0;
	plan skip_all =>
	  "pgbouncer is not installed ($pgbouncer); run: sudo apt-get install -y pgbouncer";
}

my $t_start = time();
unlink glob "$PostgreSQL::Test::Utils::log_path/018_worker_*.log";
my $node = new_node('group_workers', "max_connections = 60\n");
my $log_start = log_offset($node);

$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE ev (id bigserial PRIMARY KEY, k int NOT NULL, payload text);
SELECT stream_seq.enable('ev');
SELECT stream_seq.create_group('ev', 'g', 'k', 8);
CREATE SEQUENCE apply_order;
CREATE TABLE applied (seq bigint PRIMARY KEY, k int NOT NULL, id bigint NOT NULL,
                      ord bigint NOT NULL DEFAULT nextval('apply_order'),
                      worker text NOT NULL);
});

my $bouncer = start_pgbouncer($node, path => $pgbouncer, pool_size => 20);
note "pgbouncer $bouncer->{version} on port $bouncer->{port}";

# 8 writers: 1-3 rows of random keys per transaction; 1 in 10 rolled back,
# 2 in 10 roll the last two rows back to a savepoint
my $writer_script = $node->basedir . '/writer.sql';
append_to_file($writer_script, q{
\set k1 random(1, 1000)
\set k2 random(1, 1000)
\set k3 random(1, 1000)
\set outcome random(1, 10)
BEGIN;
INSERT INTO ev (k, payload) VALUES (:k1, 'a');
SAVEPOINT s;
INSERT INTO ev (k, payload) VALUES (:k2, 'b'), (:k3, 'c');
\if :outcome <= 2
ROLLBACK TO SAVEPOINT s;
\endif
\if :outcome = 10
ROLLBACK;
\else
COMMIT;
\endif
});
my $writers = bg_pgbench($node, undef, '-c', '8', '-j', '2', '-T', '24',
	'-R', '400', '-f', $writer_script);

# rows left to apply: rows above the position of their slot
my $pending_sql = q{
SELECT count(*) FROM ev e
  JOIN stream_seq.consumer_slots s
    ON s.stream = 'ev'::regclass AND s.consumer = 'g'
   AND s.slot = stream_seq.slot_of(e.k::text, 8)
 WHERE e.seq > s.position};

my $stop_file = $node->basedir . '/workers.stop';

# The worker loop.  Returns 0 if it ended cleanly (stop file), 1 after an
# error it does not expect: only SS001 (fenced: roll back and claim again)
# is expected; a deadlock (40P01) is not, since claim(), release() and
# advance_slot() lock slots in slot order.  A doomed worker,
# once it has applied a page, says so in file $doomed_file (slot, last
# row, rows, its server process) and waits, the transaction open, to be
# killed.
my $doomed_file = $node->basedir . '/doomed.ready';

sub worker
{
	my ($name, $doomed) = @_;
	my $s = session($node, $bouncer->{connstr});
	my %n = (pages => 0, rows => 0, fenced => 0);
	print "$name: started, pid $$\n";

	# "what" failed with result "r": roll back, count, and say whether the
	# worker goes on
	my $failed = sub {
		my ($what, $r) = @_;
		print "$name: $what: $r->{sqlstate} $r->{message}\n";
		return 0 if $r->{sqlstate} eq 'dead';
		$s->query('ROLLBACK');
		if ($r->{sqlstate} eq 'SS001')
		{
			$n{fenced}++;
			return 1;
		}
		return 0;
	};

	while (!-e $stop_file)
	{
		my $r = $s->query(
			qq{SELECT slot, token FROM stream_seq.claim('ev', 'g', '$name', '2 s')});
		if (defined $r->{sqlstate})
		{
			return 1 unless $failed->('claim', $r);
			next;
		}
		my $applied = 0;
		for my $held (grep { $_ ne '' } split /\n/, $r->{out})
		{
			my ($slot, $token) = split /\|/, $held;
			$r = $s->query('BEGIN');
			return 1 if defined $r->{sqlstate} && !$failed->('begin', $r);
			$r = $s->query(qq{
WITH page AS (SELECT seq, "row" FROM stream_seq.read_slot('ev', 'g', $slot, $token, 100)),
     ins AS (INSERT INTO applied (seq, k, id, worker)
             SELECT seq, ("row"->>'k')::int, ("row"->>'id')::bigint, '$name'
               FROM page ORDER BY seq
             RETURNING seq)
SELECT count(*), coalesce(max(seq), 0) FROM ins});
			if (defined $r->{sqlstate})
			{
				return 1 unless $failed->("read and apply slot $slot token $token", $r);
				last;
			}
			my ($rows, $last) = split /\|/, $r->{out};
			if ($rows > 0 && $doomed)
			{
				my ($pid) = $s->rows('SELECT pg_backend_pid()');
				append_to_file("$doomed_file.tmp", "$slot|$last|$rows|$pid->[0]\n");
				rename("$doomed_file.tmp", $doomed_file);
				sleep 600;
			}
			if ($rows > 0)
			{
				$r = $s->query(
					"SELECT stream_seq.advance_slot('ev', 'g', $slot, $token, $last)");
				if (defined $r->{sqlstate})
				{
					return 1
					  unless $failed->("advance slot $slot token $token", $r);
					last;
				}
			}
			$r = $s->query('COMMIT');
			if (defined $r->{sqlstate})
			{
				return 1 unless $failed->('commit', $r);
				last;
			}
			$n{pages}++ if $rows > 0;
			$n{rows} += $rows;
			$applied += $rows;
		}
		usleep(50_000) unless $applied;
	}
	# a clean stop gives the slots back
	for (1 .. 5)
	{
		my $r = $s->query("SELECT stream_seq.release('ev', 'g', '$name')");
		last unless defined $r->{sqlstate};
		return 1 unless $failed->('release', $r);
	}
	$s->close;
	print "$name: done: "
	  . join(' ', map { "$_=$n{$_}" } sort keys %n) . "\n";
	return 0;
}

my %workers;    # name => pid
my $next_worker = 1;

sub start_worker
{
	my ($doomed) = @_;
	my $name = $doomed ? 'doomed' : 'w' . $next_worker++;
	my $log = "$PostgreSQL::Test::Utils::log_path/018_worker_$name.log";
	$workers{$name} = bg_fork($log, sub { worker($name, $doomed) });
	return $name;
}

# the writers get going
$node->poll_query_until('postgres', 'SELECT count(*) >= 300 FROM ev')
  or die 'writers did not get going';

# the stalled worker: alone, it gets every slot; it reads a page of the
# first slot with rows and applies it, then stalls, its transaction open
my $stalled = session($node, $bouncer->{connstr});
my @claimed = $stalled->rows(
	q{SELECT slot, token FROM stream_seq.claim('ev', 'g', 'stalled', '2 s') ORDER BY slot});
is(scalar @claimed, 8, 'fencing: a worker alone gets all 8 slots');
my ($slot, $token);
for my $c (@claimed)
{
	($slot, $token) = @$c;
	last
	  if $node->safe_psql('postgres',
		"SELECT count(*) FROM ev WHERE stream_seq.slot_of(k::text, 8) = $slot") > 0;
}
$stalled->rows('BEGIN');
my ($stalled_rows, $stalled_last) = @{ (
		$stalled->rows(qq{
WITH page AS (SELECT seq, "row" FROM stream_seq.read_slot('ev', 'g', $slot, $token, 100)),
     ins AS (INSERT INTO applied (seq, k, id, worker)
             SELECT seq, ("row"->>'k')::int, ("row"->>'id')::bigint, 'stalled'
               FROM page ORDER BY seq
             RETURNING seq)
SELECT count(*), max(seq) FROM ins}))[0] };
cmp_ok($stalled_rows, '>', 0,
	"fencing: the stalled worker applied a page of slot $slot ($stalled_rows rows)");

# the workers start; they get the slots once the stalled worker's lease
# has run out
start_worker() for 1 .. 4;
ok( $node->poll_query_until('postgres', qq{
SELECT worker IS NOT NULL AND worker <> 'stalled' AND token > $token
  FROM stream_seq.consumer_slots
 WHERE stream = 'ev'::regclass AND consumer = 'g' AND slot = $slot}),
	"fencing: another worker took slot $slot over");
my $r = $stalled->query(
	"SELECT stream_seq.advance_slot('ev', 'g', $slot, $token, $stalled_last)");
is($r->{sqlstate} // 'ok', 'SS001',
	'fencing: the stalled worker cannot advance the slot it lost (SS001)');
like($r->{message} // '', qr/lease on slot $slot of group "g" was lost/,
	'fencing: the error says the lease was lost');
$stalled->rows('ROLLBACK');
$r = $stalled->query(
	"SELECT count(*) FROM stream_seq.read_slot('ev', 'g', $slot, $token, 100)");
is($r->{sqlstate} // 'ok', 'SS001',
	'fencing: nor read it, in its next transaction (SS001)');
is( $node->safe_psql('postgres',
		"SELECT count(*) FROM applied WHERE worker = 'stalled'"),
	0,
	'fencing: nothing of the stalled worker\'s work was committed');
$stalled->close;

# every 3 s one worker is killed, client and all, and a new one joins,
# until the writers are done; the first to join is the doomed one
my @killed;
my $writers_h = $writers->{handle};
my $next_kill = time() + 3;
my ($doomed_slot, $doomed_last, $doomed_rows, $doomed_backend);
while ($writers_h->pumpable)
{
	$writers_h->pump_nb;
	usleep(100_000);
	if (exists $workers{doomed} && -e $doomed_file)
	{
		($doomed_slot, $doomed_last, $doomed_rows, $doomed_backend) =
		  split /\|/, slurp_file($doomed_file);
		chomp $doomed_backend;
		my $pid = delete $workers{doomed};
		kill_group($pid);
		push @killed, [ 'doomed', wait_pid($pid, 30) ];
		start_worker();
		$next_kill = time() + 3;
	}
	next if time() < $next_kill;
	my @alive = sort grep { $_ ne 'doomed' } keys %workers;
	my $victim = $alive[ int(rand(@alive)) ];
	my $pid = delete $workers{$victim};
	kill_group($pid);
	push @killed, [ $victim, wait_pid($pid, 30) ];
	start_worker(!defined $doomed_slot && !exists $workers{doomed});
	$next_kill = time() + 3;
}
is(wait_done($writers, 60), 0, 'writers ran cleanly')
  or diag ${ $writers->{err} };
cmp_ok(scalar @killed, '>=', 3,
	'workers killed with SIGKILL while they worked: ' . scalar @killed);
is(scalar(grep { defined $_->[1] && $_->[1] == -9 } @killed),
	scalar @killed, 'every killed worker ended by SIGKILL');
ok(defined $doomed_slot,
	'a worker was killed with its transaction open, a page applied but not advanced');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $doomed_backend"),
	'the killed worker\'s server connection was closed, not pooled with its transaction open');

# the workers drain the group
my $pending;
my $deadline = time() + 120;
while (time() < $deadline)
{
	$pending = $node->safe_psql('postgres', $pending_sql);
	last if $pending == 0;
	sleep 1;
}
is($pending, 0, 'the workers drained the group: no row left above its slot');

# the workers left stop cleanly
append_to_file($stop_file, "stop\n");
for my $name (sort keys %workers)
{
	is(wait_pid($workers{$name}, 60), 0, "worker $name ended cleanly")
	  or diag slurp_file(
		"$PostgreSQL::Test::Utils::log_path/018_worker_$name.log");
}

check_unique($node, 'ev', 'group workers');
my ($committed, $applied, $missing, $extra) = row($node, q{
SELECT (SELECT count(*) FROM ev),
       (SELECT count(*) FROM applied),
       (SELECT count(*) FROM ev e WHERE NOT EXISTS (
          SELECT FROM applied a WHERE a.seq = e.seq)),
       (SELECT count(*) FROM applied a WHERE NOT EXISTS (
          SELECT FROM ev e WHERE e.seq = a.seq AND e.id = a.id AND e.k = a.k))});
cmp_ok($committed, '>', 5000, "rows committed by the writers: $committed");
is($missing, 0, 'no committed row is missing from the oracle');
is($extra, 0, 'the oracle holds no row that was not committed, nor another key or id');
is($applied, $committed, "every committed row applied exactly once ($applied)");

my ($out_of_order, $keys_checked) = row($node, q{
SELECT count(*) FILTER (WHERE prev_seq > seq),
       count(DISTINCT k) FILTER (WHERE prev_seq IS NOT NULL)
  FROM (SELECT k, seq, lag(seq) OVER (PARTITION BY k ORDER BY ord) AS prev_seq
          FROM applied) a});
is($out_of_order, 0, 'within each key, rows were applied in increasing seq');
cmp_ok($keys_checked, '>=', 900, "keys with several rows checked: $keys_checked");
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM stream_seq.consumer_slots s
 WHERE s.stream = 'ev'::regclass AND s.consumer = 'g'
   AND s.position IS DISTINCT FROM (
       SELECT max(seq) FROM ev WHERE stream_seq.slot_of(k::text, 8) = s.slot)}),
	0,
	'each slot ends at its last row');
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM applied WHERE worker IN ('stalled', 'doomed')}),
	0,
	'nothing was applied by the fenced worker nor the one killed in its transaction');
is( $node->safe_psql('postgres', qq{
SELECT count(*) FROM applied
 WHERE seq <= $doomed_last AND stream_seq.slot_of(k::text, 8) = $doomed_slot}),
	$node->safe_psql('postgres', qq{
SELECT count(*) FROM ev
 WHERE seq <= $doomed_last AND stream_seq.slot_of(k::text, 8) = $doomed_slot}),
	'the page of the worker killed in its transaction was applied by another');
is( $node->safe_psql('postgres', qq{
SELECT count(*) FILTER (WHERE a.worker <> 'stalled') || '|' || max(p.seq)
  FROM (SELECT seq FROM ev WHERE stream_seq.slot_of(k::text, 8) = $slot
         ORDER BY seq LIMIT $stalled_rows) p
  JOIN applied a USING (seq)}),
	"$stalled_rows|$stalled_last",
	'the fenced worker\'s page was applied by the worker that took the slot over');

# what the workers met
my @worker_logs = glob "$PostgreSQL::Test::Utils::log_path/018_worker_*.log";
my %met = (SS001 => 0, '40P01' => 0);
for my $wlog (@worker_logs)
{
	my $text = slurp_file($wlog);
	$met{$1}++ while $text =~ /: (SS001|40P01) /g;
}
note scalar(@worker_logs) . ' workers, ' . scalar(@killed)
  . " killed; SS001 met by the workers: $met{SS001}; deadlocks (40P01): $met{'40P01'}";
is($met{'40P01'}, 0, 'no worker met a deadlock: slots are locked in slot order');

my $log = log_since($node, $log_start);
unlike($log, qr/PANIC|TRAP:|terminated by signal|server process .* was terminated/,
	'no server process crashed');

stop_pgbouncer($bouncer);
$node->stop;
note sprintf('wall time %.0f s', time() - $t_start);
done_testing();
