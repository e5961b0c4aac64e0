
# Copyright (c) stream_seq contributors
#
# 037_update_under_traffic.pl: ALTER EXTENSION stream_seq UPDATE from the
# previous version (0.5.0) while applications write and read, as a DBA
# runs it.  Neither a consumer nor a writer nor the update gets 40P01, the
# writers of the streams never wait for a consumer's open transaction, and
# every row is numbered once and applied once.
#
# Two stream tables: "ev", read by a plain consumer "c", and "gev", read
# by a group "g" of 2 slots keyed by k.  Running in the background, each
# in a process of its own, one statement at a time as clients do:
#   - writer "w": single-row inserts into ev and gev, transactions that
#     insert into gev and then ev, and horizon() calls, in one session;
#   - writer "n": a new connection for every transaction (its backend
#     looks both streams up in stream_seq.stream again each time);
#   - consumer "c": the loop of consumers.md (BEGIN; read() into a
#     temporary table; apply it into applied_c; advance(); COMMIT);
#   - worker "w1" of group "g": claim(), then per slot the one-statement
#     read_slot()/apply/advance_slot() of consumers.md, into applied_g.
# And a consumer "H" in the test itself: a transaction that read
# position() and the consumers view, held open while the update runs.
#
# With H open, ALTER EXTENSION ... UPDATE under lock_timeout fails with
# 55P03 and changes nothing (the documented procedure).  Then the update
# runs without a timeout and must wait for H (it takes every table of the
# extension that consumers use); while it does, H writes a row into gev
# (a consumer that writes a stream), new connections insert into both
# streams and call horizon() under a statement_timeout of 5 s, and the
# writers keep committing: all of that must complete while H is still
# open.  H stays open for HOLD seconds (so that a deadlock, if there were
# one, would be found: deadlock_timeout is 1 s), then commits; the update
# must finish.  Measured: the longest statement of each writer, which
# must stay below HOLD (an update that waited for H holding the streams'
# locks would stop them for all of it).
#
# Also: updating from 0.4.1 in a transaction that inserted into a stream
# fails with 55006 (operations.md says so), and in a transaction of its
# own succeeds; from 0.5.0 it succeeds in such a transaction too.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use StreamSeqTest;

use constant HOLD => 4;    # seconds H stays open once the update waits

my $t_start = time();
my $node = new_node('update_traffic', "log_lock_waits = on\n");
my $log_start = log_offset($node);
my $dir = $node->basedir;
my ($writers_stop, $consumers_stop) = ("$dir/writers.stop", "$dir/consumers.stop");

$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq VERSION '0.5.0';
CREATE TABLE ev (id bigserial PRIMARY KEY, k int NOT NULL, src text NOT NULL);
SELECT stream_seq.enable('ev');
CREATE TABLE gev (id bigserial PRIMARY KEY, k int NOT NULL, src text NOT NULL);
SELECT stream_seq.enable('gev');
SELECT stream_seq.create_consumer('ev', 'c');
SELECT stream_seq.create_group('gev', 'g', 'k', 2);
CREATE TABLE applied_c (seq bigint PRIMARY KEY);
CREATE TABLE applied_g (seq bigint PRIMARY KEY);
});

# The end of a background loop: its counters, as the last line of its log.
sub report
{
	my ($name, %n) = @_;
	print "$name: " . join(' ', map { "$_=$n{$_}" } sort keys %n) . "\n";
	return $n{errors} ? 1 : 0;
}

# Runs "sql" in session "s"; counts and logs an error (and rolls back);
# keeps the longest time a statement took in $n->{max_ms}.
sub timed
{
	my ($name, $s, $n, $sql) = @_;
	my $t0 = time();
	my $r = $s->query($sql);
	my $ms = (time() - $t0) * 1000;
	$n->{max_ms} = int($ms) if $ms > $n->{max_ms};
	if (defined $r->{sqlstate})
	{
		print "$name: $r->{sqlstate} $r->{message} ($sql)\n";
		$n->{errors}++;
		$n->{"err_$r->{sqlstate}"}++;
		$s->query('ROLLBACK');
	}
	return $r;
}

my %pids;
my %logs;
sub start
{
	my ($name, $code) = @_;
	$logs{$name} = "$PostgreSQL::Test::Utils::log_path/037_$name.log";
	unlink $logs{$name};
	$pids{$name} = bg_fork($logs{$name}, $code);
}

# writer w: one session
start('w', sub {
	my $s = session($node, $node->connstr('postgres'));
	my %n = (rounds => 0, errors => 0, max_ms => 0);
	while (!-e $writers_stop)
	{
		my $k = int(rand(100));
		timed('w', $s, \%n, "INSERT INTO ev (k, src) VALUES ($k, 'w')");
		timed('w', $s, \%n, "INSERT INTO gev (k, src) VALUES ($k, 'w')");
		if ($n{rounds} % 3 == 0)
		{
			# two streams in one transaction, gev first
			timed('w', $s, \%n, 'BEGIN');
			timed('w', $s, \%n, "INSERT INTO gev (k, src) VALUES ($k + 1, 'w2')");
			timed('w', $s, \%n, "INSERT INTO ev (k, src) VALUES ($k + 1, 'w2')");
			timed('w', $s, \%n, 'COMMIT');
		}
		timed('w', $s, \%n, "SELECT stream_seq.horizon('ev')");
		$n{rounds}++;
		usleep(5_000);
	}
	$s->close;
	return report('w', %n);
});

# writer n: a new connection for each transaction
start('n', sub {
	my %n = (rounds => 0, errors => 0, max_ms => 0);
	while (!-e $writers_stop)
	{
		my $k = int(rand(100));
		my $t0 = time();
		my $r = psql_result($node,
			"INSERT INTO ev (k, src) VALUES ($k, 'n'); INSERT INTO gev (k, src) VALUES ($k, 'n'); SELECT stream_seq.horizon('gev')");
		my $ms = (time() - $t0) * 1000;
		$n{max_ms} = int($ms) if $ms > $n{max_ms};
		if ($r->{rc} != 0)
		{
			print "n: " . ($r->{sqlstate} // 'rc') . " $r->{err}\n";
			$n{errors}++;
		}
		$n{rounds}++;
		usleep(20_000);
	}
	return report('n', %n);
});

# consumer c: the loop of consumers.md; stops once told to and nothing is
# left to read
start('c', sub {
	my $s = session($node, $node->connstr('postgres'));
	my %n = (rounds => 0, rows => 0, errors => 0, max_ms => 0);
	while (1)
	{
		my $stop = -e $consumers_stop;
		timed('c', $s, \%n, 'BEGIN');
		my $r = timed('c', $s, \%n,
			q{CREATE TEMP TABLE page ON COMMIT DROP AS SELECT * FROM stream_seq.read('ev', 'c', 50)});
		next if defined $r->{sqlstate};
		$r = timed('c', $s, \%n, q{INSERT INTO applied_c SELECT seq FROM page});
		next if defined $r->{sqlstate};
		$r = timed('c', $s, \%n, q{SELECT count(*) FROM page});
		next if defined $r->{sqlstate};
		my $rows = $r->{out};
		$r = timed('c', $s, \%n,
			q{SELECT stream_seq.advance('ev', 'c', max(seq)) FROM page HAVING count(*) > 0});
		next if defined $r->{sqlstate};
		$r = timed('c', $s, \%n, 'COMMIT');
		next if defined $r->{sqlstate};
		$n{rounds}++;
		$n{rows} += $rows;
		last if $stop && $rows == 0;
		usleep(10_000) unless $rows;
	}
	$s->close;
	return report('c', %n);
});

# worker w1 of group g: claim, then per slot one statement
start('g', sub {
	my $s = session($node, $node->connstr('postgres'));
	my %n = (rounds => 0, rows => 0, errors => 0, max_ms => 0);
	while (1)
	{
		my $stop = -e $consumers_stop;
		my $r = timed('g', $s, \%n,
			q{SELECT slot, token FROM stream_seq.claim('gev', 'g', 'w1', '30 s')});
		next if defined $r->{sqlstate};
		my $done = 0;
		for my $held (grep { $_ ne '' } split /\n/, $r->{out})
		{
			my ($slot, $token) = split /\|/, $held;
			$r = timed('g', $s, \%n, qq{
WITH page AS (
    SELECT seq FROM stream_seq.read_slot('gev', 'g', $slot, $token, 50)),
  applied AS (
    INSERT INTO applied_g SELECT seq FROM page RETURNING seq),
  advanced AS (
    SELECT stream_seq.advance_slot('gev', 'g', $slot, $token, max(seq))
      FROM applied HAVING count(*) > 0)
SELECT (SELECT count(*) FROM applied), (SELECT count(*) FROM advanced)});
			last if defined $r->{sqlstate};
			my ($rows) = split /\|/, $r->{out};
			$done += $rows;
		}
		$n{rounds}++;
		$n{rows} += $done;
		last if $stop && $done == 0;
		usleep(10_000) unless $done;
	}
	$s->close;
	return report('g', %n);
});

# traffic first
ok( $node->poll_query_until('postgres',
		'SELECT (SELECT count(*) FROM applied_c) >= 30 AND (SELECT count(*) FROM applied_g) >= 30'),
	'writers and consumers run');

# H: a consumer's transaction that read its position and the consumers view
my $h = session($node, $node->connstr('postgres'));
$h->query(q{SET statement_timeout = '30s'});
$h->query('BEGIN');
is($h->query(q{SELECT stream_seq.position('ev', 'c') >= 0})->{out}, 't',
	'H read its position');
is($h->query(q{SELECT count(*) > 0 FROM stream_seq.consumers})->{out}, 't',
	'H read the consumers view');

# the procedure: under lock_timeout the update gives up and changes nothing
my $t0 = time();
my $r = psql_result($node,
	q{SET lock_timeout = '300ms'; ALTER EXTENSION stream_seq UPDATE});
my $refused_s = time() - $t0;
is($r->{sqlstate}, '55P03', 'with H open, the update under lock_timeout fails with 55P03')
  or diag $r->{err};
cmp_ok($refused_s, '<', HOLD, 'and gives up within about its lock_timeout');
is(val($node, q{SELECT extversion FROM pg_extension WHERE extname = 'stream_seq'}),
	'0.5.0', 'and changes nothing');

# now without a timeout: it waits for H
$t0 = time();
my $update = bg_psql($node, 'ALTER EXTENSION stream_seq UPDATE');
ok( $node->poll_query_until('postgres', q{
SELECT EXISTS (SELECT FROM pg_stat_activity
                WHERE query = 'ALTER EXTENSION stream_seq UPDATE'
                  AND (wait_event_type = 'Lock' OR wait_event = 'PgSleep'))}),
	'the update waits');

# while it waits, H writes into a stream
$r = $h->query(q{INSERT INTO gev (k, src) VALUES (1, 'H')});
is($r->{sqlstate}, undef, 'H inserts into a stream while the update waits')
  or diag $r->{err};

# and so do new connections, and horizon() answers, while H is open
for my $t (qw(ev gev))
{
	is(try_sql($node,
			"SET statement_timeout = '5s'; INSERT INTO $t (k, src) VALUES (2, 'probe')"),
		'ok', "a new connection inserts into $t while the update waits for H");
	is(try_sql($node,
			"SET statement_timeout = '5s'; SELECT stream_seq.horizon('$t')"),
		'ok', "a new connection gets horizon('$t') while the update waits for H");
}
my $rows_before = val($node, 'SELECT count(*) FROM ev');
ok( $node->poll_query_until('postgres',
		"SELECT count(*) >= $rows_before + 20 FROM ev"),
	'the writers commit while the update waits for H');
is(val($node, q{SELECT extversion FROM pg_extension WHERE extname = 'stream_seq'}),
	'0.5.0', 'the update has not taken what H holds');

# H stays open for HOLD seconds in all (a deadlock would be found after
# deadlock_timeout, 1 s); then it commits, and the update finishes
my $left = HOLD - (time() - $t0);
usleep(int($left * 1_000_000)) if $left > 0;
$update->{handle}->pump_nb;
ok($update->{handle}->pumpable, 'the update still waits while H is open');
my $held_s = time() - $t0;
is($h->query('COMMIT')->{sqlstate}, undef, 'H commits');
my $released = time();
is(wait_done($update), 0, 'the update succeeds once H has committed')
  or diag ${ $update->{err} };
my $update_s = time() - $t0;
my $after_release_s = time() - $released;
is(${ $update->{err} }, '', 'the update reports nothing');
my ($default_version) =
  slurp_file(source_root() . '/stream_seq.control') =~ /default_version = '([^']+)'/;
is(val($node, q{SELECT extversion FROM pg_extension WHERE extname = 'stream_seq'}),
	$default_version, "the objects are the default version ($default_version)");

# a little traffic on the new objects, then stop the writers, and the
# consumers once they have read everything
my ($c_now, $g_now) = row($node,
	'SELECT (SELECT count(*) FROM applied_c), (SELECT count(*) FROM applied_g)');
ok( $node->poll_query_until('postgres',
		"SELECT (SELECT count(*) FROM applied_c) >= $c_now + 20 AND (SELECT count(*) FROM applied_g) >= $g_now + 20"
	),
	'consumers go on after the update');
append_to_file($writers_stop, '');
for my $name (qw(w n))
{
	is(wait_pid($pids{$name}), 0, "writer $name ended without an error");
}
append_to_file($consumers_stop, '');
for my $name (qw(c g))
{
	is(wait_pid($pids{$name}), 0, "consumer $name ended without an error");
}

my %max;
for my $name (qw(w n c g))
{
	my $log = slurp_file($logs{$name});
	unlike($log, qr/40P01/, "no deadlock for $name");
	($max{$name}) = $log =~ /^$name: .*max_ms=(\d+)/m;
	note "$name: " . ($log =~ /^($name: [^\n]*)\n\z/m ? $1 : $log);
}
for my $name (qw(w n))
{
	cmp_ok($max{$name} // 1e9, '<', $held_s * 1000,
		"writer $name never waited for the consumer's transaction");
}
note sprintf('update: %.2f s in all, %.2f s after H committed; H held %.2f s; '
	  . 'longest statement: w %d ms, n %d ms (a new connection each), c %d ms, g %d ms; '
	  . 'update under lock_timeout gave up after %.2f s',
	$update_s, $after_release_s, $held_s, $max{w} // -1, $max{n} // -1,
	$max{c} // -1, $max{g} // -1, $refused_s);

# every row numbered once, and applied once
check_unique($node, 'ev', 'after the update');
check_unique($node, 'gev', 'after the update');
is(val($node, q{SELECT count(*) FROM ev e FULL JOIN applied_c a ON a.seq = e.seq
                 WHERE a.seq IS NULL OR e.seq IS NULL}),
	'0', 'every row of ev applied once by consumer c');
is(val($node, q{SELECT count(*) FROM gev e FULL JOIN applied_g a ON a.seq = e.seq
                 WHERE a.seq IS NULL OR e.seq IS NULL}),
	'0', 'every row of gev applied once by group g');
is(val($node, q{SELECT count(*) FROM gev WHERE src = 'H'}), '1', "H's row committed");
unlike(log_since($node, $log_start), qr/deadlock detected/, 'no deadlock in the server log');

# 55006: an update from before 0.4.2 after an INSERT in the same transaction
$node->safe_psql('postgres', 'CREATE DATABASE old');
$node->safe_psql('old', q{
CREATE EXTENSION stream_seq VERSION '0.4.1';
CREATE TABLE t (id bigserial PRIMARY KEY);
SELECT stream_seq.enable('t');
});
is(sqlstate($node, 'BEGIN; INSERT INTO t DEFAULT VALUES; ALTER EXTENSION stream_seq UPDATE; COMMIT',
		'old'),
	'55006', 'from 0.4.1, an update after an INSERT in its transaction fails with 55006');
is(try_sql($node, 'ALTER EXTENSION stream_seq UPDATE', 'old'), 'ok',
	'in a transaction of its own it succeeds');
$node->safe_psql('postgres', 'CREATE DATABASE recent');
$node->safe_psql('recent', q{
CREATE EXTENSION stream_seq VERSION '0.5.0';
CREATE TABLE t (id bigserial PRIMARY KEY);
SELECT stream_seq.enable('t');
});
is(try_sql($node, 'BEGIN; INSERT INTO t DEFAULT VALUES; ALTER EXTENSION stream_seq UPDATE; COMMIT',
		'recent'),
	'ok', 'from 0.5.0 an update after an INSERT in its transaction succeeds');
is($node->safe_psql('recent', 'SELECT count(seq) FROM t'), '1', 'and the row is numbered');

$node->stop;
note sprintf('037 took %.1f s', time() - $t_start);
done_testing();
