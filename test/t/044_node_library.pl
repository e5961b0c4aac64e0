# Copyright (c) stream_seq contributors
#
# 044_node_library.pl: the Node worker library (clients/node, with
# node-postgres from npm) through pgbouncer in transaction mode, as an
# ordinary role.
#
#  - Install and Quick start of clients/node/README.md, taken from the
#    README's text and run as written: the install command (its
#    /path/to/stream_seq the source tree) in a new directory outside the
#    source tree, which must end with the library copied (not linked) and
#    pg beside it; the quick start's SQL blocks in order, on the table
#    events of README's Getting started; its worker.js, run by its command
#    (its DATABASE_URL the pooler's).  The worker logs its start with the
#    slots it took, applies every row, logs a row it parks with its reason
#    and counts it apart; on SIGTERM it releases its slots at once, logs
#    it, prints the counters and exits 0, with no DeprecationWarning.
#    Killed with SIGKILL and started under another name, it names the
#    worker whose lease it waits for; under its own name it takes its
#    slots back at once.  On an error no retry mends (a database that
#    does not exist, a column of its INSERT that does not exist) it exits
#    1 with the error logged, parks nothing and releases its slots.
#  - The options: a logger object, a function (as a debug instance),
#    DEBUG; a progress line; connectAttempts (a port nobody listens on
#    ends the worker); a group that does not exist, a plain consumer and a
#    group swapped, a table that is not a stream stop it; a connection
#    terminated by the server (57P01) is logged and opened again.
#  - The scenario's workers (below) print no DeprecationWarning; the plain
#    consumer's worker logs each row it parks, a refused row at attempt 1
#    or 2 or a flaky row at attempt 1, with its reason.
#  - lastNumbers() gives the numbers of the session's last commit, as
#    BigInt.
#  - A parked row deleted before its retry: due() hands it back without
#    a row; it is parked again with a reason, not handed to the handler.
#  - Under per-key order, a key with 300 rows held behind a parked row
#    drains in one run whose dueMs is an hour, in commit order: due() is
#    called again at once while it hands rows back, at most a page's
#    worth before the slots' turn.
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
# npm: the README's install command, with npm's cache in
# STREAM_SEQ_NPM_CACHE, else /var/cache/stream_seq/npm when writable, else
# ~/.cache/stream_seq/npm, and prefer-offline, so that it needs the npm
# registry only when the cache lacks a package; the test is skipped, with
# the reason, when npm cannot install.

use strict;
use warnings;

use File::Compare ();
use File::Temp ();
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

# the README's install and quick start
my $readme = slurp_file("$lib/README.md");
my ($install) = $readme =~ /^## Install\n.*?^```sh\n(.*?)^```\n/ms;
my ($quick) = $readme =~ /^## Quick start\n(.*?)^## /ms;
die 'clients/node/README.md: no Install or Quick start section'
  unless defined $install && defined $quick;
my @qs_sql = $quick =~ /^```sql\n(.*?)^```\n/msg;
my ($qs_js) = $quick =~ /^```js\n(.*?)^```\n/ms;
my ($qs_run) = $quick =~ /^```sh\n(.*?)^```\n/ms;
die 'clients/node/README.md: the quick start lacks its SQL, worker.js or command'
  unless @qs_sql == 2 && defined $qs_js && defined $qs_run;

my $cache = $ENV{STREAM_SEQ_NPM_CACHE};
if (!defined $cache)
{
	$cache = '/var/cache/stream_seq/npm';
	$cache = "$ENV{HOME}/.cache/stream_seq/npm"
	  unless -w $cache || (!-e $cache && $> == 0);
}
File::Path::make_path("$cache/cache");
# a new directory outside the source tree, as an application's
my $appdir = File::Temp::tempdir('stream_seq_node_XXXX', TMPDIR => 1, CLEANUP => 1);
# runs the commands of "script" (the README's, its /path/to/stream_seq the
# source tree) with sh in directory "dir"; returns whether they succeeded,
# and their output
sub npm_run
{
	my ($dir, $script) = @_;
	my ($out, $err) = ('', '');
	local $ENV{npm_config_cache} = "$cache/cache";
	local $ENV{npm_config_prefer_offline} = 'true';
	local $ENV{npm_config_audit} = 'false';
	local $ENV{npm_config_fund} = 'false';
	local $ENV{npm_config_update_notifier} = 'false';
	$script =~ s{/path/to/stream_seq}{$root}g;
	my $ok = IPC::Run::run([ 'sh', '-e', '-c', $script ], '<', \undef, '>', \$out,
		'2>', \$err, init => sub { chdir $dir or die "chdir: $!" });
	return ($ok, $out . $err);
}
my $npm_seconds = time();
my ($npm_ok, $npm_out) = npm_run($appdir, $install);
plan skip_all => "the README's npm install failed (registry not reachable?): $npm_out"
  unless $npm_ok;
$npm_seconds = time() - $npm_seconds;
note sprintf('npm install: %.1f s', $npm_seconds);
my ($app) = $install =~ /\bcd (\S+)/;
$app = "$appdir/$app";
ok(-f "$app/node_modules/stream-seq-worker/index.js" && !-l "$app/node_modules/stream-seq-worker",
	'install: the library is copied into the application\'s node_modules')
  or diag $npm_out;
ok(-f "$app/node_modules/pg/package.json", 'install: pg arrives with it');
is(File::Compare::compare("$lib/index.js", "$app/node_modules/stream-seq-worker/index.js"),
	0, 'install: the copy is the source\'s');
# the README's version is package.json's, and so is the tarball's name it
# gives; npm pack and npm install of the tarball, as the README says
my ($version) = slurp_file("$lib/package.json") =~ /"version":\s*"([^"]+)"/;
like($readme, qr/^Version \Q$version\E,/m, 'README: the version of package.json');
my ($pack) = $readme =~ /`(npm pack [^`]+)`/;
my ($tgz_install) = $readme =~ /`(npm install \.\/[^`]+)`/;
is($tgz_install, "npm install ./stream-seq-worker-$version.tgz",
	'README: the tarball npm pack makes, by its name');
my $packdir = File::Temp::tempdir('stream_seq_node_XXXX', TMPDIR => 1, CLEANUP => 1);
($npm_ok, $npm_out) = npm_run($packdir, "$pack\n$tgz_install\n");
ok($npm_ok && -f "$packdir/node_modules/stream-seq-worker/index.js"
	  && -f "$packdir/node_modules/pg/package.json",
	'install from the tarball npm pack makes: the library and pg') or diag $npm_out;

# the library of the source tree (test/*.js require ../index.js) finds pg
# there too, and the scripts of this test the installed library
$ENV{NODE_PATH} = "$app/node_modules";

my $node = new_node('node_library', "max_connections = 60\n");
$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE ROLE app LOGIN;
GRANT CREATE ON SCHEMA public TO app;
GRANT USAGE ON SCHEMA stream_seq TO app;
SET ROLE app;
-- the table of README's Getting started
CREATE TABLE events (id bigserial PRIMARY KEY, customer_id int, payload jsonb);
SELECT stream_seq.enable('events');
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

# stops a worker with SIGTERM (or "signal"); it must exit 0
sub stop_worker
{
	my ($w, $name, $signal) = @_;
	$w->{handle}->signal($signal // 'TERM');
	is(wait_done($w, 60), 0, "$name exits 0 on SIG" . ($signal // 'TERM'))
	  or diag ${ $w->{out} } . ${ $w->{err} };
	return ${ $w->{out} };
}

# waits until a background command's error output (or "which" output)
# matches "re", at most "limit" seconds (default: the TAP timeout)
sub wait_err
{
	my ($w, $re, $what, $which, $limit) = @_;
	my $text = $w->{ $which // 'err' };
	my $deadline = time() + ($limit // $PostgreSQL::Test::Utils::timeout_default);
	while ($$text !~ $re && time() < $deadline && $w->{handle}->pumpable)
	{
		$w->{handle}->pump_nb;
		usleep(50_000);
	}
	like($$text, $re, $what);
}

# --- Install and Quick start, from the README's text
# its SQL, in order, as the owner of events; the first block makes the
# group and shipping_applied, the second adds rows (run below)
my $r = psql_result($node, "SET ROLE app;\n$qs_sql[0]");
is($r->{rc}, 0, 'quick start: the group and the table') or diag $r->{err};
append_to_file("$app/worker.js", $qs_js);
# its command: NAME=VALUE ... node worker.js, the URL in it the pooler's
my @qs_words = split ' ', $qs_run;
my %qs_env;
$qs_env{$1} = $2 while @qs_words && $qs_words[0] =~ /^(\w+)=(.*)$/ && shift @qs_words;
is("@qs_words", 'node worker.js', 'quick start: the command runs worker.js');
ok(defined $qs_env{DATABASE_URL}, 'quick start: the command gives DATABASE_URL');

# runs the quick start's command in the application's directory, with
# more environment variables
sub quick_start
{
	my (%env) = @_;
	my ($out, $err) = ('', '');
	local %ENV = (%ENV, %qs_env, DATABASE_URL => $url, %env);
	my $h = IPC::Run::start([@qs_words], '<', \undef, '>', \$out, '2>', \$err,
		init => sub { chdir $app or die "chdir: $!" });
	return { handle => $h, out => \$out, err => \$err };
}

$node->safe_psql('postgres', q{
SET ROLE app;
INSERT INTO events (customer_id, payload) SELECT i % 5, '{"kind": "order"}' FROM generate_series(1, 7) i;
INSERT INTO events (customer_id, payload) SELECT i % 5, '{"kind": "shipped"}' FROM generate_series(1, 5) i;
});
my $qs = quick_start();
wait_err($qs, qr/^\S+ stream-seq-worker info worker shipping-1 started: stream events, group shipping, slots 0-7 of 8 \(lease 30 s\)$/m,
	'quick start: logs its start, the slots it took');
wait_for('SELECT count(*) FROM shipping_applied a JOIN events e USING (seq)
           WHERE a.payload = e.payload AND a.customer_id = e.customer_id',
	'12', 'quick start: every row applied');
$r = psql_result($node, "SET ROLE app;\n$qs_sql[1]");
is($r->{rc}, 0, 'quick start: the rows added in psql') or diag $r->{err};
wait_for('SELECT count(*) FROM shipping_applied a JOIN events e USING (seq)
           WHERE a.payload = e.payload AND a.customer_id = e.customer_id',
	'14', 'quick start: the rows added applied');
# a row the table refuses: parked, logged with its reason, not applied
$node->safe_psql('postgres', q{
SET ROLE app;
ALTER TABLE shipping_applied ADD CONSTRAINT known_customer CHECK (customer_id >= 0);
INSERT INTO events (customer_id, payload) VALUES (-1, '{"kind": "order"}');
});
my $refused = val($node, 'SELECT seq FROM events WHERE customer_id = -1');
wait_err($qs, qr/^\S+ stream-seq-worker warn worker shipping-1: parked row $refused \(attempt 1\): new row for relation "shipping_applied" violates check constraint "known_customer" \(SQLSTATE 23514\)$/m,
	'quick start: logs the row it parks, with its reason');
is(val($node, q{SELECT seq || '/' || attempts FROM stream_seq.parked_rows WHERE consumer = 'shipping'}),
	"$refused/1", 'quick start: the refused row is parked');
my $qs_out = stop_worker($qs, 'quick start');
is($qs_out, "applied 14, parked 1\n", 'quick start: prints the rows applied and parked, apart');
like(${ $qs->{err} }, qr/^\S+ stream-seq-worker info worker shipping-1: stopped, slots 0-7 released; applied 14 rows, parked 1$/m,
	'quick start: logs its stop and the slots released');
unlike(${ $qs->{err} }, qr/Warning|warning:/, 'quick start: no DeprecationWarning or other warning of node');
is(val($node, q{SELECT count(*) FROM stream_seq.consumer_slots
                 WHERE stream = 'events'::regclass AND worker IS NOT NULL}),
	'0', 'quick start: the slots were released');

# killed, then started under another name: it waits for the lease and
# says whose; under its own name it takes its slots back at once
$qs = quick_start();
wait_err($qs, qr/started: .* slots 0-7 of 8/, 'quick start: started again');
$qs->{handle}->signal('KILL');
$qs->{handle}->finish;
my $until = val($node, q{SELECT to_char(max(lease_until) AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
                           FROM stream_seq.consumer_slots WHERE consumer = 'shipping'});
my $qs2 = quick_start(WORKER => 'shipping-2');
wait_err($qs2, qr/^\S+ stream-seq-worker info worker shipping-2: waiting for slots 0-7, held by worker shipping-1 until its lease ends at \Q$until\E\.\d{3}Z \(in [0-9.]+ s\), or until it gives them back$/m,
	'another worker names the worker whose lease it waits for, and its end');
like(${ $qs2->{err} }, qr/worker shipping-2 started: .* slots none of 8/,
	'another worker starts with no slot while the lease lasts');
is(stop_worker($qs2, 'the other worker', 'INT'), "applied 0, parked 0\n",
	'the other worker applied nothing');
$qs = quick_start();
wait_err($qs, qr/worker shipping-1 started: .* slots 0-7 of 8/,
	'under its own name it takes its slots back at once');
stop_worker($qs, 'quick start');

# errors no retry mends: the worker exits 1 with the error
(my $nope = $direct) =~ s{/postgres\?}{/nope?};
$qs = quick_start(DATABASE_URL => $nope);
is(wait_done($qs, 60), 1, 'a database that does not exist: exits 1');
like(${ $qs->{err} }, qr/^\S+ stream-seq-worker error worker shipping-1: stopping: database "nope" does not exist \(SQLSTATE 3D000\)$/m,
	'a database that does not exist: logged');
is(${ $qs->{out} }, '', 'a database that does not exist: no counters printed');
# DATABASE_URL set but empty: the PG* variables, as without it
$qs = quick_start(DATABASE_URL => '', PGHOST => $node->host, PGPORT => $node->port,
	PGUSER => 'app', PGDATABASE => 'nope');
is(wait_done($qs, 60), 1, 'an empty DATABASE_URL: exits 1 on the PG* variables\' database');
like(${ $qs->{err} }, qr/stopping: database "nope" does not exist \(SQLSTATE 3D000\)$/m,
	'an empty DATABASE_URL: the PG* variables are used') or diag ${ $qs->{err} };
my $positions = q{SELECT string_agg(slot || ':' || position, ',' ORDER BY slot)
                    FROM stream_seq.consumer_slots WHERE consumer = 'shipping'};
my $before_positions = val($node, $positions);
$node->safe_psql('postgres', q{
SET ROLE app;
ALTER TABLE shipping_applied RENAME COLUMN payload TO body;
INSERT INTO events (customer_id, payload) VALUES (3, '{"kind": "order"}');
});
my $last = val($node, 'SELECT max(seq) FROM events');
$qs = quick_start();
is(wait_done($qs, 60), 1, 'a column of the handler that does not exist: exits 1');
like(${ $qs->{err} }, qr/^\S+ stream-seq-worker error worker shipping-1: stopping: column "payload" of relation "shipping_applied" does not exist \(SQLSTATE 42703\)$/m,
	'a column of the handler that does not exist: logged');
like(${ $qs->{err} }, qr/stopped on the error, slots 0-7 released/,
	'a column of the handler that does not exist: the slots released');
is(val($node, q{SELECT count(*) FROM stream_seq.parked_rows WHERE consumer = 'shipping'})
	  . ' ' . val($node, $positions),
	"1 $before_positions", 'a column of the handler that does not exist: nothing parked, no slot advanced');
$node->safe_psql('postgres', 'SET ROLE app; ALTER TABLE shipping_applied RENAME COLUMN body TO payload');
$qs = quick_start();
wait_for("SELECT count(*) FROM shipping_applied WHERE seq = $last", '1',
	'the row applied once the column is back');
stop_worker($qs, 'quick start');

# --- the options, with a script of the installed library
$node->safe_psql('postgres', q{
SET ROLE app;
CREATE TABLE chk (id bigserial PRIMARY KEY, payload jsonb);
SELECT stream_seq.enable('chk');
SELECT stream_seq.create_group('chk', 'cg', 'id', 2);
SELECT stream_seq.create_consumer('chk', 'cp');
INSERT INTO chk (payload) SELECT '{}' FROM generate_series(1, 5);
});
append_to_file("$app/check.js", q{
const { GroupWorker, Worker } = require('stream-seq-worker')
const o = JSON.parse(process.argv[2])
const say = (...a) => process.stdout.write(a.join(' ') + '\n')
const Kind = o.plain ? Worker : GroupWorker
delete o.plain
let progress = 0
if (o.logger === 'object') o.logger = { debug: (m) => say('D', m), info: (m) => { if (/: progress: /.test(m)) progress++; say('I', m) }, warn: (m) => say('W', m), error: (m) => say('E', m) }
if (o.logger === 'function') o.logger = (m) => say('F', m)
// stops on SIGTERM, or once runMs have passed, stopAfter rows are
// applied and (with progress) a progress line was logged
const stop = new AbortController()
process.on('SIGTERM', () => stop.abort())
const { runMs, stopAfter } = o
const needProgress = o.progress
delete o.runMs
delete o.stopAfter
delete o.progress
const w = new Kind({ worker: 'c-1', ...o, handleRow () {} })
if (runMs) {
  setTimeout(function check () {
    if (w.stats.applied >= (stopAfter || 0) && (!needProgress || progress > 0)) stop.abort()
    else setTimeout(check, 50)
  }, runMs)
}
w.run({ signal: stop.signal }).then(
  (s) => say('resolved', `applied ${s.applied}`),
  (e) => { say('rejected', e.code, e.message); process.exitCode = 1 })
});
# runs check.js with options; returns exit status, output, error output
sub check
{
	my ($opts, %env) = @_;
	my ($out, $err) = ('', '');
	local %ENV = (%ENV, %env);
	IPC::Run::run([ 'node', "$app/check.js", $opts ], '<', \undef, '>', \$out, '2>', \$err,
		IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
	return ($? >> 8, $out, $err);
}

my ($rc, $out, $err) = check(qq({"connection": "$direct", "stream": "chk", "consumer": "cg",
	"logger": "object", "progressMs": 300, "runMs": 700, "stopAfter": 5, "progress": true,
	"pageSize": 2}));
is($rc, 0, 'logger object: the run ends as asked') or diag $out . $err;
is($err, '', 'logger object: nothing on stderr');
like($out, qr/^I worker c-1 started: stream chk, group cg, slots 0-1 of 2 \(lease 30 s\)$/m,
	'logger object: the start line to its info()');
like($out, qr/^D worker c-1: slot \d: 2 rows /m, 'logger object: page lines to its debug()');
like($out, qr/^I worker c-1: progress: applied \d+ rows, parked 0 in the last 300 ms \(\d and 0 since the start\), backlog \d+ rows on its slots$/m,
	'logger object: a progress line every progressMs');
like($out, qr/^I worker c-1: stopped, slots 0-1 released; applied 5 rows, parked 0\nresolved applied 5\n\z/m,
	'logger object: the stop line last');

($rc, $out, $err) = check(qq({"connection": "$direct", "stream": "chk", "consumer": "cg",
	"logger": "function", "runMs": 300}));
like($out, qr/^F worker c-1 started: /m, 'logger function: every line to it');
($rc, $out, $err) = check(qq({"connection": "$direct", "stream": "chk", "consumer": "cg", "runMs": 300}),
	DEBUG => 'other,stream-seq-*');
like($err, qr/^\S+ stream-seq-worker debug worker c-1: connected$/m, 'DEBUG naming the namespace: debug lines');
($rc, $out, $err) = check(qq({"connection": "$direct", "stream": "chk", "consumer": "cg", "runMs": 300}),
	DEBUG => '*,-stream-seq-worker');
is($err, '', 'DEBUG skipping the namespace: nothing on stderr');
($rc, $out, $err) = check(qq({"connection": "$direct", "stream": "chk", "consumer": "cg", "runMs": 300,
	"logLevel": "warn"}), DEBUG => 'stream-seq-worker');
is($err, '', 'logLevel warn: no info line, whatever DEBUG says');

# a port nobody listens on: connectAttempts, then the error
my $free = PostgreSQL::Test::Cluster::get_free_port();
($rc, $out, $err) = check(qq({"connection": "postgres://app\@127.0.0.1:$free/postgres",
	"stream": "chk", "consumer": "cg", "logger": "object", "connectAttempts": 3, "reconnectMs": 20}));
is($rc, 1, 'a port nobody listens on: the worker stops');
like($out, qr/^W worker c-1: could not connect \(attempt 1 of 3\): connect ECONNREFUSED .*; trying again in 20 ms\nW worker c-1: could not connect \(attempt 2 of 3\): .*\nE worker c-1: stopping: could not reach the database in 3 attempts: connect ECONNREFUSED .*\nI worker c-1: stopped on the error; applied 0 rows, parked 0\nrejected ECONNREFUSED /,
	'a port nobody listens on: each attempt logged, then the error');

foreach my $case (
	[ 'a group that does not exist', '"consumer": "nope"', '42704' ],
	[ 'a plain consumer given to GroupWorker', '"consumer": "cp"', '55000' ],
	[ 'a group given to Worker', '"consumer": "cg", "plain": true', '55000' ],
	[ 'a table that is not a stream', '"consumer": "cg", "stream": "applied_g", "plain": true', '42809' ],
	[ 'a table that does not exist', '"consumer": "cg", "stream": "nope"', '42P01' ])
{
	my ($what, $json, $code) = @$case;
	($rc, $out, $err) = check(qq({"connection": "$url", "stream": "chk", $json, "logger": "object"}));
	is($rc, 1, "$what: the worker stops");
	like($out, qr/^E worker c-1: stopping: .* \(SQLSTATE $code\).*\n(?:.*\n)?rejected $code /m,
		"$what: the error logged, run() rejects with it") or diag $out . $err;
}

# a connection the server terminates (57P01): logged, opened again
my $chk = IPC::Run::start([ 'node', "$app/check.js",
	qq({"connection": "$direct", "stream": "chk", "consumer": "cp", "plain": true,
	    "logger": "object", "worker": "c-2", "waitMs": 60000, "renewMs": 60000, "dueMs": 0,
	    "progressMs": 0}) ],
	'<', \undef, '>', \my $chk_out, '2>', \my $chk_err);
$chk = { handle => $chk, out => \$chk_out, err => \$chk_err };
my $waiting = q{FROM pg_stat_activity WHERE query LIKE '%stream_seq.wait(%' AND state = 'active'
                  AND usename = 'app' AND pid <> pg_backend_pid()};
wait_for("SELECT count(*) $waiting", '1', 'the plain worker waits');
$node->safe_psql('postgres', "SELECT pg_terminate_backend(pid) $waiting");
wait_err($chk, qr/connected again/, 'the plain worker connected again', 'out');
wait_for("SELECT count(*) $waiting", '1', 'the plain worker waits again');
is(stop_worker($chk, 'the plain worker') =~ s/^D .*\n//mgr =~ s/(again after )[0-9.]+ m?s$/${1}N/mr,
	"I worker c-2 started: stream chk, plain consumer cp, after 0\n"
	  . "W worker c-2: connection lost: terminating connection due to administrator command (SQLSTATE 57P01); trying again in 100 ms\n"
	  . "I worker c-2: connected again after N\n"
	  . "I worker c-2: stopped; applied 5 rows, parked 0\nresolved applied 5\n",
	'a connection terminated (57P01): logged as a warning, opened again');

# a worker waiting for a killed worker's slots takes them when its lease
# ends, not at its next renewal
sub check_bg
{
	my ($opts) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start([ 'node', "$app/check.js", $opts ], '<', \undef,
		'>', \$out, '2>', \$err);
	return { handle => $h, out => \$out, err => \$err };
}
my $c1 = check_bg(qq({"connection": "$url", "stream": "chk", "consumer": "cg", "leaseMs": 2000,
	"logger": "object"}));
wait_err($c1, qr/^I worker c-1 started: .* slots 0-1 of 2/m, 'a worker with a lease of 2 s started', 'out');
$c1->{handle}->signal('KILL');
$c1->{handle}->finish;
my $c2 = check_bg(qq({"connection": "$url", "stream": "chk", "consumer": "cg", "leaseMs": 2000,
	"renewMs": 60000, "worker": "c-2", "logger": "object"}));
wait_err($c2, qr/^I worker c-2: waiting for slots 0-1, held by worker c-1 until its lease ends at .*\nI worker c-2: slots 0-1 of 2 \(were none\)$/m,
	'a worker renewing every 60 s takes a killed worker\'s slots when their lease of 2 s ends',
	'out', 40);
stop_worker($c2, 'the worker that took the slots');

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
	my $err = ${ $workers{$name}->{err} };
	unlike($err, qr/DeprecationWarning/, "$name: no DeprecationWarning");
	next unless $name eq 'plain-1';
	# the plain consumer's only worker logged the rows it parked, each a
	# refused row at attempt 1 or 2 or a flaky row at attempt 1, with the
	# handler's or the table's reason
	my @parked = $err =~ /^\S+ stream-seq-worker warn worker plain-1: parked row (\d+) \(attempt (\d)\): (.*)$/mg;
	my @values;
	while (my ($seq, $attempt, $reason) = splice(@parked, 0, 3))
	{
		$reason = $reason =~ /^(poison|flaky) row \Q$seq\E$/ ? $1
		  : $reason =~ /^new row for relation "applied_plain" violates check constraint .* \(SQLSTATE 23514\)$/ ? 'check'
		  : 'other';
		push @values, "($seq, $attempt, '$reason')";
	}
	cmp_ok(scalar @values, '>', 0, 'plain-1 logged the rows it parked');
	is( val($node, 'SELECT count(*) FILTER (WHERE CASE'
		  . q{ WHEN e.payload->>'kind' = 'poison' THEN l.reason = 'poison' AND l.attempt IN (1, 2)}
		  . q{ WHEN e.customer_id = -1 THEN l.reason = 'check' AND l.attempt IN (1, 2)}
		  . q{ WHEN e.payload->>'kind' = 'flaky' THEN l.reason = 'flaky' AND l.attempt = 1}
		  . ' ELSE false END) || \'/\' || count(*)'
		  . ' FROM (VALUES ' . join(', ', @values) . ') l(seq, attempt, reason) LEFT JOIN ev e USING (seq)'),
		scalar(@values) . '/' . scalar(@values),
		'plain-1: each parked row logged is a refused or flaky row, with its reason and attempt')
	  if @values;
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

# --- under per-key order due() hands a held key back one row per call:
# the worker calls it again at once while it hands rows back, a page's
# worth at most before the slots' turn, not once per dueMs (an hour here).
# Key 1's rows 2..301 are held behind row 1, refused at its first delivery
# and due at once; 10 rows of key 2 come after them.
$node->safe_psql('postgres', q{
SET ROLE app;
CREATE TABLE held_ev (id bigserial PRIMARY KEY, k int);
SELECT stream_seq.enable('held_ev');
SELECT stream_seq.create_group('held_ev', 'g', 'k', 1);
SELECT stream_seq.set_retry_policy('held_ev', 'g', max_attempts => 3, delay => '0 s', backoff => 1);
SELECT stream_seq.set_key_order('held_ev', 'g', 'until_applied');
CREATE TABLE held_applied (seq bigint PRIMARY KEY, k int, attempts int, ord bigserial);
INSERT INTO held_ev (k) SELECT 1 FROM generate_series(1, 301);
SELECT token FROM stream_seq.claim('held_ev', 'g', 'setup', '30 s') \gset
BEGIN;
SELECT count(*) FROM stream_seq.read_slot_rows(NULL::held_ev, 'g', 0, :token);
SELECT stream_seq.park('held_ev', 'g', min(seq), 'refused at its first delivery') FROM held_ev;
SELECT stream_seq.advance_slot('held_ev', 'g', 0, :token, min(seq)) FROM held_ev;
COMMIT;
SELECT count(*) FROM stream_seq.read_slot_rows(NULL::held_ev, 'g', 0, :token);
SELECT stream_seq.release('held_ev', 'g', 'setup');
INSERT INTO held_ev (k) SELECT 2 FROM generate_series(1, 10);
});
is(val($node, q{SELECT count(*) FILTER (WHERE held) || '/' || count(*) FROM stream_seq.parked_rows WHERE consumer = 'g' AND stream = 'held_ev'::regclass}),
	'300/301', 'per-key order: 300 rows held behind a parked row');
my $held_js = $node->basedir . '/held.js';
append_to_file($held_js, q{
const { GroupWorker } = require('stream-seq-worker')
const stop = new AbortController()
const trail = []
let applied = 0
const t0 = Date.now()
const bound = setTimeout(() => stop.abort(), 120000)
new GroupWorker({
  connection: process.argv[2], stream: 'held_ev', consumer: 'g', worker: 'w',
  pageSize: 50, dueMs: 3600000, logLevel: 'warn',
  async handleRow ({ seq, row, attempts }, { client }) {
    await client.query('INSERT INTO held_applied (seq, k, attempts) VALUES ($1, $2, $3)',
      [String(seq), row.k, attempts])
  },
  hooks: {
    page ({ retry, applied: n }) {
      trail.push(retry ? 'd' : 's')
      applied += n
      if (applied === 311) stop.abort()
    }
  }
}).run({ signal: stop.signal }).then(() => {
  clearTimeout(bound)
  console.log('trail', trail.join(''))
  console.log('ms', Date.now() - t0)
})
});
my ($held_out, $held_err) = ('', '');
IPC::Run::run([ 'node', $held_js, $url ], '<', \undef, '>', \$held_out, '2>', \$held_err,
	IPC::Run::timeout($PostgreSQL::Test::Utils::timeout_default));
my ($trail) = $held_out =~ /^trail (\w*)$/m;
my ($held_ms) = $held_out =~ /^ms (\d+)$/m;
ok(defined $trail && defined $held_ms, 'per-key order: the worker ran') or diag "$held_out$held_err";
$trail //= '';
note "held key of 300 rows drained in $held_ms ms" if defined $held_ms;
is( val($node, q{SELECT (SELECT string_agg(seq::text, ',' ORDER BY ord) FROM held_applied WHERE k = 1)
                      = (SELECT string_agg(seq::text, ',' ORDER BY seq) FROM held_ev WHERE k = 1)}),
	't', 'per-key order: the held key drained in one run whose dueMs is an hour, in commit order');
is( val($node, q{SELECT count(*) || '/' || count(*) FILTER (WHERE attempts = 1) FROM held_applied}),
	'311/1', 'per-key order: every row applied once, the parked one at its second attempt');
is(val($node, q{SELECT count(*) FROM stream_seq.parked_rows WHERE stream = 'held_ev'::regclass}),
	'0', 'per-key order: nothing left parked');
is(($trail =~ tr/d//), 301, 'per-key order: one row of the key per due() call');
my $before_last_page = substr($trail, 0, rindex($trail, 's'));
my $longest = 0;
$longest < length($_) and $longest = length($_) for split /s/, $before_last_page;
ok($longest > 1 && $longest <= 50,
	"per-key order: due() again at once, a page's worth at most before the slot's turn ($longest)")
  or diag $trail;

stop_pgbouncer($bouncer);
$node->stop;
note sprintf('seconds: npm install %.1f; total %.1f', $npm_seconds, time() - $t_start);
done_testing();
