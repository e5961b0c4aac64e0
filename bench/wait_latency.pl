#!/usr/bin/perl
# wait_latency.pl: how soon stream_seq.wait() returns after a commit on the
# stream.  Run by wait_latency.sh against a throwaway cluster; usable on its
# own against any database with the extension preloaded:
#
#   perl bench/wait_latency.pl --dsn 'dbi:Pg:host=/tmp/x;port=55510;dbname=postgres' --n 2000
#
# One process, three connections, one clock (CLOCK_MONOTONIC):
#   waiter:  SELECT stream_seq.wait('ev', h - 1, '10 s'), h = the horizon it
#            returned last time, sent asynchronously;
#   writer:  BEGIN; INSERT one row; then, once the waiter is seen sleeping
#            in wait() (pg_stat_activity, wait event "Extension"), COMMIT,
#            sent asynchronously;
#   monitor: that pg_stat_activity check.
# A select() loop on the waiter's and the writer's sockets notes when each
# result arrives.  Per wake-up:
#   after_return = waiter's result - writer's COMMIT result (can be
#                  negative: the waiter is woken in the commit path, before
#                  the writer's backend has sent its reply);
#   after_send   = waiter's result - the moment COMMIT was sent.
use strict;
use warnings;

use DBI;
use DBD::Pg qw(:async);
use Getopt::Long;
use IO::Select;
use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC usleep);

my $dsn = 'dbi:Pg:dbname=postgres';
my $user = 'postgres';
my $n = 2000;
my $warmup = 50;
my $raw;
GetOptions(
	'dsn=s' => \$dsn,
	'user=s' => \$user,
	'n=i' => \$n,
	'warmup=i' => \$warmup,
	'raw=s' => \$raw) or die "usage: $0 [--dsn DSN] [--user U] [--n N] [--warmup W] [--raw FILE]\n";

sub connect_db
{
	my $dbh = DBI->connect($dsn, $user, '',
		{ AutoCommit => 1, RaiseError => 1, PrintError => 0 })
	  or die $DBI::errstr;
	return $dbh;
}

my $waiter = connect_db();
my $writer = connect_db();
my $monitor = connect_db();

$monitor->do(q{
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
DROP TABLE IF EXISTS ev;
CREATE TABLE ev (id bigserial PRIMARY KEY, payload text);
SELECT stream_seq.enable('ev');
INSERT INTO ev (payload) VALUES ('start');
});

my ($waiter_pid) = $waiter->selectrow_array('SELECT pg_backend_pid()');
my ($horizon) = $waiter->selectrow_array(q{SELECT stream_seq.horizon('ev')});
my ($sync) = $writer->selectrow_array('SHOW synchronous_commit');
my $waiting_sth = $monitor->prepare(q{
SELECT wait_event_type = 'Extension' AND wait_event = 'Extension'
  FROM pg_stat_activity WHERE pid = ?});
my $wait_sth = $waiter->prepare(q{SELECT stream_seq.wait('ev', ?, '10 s')},
	{ pg_async => PG_ASYNC });
my $insert_sth = $writer->prepare(q{INSERT INTO ev (payload) VALUES ('x')});

my $select = IO::Select->new;
my %fh;
for my $conn ([ waiter => $waiter ], [ writer => $writer ])
{
	open(my $fh, '<&=', $conn->[1]->{pg_socket})
	  or die "cannot watch the socket of the $conn->[0]: $!";
	$fh{ $conn->[0] } = $fh;
	$select->add($fh);
}

my (@after_return, @after_send, @commit_time);
my $not_sleeping = 0;
for my $i (1 .. $warmup + $n)
{
	# the waiter waits for rows after the last readable one
	$wait_sth->execute($horizon - 1);

	# the writer's transaction, open: it must not wake the waiter
	$writer->do('BEGIN');
	$insert_sth->execute;

	# the waiter must be asleep in wait() before the commit
	my $deadline = clock_gettime(CLOCK_MONOTONIC) + 5;
	my $sleeping = 0;
	while (clock_gettime(CLOCK_MONOTONIC) < $deadline)
	{
		$waiting_sth->execute($waiter_pid);
		($sleeping) = $waiting_sth->fetchrow_array;
		$waiting_sth->finish;
		last if $sleeping;
		usleep(100);
	}
	die "waiter $waiter_pid never slept in wait()\n" unless $sleeping;
	die "wait() returned before the commit\n" if $waiter->pg_ready;

	my $sent = clock_gettime(CLOCK_MONOTONIC);
	$writer->do('COMMIT', { pg_async => PG_ASYNC });
	my ($woken, $committed);
	while (!defined $woken || !defined $committed)
	{
		my @ready = $select->can_read(15);
		die "no result within 15 s\n" unless @ready;
		my $now = clock_gettime(CLOCK_MONOTONIC);
		if (!defined $woken && $waiter->pg_ready)
		{
			$woken = $now;
		}
		if (!defined $committed && $writer->pg_ready)
		{
			$committed = $now;
		}
	}
	$writer->pg_result;
	$wait_sth->pg_result;
	my ($new_horizon) = $wait_sth->fetchrow_array;
	$wait_sth->finish;
	die "wait() returned $new_horizon, not above $horizon (timed out?)\n"
	  unless $new_horizon > $horizon;
	$horizon = $new_horizon;
	next if $i <= $warmup;

	push @after_return, ($woken - $committed) * 1000;
	push @after_send, ($woken - $sent) * 1000;
	push @commit_time, ($committed - $sent) * 1000;
}

if (defined $raw)
{
	open(my $out, '>', $raw) or die "$raw: $!";
	print $out "after_return_ms\tafter_send_ms\tcommit_ms\n";
	printf $out "%.4f\t%.4f\t%.4f\n", $after_return[$_], $after_send[$_],
	  $commit_time[$_]
	  for 0 .. $#after_return;
	close $out;
}

# nearest-rank percentile
sub pct
{
	my ($sorted, $p) = @_;
	my $k = int($p / 100 * @$sorted + 0.999999);
	$k = 1 if $k < 1;
	return $sorted->[ $k - 1 ];
}

sub summary
{
	my ($label, $values) = @_;
	my @s = sort { $a <=> $b } @$values;
	my $negative = grep { $_ < 0 } @s;
	printf "%-42s %8.3f %8.3f %8.3f %8.3f %8.3f %8d\n", $label,
	  $s[0], pct(\@s, 50), pct(\@s, 90), pct(\@s, 99), $s[-1], $negative;
}

printf "wake-ups measured: %d (after %d warm-up), synchronous_commit = %s, "
  . "every one checked: waiter asleep in wait() before COMMIT was sent\n",
  scalar(@after_return), $warmup, $sync;
printf "%-42s %8s %8s %8s %8s %8s %8s\n", 'milliseconds', 'min', 'median',
  'p90', 'p99', 'max', 'below 0';
summary('wait() return - writer\'s COMMIT return', \@after_return);
summary('wait() return - COMMIT sent', \@after_send);
summary('(writer\'s COMMIT: sent -> returned)', \@commit_time);
printf "%d of %d wake-ups: 0.000 ms after COMMIT returned, i.e. both results "
  . "arrived before the measuring loop's next poll\n",
  scalar(grep { $_ == 0 } @after_return), scalar(@after_return);

$_->disconnect for ($waiter, $writer, $monitor);
