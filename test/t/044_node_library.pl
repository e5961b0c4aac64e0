# Copyright (c) stream_seq contributors
#
# 044_node_library.pl: the Node worker library (clients/node, with
# node-postgres from npm) through pgbouncer in transaction mode, as an
# ordinary role.
#
#  - The quick start of clients/node/README.md, taken from the README's
#    text, applies every row of its group and, on SIGTERM, releases its
#    slots, prints "stopped" and exits 0.
#  - lastNumbers() gives the numbers of the session's last commit, as
#    BigInt.
#  - A parked row deleted before its retry: due() hands it back without
#    a row; it is parked again with a reason, not handed to the handler.
#  - Three group workers (lease 3 s) and one plain-consumer worker run
#    against writers (savepoints, more than 64 subtransactions in some
#    transactions, poison rows the handler refuses, rows the table's CHECK
#    refuses, flaky rows refused on their first delivery); two group
#    workers are killed with SIGKILL and replaced, the group is resized
#    from 4 to 6 slots meanwhile, and the server is crashed (immediate
#    stop) and restarted while the workers run.  The consumers have a
#    retry policy of 2 attempts.
#
# Once everything is caught up, for the group and the plain consumer:
# every committed row was applied exactly once or is a dead letter, never
# both; only the refused rows are dead letters, after 2 attempts; every
# flaky row was applied once, by a retry; the rows' bigint columns (ids
# above 2^53) reached the handler as exact BigInts; the rows of each customer
# applied from pages were applied in number order; the resize switched;
# on SIGTERM every group worker released its slots and every worker
# exited 0.
#
# npm: pg from clients/node/package.json, installed into
# STREAM_SEQ_NPM_CACHE, else /var/cache/stream_seq/npm when writable, else
# ~/.cache/stream_seq/npm (once; again when package.json changes); the
# test is skipped, with the reason, when npm cannot install it.

use strict;
use warnings;

use File::Compare ();
use File::Copy ();
use File::Path ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use StreamSeqTest;

my $t_start = time();
my $root = source_root();
my $lib = "$root/clients/node";
my $pgbouncer = '/usr/sbin/pgbouncer';
if (!-x $pgbouncer)
{
	die "$pgbouncer is missing; test/run-tests.sh installs it as root" if $> == 0;
	plan skip_all => "pgbouncer is not installed ($pgbouncer)";
}
plan skip_all => 'node and npm are not installed (Debian: nodejs, npm)'
  unless -x '/usr/bin/node' && (-x '/usr/bin/npm' || `command -v npm`);

# pg from npm into the cache, as test/t/039_applications.pl does
my $cache = $ENV{STREAM_SEQ_NPM_CACHE};
if (!defined $cache)
{
	$cache = '/var/cache/stream_seq/npm';
	$cache = "$ENV{HOME}/.cache/stream_seq/npm"
	  unless -w $cache || (!-e $cache && $> == 0);
}
my $prefix = "$cache/worker";
File::Path::make_path($prefix);
my $npm_seconds = 0;
if (File::Compare::compare("$lib/package.json", "$prefix/package.json") != 0
	|| !-d "$prefix/node_modules/pg")
{
	my $t0 = time();
	File::Copy::copy("$lib/package.json", "$prefix/package.json")
	  or die "copy package.json: $!";
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run(
		[
			'npm', 'install', '--no-audit', '--no-fund', '--no-package-lock',
			'--prefix', $prefix, '--cache', "$cache/cache"
		],
		'<', \undef, '>', \$out, '2>', \$err);
	$npm_seconds = time() - $t0;
	if (!$ok)
	{
		unlink "$prefix/package.json";
		plan skip_all => "npm install of clients/node/package.json failed (registry not reachable?): $err";
	}
}
note sprintf('npm install: %.1f s', $npm_seconds);
# the library resolves pg through NODE_PATH; the quick start resolves the
# library by its package name through a directory of its own
my $modules = PostgreSQL::Test::Utils::tempdir();
symlink($lib, "$modules/stream-seq-worker") or die "symlink: $!";
$ENV{NODE_PATH} = "$prefix/node_modules:$modules";

my $node = new_node('node_library', "max_connections = 60\n");
$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE ROLE app LOGIN;
GRANT CREATE ON SCHEMA public TO app;
GRANT USAGE ON SCHEMA stream_seq TO app;
SET ROLE app;
-- the quick start's stream and table, as in doc/consumers.md
CREATE TABLE events (id bigserial PRIMARY KEY, customer_id int, payload jsonb);
SELECT stream_seq.enable('events');
SELECT stream_seq.create_group('events', 'shipping', 'customer_id', 4);
CREATE TABLE shipping_applied (seq bigint PRIMARY KEY, customer_id int, payload jsonb);
-- the scenario's stream, a group and a plain consumer, each applying into
-- a table of its own, refusing customer -1, in an order of application
CREATE TABLE ev (id bigserial PRIMARY KEY, customer_id int, payload jsonb);
-- ids above 2^53, where a Number is no longer exact
ALTER SEQUENCE ev_id_seq RESTART WITH 9007199254740993;
SELECT stream_seq.enable('ev');
SELECT stream_seq.create_group('ev', 'g', 'customer_id', 4);
SELECT stream_seq.create_consumer('ev', 'plain');
SELECT stream_seq.set_retry_policy('ev', c, max_attempts => 2, delay => '20 ms', backoff => 1)
  FROM unnest(ARRAY['g', 'plain']) c;
CREATE TABLE applied_g (seq bigint PRIMARY KEY, id bigint, customer_id int CHECK (customer_id >= 0),
                        payload jsonb, worker text, attempts int, retry boolean,
                        ord bigserial);
CREATE TABLE applied_plain (LIKE applied_g INCLUDING ALL);
});
# server_login_retry: after the crash restart, pgbouncer tries the server
# again within a second instead of answering 08P01 for 15 s
my $bouncer = start_pgbouncer($node, path => $pgbouncer, users => ['app'],
	pool_size => 20, settings => ['server_login_retry = 1']);
my $port = $bouncer->{port};
my $url = "postgres://app\@127.0.0.1:$port/postgres";
# node-postgres takes URLs, not libpq's key=value strings; the socket
# directory goes in the host parameter
my $direct = 'postgres://app@/postgres?host=' . $node->host . '&port=' . $node->port;

# wait until a query gives the wanted value
sub wait_for
{
	my ($sql, $want, $what) = @_;
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	my $got;
	while (time() < $deadline)
	{
		$got = $node->safe_psql('postgres', $sql);
		last if $got eq $want;
		usleep(100_000);
	}
	is($got, $want, $what);
}

# stops a worker with SIGTERM; it must exit 0
sub stop_worker
{
	my ($w, $name) = @_;
	$w->{handle}->signal('TERM');
	is(wait_done($w, 60), 0, "$name exits 0 on SIGTERM")
	  or diag ${ $w->{out} } . ${ $w->{err} };
	return ${ $w->{out} };
}

# --- the quick start, from the README's text
open(my $fh, '<', "$lib/README.md") or die "README.md: $!";
my $readme = do { local $/; <$fh> };
close $fh;
my ($quick) = $readme =~ /^## Quick start\n.*?^```js\n(.*?)^```\n/ms;
ok(defined $quick, 'the README has a quick start');
my $qs_file = PostgreSQL::Test::Utils::tempdir() . '/quick_start.js';
append_to_file($qs_file, $quick // '');
$node->safe_psql('postgres', q{
INSERT INTO events (customer_id, payload) SELECT i % 5, '{"kind": "order"}' FROM generate_series(1, 7) i;
INSERT INTO events (customer_id, payload) SELECT i % 5, '{"kind": "shipped"}' FROM generate_series(1, 5) i;
});
my $qs = do
{
	local $ENV{DATABASE_URL} = $url;
	bg_run('node', $qs_file);
};
wait_for('SELECT count(*) FROM shipping_applied a JOIN events e USING (seq)
           WHERE a.payload = e.payload AND a.customer_id = e.customer_id',
	'12', 'quick start: every row applied');
my $qs_out = stop_worker($qs, 'quick start');
is($qs_out, "stopped 12\n", 'quick start: prints that it stopped after 12 rows');
is(val($node, q{SELECT count(*) FROM stream_seq.consumer_slots
                 WHERE stream = 'events'::regclass AND worker IS NOT NULL}),
	'0', 'quick start: the slots were released');

# --- lastNumbers()
my ($p_out, $p_err) = ('', '');
IPC::Run::run([ 'node', "$lib/test/producer.js", $direct ],
	'<', \undef, '>', \$p_out, '2>', \$p_err);
is($p_out, "before null null\nafter 1 3 bigint bigint\n",
	'lastNumbers(): nothing before the first commit, then its numbers as BigInt')
  or diag $p_err;

# --- the scenario
my %workers;
sub start_worker
{
	my ($name, $mode, $consumer) = @_;
	$workers{$name} = bg_run('node', "$lib/test/worker.js", $url, $name, $mode,
		$consumer, "applied_$consumer");
}
start_worker("g-$_", 'group', 'g') foreach 1 .. 3;
start_worker('plain-1', 'plain', 'plain');

my $dir = $node->basedir;
append_to_file("$dir/writer.sql", q{
\set c random(0, 20)
\set f random(1, 15)
BEGIN;
INSERT INTO ev (customer_id, payload) VALUES (:c, '{"kind": "order"}');
SAVEPOINT s;
INSERT INTO ev (customer_id, payload) VALUES (:c, '{"kind": "rolled back"}');
ROLLBACK TO SAVEPOINT s;
INSERT INTO ev (customer_id, payload)
VALUES (:c, CASE WHEN :f = 1 THEN '{"kind": "flaky"}' ELSE '{"kind": "shipped"}' END::jsonb);
COMMIT;
});
append_to_file("$dir/overflow.sql", q{
DO $$
BEGIN
    FOR i IN 1..70 LOOP
        BEGIN
            INSERT INTO ev (customer_id, payload) VALUES (i % 21, '{"kind": "many"}');
        EXCEPTION WHEN others THEN RAISE;
        END;
    END LOOP;
END $$;
});
# refused rows: by the handler (kind poison) and by the table (customer
# -1), adjacent in one transaction
append_to_file("$dir/poison.sql", q{
INSERT INTO ev (customer_id, payload)
VALUES (3, '{"kind": "poison"}'), (-1, '{"kind": "order"}');
});
my @script = ('-f', "$dir/writer.sql\@20", '-f', "$dir/overflow.sql\@1",
	'-f', "$dir/poison.sql\@1");
my $writers = bg_run($node->installed_command('pgbench'), '-n', '-h', $node->host,
	'-p', $node->port, '-U', 'app', '-c', '3', '-t', '150', @script, 'postgres');

# wait until at least n rows are applied by the group
sub applied_at_least
{
	my ($n) = @_;
	wait_for("SELECT count(*) >= $n FROM applied_g", 't', "the group applied $n rows");
}

applied_at_least(200);
$workers{'g-1'}->{handle}->signal('KILL');
$workers{'g-1'}->{handle}->finish;
delete $workers{'g-1'};
start_worker('g-4', 'group', 'g');

applied_at_least(600);
is( val($node, q{SET ROLE app; SELECT stream_seq.resize_group('ev', 'g', 6)}),
	'f', 'resize to 6 slots while the workers run: pending');

applied_at_least(1000);
$workers{'g-2'}->{handle}->signal('KILL');
$workers{'g-2'}->{handle}->finish;
delete $workers{'g-2'};
start_worker('g-5', 'group', 'g');

is(wait_done($writers), 0, 'writers ran') or diag ${ $writers->{err} };

# a backlog, then a crash while the workers work it
my $before = val($node, 'SELECT count(*) FROM applied_g');
$node->safe_psql('postgres', q{
SET ROLE app;
INSERT INTO ev (customer_id, payload)
SELECT i % 21, CASE WHEN i % 500 = 0 THEN '{"kind": "poison"}' ELSE '{"kind": "bulk"}' END::jsonb
  FROM generate_series(1, 3000) i;
});
applied_at_least($before + 50);
$node->stop('immediate');
$node->start;
note 'crash restart done';
my $after = bg_run($node->installed_command('pgbench'), '-n', '-h', $node->host,
	'-p', $node->port, '-U', 'app', '-c', '2', '-t', '20', @script, 'postgres');
is(wait_done($after), 0, 'writers ran after the restart') or diag ${ $after->{err} };

my $total = val($node, 'SELECT count(*) FROM ev');
foreach my $c ('g', 'plain')
{
	wait_for(qq{SELECT (SELECT count(*) FROM applied_$c)
	                 + (SELECT count(*) FROM stream_seq.parked_rows
	                     WHERE consumer = '$c' AND dead)
	                 = $total
	               AND NOT EXISTS (SELECT FROM stream_seq.parked_rows
	                                WHERE consumer = '$c' AND NOT dead)},
		't', "$c: caught up, every row applied or a dead letter");
}
wait_for(q{SELECT slots || '/' || (resize_to IS NULL) FROM stream_seq.consumers
            WHERE consumer = 'g'}, '6/true', 'the resize switched to 6 slots');

my $reconnected = 0;
foreach my $name (sort keys %workers)
{
	my $out = stop_worker($workers{$name}, $name);
	# a plain consumer holds no slots: it has nothing to release
	if ($name =~ /^g-/)
	{
		like($out, qr/^release$/m, "$name released its slots");
	}
	like($out, qr/^stopped \{/m, "$name finished its page and stopped");
	# A worker started just before the crash may first connect after it,
	# and one between transactions keeps its pgbouncer connection: what is
	# certain is that each lost connection is followed by a new one.
	my $connects = () = $out =~ /^connect$/mg;
	$reconnected++ if $connects >= 2;
	my $last_lost = rindex("\n$out", "\nerror connection");
	ok($last_lost < 0 || substr("\n$out", $last_lost) =~ /^connect$/m,
		"$name connected again after each lost connection");
	unlike($out, qr/^failed/m, "$name never failed");
}
cmp_ok($reconnected, '>=', 1, 'workers reconnected after the crash');
is(val($node, q{SELECT count(*) FROM stream_seq.consumer_slots WHERE worker IS NOT NULL}),
	'0', 'no slot is held once the workers stopped');
# each worker stopped out of wait(), by a cancel request through
# pgbouncer; pgbouncer 1.18 (Debian bookworm) exits when the cancel
# connection is closed before it has forwarded the request
$bouncer->{handle}->pump_nb;
ok($bouncer->{handle}->pumpable, 'pgbouncer still runs after the workers\' cancel requests')
  or diag slurp_file($bouncer->{log});

foreach my $c ('g', 'plain')
{
	is( val($node, qq{SELECT count(*) FROM ev e
	                   WHERE (SELECT count(*) FROM applied_$c a WHERE a.seq = e.seq)
	                       + (SELECT count(*) FROM stream_seq.parked_rows p
	                           WHERE p.consumer = '$c' AND p.seq = e.seq) <> 1}),
		'0', "$c: every row applied exactly once or parked, never both");
	is( val($node, qq{SELECT count(*) FILTER (WHERE a.id = e.id AND e.id > 9007199254740992), count(*)
	                    FROM ev e JOIN applied_$c a USING (seq)}),
		val($node, qq{SELECT count(*) || '|' || count(*) FROM applied_$c}),
		"$c: the rows' bigint columns reached the handler as exact BigInts");
	is( val($node, qq{SELECT count(*) FILTER (WHERE NOT (e.payload->>'kind' = 'poison' OR e.customer_id = -1)
	                                             OR p.attempts <> 2 OR NOT p.dead),
	                         count(*)
	                    FROM stream_seq.parked_rows p JOIN ev e USING (seq)
	                   WHERE p.consumer = '$c'}),
		'0|' . val($node, q{SELECT count(*) FROM ev
		                     WHERE payload->>'kind' = 'poison' OR customer_id = -1}),
		"$c: the refused rows, and only they, are dead letters after 2 attempts");
	is( val($node, qq{SELECT count(*) FILTER (WHERE a.retry AND a.attempts = 1), count(*)
	                    FROM ev e JOIN applied_$c a USING (seq)
	                   WHERE e.payload->>'kind' = 'flaky'}),
		val($node, q{SELECT count(*) || '|' || count(*) FROM ev WHERE payload->>'kind' = 'flaky'}),
		"$c: every flaky row applied once, by a retry after its failure");
	is( val($node, qq{SELECT count(*) FROM (
	                    SELECT seq < lag(seq) OVER (PARTITION BY customer_id ORDER BY ord) AS back
	                      FROM applied_$c WHERE NOT retry) o WHERE back}),
		'0', "$c: the rows of each customer were applied in number order");
}
cmp_ok(val($node, q{SELECT count(*) FROM ev WHERE payload->>'kind' = 'flaky'}), '>', 0,
	'some rows are flaky');
# --- a parked row that is gone when due() hands it back (deleted; with
# respect_consumers off, retention may remove it too): parked again with
# the reason, never handed to the handler, and the next row still read
$node->safe_psql('postgres', q{
SET ROLE app;
CREATE TABLE gone_ev (id bigserial PRIMARY KEY, payload jsonb);
SELECT stream_seq.enable('gone_ev');
SELECT stream_seq.create_consumer('gone_ev', 'p');
SELECT stream_seq.set_retry_policy('gone_ev', 'p', max_attempts => 3, delay => '0 s', backoff => 1);
INSERT INTO gone_ev (payload) VALUES ('{"n": 1}'), ('{"n": 2}');
});
$node->safe_psql('postgres', q{
SET ROLE app;
SELECT stream_seq.park('gone_ev', 'p', min(seq), 'refused') FROM gone_ev;
DELETE FROM gone_ev WHERE payload->>'n' = '1';
});
my $gone_js = $node->basedir . '/gone.js';
append_to_file($gone_js, q{
const { Worker } = require('stream-seq-worker')
const stop = new AbortController()
const handled = []
new Worker({
  connection: process.argv[2], stream: 'gone_ev', consumer: 'p',
  handleRow ({ seq, row }) { handled.push(`${seq}:${row.payload.n}`) },
  hooks: { park: ({ seq, error, attempts }) => { console.log('park', `${seq}`, attempts, error.message); stop.abort() } }
}).run({ signal: stop.signal }).then(() => console.log('handled', handled.join(',')))
});
my ($gone_out, $gone_err) = ('', '');
IPC::Run::run([ 'node', $gone_js, $url ], '<', \undef, '>', \$gone_out, '2>', \$gone_err,
	IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
my $seq2 = val($node, q{SELECT seq FROM gone_ev});
my $seq1 = val($node, q{SELECT seq FROM stream_seq.parked_rows WHERE consumer = 'p'});
is($gone_out, "park $seq1 2 row removed by retention\nhandled $seq2:2\n",
	'a parked row gone by its retry is parked again, not handed over; the next row is')
  or diag $gone_err;
is(val($node, q{SELECT attempts || '/' || reason FROM stream_seq.parked_rows WHERE consumer = 'p'}),
	'2/row removed by retention', 'the gone row is parked with its reason, one more attempt');

stop_pgbouncer($bouncer);
$node->stop;
note sprintf('seconds: npm install %.1f; total %.1f', $npm_seconds, time() - $t_start);
done_testing();
