
# Copyright (c) stream_seq contributors
#
# 033_retries.pl: workers of a consumer group with a retry policy, through
# pgbouncer in transaction pooling mode, some of them killed, apply every
# row once: a row that fails now and then is retried by due() until it
# succeeds; a row that always fails becomes a dead letter after the
# policy's maximum, is counted as one, and once the handler is fixed and
# the dead letters revived, is applied once too.
#
# A stream table "ev" (key k, 200 keys; payload 'ok', 'flaky' or
# 'poison'), a group "g" of 4 slots keyed by k, with the policy: at most 3
# failures, waiting 20 ms, doubling, at most 100 ms.  4 pgbench writers
# insert rows in transactions with savepoints, 1 in 25 rows flaky and 1 in
# 250 poison, some rolled back.  The handler, handle(), fails (SQLSTATE
# 22000) on a flaky row delivered with fewer than 2 failures behind it, and
# on a poison row unless the test has "fixed" it; otherwise it inserts the
# row into the oracle table "applied" (primary key seq) with the number of
# failures behind it.  Workers (psql sessions through the pgbouncer, each
# in a process of its own) loop: claim, then for each slot held one
# statement, work(): take the group's due retries (due()) and the slot's
# next page (read_slot()), apply each row in a subtransaction of its own,
# park (stream_seq.park) the rows that fail, advance the slot past the
# page.  Every 2 s one worker is killed with SIGKILL and a new one joins.
#
# Checked once the writers are done and nothing but dead letters is
# parked: every committed row that is not poison is applied exactly once;
# 'ok' rows with no failure behind them, per key in increasing seq; every
# flaky row after exactly 2 failures; every poison row is a dead letter
# after 3 attempts, not applied, and the consumers view counts them; a
# crash (immediate stop) keeps the dead letters and the policy, and the
# stream's time column (enable()'s time_column) never goes down as numbers
# go up across it; after the fix and revive(), every committed row is
# applied exactly once and nothing is parked; no server process crashed
# but the one crash the test makes.

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
unlink glob "$PostgreSQL::Test::Utils::log_path/033_worker_*.log";
my $node = new_node('retries', "max_connections = 40\n");
my $log_start = log_offset($node);

$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE ev (id bigserial PRIMARY KEY, k int NOT NULL, payload text NOT NULL);
SELECT stream_seq.enable('ev', time_column => 'committed_at');
SELECT stream_seq.create_group('ev', 'g', 'k', 4);
SELECT stream_seq.set_retry_policy('ev', 'g', 3, '20 ms', 2, '100 ms');
CREATE SEQUENCE apply_order;
CREATE TABLE applied (seq bigint PRIMARY KEY, k int NOT NULL, payload text NOT NULL,
                      failures int NOT NULL, worker text NOT NULL,
                      ord bigint NOT NULL DEFAULT nextval('apply_order'));
CREATE TABLE fixed (poison boolean NOT NULL);
INSERT INTO fixed VALUES (false);

CREATE FUNCTION handle(seq bigint, r jsonb, failures int, worker text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF r->>'payload' = 'poison' AND NOT (SELECT poison FROM fixed) THEN
        RAISE EXCEPTION 'poison row %', seq USING ERRCODE = '22000';
    END IF;
    IF r->>'payload' = 'flaky' AND failures < 2 THEN
        RAISE EXCEPTION 'flaky row % after % failures', seq, failures USING ERRCODE = '22000';
    END IF;
    INSERT INTO applied (seq, k, payload, failures, worker)
    VALUES (seq, (r->>'k')::int, r->>'payload', failures, worker);
END;
$$;

-- one worker transaction for a slot: the group's due retries, then the
-- slot's next page; a row that fails is parked, in the transaction that
-- advances past it
CREATE FUNCTION work(slot int, token bigint, worker text) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    last bigint;
    n int := 0;
BEGIN
    FOR r IN SELECT * FROM stream_seq.due('ev', 'g', 20) LOOP
        BEGIN
            PERFORM handle(r.seq, r."row", r.attempts, worker);
        EXCEPTION WHEN data_exception THEN
            PERFORM stream_seq.park('ev', 'g', r.seq, SQLERRM);
        END;
        n := n + 1;
    END LOOP;
    FOR r IN SELECT * FROM stream_seq.read_slot('ev', 'g', slot, token, 50) LOOP
        BEGIN
            PERFORM handle(r.seq, r."row", 0, worker);
        EXCEPTION WHEN data_exception THEN
            PERFORM stream_seq.park('ev', 'g', r.seq, SQLERRM);
        END;
        last := r.seq;
        n := n + 1;
    END LOOP;
    IF last IS NOT NULL THEN
        PERFORM stream_seq.advance_slot('ev', 'g', slot, token, last);
    END IF;
    RETURN n;
END;
$$;
});

my $bouncer = start_pgbouncer($node, path => $pgbouncer, pool_size => 16);
note "pgbouncer $bouncer->{version} on port $bouncer->{port}";

# 4 writers: 1-3 rows per transaction with a savepoint; 1 in 10 rolled
# back, 2 in 10 roll the last two rows back to the savepoint
my $writer_script = $node->basedir . '/writer.sql';
append_to_file($writer_script, q{
\set k1 random(1, 200)
\set k2 random(1, 200)
\set k3 random(1, 200)
\set p1 random(1, 250)
\set p2 random(1, 250)
\set p3 random(1, 250)
\set outcome random(1, 10)
BEGIN;
INSERT INTO ev (k, payload) VALUES (:k1, CASE WHEN :p1 = 1 THEN 'poison' WHEN :p1 <= 11 THEN 'flaky' ELSE 'ok' END);
SAVEPOINT s;
INSERT INTO ev (k, payload) VALUES
  (:k2, CASE WHEN :p2 = 1 THEN 'poison' WHEN :p2 <= 11 THEN 'flaky' ELSE 'ok' END),
  (:k3, CASE WHEN :p3 = 1 THEN 'poison' WHEN :p3 <= 11 THEN 'flaky' ELSE 'ok' END);
\if :outcome <= 2
ROLLBACK TO SAVEPOINT s;
\endif
\if :outcome = 10
ROLLBACK;
\else
COMMIT;
\endif
});
my $writers = bg_pgbench($node, undef, '-c', '4', '-j', '2', '-T', '10',
	'-R', '300', '-f', $writer_script);

my $stop_file = $node->basedir . '/workers.stop';

# A worker: claim, then work() each slot held, in a transaction of its
# own (one statement); only SS001 (fenced) is an error it expects.
sub worker
{
	my ($name) = @_;
	return group_worker(
		node => $node,
		connstr => $bouncer->{connstr},
		stream => 'ev',
		groups => ['g'],
		name => $name,
		stop => $stop_file,
		expected => qr/^SS001$/,
		work => sub {
			my ($grp, $slot, $token) = @_;
			return "SELECT work($slot, $token, '$name')";
		});
}

my %workers;    # name => pid
my $next_worker = 1;

sub start_worker
{
	my $name = 'w' . $next_worker++;
	my $log = "$PostgreSQL::Test::Utils::log_path/033_worker_$name.log";
	$workers{$name} = bg_fork($log, sub { worker($name) });
	return $name;
}

$node->poll_query_until('postgres', 'SELECT count(*) >= 100 FROM ev')
  or die 'writers did not get going';
# rows of each kind whatever the writers' random numbers give
$node->safe_psql('postgres',
	q{INSERT INTO ev (k, payload) VALUES (1, 'poison'), (2, 'poison'), (3, 'flaky'), (4, 'flaky')});
start_worker() for 1 .. 3;

# while the writers run, every 2 s one worker is killed, client and all,
# and a new one joins
my @killed;
my $next_kill = time() + 2;
my $writers_rc;
while (1)
{
	my $h = $writers->{handle};
	$h->pump_nb if $h->pumpable;
	if (!$h->pumpable)
	{
		$writers_rc = wait_done($writers);
		last;
	}
	if (time() >= $next_kill)
	{
		my ($victim) = sort keys %workers;
		my $pid = delete $workers{$victim};
		kill_group($pid);
		push @killed, [ $victim, wait_pid($pid, 30) ];
		start_worker();
		$next_kill = time() + 2;
	}
	usleep(100_000);
}
is($writers_rc, 0, 'the writers ran without error');
cmp_ok(scalar @killed, '>=', 3,
	'workers killed with SIGKILL while they worked: ' . scalar @killed);
is(scalar(grep { defined $_->[1] && $_->[1] == -9 } @killed),
	scalar @killed, 'every killed worker ended by SIGKILL');

my ($rows, $flaky, $poison) = split /\|/, $node->safe_psql('postgres', q{
SELECT count(*), count(*) FILTER (WHERE payload = 'flaky'), count(*) FILTER (WHERE payload = 'poison')
  FROM ev});
note "committed rows: $rows, of them flaky $flaky, poison $poison";
cmp_ok($flaky, '>=', 2, 'rows are flaky');
cmp_ok($poison, '>=', 2, 'rows are poison');

# drained: every slot at its last row, and nothing parked but dead letters
my $drained = q{
SELECT (SELECT count(*) FROM ev e
          JOIN stream_seq.consumer_slots s
            ON s.stream = 'ev'::regclass AND s.consumer = 'g'
           AND s.slot = stream_seq.slot_of(e.k::text, 4)
         WHERE e.seq > s.position) = 0
   AND NOT EXISTS (SELECT FROM stream_seq.parked_rows WHERE NOT dead)};
ok($node->poll_query_until('postgres', $drained),
	'the workers drained the group: only dead letters are parked');

is( $node->safe_psql('postgres', q{
SELECT count(*) FROM ev e LEFT JOIN applied a USING (seq)
 WHERE e.payload <> 'poison' AND a.seq IS NULL}),
	0, 'every committed row but the poison ones was applied');
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM applied a LEFT JOIN ev e USING (seq)
 WHERE e.seq IS NULL OR e.payload = 'poison'}),
	0, 'nothing else was applied (a primary key allows no row twice)');
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM applied WHERE (payload = 'ok') <> (failures = 0)
    OR (payload = 'flaky') <> (failures = 2)}),
	0, 'ok rows were applied at the first try, flaky rows after exactly 2 failures');
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM (
  SELECT seq < lag(seq) OVER (PARTITION BY k ORDER BY ord) AS out_of_order
    FROM applied WHERE failures = 0) x WHERE out_of_order}),
	0, 'rows applied at the first try were applied per key in increasing seq');
is( $node->safe_psql('postgres', q{
SELECT count(*) || '|' || count(*) FILTER (WHERE p.dead AND p.attempts = 3)
  FROM stream_seq.parked_rows p JOIN ev e USING (seq)
 WHERE e.payload = 'poison'}),
	"$poison|$poison", 'every poison row is a dead letter after 3 attempts');
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM stream_seq.parked_rows p JOIN ev e USING (seq) WHERE e.payload <> 'poison'}),
	0, 'no other row is parked');
is( $node->safe_psql('postgres',
		q{SELECT parked || '|' || dead_letters FROM stream_seq.consumers WHERE consumer = 'g'}),
	"0|$poison", 'the consumers view counts the dead letters');

# the workers stop; a crash (immediate stop) keeps the dead letters,
# the policy and the stream's times
append_to_file($stop_file, '');
for my $name (sort keys %workers)
{
	is(wait_pid($workers{$name}, 60), 0, "worker $name ended cleanly");
}
%workers = ();
my $parked_before = $node->safe_psql('postgres',
	q{SELECT string_agg(format('%s:%s:%s:%s', seq, attempts, dead, due_at), ',' ORDER BY seq) FROM stream_seq.parked});
$node->stop('immediate');
$node->start;
is( $node->safe_psql('postgres',
		q{SELECT string_agg(format('%s:%s:%s:%s', seq, attempts, dead, due_at), ',' ORDER BY seq) FROM stream_seq.parked}),
	$parked_before, 'after a crash: the dead letters are as they were');
is( $node->safe_psql('postgres',
		q{SELECT max_attempts || ' ' || retry_delay FROM stream_seq.consumers WHERE consumer = 'g'}),
	'3 00:00:00.02', 'after a crash: the retry policy is as it was');
$node->safe_psql('postgres', q{INSERT INTO ev (k, payload) VALUES (5, 'ok'), (6, 'ok')});
is( $node->safe_psql('postgres', q{
SELECT bool_and(committed_at >= previous)
  FROM (SELECT committed_at, lag(committed_at) OVER (ORDER BY seq) AS previous FROM ev) x
 WHERE previous IS NOT NULL}),
	't', 'after a crash: times never go down as numbers go up');
is( $node->safe_psql('postgres', q{
SELECT stream_seq.position_at('ev', max(committed_at)) = (SELECT min(seq) - 1 FROM ev
         WHERE committed_at = (SELECT max(committed_at) FROM ev))
  FROM ev}),
	't', 'after a crash: position_at() finds the rows numbered after it');
# (a pgbouncer of its own for the new workers: the old one's server
# connections went with the crash)
stop_pgbouncer($bouncer);
$bouncer = start_pgbouncer($node, path => $pgbouncer, pool_size => 16);
unlink $stop_file;
start_worker() for 1 .. 2;

# the handler is fixed; the dead letters revived are applied once
$node->safe_psql('postgres', 'UPDATE fixed SET poison = true');
is($node->safe_psql('postgres', q{SELECT stream_seq.revive('ev', 'g')}),
	$poison, 'revive() makes every dead letter due again');
ok( $node->poll_query_until('postgres',
		q{SELECT NOT EXISTS (SELECT FROM stream_seq.parked_rows)}),
	'the workers applied the revived rows');
is( $node->safe_psql('postgres', q{
SELECT (SELECT count(*) FROM ev) = (SELECT count(*) FROM applied)
   AND NOT EXISTS (SELECT FROM ev e LEFT JOIN applied a USING (seq) WHERE a.seq IS NULL)}),
	't', 'now every committed row is applied exactly once');
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM applied WHERE payload = 'poison' AND failures = 3}),
	$poison, 'each poison row was applied with its 3 failures behind it');

append_to_file($stop_file, '');
for my $name (sort keys %workers)
{
	is(wait_pid($workers{$name}, 60), 0, "worker $name ended cleanly");
}

my $log = log_since($node, $log_start);
unlike($log, qr/PANIC|TRAP:|terminated by signal|server process .* was terminated/,
	'no server process crashed');
like($log, qr/database system was interrupted|was not properly shut down/,
	'the crash was recovered from');

stop_pgbouncer($bouncer);
$node->stop;
note sprintf('wall time %.0f s', time() - $t_start);
done_testing();
