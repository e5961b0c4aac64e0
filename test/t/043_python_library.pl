# Copyright (c) stream_seq contributors
#
# 043_python_library.pl: the Python worker library (clients/python,
# stream_seq_worker) through pgbouncer in transaction mode, as an
# ordinary role:
#
#  - its unit-level checks (clients/python/tests/test_worker.py, sync and
#    asyncio) pass;
#  - clients/python/README.md, run from its own text outside the source
#    tree: the package installs offline into a venv (and builds an sdist
#    and a wheel), the quick start's worker logs its start, applies the
#    rows, releases its slots on SIGTERM, takes them back when started
#    again, names the lease a worker of another name waits for, and exits
#    1 on a database that does not exist or a server it cannot reach;
#    stream-seq-lag shows a known backlog;
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
use File::Temp ();
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

# The README's install, quick start, restart and lag command, run from
# the README's own text, as a user would: in a directory of their own
# outside the source tree (a copy of clients/python where the README's
# commands expect it), with a HOME of their own, Debian's python3 and no
# PYTHONPATH; only the connection string "dbname=app" is replaced by the
# test's (through pgbouncer), and the worker's name where the README says
# to start another.
my $readme = slurp_file("$lib/README.md");
sub readme_block
{
	my ($name) = @_;
	my ($b) = $readme =~ /^<!-- doc-test 043: \Q$name\E -->\n```sh\n(.*?)^```/ms;
	die "README has no block \"$name\"" unless defined $b;
	return $b;
}
my $tmp = File::Temp::tempdir('stream_seq_043_XXXX', TMPDIR => 1, CLEANUP => 1);
my $tree = "$tmp/stream_seq";
my $home = "$tmp/home";
my $work = "$tmp/work";
mkdir $_ for ($tree, "$tree/clients", $home, $work);
system('cp', '-R', $lib, "$tree/clients/python") == 0 or die 'cp failed';
system("cd '$tree/clients/python' && rm -rf build dist *.egg-info && find . -name __pycache__ -prune -exec rm -rf {} +") == 0
  or die 'cleaning the copy failed';

# runs "script" with bash -eu in "dir" with HOME "home", as a user's shell
sub user_sh
{
	my ($dir, $h, $script) = @_;
	my ($out, $err) = ('', '');
	local $ENV{HOME} = $h;
	local $ENV{PATH} = '/usr/bin:/bin';
	local $ENV{PYTHONPATH};
	delete $ENV{PYTHONPATH};
	my $ok = IPC::Run::run([ 'bash', '-euc', $script ], '<', \undef, '>', \$out, '2>', \$err,
		init => sub { chdir $dir or die });
	return ($ok, "$out$err");
}

my ($ok, $out) = user_sh($tree, $home, readme_block('install'));
ok($ok, 'the README\'s install commands run (offline, Debian\'s setuptools)') or diag $out;
($ok, $out) = user_sh($work, $home,
	'~/stream_seq_venv/bin/python -c "import stream_seq_worker as m; print(m.__version__, m.__file__)"');
like($out, qr{^0\.8\.0 \Q$home\E/stream_seq_venv/lib/python3[.\d]*/site-packages/stream_seq_worker/__init__\.py$}m,
	'the package imports from the environment, not from the source tree') or diag $out;
ok(-x "$home/stream_seq_venv/bin/stream-seq-lag", 'the lag command is installed with it');

my $home2 = "$tmp/home2";
mkdir $home2;
($ok, $out) = user_sh($tree, $home2, readme_block('build'));
ok($ok, 'the README\'s build commands run') or diag $out;
ok(-f "$tree/dist/stream_seq_worker-0.8.0.tar.gz", 'an sdist is built');
ok(-f "$tree/dist/stream_seq_worker-0.8.0-py3-none-any.whl", 'a wheel is built');
($ok, $out) = user_sh($work, $home2, '~/stream_seq_venv/bin/python -c "import stream_seq_worker as m; print(m.__version__)"');
is($out, "0.8.0\n", 'the wheel installs into an environment of its own');

# README's Getting started (its block that makes the table events), then
# the library's quick start, whose statements can run again
my $top = slurp_file(source_root() . '/README.md');
my ($gs_section) = $top =~ /^## Getting started\n(.*?)^## /ms;
my ($getting_started) = grep { /CREATE TABLE events/ } (($gs_section // '') =~ /^```sql\n(.*?)^```/msg);
ok($getting_started, 'README\'s Getting started makes the table events');
$node->safe_psql('postgres', "SET ROLE app;\n$getting_started");
my ($qs) = $readme =~ /^## Quick start\n(.*?)^## /ms;
my @qs_sql = $qs =~ /^```sql\n(.*?)^```/msg;
my ($code) = $qs =~ /^```python\n(.*?)^```/ms;
is(scalar(@qs_sql), 2, 'the quick start has its schema and its writes');
ok($code, 'and its worker');
$node->safe_psql('postgres', "SET ROLE app;\n$qs_sql[0]");
is(psql_result($node, "SET ROLE app;\n$qs_sql[0]")->{rc}, 0, 'its schema can run again');
append_to_file("$work/shipping_worker.py", $code);

my $run = readme_block('run');
chomp $run;
unlike($run, qr/\n/, 'the run command is one line (so that bash runs python in its place)');
my $lag_cmd = readme_block('lag');
my $qs_n = 0;
sub start_quick_start
{
	my ($name, $conninfo) = @_;
	my $log = "$PostgreSQL::Test::Utils::log_path/043_quick_start_" . ++$qs_n . ".log";
	(my $cmd = $run) =~ s/dbname=app/$conninfo/;
	$cmd =~ s/shipping-1/$name/;
	my $pid = bg_fork($log, sub {
		chdir $work or die;
		$ENV{HOME} = $home;
		$ENV{PATH} = '/usr/bin:/bin';
		delete $ENV{PYTHONPATH};
		exec('bash', '-c', $cmd) or die;
	});
	return ($pid, $log);
}
sub log_has
{
	my ($log, $re) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		return 1 if -f $log && slurp_file($log) =~ $re;
		usleep(50_000);
	}
	return 0;
}
sub lag_report
{
	(my $cmd = $lag_cmd) =~ s/dbname=app/$dsn/;
	my ($ok, $out) = user_sh($work, $home, $cmd);
	ok($ok, 'the README\'s lag command runs') or diag $out;
	return $out;
}
my $all_applied = q{SELECT count(*) = (SELECT count(*) FROM events) FROM shipping_applied};

my ($qs_pid, $qs_log) = start_quick_start('shipping-1', $dsn);
ok(log_has($qs_log, qr/INFO shipping-1: started: group "shipping" of events, holds slots 0-7 of 8 \(lease 30 s\)/),
	'the worker logs its start: the group, the stream, the slots it holds') or diag slurp_file($qs_log);
$node->safe_psql('postgres', "SET ROLE app;\n$qs_sql[1]");
ok($node->poll_query_until('postgres', $all_applied), 'the quick start applied every row');
ok($node->poll_query_until('postgres',
		q{SELECT count(*) > 0 FROM pg_stat_activity WHERE query LIKE 'SELECT stream_seq.wait(%'}),
	'and waits for more');
my $n = val($node, 'SELECT count(*) FROM events');
kill 'TERM', $qs_pid;
is(wait_pid($qs_pid, 30), 0, 'the quick start exits 0 on SIGTERM') or diag slurp_file($qs_log);
like(slurp_file($qs_log), qr/INFO shipping-1: stopped, slots released \($n rows handled, 0 parked\)$/m,
	'and says it released its slots');
is(val($node, q{SELECT count(*) FROM stream_seq.consumer_slots WHERE worker IS NOT NULL}),
	'0', 'it released them');

# started again: it takes the slots back at once; killed with SIGKILL, it
# keeps them for its lease
($qs_pid, $qs_log) = start_quick_start('shipping-1', $dsn);
ok(log_has($qs_log, qr/shipping-1: started: group "shipping" of events, holds slots 0-7 of 8/),
	'started again, it holds every slot at once');
kill_group($qs_pid);
is(wait_pid($qs_pid, 30), -9, 'killed with SIGKILL');
$node->safe_psql('postgres', q{INSERT INTO events (customer_id, payload)
	SELECT g % 10, '{"kind": "order"}' FROM generate_series(1, 20) g});

# the lag command: a known backlog of 20 rows, slots still leased by the
# killed worker
my $report = lag_report();
like($report, qr/^STREAM\s+CONSUMER\s+SLOT\s+POSITION\s+HORIZON\s+LAG\s+BACKLOG\s+PARKED\s+DEAD\s+WORKER\s+LEASE_ENDS$/m,
	'the lag report has its header');
my $horizon = val($node, q{SELECT stream_seq.horizon('events')});
my ($position, $lag) = split /\|/, val($node,
	q{SELECT position, lag FROM stream_seq.consumers WHERE consumer = 'shipping'});
my ($group_line) = $report =~ /^(events\s+shipping\s+-\s.*)$/m;
like($group_line // '', qr/^events\s+shipping\s+-\s+$position\s+$horizon\s+$lag\s+20\s+0\s+0\s+1 worker\s+-$/,
	'the group: its position, the horizon, its lag, a backlog of 20 rows, nothing parked, one worker')
  or diag $report;
is(scalar(() = $report =~ /^events\s+shipping\s+\d\s.*\sshipping-1\s+(?:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\S*|expired)$/mg),
	8, 'each of its 8 slots, held by the killed worker until its lease ends')
  or diag $report;

# a worker of another name waits for the lease and says for whom (if the
# lease has not ended meanwhile on a slow machine)
my $leased = val($node, q{SELECT min(lease_until) > now() + interval '5 s'
                            FROM stream_seq.consumer_slots WHERE consumer = 'shipping'});
my ($pid2, $log2) = start_quick_start('shipping-2', $dsn);
SKIP:
{
	skip 'the lease ended before the second worker started', 1 unless $leased eq 't';
	ok(log_has($log2, qr/INFO shipping-2: holds 0 of 8 slots, its share is 4: waiting for 8 held by "shipping-1" until its lease ends at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d/),
		'a worker of another name names the lease it waits for') or diag slurp_file($log2);
}
kill 'TERM', $pid2;
is(wait_pid($pid2, 30), 0, 'it exits 0 on SIGTERM') or diag slurp_file($log2);
($qs_pid, $qs_log) = start_quick_start('shipping-1', $dsn);
ok($node->poll_query_until('postgres', $all_applied),
	'started again under its name, it took its slots back and applied the rest');
kill 'TERM', $qs_pid;
is(wait_pid($qs_pid, 30), 0, 'and exits 0 on SIGTERM') or diag slurp_file($qs_log);
is(val($node, q{SELECT count(*) FROM events e
                 WHERE (SELECT count(*) FROM shipping_applied a WHERE a.seq = e.seq) <> 1}),
	'0', 'every row applied once');
$report = lag_report();
like($report, qr/^events\s+shipping\s+-\s+\d+\s+$horizon\s+\d+\s+0\s+0\s+0\s+0 workers\s+-$/m,
	'no backlog, no worker left') or diag $report;

($ok, $out) = user_sh($work, $home, "~/stream_seq_venv/bin/stream-seq-lag '$dsn' --stream no_such_table");
ok(!$ok, 'the lag command fails on a table that does not exist');
like($out, qr/^stream-seq-lag: relation "no_such_table" does not exist \[42P01\]$/m, 'and says why');

# permanent errors: the README's worker exits 1 with the message
my ($bad, $bad_log) = start_quick_start('shipping-1', $node->connstr('nope') . ' user=app');
is(wait_pid($bad, 30), 1, 'a database that does not exist: the worker exits 1');
like(slurp_file($bad_log), qr/ERROR shipping-1: stopping: could not connect to .*, database nope: .*database "nope" does not exist/,
	'with the message');
my $free = PostgreSQL::Test::Cluster::get_free_port();
($bad, $bad_log) = start_quick_start('shipping-1', "host=127.0.0.1 port=$free dbname=postgres user=app");
is(wait_pid($bad, 60), 1, 'no server on that port: it exits 1 after its connect attempts');
like(slurp_file($bad_log), qr/ERROR shipping-1: stopping: could not connect to host 127\.0\.0\.1, port $free, database postgres in 10 attempts: /,
	'with the message') or diag slurp_file($bad_log);
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
