# Copyright (c) stream_seq contributors
#
# 043_python_library.pl: the Python worker library (clients/python,
# stream_seq_worker) through pgbouncer in transaction mode, as an
# ordinary role:
#
#  - its unit-level checks (clients/python/tests/test_worker.py, sync and
#    asyncio) pass;
#  - the quick start of clients/python/README.md, run from the README's
#    own text, applies the rows and releases its slots on SIGTERM;
#  - workers of a group (sync and asyncio) against writers (savepoints,
#    more than 64 subtransactions, poison rows the handler refuses), two
#    of them killed with SIGKILL and replaced, a resize during the run and
#    a crash restart of the server: every committed row applied exactly
#    once or, if poison, a dead letter; per-key order; on SIGTERM every
#    worker exits 0 and its slots are released.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use StreamSeqTest;

my $python = '/usr/bin/python3';
if (system($python, '-c', 'import psycopg') != 0)
{
	die 'python3-psycopg is missing; test/run-tests.sh installs it as root' if $> == 0;
	plan skip_all => 'python3-psycopg is not installed';
}
my $t_start = time();
my $lib = source_root() . '/clients/python';
$ENV{PYTHONPATH} = $lib;

my $node = new_node('python_library', "max_connections = 60\n");
$node->safe_psql('postgres', q{
CREATE ROLE app LOGIN;
CREATE EXTENSION stream_seq;
GRANT USAGE ON SCHEMA stream_seq TO app;
GRANT CREATE ON SCHEMA public TO app;
});
my $bouncer = start_pgbouncer($node, users => ['app'], pool_size => 20,
	settings => ['server_login_retry = 1']);
my $dsn = "host=127.0.0.1 port=$bouncer->{port} dbname=postgres user=app";
my $direct = $node->connstr('postgres') . ' user=app';

# unit-level checks
{
	local $ENV{STREAM_SEQ_TEST_DSN} = $dsn;
	local $ENV{STREAM_SEQ_TEST_DIRECT_DSN} = $direct;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run([ $python, '-m', 'unittest', '-v', 'tests/test_worker.py' ],
		'<', \undef, '>', \$out, '2>', \$err, init => sub { chdir $lib });
	ok($ok, 'the unit-level checks pass (sync and asyncio)') or diag "$out$err";
	like($err, qr/^Ran (\d+) tests/m, 'they ran');
	note $err;    # each check by name, in the log
}

# the README's quick start, from its text
my $readme = slurp_file("$lib/README.md");
my ($qs) = $readme =~ /^## Quick start\n(.*?)^## /ms;
my ($setup) = $qs =~ /^```sql\n(.*?)^```/ms;
my ($code) = $qs =~ /^```python\n(.*?)^```/ms;
ok($setup && $code, 'the quick start has its SQL and its Python');
$node->safe_psql('postgres', "SET ROLE app;\n$setup");
my $qs_py = $node->basedir . '/quick_start.py';
append_to_file($qs_py, $code);
my $qs_log = "$PostgreSQL::Test::Utils::log_path/043_quick_start.log";
my $qs_pid = bg_fork($qs_log, sub { local $ENV{DATABASE_URL} = $dsn; exec($python, $qs_py) or die });
$node->safe_psql('postgres',
	q{INSERT INTO events (customer_id, payload) SELECT g % 10, '{}' FROM generate_series(1, 50) g});
ok($node->poll_query_until('postgres', 'SELECT count(*) = 50 FROM shipping_applied'),
	'the quick start applied every row');
ok($node->poll_query_until('postgres',
		q{SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE 'SELECT stream_seq.wait(%'}),
	'and waits for more');
kill 'TERM', $qs_pid;
is(wait_pid($qs_pid, 30), 0, 'the quick start exits 0 on SIGTERM') or diag slurp_file($qs_log);
is(val($node, q{SELECT count(*) FROM stream_seq.consumer_slots WHERE worker IS NOT NULL}),
	'0', 'and released its slots');
$node->safe_psql('postgres', 'DROP TABLE events, shipping_applied');

# the scenario
$node->safe_psql('postgres', q{
SET ROLE app;
CREATE TABLE events (id bigserial PRIMARY KEY, customer_id int, payload jsonb);
SELECT stream_seq.enable('events');
SELECT stream_seq.create_group('events', 'shipping', 'customer_id', 4);
SELECT stream_seq.set_retry_policy('events', 'shipping', 2, '0 s', 1, '0 s');
CREATE TABLE shipping_applied (seq bigint PRIMARY KEY, customer_id int
                               CHECK (customer_id >= 0), payload text, worker text,
                               applied bigserial);
});

my %workers;    # name => pid
my @killed;
my $next = 1;
sub start_worker
{
	my $name = 'w' . $next++;
	my $mode = $next % 2 ? 'async' : 'sync';
	my $log = "$PostgreSQL::Test::Utils::log_path/043_worker_$name.log";
	unlink $log;
	$workers{$name} = bg_fork($log,
		sub { exec($python, "$lib/tests/scenario_worker.py", $dsn, $name, $mode) or die });
	return $name;
}
sub kill_worker
{
	my ($name) = sort keys %workers;
	my $pid = delete $workers{$name};
	kill_group($pid);
	is(wait_pid($pid, 30), -9, "worker $name killed with SIGKILL");
	push @killed, $name;
	start_worker();
}

my $writer = $node->basedir . '/writer.sql';
append_to_file($writer, q{
\set c random(0, 20)
BEGIN;
INSERT INTO events (customer_id, payload) VALUES (:c, '{"kind": "order"}');
SAVEPOINT s;
INSERT INTO events (customer_id, payload) VALUES (:c, '{"kind": "rolled back"}');
ROLLBACK TO SAVEPOINT s;
INSERT INTO events (customer_id, payload) VALUES (:c, '{"kind": "shipped"}');
COMMIT;
});
my $overflow = $node->basedir . '/overflow.sql';
append_to_file($overflow, q{
DO $$
BEGIN
    FOR i IN 1..70 LOOP
        BEGIN
            INSERT INTO events (customer_id, payload) VALUES (i % 21, '{"kind": "many"}');
        EXCEPTION WHEN others THEN RAISE;
        END;
    END LOOP;
END $$;
});
my $poison = $node->basedir . '/poison.sql';
append_to_file($poison, q{
INSERT INTO events (customer_id, payload) VALUES (-1, '{"kind": "poison"}'), (-1, '{"kind": "poison"}');
});
sub writers
{
	return bg_pgbench($node, undef, '-c', '3', '-t', $_[0],
		'-f', "$writer\@20", '-f', "$overflow\@1", '-f', "$poison\@1");
}

start_worker() for 1 .. 3;
my $w = writers(100);
ok($node->poll_query_until('postgres', 'SELECT count(*) >= 100 FROM shipping_applied'),
	'the workers are at work');
kill_worker();
is(val($node, q{SET ROLE app; SELECT stream_seq.resize_group('events', 'shipping', 6)}),
	'f', 'a resize during the run (pending)');
is(wait_done($w), 0, 'writers ran') or diag ${ $w->{err} };
ok($node->poll_query_until('postgres',
		q{SELECT slots = 6 AND resize_to IS NULL FROM stream_seq.consumers WHERE consumer = 'shipping'}),
	'the workers switched the group to 6 slots');
kill_worker();
$w = writers(60);
is(wait_done($w), 0, 'more writers ran') or diag ${ $w->{err} };
$node->stop('immediate');
$node->start;
$w = writers(60);
is(wait_done($w), 0, 'writers after the crash restart ran') or diag ${ $w->{err} };

my $caught_up = q{
SELECT (SELECT count(*) FROM shipping_applied)
     + (SELECT count(*) FROM stream_seq.parked_rows WHERE dead) = (SELECT count(*) FROM events)
   AND NOT EXISTS (SELECT FROM stream_seq.parked_rows WHERE NOT dead)};
ok($node->poll_query_until('postgres', $caught_up),
	'the workers caught up after the crash: every row applied or a dead letter');
my $killed = join(',', map { "'$_'" } @killed);
ok($node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM stream_seq.consumer_slots WHERE worker IN ($killed)"),
	'the killed workers\' slots were taken over');

foreach my $name (sort keys %workers)
{
	kill 'TERM', $workers{$name};
	my $log = "$PostgreSQL::Test::Utils::log_path/043_worker_$name.log";
	is(wait_pid($workers{$name}, 30), 0, "worker $name exits 0 on SIGTERM")
	  or diag slurp_file($log);
	note slurp_file($log) =~ /(\w+ stopped: .*)/ ? $1 : "$name: no stats";
}

is(val($node, q{SELECT count(*) FROM events e
                 WHERE (SELECT count(*) FROM shipping_applied a WHERE a.seq = e.seq)
                     + (SELECT count(*) FROM stream_seq.parked_rows p WHERE p.seq = e.seq) <> 1}),
	'0', 'every row applied once or parked, never both, never twice');
cmp_ok(val($node, q{SELECT count(*) FROM events WHERE customer_id = -1}), '>', 0, 'rows are poison');
is(val($node, q{SELECT count(*) FROM stream_seq.parked_rows p JOIN events e ON e.seq = p.seq
                 WHERE e.customer_id <> -1 OR NOT p.dead OR p.attempts <> 2}),
	'0', 'only poison rows were parked, each a dead letter after the policy\'s 2 attempts');
cmp_ok(val($node, q{SELECT count(*) FROM events WHERE payload->>'kind' = 'many'}), '>', 64,
	'transactions of more than 64 subtransactions');
is(val($node, q{SELECT count(*) FROM (
                  SELECT seq < lag(seq) OVER (PARTITION BY customer_id ORDER BY applied) AS back
                    FROM shipping_applied) o WHERE back}),
	'0', 'the rows of each customer were applied in number order');
is(val($node, q{SELECT count(*) FROM stream_seq.consumer_slots WHERE worker IS NOT NULL}),
	'0', 'the workers released their slots');

note sprintf('043_python_library took %.1f s', time() - $t_start);
stop_pgbouncer($bouncer);
done_testing();
