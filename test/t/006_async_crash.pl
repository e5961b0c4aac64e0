
# Copyright (c) stream_seq contributors
#
# 006_async_crash.pl: with synchronous_commit = off, a reader paging below
# the horizon never reads a row whose commit a crash takes back.
#
# The WAL writer is slowed to its maximum delay (10 s) so that
# asynchronous commits stay unflushed; while the flush position is below a
# commit (checked with pg_current_wal_flush_lsn() after the read), the
# horizon must stay at or below its numbers although a reader can already
# see its rows as committed, and pass them once a synchronous commit
# flushes the WAL.  After an immediate stop, every row the reader read
# survives with its number, new numbers are above every number handed out
# before the crash (lost ones too), and the recorded head of the undamaged
# stream is not reported as damaged.
#
# Every write after the restart goes through write_ok(): a number handed
# out twice fails there (the unique index refuses it) without ending the
# script.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use List::Util qw(max min);
use StreamSeqTest;

# Asynchronous commits stay unflushed until the test flushes the WAL (or
# the WAL writer's next round, at most every 10 s).
my $node = new_node('async', slow_wal_conf());

$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE flusher (id bigserial PRIMARY KEY);
});

# A synchronous commit: flushes all WAL written before it.
sub flush_wal
{
	$node->safe_psql('postgres', 'INSERT INTO flusher DEFAULT VALUES');
}

# Rows of stream table "tab", id => seq.
sub rows_of
{
	my ($tab) = @_;
	my %rows;
	for my $line (split /\n/,
		$node->safe_psql('postgres', "SELECT id, seq FROM $tab"))
	{
		my ($id, $seq) = split /\|/, $line;
		$rows{$id} = $seq;
	}
	return %rows;
}

$node->safe_psql('postgres', q{
CREATE TABLE t (id bigserial PRIMARY KEY, round int NOT NULL);
SELECT stream_seq.enable('t');
INSERT INTO t (round) SELECT 0 FROM generate_series(1, 5);
});

# The writer commits asynchronously.  The reader only reads: a commit of
# its own that wrote WAL would flush the writer's commits too.
my $writer = $node->background_psql('postgres');
$writer->query_safe('SET synchronous_commit = off');
my $reader = $node->background_psql('postgres');

my %written;        # id => seq of every row the writer committed
my %read;           # id => seq of every row the reader read
my $cursor = 0;
my $round = 0;

# One asynchronously committed transaction of "n" rows; returns the ids
# and the WAL insert position just before its commit record.
sub write_async
{
	my ($n) = @_;
	$round++;
	$writer->query_safe('BEGIN');
	my @ids = split /\n/, $writer->query_safe(
		"INSERT INTO t (round) SELECT $round FROM generate_series(1, $n) RETURNING id");
	my $lsn = $writer->query_safe('SELECT pg_current_wal_insert_lsn()');
	$writer->query_safe('COMMIT');
	# committed and visible: read back the numbers given at commit
	for my $line (split /\n/,
		$writer->query_safe("SELECT id, seq FROM t WHERE round = $round"))
	{
		my ($id, $seq) = split /\|/, $line;
		$written{$id} = $seq;
	}
	return { ids => \@ids, lsn => $lsn };
}

# The reader: pages "seq > cursor AND seq < horizon" until a page comes
# back empty, records what it read, and returns the horizon of the last
# page and whether "lsn" was still unflushed after it (then it was
# unflushed when the horizon was computed, the flush position never moves
# back).
sub read_pages
{
	my ($lsn) = @_;
	my $horizon;
	while (1)
	{
		my $out = $reader->query_safe(qq{
SELECT stream_seq.horizon('t') || ' ' || coalesce(
  (SELECT string_agg(id || ':' || seq, ' ' ORDER BY seq)
     FROM (SELECT id, seq FROM t
            WHERE seq > $cursor AND seq < stream_seq.horizon('t')
            ORDER BY seq LIMIT 100) page), '')});
		my ($h, @page) = split / /, $out;
		$horizon = $h;
		last unless @page;
		for (@page)
		{
			my ($id, $seq) = split /:/;
			die "reader read row $id twice" if exists $read{$id};
			$read{$id} = $seq;
			$cursor = $seq;
		}
	}
	my $unflushed = defined $lsn
	  ? $reader->query_safe(
		"SELECT pg_current_wal_flush_lsn() < '$lsn'::pg_lsn") eq 't'
	  : 0;
	return ($horizon, $unflushed);
}

read_pages(undef);
is(scalar(keys %read), 5, 'async: the reader read the synchronously committed rows');

# An asynchronous commit, read back before the WAL writer flushes it.  The
# WAL writer's timer can flush it between the commit and the read (rarely,
# the window is a few ms out of 10 s): then try again.
my ($horizon, $unflushed, $txn);
for my $attempt (1 .. 8)
{
	flush_wal();
	$txn = write_async(3);
	($horizon, $unflushed) = read_pages($txn->{lsn});
	last if $unflushed;
	note "async: commit flushed before the reader looked (attempt $attempt), again";
}
ok($unflushed, 'async: caught an asynchronous commit before its WAL flush');
my @held = map { $written{$_} } @{ $txn->{ids} };
is( $node->safe_psql('postgres',
		'SELECT count(*) FROM t WHERE seq IS NOT NULL AND id IN ('
		  . join(',', @{ $txn->{ids} }) . ')'),
	3,
	'async: the unflushed rows are committed, numbered and visible to others');
cmp_ok($horizon, '<=', min(@held),
	"async: unflushed rows (numbers @held) are held back: horizon $horizon");
is(scalar(grep { exists $read{$_} } @{ $txn->{ids} }), 0,
	'async: the reader did not read the unflushed rows');

# A synchronous commit flushes the WAL: the horizon passes them.
flush_wal();
($horizon) = read_pages(undef);
cmp_ok($horizon, '>', max(@held),
	"async: after the WAL flush the horizon ($horizon) passed the rows");
is(scalar(grep { exists $read{$_} } @{ $txn->{ids} }), 3,
	'async: after the WAL flush the reader read the rows');

# Now several asynchronous commits, a reader acting on what it reads, and
# an immediate stop before the WAL writer's next round.
my @crash_txns;
for my $attempt (1 .. 8)
{
	flush_wal();
	@crash_txns = map { write_async(1 + $_ % 3) } 1 .. 6;
	($horizon, $unflushed) = read_pages($crash_txns[-1]{lsn});
	last if $unflushed;
	note "async: commits flushed before the reader looked (attempt $attempt), again";
}
ok($unflushed, 'async: caught asynchronous commits before their WAL flush');
my @last_held = map { $written{$_} } @{ $crash_txns[-1]{ids} };
cmp_ok($horizon, '<=', min(@last_held),
	"async: the last unflushed commit (numbers @last_held) is held back: horizon $horizon");

my $max_written = max(values %written);
my $max_read = max(values %read);
my $log_offset = log_offset($node);
$node->stop('immediate');
$writer->quit;
$reader->quit;
$node->start;

my %after = rows_of('t');
my @lost_read = grep { !exists $after{$_} || $after{$_} != $read{$_} } keys %read;
is(scalar(@lost_read), 0,
	'async crash: every row the reader read survived with its number')
  or diag "lost or renumbered: @lost_read";
my @lost = grep { !exists $after{$_} } keys %written;
note 'async crash: ' . scalar(@lost) . ' of ' . scalar(keys %written)
  . ' asynchronously committed rows were lost (none of them read)';
check_unique($node, 't', 'async crash');

write_ok($node, 'INSERT INTO t (round) SELECT -1 FROM generate_series(1, 3)',
	'async crash: insert after the restart');
write_ok($node, 'INSERT INTO t (round) VALUES (-1)', 'async crash: another insert');
my ($new_min) = row($node, 'SELECT min(seq) FROM t WHERE round = -1');
cmp_ok($new_min, '>', $max_read,
	"async crash: new numbers above every number read ($max_read)");
cmp_ok($new_min, '>', $max_written,
	"async crash: new numbers above every number handed out before the crash, lost ones too ($max_written)");
unlike(log_since($node, $log_offset), qr/recorded head of stream table "t"/,
	'async crash: an undamaged recorded head is not reported as damaged after a crash');


$node->stop;
done_testing();
