
# Copyright (c) stream_seq contributors
#
# 032_resize_group.pl: a consumer group resized up and down while writers
# write and workers work (through pgbouncer in transaction pooling mode,
# some workers killed with SIGKILL, and once a worker's server process,
# which makes the postmaster restart every backend while a resize is
# pending) applies every committed row exactly once, the rows of each key
# in order.
#
# A stream table "ev" with a key column k (500 keys) and a group "g" of 4
# slots keyed by it.  Phase 1: 6 pgbench writers insert rows of random
# keys; 4 workers (the loop of 018_group_workers.pl: claim, then per slot
# held one transaction that reads a page with read_slot(), inserts it into
# the oracle table "applied" and advances the slot) consume the group; the
# group is resized to 8, then 3, then 5 slots, each time waiting (polling)
# until a worker's claim() has switched it, and a worker is killed with
# SIGKILL, client and all, after each switch, and a new one joins.
# Phase 2: with a burst of rows unread, a resize to 2 is requested; a
# worker's server process is killed with SIGKILL (the postmaster restarts
# every backend); the pending resize survives in the extension's tables,
# and the workers, which from then on retry whatever fails, switch it once
# the old slots have finished up to the fence.
#
# Checked once the workers have drained the group: the oracle holds exactly
# the committed rows (none missing, none extra; its primary key allows none
# twice); within each key, the order rows were applied in (a sequence,
# "ord") is increasing seq; before the crash no worker met an error other
# than SS001 (no deadlock); the only crash is the one the test caused.

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
	die "$pgbouncer is missing; test/run-tests.sh installs it as root"
	  if $> == 0;
	plan skip_all =>
	  "pgbouncer is not installed ($pgbouncer); run: sudo apt-get install -y pgbouncer";
}

my $t_start = time();
unlink glob "$PostgreSQL::Test::Utils::log_path/032_worker_*.log";
my $node = new_node('resize_group', "max_connections = 60\nrestart_after_crash = on\n");
my $log_start = log_offset($node);

$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE ev (id bigserial PRIMARY KEY, k int NOT NULL, payload text);
SELECT stream_seq.enable('ev');
SELECT stream_seq.create_group('ev', 'g', 'k', 4);
CREATE SEQUENCE apply_order;
CREATE TABLE applied (seq bigint PRIMARY KEY, k int NOT NULL, id bigint NOT NULL,
                      ord bigint NOT NULL DEFAULT nextval('apply_order'),
                      worker text NOT NULL);
});

my $bouncer = start_pgbouncer($node, path => $pgbouncer, pool_size => 20);
note "pgbouncer $bouncer->{version} on port $bouncer->{port}";

my $writer_script = $node->basedir . '/writer.sql';
append_to_file($writer_script, q{
\set k1 random(1, 500)
\set k2 random(1, 500)
\set outcome random(1, 10)
BEGIN;
INSERT INTO ev (k, payload) VALUES (:k1, 'a'), (:k2, 'b');
\if :outcome = 10
ROLLBACK;
\else
COMMIT;
\endif
});

my $stop_file = $node->basedir . '/workers.stop';
# once it exists, workers retry whatever fails (the server restarts)
my $crash_file = $node->basedir . '/crash';
# the pgbouncer to connect to, once the test has started a new one (after
# the crash: pgbouncer 1.18 stops logging in to a server whose login
# failed while it restarted, and lets its clients wait for good)
my $connstr_file = $node->basedir . '/connstr';

sub bouncer_connstr
{
	return -e $connstr_file ? slurp_file($connstr_file) : $bouncer->{connstr};
}

# The worker loop of 018_group_workers.pl.  Before the crash only SS001 is
# expected (fenced, by a takeover or a resize: roll back and claim again);
# anything else ends the worker with 1.  After it, every error is retried,
# with a new psql if the old one is gone.
sub worker
{
	my ($name) = @_;
	my $s = session($node, $bouncer->{connstr});
	my %n = (pages => 0, rows => 0, fenced => 0, retried => 0);
	print "$name: started, pid $$\n";

	my $failed = sub {
		my ($what, $r) = @_;
		print "$name: $what: $r->{sqlstate} $r->{message}\n";
		if ($r->{sqlstate} eq 'SS001')
		{
			$s->query('ROLLBACK');
			$n{fenced}++;
			return 1;
		}
		return 0 unless -e $crash_file;
		$n{retried}++;
		if ($r->{sqlstate} eq 'dead')
		{
			$s = eval { session($node, bouncer_connstr()) };
			usleep(200_000);
			return 1;
		}
		$s->query('ROLLBACK');
		usleep(100_000);
		return 1;
	};

	while (!-e $stop_file)
	{
		if (!defined $s)
		{
			$s = eval { session($node, bouncer_connstr()) };
			usleep(200_000);
			next;
		}
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
			if (defined $r->{sqlstate})
			{
				return 1 unless $failed->('begin', $r);
				last;
			}
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
my @killed;
my $next_worker = 1;

sub start_worker
{
	my $name = 'w' . $next_worker++;
	my $log = "$PostgreSQL::Test::Utils::log_path/032_worker_$name.log";
	$workers{$name} = bg_fork($log, sub { worker($name) });
	return $name;
}

# one worker, client and all, killed with SIGKILL; a new one joins
sub kill_a_worker
{
	my @alive = sort keys %workers;
	my $victim = $alive[ int(rand(@alive)) ];
	my $pid = delete $workers{$victim};
	kill_group($pid);
	push @killed, [ $victim, wait_pid($pid, 30) ];
	start_worker();
}

# a resize to "slots", then a worker's claim() switching it
sub resize_and_wait
{
	my ($slots) = @_;
	my $now = $node->safe_psql('postgres',
		"SELECT stream_seq.resize_group('ev', 'g', $slots)");
	note "resize to $slots: " . ($now eq 't' ? 'switched at once' : 'pending');
	ok( $node->poll_query_until('postgres', qq{
SELECT slots = $slots AND resize_to IS NULL FROM stream_seq.consumers
 WHERE consumer = 'g'}),
		"the workers switched the group to $slots slots");
	is( $node->safe_psql('postgres', q{
SELECT count(*) FROM stream_seq.consumer_slots WHERE consumer = 'g'}),
		$slots, "the group has $slots slot rows");
}

# phase 1: writers, workers, resizes up and down, workers killed
my $writers = bg_pgbench($node, undef, '-c', '6', '-j', '2', '-T', '12',
	'-R', '300', '-f', $writer_script);
start_worker() for 1 .. 4;
$node->poll_query_until('postgres', 'SELECT count(*) >= 300 FROM applied')
  or die 'the workers did not get going';

for my $slots (8, 3, 5)
{
	resize_and_wait($slots);
	kill_a_worker();
}
is(wait_done($writers, 60), 0, 'writers ran cleanly')
  or diag ${ $writers->{err} };
is(scalar(grep { defined $_->[1] && $_->[1] == -9 } @killed),
	3, 'three workers killed with SIGKILL while they worked');

# phase 2: the workers are held up (a lock on the oracle table stops
# their inserts, in the transactions that read); a burst they have not
# read; a resize to 2, certainly pending; a worker's server process,
# waiting for the lock, killed with SIGKILL
my $locker = session($node, $node->connstr('postgres'));
$locker->rows('BEGIN');
$locker->rows('LOCK TABLE applied IN SHARE MODE');
$node->safe_psql('postgres', q{
INSERT INTO ev (k, payload) SELECT 1 + (g * 7919) % 500, 'burst' FROM generate_series(1, 5000) g});
is($node->safe_psql('postgres', "SELECT stream_seq.resize_group('ev', 'g', 2)"),
	'f', 'a resize to 2 with rows unread is pending');
my $fence = $node->safe_psql('postgres',
	"SELECT resize_fence FROM stream_seq.consumers WHERE consumer = 'g'");
cmp_ok($fence, '>=', $node->safe_psql('postgres', 'SELECT max(seq) FROM ev'),
	"its fence ($fence) is at or above the last row written before it");
append_to_file($crash_file, "crash\n");
ok( $node->poll_query_until('postgres', q{
SELECT count(*) > 0 FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND query LIKE '%read_slot%'}),
	'a worker waits for the lock in its transaction');
my $victim = $node->safe_psql('postgres', q{
SELECT pid FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND query LIKE '%read_slot%' LIMIT 1});
note "killing server process $victim with SIGKILL";
kill 'KILL', $victim;
ok($node->poll_query_until('postgres', 'SELECT true'),
	'the server is back after the crash');
stop_pgbouncer($bouncer);
$bouncer = start_pgbouncer($node, path => $pgbouncer, pool_size => 20,
	name => 'resize_group_after_crash');
append_to_file("$connstr_file.tmp", $bouncer->{connstr});
rename("$connstr_file.tmp", $connstr_file) or die "rename: $!";
note 'resize state after the crash: '
  . $node->safe_psql('postgres', q{
SELECT slots || ' slots, resize_to ' || coalesce(resize_to::text, 'none')
  FROM stream_seq.consumers WHERE consumer = 'g'});

# the workers drain the group and switch it to 2 slots
ok( $node->poll_query_until('postgres', q{
SELECT c.slots = 2 AND c.resize_to IS NULL
       AND NOT EXISTS (
         SELECT FROM ev e
           JOIN stream_seq.consumer_slots s
             ON s.stream = 'ev'::regclass AND s.consumer = 'g'
            AND s.slot = stream_seq.slot_of(e.k::text, c.slots)
          WHERE e.seq > s.position)
  FROM stream_seq.consumers c WHERE c.consumer = 'g'}),
	'the workers switched the group to 2 slots and drained it');

append_to_file($stop_file, "stop\n");
for my $name (sort keys %workers)
{
	is(wait_pid($workers{$name}, 60), 0, "worker $name ended cleanly")
	  or diag slurp_file(
		"$PostgreSQL::Test::Utils::log_path/032_worker_$name.log");
}

check_unique($node, 'ev', 'resized group');
my ($committed, $applied, $missing, $extra) = row($node, q{
SELECT (SELECT count(*) FROM ev),
       (SELECT count(*) FROM applied),
       (SELECT count(*) FROM ev e WHERE NOT EXISTS (
          SELECT FROM applied a WHERE a.seq = e.seq)),
       (SELECT count(*) FROM applied a WHERE NOT EXISTS (
          SELECT FROM ev e WHERE e.seq = a.seq AND e.id = a.id AND e.k = a.k))});
cmp_ok($committed, '>', 5000, "rows committed: $committed");
is($missing, 0, 'no committed row is missing from the oracle');
is($extra, 0, 'the oracle holds no row that was not committed, nor another key or id');
is($applied, $committed, "every committed row applied exactly once ($applied)");

my ($out_of_order, $keys_checked) = row($node, q{
SELECT count(*) FILTER (WHERE prev_seq > seq),
       count(DISTINCT k) FILTER (WHERE prev_seq IS NOT NULL)
  FROM (SELECT k, seq, lag(seq) OVER (PARTITION BY k ORDER BY ord) AS prev_seq
          FROM applied) a});
is($out_of_order, 0, 'within each key, rows were applied in increasing seq');
cmp_ok($keys_checked, '>=', 450, "keys with several rows checked: $keys_checked");
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM pg_indexes WHERE tablename = 'ev' AND indexdef LIKE '%slot_of%'}),
	2, 'the group\'s index and the one its last resize retired');
$node->safe_psql('postgres', "SELECT stream_seq.resize_group('ev', 'g', 2)");
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM pg_indexes WHERE tablename = 'ev' AND indexdef LIKE '%slot_of%'}),
	1, 'resize_group() to the same count drops the retired index');

my @worker_logs = glob "$PostgreSQL::Test::Utils::log_path/032_worker_*.log";
my %met = (SS001 => 0, '40P01' => 0, retried => 0);
for my $wlog (@worker_logs)
{
	my $text = slurp_file($wlog);
	$met{$1}++ while $text =~ /: (SS001|40P01) /g;
	$met{retried} += $1 while $text =~ /retried=(\d+)/g;
}
note scalar(@worker_logs)
  . " workers; SS001 met: $met{SS001}; deadlocks: $met{'40P01'}; errors retried after the crash: $met{retried}";
is($met{'40P01'}, 0, 'no worker met a deadlock');

my $log = slurp_file($node->logfile, $log_start);
# "server process" on PostgreSQL 15, the process's type ("client backend")
# from 16 on
my @crashes = $log =~ /((?:server process|client backend) \(PID \d+\) was terminated by signal 9)/g;
is(scalar @crashes, 1, 'one server process was killed: the one the test killed');
like($log, qr/PID $victim\) was terminated by signal 9/,
	'the server process killed was the worker\'s');
unlike($log, qr/PANIC|TRAP:/, 'no PANIC, no assertion failure');

# phase 3: a pending resize survives pg_dump and pg_restore -j (the state
# is in the extension's configuration tables, its index an ordinary one),
# and a worker in the restored database finishes it
$node->safe_psql('postgres', q{
INSERT INTO ev (k, payload) SELECT g, 'late' FROM generate_series(1, 20) g});
is($node->safe_psql('postgres', "SELECT stream_seq.resize_group('ev', 'g', 3)"),
	'f', 'a resize to 3 with rows unread is pending before the dump');
my $state_sql = q{
SELECT slots || '|' || resize_to || '|' || resize_fence FROM stream_seq.consumers
 WHERE consumer = 'g'};
my $pending = $node->safe_psql('postgres', $state_sql);
my $dump = $node->basedir . '/resize.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', 'postgres' ],
	'pg_dump -Fc with a resize pending');
$node->safe_psql('postgres', 'CREATE DATABASE restored');
$node->command_ok(
	[ 'pg_restore', '--exit-on-error', '-j', '2', '-d', 'restored', $dump ],
	'pg_restore -j 2 into a new database');
is($node->safe_psql('restored', $state_sql), $pending,
	"the pending resize was restored ($pending)");
is( $node->safe_psql('restored', q{
SELECT count(*) FROM pg_indexes WHERE tablename = 'ev' AND indexdef LIKE '%slot_of%'}),
	2, 'the group\'s index and the pending resize\'s were restored');
my ($fence3) = (split /\|/, $pending)[2];
my $late = 0;
for my $c ($node->safe_psql('restored',
		"SELECT slot || '|' || token FROM stream_seq.claim('ev', 'g', 'r1', '1 minute')") =~ /^(\d+\|\d+)$/mg)
{
	my ($slot, $token) = split /\|/, $c;
	my ($rows, $max, $above) = split /\|/, $node->safe_psql('restored', qq{
SELECT count(*), coalesce(max(seq), 0), count(*) FILTER (WHERE seq > $fence3)
  FROM stream_seq.read_slot('ev', 'g', $slot, $token, 1000)});
	$late += $above;
	$node->safe_psql('restored',
		"SELECT stream_seq.advance_slot('ev', 'g', $slot, $token, $max)")
	  if $rows > 0;
}
my $resize_state = q{
SELECT slots || '|' || coalesce(resize_to::text, '') FROM stream_seq.consumers WHERE consumer = 'g'};
is($node->safe_psql('restored', $resize_state), '2|3',
	'in the restored database, a worker finished the old slots up to the fence');
$node->safe_psql('restored', "SELECT count(*) FROM stream_seq.claim('ev', 'g', 'r1', '1 minute')");
is($node->safe_psql('restored', $resize_state), '3|',
	'and its next claim switched to 3 slots');
is($late, 0, 'no row above the fence was read before the switch');
is( $node->safe_psql('restored', qq{
SELECT count(*) FROM stream_seq.claim('ev', 'g', 'r1', '1 minute') c,
       LATERAL stream_seq.read_slot('ev', 'g', c.slot, c.token, 1000) r}),
	$node->safe_psql('restored', "SELECT count(*) FROM ev WHERE seq > $fence3"),
	'the new slots hold the rows above the fence');

stop_pgbouncer($bouncer);
eval { $locker->close; };
$node->stop;
note sprintf('wall time %.0f s', time() - $t_start);
done_testing();
