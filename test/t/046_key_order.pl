
# Copyright (c) stream_seq contributors
#
# 046_key_order.pl: per-key order through retries, under faults.  Two
# groups of one stream keep per-key order, "ga" with hold 'until_applied'
# (a dead letter lets its key go on) and "gr" with 'until_released' (a
# dead letter holds its key until release_key()); both with the retry
# policy: at most 3 failures, waiting 20 ms, doubling, at most 100 ms.
#
# A stream table "ev" (key k, 150 keys; payload 'ok', 'flaky' or
# 'poison').  4 pgbench writers insert rows in transactions with
# savepoints, some rolled back, some rolled back to the savepoint.  The
# handler fails on a flaky row delivered with fewer than 2 failures behind
# it and always on a poison row; otherwise it inserts the row into the
# oracle table "applied" (primary key group and seq) with an apply order.
# Workers (psql sessions through pgbouncer in transaction mode, each a
# process of its own) loop over both groups: claim, then for each slot
# held one statement: the group's due() rows, then the slot's page
# (read_slot()), each row under a subtransaction of its own, parking the
# rows that fail, advancing the slot past the page.  While the writers
# run, a worker is killed with SIGKILL every 2 s and a new one joins, one
# is stopped (SIGSTOP) past its lease and then continued, and both groups
# are resized.  Then the server crashes (immediate stop) and restarts, and
# the workers go on.
#
# Checked: for every key, the rows applied by "ga" are its committed rows
# but the poison ones, in commit (seq) order, each once; each poison row is
# a dead letter after 3 attempts; the rows "gr" applied of a key are its
# committed rows up to its first poison row, in order, and the rest of the
# key's rows are held behind that dead letter, while the keys without a
# failure were never held; after release_key() (as often as a further
# poison row of the key holds it again) "gr" has applied every row but the
# poison ones, in order, each once, and the dead letters say why they were
# released.

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
unlink glob "$PostgreSQL::Test::Utils::log_path/046_worker_*.log";
my $node = new_node('key_order', "max_connections = 40\n");
my $log_start = log_offset($node);

$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE ev (id bigserial PRIMARY KEY, k int NOT NULL, payload text NOT NULL);
SELECT stream_seq.enable('ev');
SELECT stream_seq.create_group('ev', 'ga', 'k', 4);
SELECT stream_seq.create_group('ev', 'gr', 'k', 4);
SELECT stream_seq.set_key_order('ev', 'ga', 'until_applied');
SELECT stream_seq.set_key_order('ev', 'gr', 'until_released');
SELECT stream_seq.set_retry_policy('ev', 'ga', 3, '20 ms', 2, '100 ms');
SELECT stream_seq.set_retry_policy('ev', 'gr', 3, '20 ms', 2, '100 ms');
CREATE SEQUENCE apply_order;
CREATE TABLE applied (grp text NOT NULL, seq bigint NOT NULL, k int NOT NULL,
                      payload text NOT NULL, attempts int NOT NULL, via text NOT NULL,
                      worker text NOT NULL, ord bigint NOT NULL DEFAULT nextval('apply_order'),
                      PRIMARY KEY (grp, seq));

CREATE FUNCTION handle(grp text, seq bigint, r jsonb, attempts int, via text, worker text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF r->>'payload' = 'poison' THEN
        RAISE EXCEPTION 'poison row %', seq USING ERRCODE = '22000';
    END IF;
    IF r->>'payload' = 'flaky' AND attempts < 2 THEN
        RAISE EXCEPTION 'flaky row % after % failures', seq, attempts USING ERRCODE = '22000';
    END IF;
    INSERT INTO applied (grp, seq, k, payload, attempts, via, worker)
    VALUES (grp, seq, (r->>'k')::int, r->>'payload', attempts, via, worker);
END;
$$;

-- one worker transaction for a slot of a group: the group's due rows
-- (retries and held rows), then the slot's next page; a row that fails is
-- parked in the transaction that advances past it
CREATE FUNCTION work(grp text, slot int, token bigint, worker text) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    last bigint;
    n int := 0;
BEGIN
    FOR r IN SELECT * FROM stream_seq.due('ev', grp, 20) LOOP
        BEGIN
            PERFORM handle(grp, r.seq, r."row", r.attempts, 'due', worker);
        EXCEPTION WHEN data_exception THEN
            PERFORM stream_seq.park('ev', grp, r.seq, SQLERRM);
        END;
        n := n + 1;
    END LOOP;
    FOR r IN SELECT * FROM stream_seq.read_slot('ev', grp, slot, token, 50) LOOP
        BEGIN
            PERFORM handle(grp, r.seq, r."row", 0, 'read', worker);
        EXCEPTION WHEN data_exception THEN
            PERFORM stream_seq.park('ev', grp, r.seq, SQLERRM);
        END;
        last := r.seq;
        n := n + 1;
    END LOOP;
    IF last IS NOT NULL THEN
        PERFORM stream_seq.advance_slot('ev', grp, slot, token, last);
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
\set k1 random(1, 150)
\set k2 random(1, 150)
\set k3 random(1, 150)
\set p1 random(1, 400)
\set p2 random(1, 400)
\set p3 random(1, 400)
\set outcome random(1, 10)
BEGIN;
INSERT INTO ev (k, payload) VALUES (:k1, CASE WHEN :p1 = 1 THEN 'poison' WHEN :p1 <= 9 THEN 'flaky' ELSE 'ok' END);
SAVEPOINT s;
INSERT INTO ev (k, payload) VALUES
  (:k2, CASE WHEN :p2 = 1 THEN 'poison' WHEN :p2 <= 9 THEN 'flaky' ELSE 'ok' END),
  (:k3, CASE WHEN :p3 = 1 THEN 'poison' WHEN :p3 <= 9 THEN 'flaky' ELSE 'ok' END);
\if :outcome <= 2
ROLLBACK TO SAVEPOINT s;
\endif
\if :outcome = 10
ROLLBACK;
\else
COMMIT;
\endif
});

my $stop_file = $node->basedir . '/workers.stop';

# A worker of both groups: claim, then work() each slot held, a
# transaction (one statement) each; SS001 (fenced, its lease lost) and
# 40001 are the errors it expects.
sub worker
{
	my ($name) = @_;
	return group_worker(
		node => $node,
		connstr => $bouncer->{connstr},
		stream => 'ev',
		groups => [ 'ga', 'gr' ],
		name => $name,
		stop => $stop_file,
		expected => qr/^(SS001|40001)$/,
		work => sub {
			my ($grp, $slot, $token) = @_;
			return "SELECT work('$grp', $slot, $token, '$name')";
		});
}

my %workers;    # name => pid
my $next_worker = 1;

sub start_worker
{
	my $name = 'w' . $next_worker++;
	my $log = "$PostgreSQL::Test::Utils::log_path/046_worker_$name.log";
	$workers{$name} = bg_fork($log, sub { worker($name) });
	return $name;
}

sub stop_workers
{
	append_to_file($stop_file, '');
	for my $name (sort keys %workers)
	{
		is(wait_pid($workers{$name}, 60), 0, "worker $name ended cleanly");
	}
	%workers = ();
	unlink $stop_file;
}

# rows of each kind whatever the writers' random numbers give: key 1 fails
# twice then succeeds, key 2 always fails, each with rows behind them
$node->safe_psql('postgres', q{
INSERT INTO ev (k, payload) VALUES (1, 'ok'), (1, 'flaky'), (2, 'poison'), (1, 'ok'),
                                   (2, 'ok'), (3, 'ok'), (2, 'ok'), (1, 'ok')});
my $writers = bg_pgbench($node, undef, '-c', '4', '-j', '2', '-T', '8',
	'-R', '200', '-f', $writer_script);
$node->poll_query_until('postgres', 'SELECT count(*) >= 100 FROM ev')
  or die 'writers did not get going';
start_worker() for 1 .. 3;

# while the writers run: every 2 s one worker is killed, client and all,
# and a new one joins; after 3 s one is stopped past its lease (2 s) and
# continued 3 s later; after 4 s both groups are resized
my @killed;
my $t0 = time();
my $next_kill = $t0 + 2;
my ($stopped, $resized);
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
		my ($victim) = grep { !$stopped || $_ ne $stopped->[0] } sort keys %workers;
		my $pid = delete $workers{$victim};
		kill_group($pid);
		push @killed, [ $victim, wait_pid($pid, 30) ];
		start_worker();
		$next_kill = time() + 2;
	}
	if (!$stopped && time() >= $t0 + 3)
	{
		my ($name) = reverse sort keys %workers;
		kill 'STOP', -$workers{$name};
		$stopped = [ $name, time() ];
		note "stopped worker $name";
	}
	if ($stopped && @$stopped == 2 && time() >= $stopped->[1] + 3)
	{
		kill 'CONT', -$workers{ $stopped->[0] };
		push @$stopped, 'continued';
		note "continued worker $stopped->[0]";
	}
	if (!$resized && time() >= $t0 + 4)
	{
		$resized = $node->safe_psql('postgres',
			q{SELECT stream_seq.resize_group('ev', 'ga', 6)::text || ' ' || stream_seq.resize_group('ev', 'gr', 3)::text});
		note "resize_group: $resized";
	}
	usleep(100_000);
}
is($writers_rc, 0, 'the writers ran without error');
cmp_ok(scalar @killed, '>=', 2,
	'workers killed with SIGKILL while they worked: ' . scalar @killed);
is(scalar(grep { defined $_->[1] && $_->[1] == -9 } @killed),
	scalar @killed, 'every killed worker ended by SIGKILL');
ok($stopped && @$stopped == 3, 'a worker was stopped past its lease and continued');
ok( $node->poll_query_until('postgres', q{
SELECT string_agg(consumer || ':' || slots || ':' || (resize_to IS NULL), ',' ORDER BY consumer)
  FROM stream_seq.consumers WHERE stream = 'ev'::regclass}, 'ga:6:true,gr:3:true'),
	'both resizes switched while the workers ran');

my ($rows, $flaky, $poison) = split /\|/, $node->safe_psql('postgres', q{
SELECT count(*), count(*) FILTER (WHERE payload = 'flaky'), count(*) FILTER (WHERE payload = 'poison')
  FROM ev});
note "committed rows: $rows, of them flaky $flaky, poison $poison";

# drained: every slot of both groups past its rows; nothing parked but
# dead letters, and for gr the rows held behind them
my $drained = q{
SELECT NOT EXISTS (SELECT FROM ev e
                     JOIN stream_seq.consumers c ON c.stream = 'ev'::regclass
                     JOIN stream_seq.consumer_slots s
                       ON s.stream = c.stream AND s.consumer = c.consumer
                      AND s.slot = stream_seq.slot_of(e.k::text, c.slots)
                    WHERE e.seq > s.position)
   AND NOT EXISTS (SELECT FROM stream_seq.parked_rows
                    WHERE NOT dead AND (consumer = 'ga' OR waits_behind IS NULL))};
ok($node->poll_query_until('postgres', $drained),
	'the workers drained both groups: only dead letters, and rows held behind them, are parked');

# 'until_applied': every key's rows but the poison ones, in commit order,
# each once
my $in_order = q{
SELECT count(*) FROM (
  SELECT e.k, string_agg(e.seq::text, ',' ORDER BY e.seq) AS committed,
         (SELECT string_agg(a.seq::text, ',' ORDER BY a.ord) FROM applied a
           WHERE a.grp = '%s' AND a.k = e.k) AS applied
    FROM ev e WHERE e.payload <> 'poison' %s GROUP BY e.k) x
 WHERE committed IS DISTINCT FROM applied};
is($node->safe_psql('postgres', sprintf($in_order, 'ga', '')),
	0, 'ga: every key applied its committed rows but the poison ones, in commit order');
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM applied a LEFT JOIN ev e USING (seq)
 WHERE a.grp = 'ga' AND (e.seq IS NULL OR e.payload = 'poison')}),
	0, 'ga: nothing else was applied (a primary key allows no row twice)');
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM applied WHERE payload = 'flaky' AND attempts <> 2}),
	0, 'flaky rows were applied after exactly 2 failures');
is( $node->safe_psql('postgres', q{
SELECT count(*) || '|' || count(*) FILTER (WHERE p.dead AND p.attempts = 3)
  FROM stream_seq.parked_rows p JOIN ev e USING (seq)
 WHERE p.consumer = 'ga' AND e.payload = 'poison'}),
	"$poison|$poison", 'ga: every poison row is a dead letter after 3 attempts');
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM stream_seq.parked_rows p JOIN ev e USING (seq) WHERE p.consumer = 'ga' AND e.payload <> 'poison'}),
	0, 'ga: no other row is parked');

# 'until_released': a key's rows up to its first poison row, in order;
# every row after it held behind it
my $first_poison = q{(SELECT min(p.seq) FROM ev p WHERE p.k = e.k AND p.payload = 'poison')};
is( $node->safe_psql('postgres',
		sprintf($in_order, 'gr', "AND e.seq < coalesce($first_poison, 'Infinity'::float8)")),
	0, 'gr: every key applied its committed rows up to its first poison row, in commit order');
is( $node->safe_psql('postgres', qq{
SELECT count(*) FROM ev e
 WHERE e.seq > $first_poison
   AND NOT EXISTS (SELECT FROM stream_seq.parked_rows p
                    WHERE p.consumer = 'gr' AND p.seq = e.seq AND p.held
                      AND p.waits_behind = $first_poison)}),
	0, 'gr: every row after the first poison row of its key is held behind it');
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM stream_seq.parked_rows p WHERE p.consumer = 'gr' AND p.dead
   AND NOT EXISTS (SELECT FROM ev e WHERE e.seq = p.seq AND e.payload = 'poison')}),
	0, 'gr: only poison rows are dead letters');
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM applied a
 WHERE a.via = 'due' AND a.attempts = 0
   AND NOT EXISTS (SELECT FROM ev e WHERE e.k = a.k AND e.seq < a.seq AND e.payload <> 'ok')}),
	0, 'no key without a failure before a row had that row held');
cmp_ok( $node->safe_psql('postgres',
		q{SELECT count(*) FROM applied WHERE via = 'due' AND attempts = 0}),
	'>', 0, 'rows were held and handed back by due()');
is( $node->safe_psql('postgres', q{
SELECT held > 0 FROM stream_seq.metrics('consumer') WHERE consumer = 'gr'}),
	't', 'metrics() counts the held rows');

# a crash keeps the held rows, the dead letters and the groups' policies
stop_workers();
my $parked_sql = q{SELECT string_agg(format('%s:%s:%s:%s:%s:%s', consumer, seq, attempts, dead, held, key), ',' ORDER BY consumer, seq) FROM stream_seq.parked};
my $parked_before = $node->safe_psql('postgres', $parked_sql);
$node->stop('immediate');
$node->start;
is($node->safe_psql('postgres', $parked_sql), $parked_before,
	'after a crash: the held rows and the dead letters are as they were');
is( $node->safe_psql('postgres',
		q{SELECT string_agg(consumer || ':' || key_order, ',' ORDER BY consumer) FROM stream_seq.consumers WHERE stream = 'ev'::regclass}),
	'ga:until_applied,gr:until_released', 'after a crash: the key order policies are as they were');
stop_pgbouncer($bouncer);
$bouncer = start_pgbouncer($node, path => $pgbouncer, pool_size => 16);

# more rows after the crash, some behind held keys
$node->safe_psql('postgres',
	q{INSERT INTO ev (k, payload) SELECT g % 150 + 1, 'ok' FROM generate_series(1, 300) g});
start_worker() for 1 .. 2;

# the operator releases the keys held behind dead letters, as often as a
# further poison row of the key holds it again
my $released = 0;
for my $round (1 .. 20)
{
	ok($node->poll_query_until('postgres', $drained), "drained before release round $round");
	my $n = $node->safe_psql('postgres', q{
SELECT coalesce(sum(stream_seq.release_key('ev', 'gr', key, 'poison: skipped by the operator')), 0)
  FROM (SELECT DISTINCT key FROM stream_seq.parked_rows
         WHERE consumer = 'gr' AND dead AND released_at IS NULL) h});
	last if $n == 0;
	$released += $n;
}
is($released, $poison, 'every poison row of gr was released once');
ok( $node->poll_query_until('postgres', q{
SELECT NOT EXISTS (SELECT FROM stream_seq.parked_rows WHERE consumer = 'gr' AND NOT dead)}),
	'gr: nothing is held any more');
ok($node->poll_query_until('postgres', $drained), 'drained after the release');
is($node->safe_psql('postgres', sprintf($in_order, 'gr', '')),
	0, 'gr: every key applied its committed rows but the poison ones, in commit order');
is($node->safe_psql('postgres', sprintf($in_order, 'ga', '')),
	0, 'ga: still every key in commit order after the crash');
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM applied a LEFT JOIN ev e USING (seq)
 WHERE e.seq IS NULL OR e.payload = 'poison'}),
	0, 'no poison row and no row that was not committed was applied');
is( $node->safe_psql('postgres', q{
SELECT count(*) || '|' || count(*) FILTER (WHERE release_reason = 'poison: skipped by the operator' AND dead)
  FROM stream_seq.parked_rows WHERE consumer = 'gr'}),
	"$poison|$poison", 'gr: the dead letters stay, with the reason they were released');

stop_workers();
my $log = log_since($node, $log_start);
unlike($log, qr/PANIC|TRAP:|terminated by signal|server process .* was terminated/,
	'no server process crashed');

stop_pgbouncer($bouncer);
$node->stop;
note sprintf('wall time %.0f s', time() - $t_start);
done_testing();
