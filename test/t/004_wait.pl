
# Copyright (c) stream_seq contributors
#
# 004_wait.pl: what wakes stream_seq.wait() and what does not, which the
# isolation tester cannot observe (it only sees waits on heavyweight locks):
#
#  (a) a commit on another table does not end the wait;
#  (b) an open transaction that inserted into the stream does not, nor does
#      a rolled-back one;
#  (c) committing the insert ends it within a few seconds, returning the
#      new horizon (head + 1);
#  (d) pg_cancel_backend() ends a wait with SQLSTATE 57014, and the session
#      can wait again afterwards (and be woken);
#  (e) statement_timeout ends a wait with SQLSTATE 57014;
#  (f) with stream_seq.notify = on in the writing session, LISTEN stream_seq
#      receives the schema-qualified table name when a stream write commits,
#      and nothing for a rollback, a write to another table, or with the
#      setting off;
#  (g) DROP TABLE or disable() of the stream ends a sleeping wait() with an
#      error (for disable(): 42809, "not a stream table"), without crashing
#      the backend.
#
# "Still waiting" is checked twice: psql has not printed the line after
# the wait() statement, and pg_stat_activity shows the backend active in
# the wait event "Extension" (on 17 and later "StreamSeqWait").

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use StreamSeqTest;

# restart_after_crash: should a backend crash in (g), the checks after it
# still run (crashes are detected in the server log)
my $node = new_node('wait', "restart_after_crash = on\n");

$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE ev (id bigserial PRIMARY KEY, payload text);
SELECT stream_seq.enable('ev');
CREATE TABLE other (id bigserial PRIMARY KEY, payload text);
INSERT INTO ev (payload) VALUES ('first');
});

sub head
{
	return $node->safe_psql('postgres', q{SELECT stream_seq.head('ev')});
}

# The waiting session.  VERBOSITY verbose puts the SQLSTATE in errors.
my ($waiter, $waiter_pid);

sub new_waiter
{
	$waiter = $node->background_psql('postgres', on_error_stop => 0);
	$waiter->query_safe('\set VERBOSITY verbose');
	$waiter_pid = $waiter->query_safe('SELECT pg_backend_pid()');
}
new_waiter();

my $wait_no = 0;

# Send "SELECT stream_seq.wait('ev', $after, $timeout)" to the waiter
# without waiting for it to finish; returns the marker psql prints when the
# statement has ended.
sub start_wait
{
	my ($after, $timeout, $stream) = @_;
	$stream //= 'ev';
	$wait_no++;
	$waiter->{stderr} = '';
	$waiter->query_until(qr/wait $wait_no started\n/, qq{\\echo 'wait $wait_no started'
SELECT stream_seq.wait('$stream', $after, '$timeout');
\\echo 'wait $wait_no ended'
});
	# wait until the backend is inside wait(), or the statement has ended
	my $marker = "wait $wait_no ended";
	my $deadline = time() + 10;
	while (time() < $deadline)
	{
		$waiter->{run}->pump_nb();
		last if $waiter->{stdout} =~ /\Q$marker\E/;
		last
		  if $node->safe_psql('postgres', qq{
SELECT wait_event_type = 'Extension' AND wait_event IN ('Extension', 'StreamSeqWait')
  FROM pg_stat_activity WHERE pid = $waiter_pid}) eq 't';
		usleep(20_000);
	}
	return $marker;
}

# Is the waiter still inside wait() (psql has not printed the end marker,
# and the backend is active in the wait event)?
sub still_waiting
{
	my ($marker) = @_;
	$waiter->{run}->pump_nb();
	return 0 if $waiter->{stdout} =~ /\Q$marker\E/;
	my $state = $node->safe_psql('postgres', qq{
SELECT state || ':' || wait_event_type || ':' || wait_event
  FROM pg_stat_activity WHERE pid = $waiter_pid});
	return $state eq 'active:Extension:Extension' || $state eq 'active:Extension:StreamSeqWait';
}

# The error the waiter's statement ended with (waiting up to 5 s for it to
# arrive on stderr); clears it.
sub waiter_error
{
	my $timer = IPC::Run::timer(5);
	$timer->start;
	# (psql may be gone, if its backend crashed)
	eval {
		pump_until($waiter->{run}, $timer, \$waiter->{stderr},
			qr/ERROR.*\n/);
	};
	my $err = $waiter->{stderr};
	$waiter->{stderr} = '';
	return $err;
}

# Wait (up to $seconds) for the waiter's statement to end; returns its
# stdout (without the marker) and the seconds waited, or undef on timeout.
sub finish_wait
{
	my ($marker, $seconds) = @_;
	my $start = time();
	my $timer = IPC::Run::timer($seconds);
	$timer->start;
	my $ok = pump_until($waiter->{run}, $timer, \$waiter->{stdout},
		qr/\Q$marker\E\n/);
	my $elapsed = time() - $start;
	return (undef, $elapsed) unless $ok;
	my $out = $waiter->{stdout};
	$waiter->{stdout} = '';
	$out =~ s/\Q$marker\E\n//;
	chomp $out;
	return ($out, $elapsed);
}

# ---------------------------------------------------------------------
# (a)-(c): woken by a commit on the stream, not by anything else
my $head = head();
is($head, 1, 'one row numbered before waiting');
my $marker = start_wait($head, '60 s');
usleep(300_000);
ok(still_waiting($marker), 'wait() blocks while no row after the head is readable');

$node->safe_psql('postgres', q{INSERT INTO other (payload) VALUES ('x')});
usleep(500_000);
ok(still_waiting($marker), '(a) a commit on another table does not end the wait');

my $writer = $node->background_psql('postgres');
$writer->query_safe(q{BEGIN; INSERT INTO ev (payload) VALUES ('second')});
usleep(500_000);
ok(still_waiting($marker),
	'(b) an open transaction that inserted into the stream does not end the wait');

$node->safe_psql('postgres', q{
BEGIN;
INSERT INTO ev (payload) VALUES ('rolled back');
ROLLBACK;
});
usleep(500_000);
ok(still_waiting($marker),
	'(b) a rolled-back insert into the stream does not end the wait');

$writer->query_safe('COMMIT');
my ($horizon, $elapsed) = finish_wait($marker, 5);
my $new_head = head();
is($new_head, 2, 'the committed insert got number 2');
is($horizon, $new_head + 1,
	'(c) committing the insert ends the wait, returning horizon = head + 1');
ok(defined $horizon && $elapsed < 5,
	sprintf('(c) wait() returned %.3f s after COMMIT returned',
		$elapsed));
is($waiter->{stderr}, '', '(c) no error from the woken wait()');

# ---------------------------------------------------------------------
# (d) pg_cancel_backend
$marker = start_wait($new_head, '60 s');
ok(still_waiting($marker), '(d) waiting again');
is($node->safe_psql('postgres', "SELECT pg_cancel_backend($waiter_pid)"),
	't', '(d) pg_cancel_backend() sent');
my ($out, $took) = finish_wait($marker, 5);
ok(defined $out, sprintf('(d) cancelled wait ended after %.3f s', $took));
is($out, '', '(d) cancelled wait returned no value');
like(waiter_error(),
	qr/ERROR:\s+57014: canceling statement due to user request/,
	'(d) cancelled wait fails with SQLSTATE 57014');

# the session is usable and can wait (and be woken) again
is($waiter->query('SELECT 1'), '1', '(d) session usable after the cancel');
$marker = start_wait($new_head, '60 s');
ok(still_waiting($marker), '(d) the same session waits again after a cancel');
$node->safe_psql('postgres', q{INSERT INTO ev (payload) VALUES ('third')});
($horizon, $elapsed) = finish_wait($marker, 5);
is($horizon, head() + 1,
	'(d) after a cancel, a new wait() in the session is woken by a commit');

# ---------------------------------------------------------------------
# (e) statement_timeout
$new_head = head();
$waiter->query_safe(q{SET statement_timeout = '500ms'});
my $sent = time();
$marker = start_wait($new_head, '60 s');
($out, $took) = finish_wait($marker, 10);
$took = time() - $sent;
ok(defined $out,
	sprintf('(e) wait() under statement_timeout = 500ms ended after %.3f s',
		$took));
ok($took >= 0.45, '(e) ... not before the statement timeout');
like(waiter_error(),
	qr/ERROR:\s+57014: canceling statement due to statement timeout/,
	'(e) statement_timeout ends wait() with SQLSTATE 57014');
$waiter->query_safe('RESET statement_timeout');

# a timeout argument shorter than the statement timeout still returns
is($waiter->query_safe(q{SELECT stream_seq.wait('ev', stream_seq.head('ev'), '200 ms') = stream_seq.head('ev') + 1}),
	't', 'wait() returns the horizon when its own timeout ends');

# ---------------------------------------------------------------------
# (f) stream_seq.notify = on: LISTEN stream_seq gets the table name
$node->safe_psql('postgres', q{
CREATE SCHEMA "Sch";
CREATE TABLE "Sch"."Ev Two" (payload text);
SELECT stream_seq.enable('"Sch"."Ev Two"');
});
my $listener = $node->background_psql('postgres');
$listener->query_safe('LISTEN stream_seq');

# Payloads of the notifications the listener has received, comma-separated
# (psql prints them after the next command).  With $expected, look a few
# times in case a notification is still on its way.
sub notifications
{
	my ($expected) = @_;
	my @payloads;
	for my $try (1 .. ($expected ? 10 : 1))
	{
		my $out = $listener->query('SELECT 1');
		push @payloads, ($out =~ /Asynchronous notification "stream_seq" with payload "(.*)" received from server process/g);
		last if !$expected || scalar(@payloads) >= $expected;
		usleep(100_000);
	}
	return join(',', sort @payloads);
}

is(notifications(), '', 'no notification before any write');

$node->safe_psql('postgres', q{INSERT INTO ev (payload) VALUES ('quiet')});
is(notifications(), '', 'no notification with stream_seq.notify off (default)');

$node->safe_psql('postgres', q{
SET stream_seq.notify = on;
INSERT INTO ev (payload) VALUES ('loud');
});
is(notifications(1), 'public.ev',
	'(f) with stream_seq.notify = on, a stream commit notifies with the schema-qualified name');

$node->safe_psql('postgres', q{
SET stream_seq.notify = on;
INSERT INTO other (payload) VALUES ('loud');
BEGIN;
INSERT INTO ev (payload) VALUES ('rolled back');
ROLLBACK;
});
is(notifications(), '',
	'(f) no notification for a write to another table or a rolled-back stream write');

$node->safe_psql('postgres', q{
SET stream_seq.notify = on;
BEGIN;
INSERT INTO ev (payload) VALUES ('a');
INSERT INTO "Sch"."Ev Two" (payload) VALUES ('b');
INSERT INTO ev (payload) VALUES ('c');
COMMIT;
});
is(notifications(2), '"Sch"."Ev Two",public.ev',
	'(f) one notification per stream written, names quoted as identifiers');
$listener->quit;
$writer->quit;

# ---------------------------------------------------------------------
# (g) the stream goes away under a sleeping wait(): the wait ends with an
# error, and the server stays up.
sub server_crashed
{
	return slurp_file($node->logfile) =~ /terminated by signal/;
}

$node->safe_psql('postgres', q{
CREATE TABLE ev_drop (payload text);
SELECT stream_seq.enable('ev_drop');
INSERT INTO ev_drop VALUES ('x');
});
$marker = start_wait(1, '60 s', 'ev_drop');
ok(still_waiting($marker), '(g) waiting on a stream about to be dropped');
# psql, not safe_psql: a crash of the waiter may end this session too
$node->psql('postgres', 'DROP TABLE ev_drop');
($out, $took) = finish_wait($marker, 5);
ok(defined $out, '(g) DROP TABLE of the stream ends a sleeping wait()');
like(waiter_error(), qr/ERROR:\s+\w{5}: /, '(g) ... with an error');
ok(!server_crashed(), '(g) ... and no backend crashed')
  or diag 'server log: ' . join("\n", grep { /terminated by signal|Failed process/ }
	  split /\n/, slurp_file($node->logfile));
my $crashes_before_disable = () = slurp_file($node->logfile) =~ /terminated by signal/g;

# a new session, in case the last one crashed
eval { $waiter->quit; };
$node->poll_query_until('postgres', 'SELECT true')
  or die 'server did not come back';
new_waiter();
$marker = start_wait(head(), '60 s', 'ev');
ok(still_waiting($marker), '(g) waiting on a stream about to be disabled');
$node->psql('postgres', q{SELECT stream_seq.disable('ev')});
($out, $took) = finish_wait($marker, 5);
ok(defined $out, '(g) disable() of the stream ends a sleeping wait()');
like(waiter_error(),
	qr/ERROR:\s+(?:42809: table "ev" is not a stream table|55000: stream table "ev" was disabled or dropped while in use)/,
	'(g) ... with an error naming the stream (42809 or 55000)');
my $crashes = () = slurp_file($node->logfile) =~ /terminated by signal/g;
is($crashes - $crashes_before_disable, 0, '(g) ... and no backend crashed');

eval { $waiter->quit; };
$node->poll_query_until('postgres', 'SELECT true')
  or die 'server did not come back';

$node->stop;
done_testing();
