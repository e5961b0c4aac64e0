
# Copyright (c) stream_seq contributors
#
# 037_update_under_traffic.pl: ALTER EXTENSION stream_seq UPDATE from
# earlier versions (0.4.2, 0.5.0, 0.5.1, and 0.6.0, whose streams have
# INSERT triggers, to the write path of 0.7.0 without them; and 0.7.0,
# whose update changes the consumers' tables and views only) while
# applications write and read, as a DBA runs it.  Neither a consumer nor a writer nor the update gets 40P01, the
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
my ($default_version) =
  slurp_file(source_root() . '/stream_seq.control') =~ /default_version = '([^']+)'/;

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

# The whole scenario, in a database of its own, from version "from".
sub scenario
{
	my ($from) = @_;
	my $db = 'from_' . ($from =~ tr/./_/r);
	my $dir = $node->basedir . "/$db";
	mkdir $dir;
	my ($writers_stop, $consumers_stop) = ("$dir/writers.stop", "$dir/consumers.stop");
	my $connstr = $node->connstr($db);
	my $t_scenario = time();

	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, qq{
CREATE EXTENSION stream_seq VERSION '$from';
CREATE TABLE ev (id bigserial PRIMARY KEY, k int NOT NULL, src text NOT NULL);
SELECT stream_seq.enable('ev');
CREATE TABLE gev (id bigserial PRIMARY KEY, k int NOT NULL, src text NOT NULL);
SELECT stream_seq.enable('gev');
CREATE TABLE other (id bigserial PRIMARY KEY, src text NOT NULL);
SELECT stream_seq.enable('other');
SELECT stream_seq.create_consumer('ev', 'c');
SELECT stream_seq.create_group('gev', 'g', 'k', 2);
CREATE TABLE applied_c (seq bigint PRIMARY KEY);
CREATE TABLE applied_g (seq bigint PRIMARY KEY);
});

	my %pids;
	my %logs;
	my $start = sub {
		my ($name, $code) = @_;
		$logs{$name} = "$PostgreSQL::Test::Utils::log_path/037_${db}_$name.log";
		unlink $logs{$name};
		$pids{$name} = bg_fork($logs{$name}, $code);
	};

	# writer w: one session
	$start->('w', sub {
		my $s = session($node, $connstr);
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
	$start->('n', sub {
		my %n = (rounds => 0, errors => 0, max_ms => 0);
		while (!-e $writers_stop)
		{
			my $k = int(rand(100));
			my $t0 = time();
			my $r = psql_result($node,
				"INSERT INTO ev (k, src) VALUES ($k, 'n'); INSERT INTO gev (k, src) VALUES ($k, 'n'); SELECT stream_seq.horizon('gev')",
				$db);
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

	# writer o: another stream, that no consumer reads, a new connection
	# for each transaction (its backend looks the stream up in
	# stream_seq.stream after its INSERT has locked the table)
	$start->('o', sub {
		my %n = (rounds => 0, errors => 0, max_ms => 0);
		while (!-e $writers_stop)
		{
			my $t0 = time();
			my $r = psql_result($node,
				"BEGIN; INSERT INTO other (src) VALUES ('o'); INSERT INTO other (src) VALUES ('o2'); COMMIT",
				$db);
			my $ms = (time() - $t0) * 1000;
			$n{max_ms} = int($ms) if $ms > $n{max_ms};
			if ($r->{rc} != 0)
			{
				print "o: " . ($r->{sqlstate} // 'rc') . " $r->{err}\n";
				$n{errors}++;
			}
			$n{rounds}++;
			usleep(10_000);
		}
		return report('o', %n);
	});

	# readers r1, r2, r3: read() of consumer c in a loop, without
	# advancing (dashboards, a consumer's retries)
	for my $name (qw(r1 r2 r3))
	{
		$start->($name, sub {
			my $s = session($node, $connstr);
			my %n = (rounds => 0, errors => 0, max_ms => 0);
			while (!-e $writers_stop)
			{
				timed($name, $s, \%n, q{SELECT count(*) FROM stream_seq.read('ev', 'c', 20)});
				$n{rounds}++;
				usleep(5_000);
			}
			$s->close;
			return report($name, %n);
		});
	}

	# consumer c: the loop of consumers.md; stops once told to and nothing
	# is left to read
	$start->('c', sub {
		my $s = session($node, $connstr);
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
	$start->('g', sub {
		my $s = session($node, $connstr);
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
	ok( $node->poll_query_until($db,
			'SELECT (SELECT count(*) FROM applied_c) >= 30 AND (SELECT count(*) FROM applied_g) >= 30'),
		"from $from: writers and consumers run");

	# H: a consumer's transaction that read its position, a page and the
	# consumers view
	my $h = session($node, $connstr);
	$h->query(q{SET statement_timeout = '30s'});
	$h->query('BEGIN');
	is($h->query(q{SELECT stream_seq.position('ev', 'c') >= 0})->{out}, 't',
		"from $from: H read its position");
	is($h->query(q{SELECT count(*) >= 0 FROM stream_seq.read('ev', 'c', 10)})->{out}, 't',
		"from $from: H read a page");
	is($h->query(q{SELECT count(*) > 0 FROM stream_seq.consumers})->{out}, 't',
		"from $from: H read the consumers view");
	# and wrote a row of another stream: every update needs to lock the
	# stream tables (0.5.1 -> 0.6.0 only those: it adds a trigger)
	is($h->query(q{INSERT INTO other (src) VALUES ('H')})->{sqlstate}, undef,
		"from $from: H wrote a row of another stream");

	# the procedure: under lock_timeout the update gives up and changes
	# nothing
	my $t0 = time();
	my $r = psql_result($node,
		q{SET lock_timeout = '300ms'; ALTER EXTENSION stream_seq UPDATE}, $db);
	my $refused_s = time() - $t0;
	is($r->{sqlstate}, '55P03',
		"from $from: with H open, the update under lock_timeout fails with 55P03")
	  or diag $r->{err};
	cmp_ok($refused_s, '<', HOLD, "from $from: and gives up within about its lock_timeout");
	is($node->safe_psql($db, q{SELECT extversion FROM pg_extension WHERE extname = 'stream_seq'}),
		$from, "from $from: and changes nothing");

	# now without a timeout, in one ALTER EXTENSION: it waits for H
	$t0 = time();
	my $update = bg_run($node->installed_command('psql'), '-XAtq', '-v',
		'ON_ERROR_STOP=1', '-d', $connstr, '-c', 'ALTER EXTENSION stream_seq UPDATE');
	ok( $node->poll_query_until($db, q{
SELECT EXISTS (SELECT FROM pg_stat_activity
                WHERE query = 'ALTER EXTENSION stream_seq UPDATE'
                  AND (wait_event_type = 'Lock' OR wait_event = 'PgSleep'))}),
		"from $from: the update waits");

	# while it waits, H writes into a stream
	$r = $h->query(q{INSERT INTO gev (k, src) VALUES (1, 'H')});
	is($r->{sqlstate}, undef, "from $from: H inserts into a stream while the update waits")
	  or diag $r->{err};

	# and so do new connections, and horizon() answers, while H is open
	for my $t (qw(ev gev other))
	{
		my $values = $t eq 'other' ? "('probe')" : "(2, 'probe')";
		my $cols = $t eq 'other' ? '(src)' : '(k, src)';
		is(try_sql($node,
				"SET statement_timeout = '5s'; INSERT INTO $t $cols VALUES $values", $db),
			'ok', "from $from: a new connection inserts into $t while the update waits for H");
		is(try_sql($node,
				"SET statement_timeout = '5s'; SELECT stream_seq.horizon('$t')", $db),
			'ok', "from $from: a new connection gets horizon('$t') while the update waits for H");
	}
	my ($ev_before, $other_before) = split /\|/,
	  $node->safe_psql($db, 'SELECT (SELECT count(*) FROM ev), (SELECT count(*) FROM other)');
	ok( $node->poll_query_until($db,
			"SELECT (SELECT count(*) FROM ev) >= $ev_before + 20 AND (SELECT count(*) FROM other) >= $other_before + 20"),
		"from $from: the writers commit while the update waits for H");
	is($node->safe_psql($db, q{SELECT extversion FROM pg_extension WHERE extname = 'stream_seq'}),
		$from, "from $from: the update has not taken what H holds");

	# H stays open for HOLD seconds in all (a deadlock would be found
	# after deadlock_timeout, 1 s); then it commits, and the update
	# finishes
	my $left = HOLD - (time() - $t0);
	usleep(int($left * 1_000_000)) if $left > 0;
	$update->{handle}->pump_nb;
	ok($update->{handle}->pumpable, "from $from: the update still waits while H is open");
	my $held_s = time() - $t0;
	is($h->query('COMMIT')->{sqlstate}, undef, "from $from: H commits");
	my $released = time();
	# bounded: an update that waits where the deadlock detector cannot
	# see it would wait for ever
	is(wait_done($update, 60), 0, "from $from: the update succeeds once H has committed")
	  or diag ${ $update->{err} };
	my $update_s = time() - $t0;
	my $after_release_s = time() - $released;
	is(${ $update->{err} }, '', "from $from: the update reports nothing");
	is($node->safe_psql($db, q{SELECT extversion FROM pg_extension WHERE extname = 'stream_seq'}),
		$default_version, "from $from: the objects are the default version ($default_version)");
	# every stream on the write path without INSERT triggers: a capture
	# index each, the old INSERT triggers gone or disabled, a new row
	# stored with the placeholder and numbered at commit
	is( $node->safe_psql($db, q{
SELECT (SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
          JOIN pg_am a ON a.oid = c.relam
         WHERE a.amname = 'stream_seq_capture'
           AND i.indrelid IN ('ev'::regclass, 'gev'::regclass, 'other'::regclass))
       || ',' ||
       (SELECT count(*) FROM pg_trigger
         WHERE tgname IN ('stream_seq_assign', 'stream_seq_guard_insert')
           AND tgenabled <> 'D'
           AND tgrelid IN ('ev'::regclass, 'gev'::regclass, 'other'::regclass))}),
		'3,0', "from $from: every stream has its capture index, and no INSERT trigger fires");
	is( $node->safe_psql($db, q{
BEGIN;
INSERT INTO other (src) VALUES ('after the update') RETURNING seq;
COMMIT;}),
		'0', "from $from: a row inserted after the update holds the placeholder until commit");

	# a little traffic on the new objects, then stop the writers, and the
	# consumers once they have read everything
	my ($c_now, $g_now) = split /\|/, $node->safe_psql($db,
		'SELECT (SELECT count(*) FROM applied_c), (SELECT count(*) FROM applied_g)');
	ok( $node->poll_query_until($db,
			"SELECT (SELECT count(*) FROM applied_c) >= $c_now + 20 AND (SELECT count(*) FROM applied_g) >= $g_now + 20"
		),
		"from $from: consumers go on after the update");
	append_to_file($writers_stop, '');
	for my $name (qw(w n o r1 r2 r3))
	{
		is(wait_pid($pids{$name}), 0, "from $from: $name ended without an error");
	}
	append_to_file($consumers_stop, '');
	for my $name (qw(c g))
	{
		is(wait_pid($pids{$name}), 0, "from $from: consumer $name ended without an error");
	}

	my %max;
	for my $name (qw(w n o r1 r2 r3 c g))
	{
		my $log = slurp_file($logs{$name});
		unlike($log, qr/40P01/, "from $from: no deadlock for $name");
		($max{$name}) = $log =~ /^$name: .*max_ms=(\d+)/m;
		note "from $from: $name: " . ($log =~ /^($name: [^\n]*)\n\z/m ? $1 : $log);
	}
	for my $name (qw(w n o))
	{
		cmp_ok($max{$name} // 1e9, '<', $held_s * 1000,
			"from $from: writer $name never waited for the consumer's transaction");
	}
	note sprintf('from %s: update: %.2f s in all, %.2f s after H committed; H held %.2f s; '
		  . 'longest statement: w %d ms, n %d ms and o %d ms (a new connection each), '
		  . 'readers %d/%d/%d ms, c %d ms, g %d ms; update under lock_timeout gave up after %.2f s',
		$from, $update_s, $after_release_s, $held_s, map({ $max{$_} // -1 } qw(w n o r1 r2 r3 c g)),
		$refused_s);

	# every row numbered once, and applied once
	for my $t (qw(ev gev other))
	{
		my ($total, $distinct, $nulls) = split /\|/, $node->safe_psql($db,
			"SELECT count(*), count(DISTINCT seq) FILTER (WHERE seq > 0), count(*) FILTER (WHERE seq IS NULL OR seq <= 0) FROM $t");
		is($nulls, 0, "from $from: every committed row of $t has a number");
		is($distinct, $total - $nulls, "from $from: no number is used twice in $t");
	}
	is($node->safe_psql($db, q{SELECT count(*) FROM ev e FULL JOIN applied_c a ON a.seq = e.seq
                               WHERE a.seq IS NULL OR e.seq IS NULL}),
		'0', "from $from: every row of ev applied once by consumer c");
	is($node->safe_psql($db, q{SELECT count(*) FROM gev e FULL JOIN applied_g a ON a.seq = e.seq
                               WHERE a.seq IS NULL OR e.seq IS NULL}),
		'0', "from $from: every row of gev applied once by group g");
	is($node->safe_psql($db, q{SELECT count(*) FROM gev WHERE src = 'H'}), '1',
		"from $from: H's row committed");
	$h->close;
	note sprintf('from %s: %.1f s', $from, time() - $t_scenario);
	return;
}

scenario($_) for ('0.4.2', '0.5.0', '0.5.1', '0.6.0', '0.7.0');
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
is($node->safe_psql('recent', 'SELECT count(*) FILTER (WHERE seq > 0) FROM t'), '1',
	'and the row is numbered');
# that transaction had the old triggers' events pending on t, which keeps
# an index from being built on it: the stream stays as it was, and moves
# in a transaction of its own
is($node->safe_psql('recent', q{SELECT stream_seq.upgrade_write_path('t')}), 'moved',
	'the stream left behind moves with upgrade_write_path() afterwards');
is( $node->safe_psql('recent', q{
INSERT INTO t DEFAULT VALUES;
SELECT count(*) FILTER (WHERE seq > 0) || ',' || count(DISTINCT seq) FROM t}),
	'2,2', 'and numbers its rows');

# An update that already holds locks an application may wait for (its
# transaction wrote a stream; or it started before 0.4.2, whose step
# 0.4.1 -> 0.4.2 adds a trigger to every stream) must not poll for a
# lock another transaction holds: it gives up at once with 55P03, names
# that transaction's process and what it holds itself, and changes
# nothing.  Then, in a transaction of its own, it succeeds.
for my $case (
	[ '0.4.1', 'ALTER EXTENSION stream_seq UPDATE' ],
	[ '0.5.0', 'BEGIN; INSERT INTO t DEFAULT VALUES; ALTER EXTENSION stream_seq UPDATE; COMMIT' ])
{
	my ($from, $sql) = @$case;
	my $db = 'holding_' . ($from =~ tr/./_/r);
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, qq{
CREATE EXTENSION stream_seq VERSION '$from';
CREATE TABLE t (id bigserial PRIMARY KEY);
SELECT stream_seq.enable('t');
SELECT stream_seq.create_consumer('t', 'c');
});
	my $h = session($node, $node->connstr($db));
	my ($h_pid) = map { $_->[0] } $h->rows('SELECT pg_backend_pid()');
	$h->query('BEGIN');
	$h->rows(q{SELECT stream_seq.position('t', 'c')});
	my $t0 = time();
	# (bounded: polling for the other transaction would go on for ever)
	my $r = psql_result($node, "SET statement_timeout = '30s'; $sql", $db);
	my $gave_up_s = time() - $t0;
	is($r->{sqlstate}, '55P03',
		"holding locks, from $from: the update gives up with 55P03 instead of waiting")
	  or diag $r->{err};
	like($r->{message}, qr/without risking a deadlock/, "holding locks, from $from: and says why");
	like($r->{err}, qr/DETAIL:  Processes $h_pid hold locks on stream_seq\.\w+, and this transaction already holds public\.t \(/,
		"holding locks, from $from: naming the process in the way and what it holds");
	cmp_ok($gave_up_s, '<', 5, "holding locks, from $from: at once");
	is($node->safe_psql($db, q{SELECT extversion FROM pg_extension WHERE extname = 'stream_seq'}),
		$from, "holding locks, from $from: nothing changed");
	$h->query('COMMIT');
	$h->close;
	is(try_sql($node, 'ALTER EXTENSION stream_seq UPDATE', $db), 'ok',
		"holding locks, from $from: with the other transaction gone, the update succeeds");
}

# The same from 0.6.0, whose update locks the stream tables only: the
# other transaction writes a second stream, and the update's transaction
# wrote the first.
{
	my $db = 'holding_0_6_0';
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, q{
CREATE EXTENSION stream_seq VERSION '0.6.0';
CREATE TABLE t (id bigserial PRIMARY KEY);
SELECT stream_seq.enable('t');
CREATE TABLE t2 (id bigserial PRIMARY KEY);
SELECT stream_seq.enable('t2');
});
	my $h = session($node, $node->connstr($db));
	my ($h_pid) = map { $_->[0] } $h->rows('SELECT pg_backend_pid()');
	$h->query('BEGIN');
	$h->query('INSERT INTO t2 DEFAULT VALUES');
	my $t0 = time();
	my $r = psql_result($node, "SET statement_timeout = '30s'; "
		  . 'BEGIN; INSERT INTO t DEFAULT VALUES; ALTER EXTENSION stream_seq UPDATE; COMMIT', $db);
	my $gave_up_s = time() - $t0;
	is($r->{sqlstate}, '55P03',
		'holding locks, from 0.6.0: the update gives up with 55P03 instead of waiting')
	  or diag $r->{err};
	like($r->{err}, qr/DETAIL:  Processes $h_pid hold locks on public\.t2, and this transaction already holds public\.t \(/,
		'holding locks, from 0.6.0: naming the process in the way and what it holds');
	cmp_ok($gave_up_s, '<', 5, 'holding locks, from 0.6.0: at once');
	is($node->safe_psql($db, q{SELECT extversion FROM pg_extension WHERE extname = 'stream_seq'}),
		'0.6.0', 'holding locks, from 0.6.0: nothing changed');
	$h->query('COMMIT');
	$h->close;
	is(try_sql($node, 'ALTER EXTENSION stream_seq UPDATE', $db), 'ok',
		'holding locks, from 0.6.0: with the other transaction gone, the update succeeds');
	is( $node->safe_psql($db, q{
SELECT count(*) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
  JOIN pg_am a ON a.oid = c.relam
 WHERE a.amname = 'stream_seq_capture' AND i.indrelid IN ('t'::regclass, 't2'::regclass)}),
		'2', 'holding locks, from 0.6.0: and moves both streams');
}

# The update scripts from 0.4.2 and 0.5.0 to 0.6.0 make what the steps
# they replace make: every function (its source too), table, column,
# constraint, index, view, trigger on the streams, event trigger, grant
# and comment of an update from 0.4.2 and from 0.5.0, and of a fresh
# install, is that of an update through the released scripts one step
# at a time (0.4.2 -> 0.5.0 -> 0.5.1 -> 0.6.0, then to the default
# version), with streams, a consumer and a group made before the update.
my $fingerprint = q{
SELECT string_agg(x, E'\n' ORDER BY x) FROM (
 SELECT 'function ' || p.oid::regprocedure || ' ' || pg_get_function_result(p.oid) || ' args(' || pg_get_function_arguments(p.oid) || ') '
        || p.provolatile::text || p.proisstrict || p.prosecdef || p.proretset || p.proparallel::text || ' rows ' || p.prorows || ' cost ' || p.procost
        || ' lang ' || l.lanname || ' config ' || coalesce(p.proconfig::text, '-') || ' acl ' || coalesce(p.proacl::text, '-')
        || ' comment ' || coalesce(obj_description(p.oid, 'pg_proc'), '-') || ' src ' || md5(p.prosrc) AS x
   FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang WHERE p.pronamespace = 'stream_seq'::regnamespace
 UNION ALL
 SELECT 'relation ' || c.relname || ' ' || c.relkind::text || ' opts ' || coalesce(c.reloptions::text, '-') || ' acl ' || coalesce(c.relacl::text, '-')
        || ' comment ' || coalesce(obj_description(c.oid, 'pg_class'), '-')
        || CASE WHEN c.relkind = 'v' THEN ' def ' || pg_get_viewdef(c.oid) ELSE '' END
   FROM pg_class c WHERE c.relnamespace = 'stream_seq'::regnamespace AND c.relkind IN ('r', 'p', 'v', 'i', 'I')
     AND EXISTS (SELECT FROM pg_depend d WHERE d.objid = c.oid AND d.deptype = 'e' OR c.relkind IN ('i', 'I'))
 UNION ALL
 SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull || ' ' || a.attnum
        || ' default ' || coalesce(pg_get_expr(ad.adbin, ad.adrelid), '-') || ' comment ' || coalesce(col_description(c.oid, a.attnum), '-')
   FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
   LEFT JOIN pg_attrdef ad ON ad.adrelid = c.oid AND ad.adnum = a.attnum
  WHERE c.relnamespace = 'stream_seq'::regnamespace AND c.relkind IN ('r', 'p', 'v')
 UNION ALL
 SELECT 'constraint ' || conrelid::regclass || ' ' || conname || ' ' || pg_get_constraintdef(oid)
   FROM pg_constraint WHERE connamespace = 'stream_seq'::regnamespace
 UNION ALL
 SELECT 'index ' || pg_get_indexdef(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
  WHERE c.relnamespace = 'stream_seq'::regnamespace
 UNION ALL
 SELECT 'trigger ' || t.tgrelid::regclass || ' ' || t.tgname || ' ' || t.tgenabled::text || ' ' || pg_get_triggerdef(t.oid)
   FROM pg_trigger t WHERE NOT t.tgisinternal OR t.tgname LIKE 'stream_seq%'
 UNION ALL
 SELECT 'event trigger ' || evtname || ' ' || evtevent || ' ' || evtfoid::regproc || ' ' || coalesce(evttags::text, '-') || ' ' || evtenabled::text
   FROM pg_event_trigger
 UNION ALL
 SELECT 'extension ' || e.extversion || ' config ' || coalesce((SELECT string_agg(c::regclass::text, ',' ORDER BY c::regclass::text) FROM unnest(e.extconfig) c), '-')
        || ' conditions ' || coalesce(array_to_string(e.extcondition, ','), '-')
   FROM pg_extension e WHERE e.extname = 'stream_seq'
 UNION ALL
 SELECT 'schema acl ' || coalesce(nspacl::text, '-') || ' comment ' || coalesce(obj_description(oid, 'pg_namespace'), '-')
   FROM pg_namespace WHERE nspname = 'stream_seq'
 UNION ALL
 SELECT 'member ' || pg_describe_object(d.classid, d.objid, d.objsubid)
   FROM pg_depend d WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
    AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'stream_seq')
 UNION ALL
 SELECT 'type ' || t.typname || ' ' || t.typtype::text FROM pg_type t WHERE t.typnamespace = 'stream_seq'::regnamespace AND t.typtype NOT IN ('b')
) f
};
my %fp;
for my $way ('stepwise', '0.4.2', '0.5.0', 'fresh')
{
	my $db = 'fp_' . ($way =~ tr/./_/r);
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	my $version = $way eq 'stepwise' ? '0.4.2' : $way eq 'fresh' ? $default_version : $way;
	$node->safe_psql($db, qq{
CREATE EXTENSION stream_seq VERSION '$version';
CREATE TABLE ev (id bigserial PRIMARY KEY, k int, payload text);
SELECT stream_seq.enable('ev');
CREATE TABLE pev (id int, day int NOT NULL) PARTITION BY RANGE (day);
CREATE TABLE pev_1 PARTITION OF pev FOR VALUES FROM (1) TO (2);
SELECT stream_seq.enable('pev');
INSERT INTO ev (k) SELECT g FROM generate_series(1, 5) g;
SELECT stream_seq.create_consumer('ev', 'c');
SELECT stream_seq.create_group('ev', 'g', 'k', 2);
});
	if ($way eq 'stepwise')
	{
		$node->safe_psql($db, "ALTER EXTENSION stream_seq UPDATE TO '$_'")
		  for ('0.5.0', '0.5.1', '0.6.0');
	}
	# then on to the default version, in one step
	$node->safe_psql($db, 'SET client_min_messages = warning; ALTER EXTENSION stream_seq UPDATE')
	  unless $way eq 'fresh';
	$fp{$way} = $node->safe_psql($db, $fingerprint);
}
cmp_ok(scalar(split /\n/, $fp{stepwise}), '>', 400,
	'the objects of 0.6.0 through the released steps: ' . scalar(split /\n/, $fp{stepwise}) . ' lines');
for my $way ('0.4.2', '0.5.0', 'fresh')
{
	my @a = split /\n/, $fp{stepwise};
	my %b = map { ($_ => 1) } split /\n/, $fp{$way};
	my %a = map { ($_ => 1) } @a;
	my @differ = ((map { "only stepwise: $_" } grep { !$b{$_} } @a),
		(map { "only $way: $_" } grep { !$a{$_} } keys %b));
	is(scalar(@differ), 0, "0.6.0 through $way has the objects of the released steps")
	  or diag join("\n", @differ[ 0 .. ($#differ < 20 ? $#differ : 20) ]);
}

$node->stop;
note sprintf('037 took %.1f s', time() - $t_start);
done_testing();
