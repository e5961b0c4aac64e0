
# Copyright (c) stream_seq contributors
#
# 006_durability.pl: what a crash, a restart, trimming, a damaged recorded
# head and a standby promotion must not break.
#
#  1. synchronous_commit = off: a reader paging below the horizon never
#     reads a row whose commit a crash takes back.  The WAL writer is
#     slowed to its maximum delay (10 s) so that asynchronous commits stay
#     unflushed; while the flush position is below a commit (checked with
#     pg_current_wal_flush_lsn() after the read), the horizon must stay at
#     or below its numbers although a reader can already see its rows as
#     committed, and pass them once a synchronous commit flushes the WAL.
#     After an immediate stop, every row the reader read survives with its
#     number, new numbers are above every number handed out before the
#     crash (lost ones too), and the recorded head of the undamaged stream
#     is not reported as damaged.
#  2. Trim everything, restart (fast, then immediate), insert: new numbers
#     are above the trimmed ones, first() reports the trim point, trim()
#     refuses to pass the horizon (22023) and a consumer (55000, unless
#     forced), and read() for a consumer behind a forced trim fails with
#     55000 naming it, before and after the restart, until it is advanced
#     past the trimmed rows.
#  3. A recorded head set too low by hand is reported by name at the next
#     start and moved forward, and no number is handed out twice (also on
#     a trimmed, empty stream, where only first() shows the damage); one
#     set far too high is reported and kept.  An undamaged head is not
#     reported after a clean restart; a rebuilt one not after the next.
#  5. Consumers running the README's loop (read, apply, advance in one
#     transaction) under write load (synchronous and asynchronous writers,
#     and a deferred trigger that widens the window between numbering and
#     commit), crashed and restarted, end with every committed row applied
#     exactly once and nothing applied that the crash took back.
#  4. A streaming standby promoted after the primary stopped hands out
#     numbers above everything it had replayed, and right after promotion
#     head() and horizon() describe the replayed rows; horizon() on the
#     standby fails with 0A000.  head() is called on the standby before the
#     load, as a monitoring query would.  (Run last: it stops the primary.)
#
# Every write after a restart goes through write_ok(): a number handed out
# twice fails there (the unique index refuses it) without ending the script.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(usleep time);

my $node = PostgreSQL::Test::Cluster->new('durable');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'stream_seq'
max_connections = 40
# Asynchronous commits stay unflushed until the WAL writer's next round (at
# most every 10 s, the maximum), a synchronous commit, or a full WAL page.
# Nothing else may flush WAL behind the test's back.
wal_writer_delay = 10000ms
autovacuum = off
bgwriter_lru_maxpages = 0
checkpoint_timeout = 1h
});
$node->start;

$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE flusher (id bigserial PRIMARY KEY);
});

# One-row results as lists.
sub row
{
	my ($sql, $on) = @_;
	$on //= $node;
	return split /\|/, $on->safe_psql('postgres', $sql);
}

# A one-value result.
sub val
{
	my ($sql, $on) = @_;
	$on //= $node;
	return $on->safe_psql('postgres', $sql);
}

# Run "sql", which must fail; returns "SQLSTATE: message" of the error.
sub sql_error
{
	my ($sql, $on) = @_;
	$on //= $node;
	my ($rc, $out, $err) =
	  $on->psql('postgres', "\\set VERBOSITY verbose\n$sql");
	return 'no error' if $rc == 0;
	return $err =~ /ERROR:\s+([0-9A-Z]{5}):\s+([^\n]*)/ ? "$1: $2" : $err;
}

# A write that must succeed: a failure (a number used twice, say) is a
# failed test, not the end of the script.
sub write_ok
{
	my ($sql, $what, $on) = @_;
	$on //= $node;
	my ($rc, $out, $err) = $on->psql('postgres', $sql);
	is($rc, 0, $what) or diag $err;
}

# A synchronous commit: flushes all WAL written before it.
sub flush_wal
{
	$node->safe_psql('postgres', 'INSERT INTO flusher DEFAULT VALUES');
}

# The server log from byte "offset" on.
sub log_since
{
	my ($offset, $on) = @_;
	$on //= $node;
	return slurp_file($on->logfile, $offset);
}

# Rows of a stream table, id => seq.
sub rows_of
{
	my ($tab, $where) = @_;
	$where //= 'true';
	my %rows;
	for my $line (split /\n/,
		$node->safe_psql('postgres', "SELECT id, seq FROM $tab WHERE $where"))
	{
		my ($id, $seq) = split /\|/, $line;
		$rows{$id} = $seq;
	}
	return %rows;
}

sub max_of { my $m; for (@_) { $m = $_ if !defined $m || $_ > $m } return $m }
sub min_of { my $m; for (@_) { $m = $_ if !defined $m || $_ < $m } return $m }

# Count of rows, distinct numbers and NULL numbers: every committed row has
# a number, and no number is used twice.
sub check_unique
{
	my ($tab, $what) = @_;
	my ($total, $distinct, $nulls) = row(
		"SELECT count(*), count(DISTINCT seq), count(*) FILTER (WHERE seq IS NULL) FROM $tab");
	is($nulls, 0, "$what: every row of $tab has a number");
	is($distinct, $total - $nulls, "$what: no number is used twice in $tab");
}

###########################################################################
# 1. Asynchronous commit: the durable horizon.
###########################################################################

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
cmp_ok($horizon, '<=', min_of(@held),
	"async: unflushed rows (numbers @held) are held back: horizon $horizon");
is(scalar(grep { exists $read{$_} } @{ $txn->{ids} }), 0,
	'async: the reader did not read the unflushed rows');

# A synchronous commit flushes the WAL: the horizon passes them.
flush_wal();
($horizon) = read_pages(undef);
cmp_ok($horizon, '>', max_of(@held),
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
cmp_ok($horizon, '<=', min_of(@last_held),
	"async: the last unflushed commit (numbers @last_held) is held back: horizon $horizon");

my $max_written = max_of(values %written);
my $max_read = max_of(values %read);
my $log_offset = -s $node->logfile;
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
check_unique('t', 'async crash');

write_ok('INSERT INTO t (round) SELECT -1 FROM generate_series(1, 3)',
	'async crash: insert after the restart');
write_ok('INSERT INTO t (round) VALUES (-1)', 'async crash: another insert');
my ($new_min) = row('SELECT min(seq) FROM t WHERE round = -1');
cmp_ok($new_min, '>', $max_read,
	"async crash: new numbers above every number read ($max_read)");
cmp_ok($new_min, '>', $max_written,
	"async crash: new numbers above every number handed out before the crash, lost ones too ($max_written)");
unlike(log_since($log_offset), qr/recorded head of stream table "t"/,
	'async crash: an undamaged recorded head is not reported as damaged after a crash');

###########################################################################
# 2. Trimming: nothing trimmed is numbered again, and consumers are told.
###########################################################################

$node->safe_psql('postgres', q{
SET stream_seq.head_interval = 5;
CREATE TABLE tr (id bigserial PRIMARY KEY, phase int NOT NULL);
SELECT stream_seq.enable('tr');
SELECT stream_seq.create_consumer('tr', 'laggard');
SELECT stream_seq.create_consumer('tr', 'keeper');
});

my $trim_phase = 0;
sub fill_tr
{
	$trim_phase++;
	for my $n (3, 7, 1, 4)
	{
		$node->safe_psql('postgres',
			"INSERT INTO tr (phase) SELECT $trim_phase FROM generate_series(1, $n)");
	}
	return row("SELECT max(seq), stream_seq.horizon('tr') FROM tr");
}

sub trim_everything_restart
{
	my ($mode) = @_;
	my $what = "trim everything, $mode restart";

	my ($max, $h) = fill_tr();
	is($h, $max + 1, "$what: idle horizon is max + 1 before the trim");
	$node->safe_psql('postgres',
		"SELECT stream_seq.advance('tr', 'keeper', $max)");

	like(sql_error("SELECT stream_seq.trim('tr', $h)"),
		qr/^55000: .*consumer "laggard"/,
		"$what: trim past a consumer fails with 55000 naming it");
	like(sql_error("SELECT stream_seq.trim('tr', $h + 1, force => true)"),
		qr/^22023: /, "$what: trim above the horizon fails with 22023");
	my ($total) = row('SELECT count(*) FROM tr');
	is(val("SELECT stream_seq.trim('tr', $h, force => true)"), $total,
		"$what: forced trim returns the count deleted ($total)");
	is(val('SELECT count(*) FROM tr'), 0, "$what: the table is empty");
	is(val("SELECT stream_seq.first('tr')"), $h, "$what: first() is the trim point");
	like(sql_error("SELECT * FROM stream_seq.read('tr', 'laggard')"),
		qr/^55000: .*consumer "laggard"/,
		"$what: read() for the consumer behind the trim fails with 55000 naming it");
	is(val("SELECT count(*) FROM stream_seq.read('tr', 'keeper')"), 0,
		"$what: read() for the consumer at the trim point works");

	my $offset = -s $node->logfile;
	if ($mode eq 'immediate')
	{
		$node->stop('immediate');
		$node->start;
	}
	else
	{
		$node->restart;
	}

	is(val("SELECT stream_seq.first('tr')"), $h, "$what: first() survives the restart");
	like(sql_error("SELECT * FROM stream_seq.read('tr', 'laggard')"),
		qr/^55000: .*consumer "laggard"/,
		"$what: read() for the consumer behind the trim still fails");

	write_ok("INSERT INTO tr (phase) SELECT -$trim_phase FROM generate_series(1, 3)",
		"$what: insert after the restart");
	write_ok("INSERT INTO tr (phase) VALUES (-$trim_phase)", "$what: another insert");
	my ($min, $count) = row("SELECT min(seq), count(*) FROM tr WHERE phase = -$trim_phase");
	is($count, 4, "$what: rows inserted after the restart");
	cmp_ok($min, '>', $max, "$what: new numbers ($min...) above the trimmed ones (up to $max)");
	check_unique('tr', $what);
	unlike(log_since($offset), qr/recorded head of stream table "tr"/,
		"$what: the recorded head is not reported as damaged")
	  if $mode ne 'immediate';

	# the hint's way out: skip the trimmed rows
	$node->safe_psql('postgres',
		"SELECT stream_seq.advance('tr', 'laggard', stream_seq.first('tr') - 1)");
	is(val("SELECT count(*) FROM stream_seq.read('tr', 'laggard')"), 4,
		"$what: the consumer that skipped the trimmed rows reads the new ones");
	is(val("SELECT count(*) FROM stream_seq.read('tr', 'keeper')"), 4,
		"$what: the consumer at the trim point reads the new ones");
	# behind the next trim again
	$node->safe_psql('postgres', q{
SELECT stream_seq.drop_consumer('tr', 'laggard');
SELECT stream_seq.create_consumer('tr', 'laggard');
});
}

trim_everything_restart('fast');
trim_everything_restart('immediate');

###########################################################################
# 3. A damaged recorded head.
###########################################################################

$node->safe_psql('postgres', q{
SET stream_seq.head_interval = 10;
CREATE TABLE h (id bigserial PRIMARY KEY, phase int NOT NULL);
SELECT stream_seq.enable('h');
INSERT INTO h (phase) SELECT 1 FROM generate_series(1, 30);
INSERT INTO h (phase) SELECT 1 FROM generate_series(1, 7);
});
my ($head_seq) = row(q{SELECT head_seq FROM stream_seq.stream WHERE relid = 'h'::regclass});

# An undamaged head is not reported after a clean restart.
my $offset = -s $node->logfile;
$node->restart;
write_ok("INSERT INTO h (phase) VALUES (2)", 'head: insert after a clean restart');
unlike(log_since($offset), qr/recorded head of stream table "h"/,
	'head: an undamaged recorded head is not reported after a clean restart');

# Too low: below the table's maximum.
my ($max_h) = row('SELECT max(seq) FROM h');
$node->safe_psql('postgres', "SELECT setval('$head_seq', 1)");
$offset = -s $node->logfile;
$node->restart;
$node->safe_psql('postgres', "SELECT stream_seq.horizon('h')");
like(log_since($offset),
	qr/WARNING:  recorded head of stream table "h" is behind its rows/,
	'head too low: reported by name at the first use after the start');
for my $i (1 .. 4)
{
	write_ok("INSERT INTO h (phase) SELECT 3 FROM generate_series(1, $i * 3)",
		"head too low: insert $i after the restart");
}
my ($low_min, $low_count) = row('SELECT min(seq), count(*) FROM h WHERE phase = 3');
is($low_count, 30, 'head too low: rows inserted after the restart');
cmp_ok($low_min, '>', $max_h, "head too low: new numbers above the table's maximum ($max_h)");
check_unique('h', 'head too low');
like(log_since($offset), qr/moving recorded head of stream table "h" forward/,
	'head too low: moved forward at the first refill');
my ($max_h2) = row('SELECT max(seq) FROM h');
my ($recorded) = row("SELECT last_value + 10 FROM $head_seq");
cmp_ok($recorded, '>', $max_h2, 'head too low: the recorded head covers the table again');
$offset = -s $node->logfile;
$node->restart;
write_ok("INSERT INTO h (phase) VALUES (4)", 'head too low: insert after the next restart');
unlike(log_since($offset), qr/recorded head of stream table "h"/,
	'head too low: not reported again after the next restart (rebuilt)');

# Far too high: reported, and kept (rows above the table's maximum may
# have been deleted, their numbers must not come back).
$node->safe_psql('postgres', "SELECT setval('$head_seq', 10000000)");
$offset = -s $node->logfile;
$node->restart;
$node->safe_psql('postgres', "SELECT stream_seq.horizon('h')");
like(log_since($offset),
	qr/LOG:  recorded head of stream table "h" is ahead of its rows/,
	'head too high: logged by name at the first use after the start');
write_ok("INSERT INTO h (phase) SELECT 5 FROM generate_series(1, 12)",
	'head too high: insert after the restart');
my ($high_min, $high_count) = row('SELECT min(seq), count(*) FROM h WHERE phase = 5');
is($high_count, 12, 'head too high: rows inserted after the restart');
cmp_ok($high_min, '>=', 10000000 + 10,
	'head too high: numbering continues above the recorded head (kept)');
check_unique('h', 'head too high');
$offset = -s $node->logfile;
$node->restart;
write_ok("INSERT INTO h (phase) VALUES (6)", 'head too high: insert after the next restart');
unlike(log_since($offset), qr/recorded head of stream table "h"/,
	'head too high: not reported again once rows reach it');

# Too low on a stream that was trimmed empty: the table's maximum shows
# nothing, first() still does.  A consumer positioned at the trim point
# must not be skipped past new rows numbered below it.
$node->safe_psql('postgres', q{
SET stream_seq.head_interval = 10;
CREATE TABLE he (id bigserial PRIMARY KEY, phase int NOT NULL);
SELECT stream_seq.enable('he');
INSERT INTO he (phase) SELECT 1 FROM generate_series(1, 25);
SELECT stream_seq.create_consumer('he', 'c', start_after => 25);
});
my ($he_first) = row("SELECT stream_seq.horizon('he')");
$node->safe_psql('postgres', "SELECT stream_seq.trim('he', $he_first)");
my ($he_head_seq) = row(q{SELECT head_seq FROM stream_seq.stream WHERE relid = 'he'::regclass});
$node->safe_psql('postgres', "SELECT setval('$he_head_seq', 1)");
$offset = -s $node->logfile;
$node->restart;
write_ok("INSERT INTO he (phase) SELECT 2 FROM generate_series(1, 5)",
	'head too low, trimmed stream: insert after the restart');
my ($he_min) = row('SELECT min(seq) FROM he WHERE phase = 2');
cmp_ok($he_min, '>=', $he_first,
	"head too low, trimmed stream: new numbers not below first() ($he_first)");
is(val("SELECT count(*) FROM stream_seq.read('he', 'c')"), 5,
	'head too low, trimmed stream: the consumer at the trim point reads the new rows');
like(log_since($offset),
	qr/WARNING:  recorded head of stream table "he" is behind its rows/,
	'head too low, trimmed stream: reported by name');

###########################################################################
# 5. A consumer under write load resumes after a crash.
###########################################################################

$node->safe_psql('postgres', q{
CREATE TABLE c (id bigserial PRIMARY KEY, phase int NOT NULL, client int);
SELECT stream_seq.enable('c');
SET stream_seq.head_interval = 7;
CREATE TABLE c7 (id bigserial PRIMARY KEY, phase int NOT NULL, client int);
SELECT stream_seq.enable('c7');
-- A deferred trigger of the application's that runs after the stream's
-- own (names sort after "stream_seq_assign"): commits of "c" take a few ms
-- between taking their numbers and becoming visible, so later numbers often
-- become visible first and only the horizon keeps readers from skipping.
CREATE FUNCTION dawdle() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_sleep(random() * 0.002);
    RETURN NULL;
END;
$$;
CREATE CONSTRAINT TRIGGER zz_dawdle AFTER INSERT ON c
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION dawdle();
CREATE TABLE control (writers_done boolean NOT NULL);
INSERT INTO control VALUES (false);
CREATE TABLE applied (consumer text NOT NULL, stream text NOT NULL,
                      seq bigint NOT NULL, id bigint NOT NULL);
SELECT stream_seq.create_consumer('c', 'fast');
SELECT stream_seq.create_consumer('c', 'slow');
SELECT stream_seq.create_consumer('c7', 'fast');

-- The consumer loop of the README: read a page, apply it, advance, all in
-- one transaction; wait() when there is nothing to read.  Ends when the
-- writers are done and nothing is left.
CREATE PROCEDURE consume(stream regclass, cname text, page_size int, nap float8)
LANGUAGE plpgsql AS $$
DECLARE
    n bigint;
    top bigint;
    done boolean;
    deadline timestamptz := clock_timestamp() + interval '60 s';
BEGIN
    LOOP
        SELECT writers_done INTO done FROM control;
        CREATE TEMP TABLE page ON COMMIT DROP AS
          SELECT * FROM stream_seq.read(stream, cname, page_size);
        INSERT INTO applied
          SELECT cname, stream::text, seq, ("row"->>'id')::bigint FROM page;
        SELECT count(*), max(seq) INTO n, top FROM page;
        IF n > 0 THEN
            PERFORM stream_seq.advance(stream, cname, top);
        END IF;
        COMMIT;
        IF n = 0 THEN
            EXIT WHEN done;
            IF clock_timestamp() > deadline THEN
                RAISE EXCEPTION 'consumer % of % gave up at %, horizon %',
                    cname, stream, stream_seq.position(stream, cname),
                    stream_seq.horizon(stream);
            END IF;
            PERFORM stream_seq.wait(stream, stream_seq.position(stream, cname), '200 ms');
            COMMIT;
        ELSIF nap > 0 THEN
            PERFORM pg_sleep(nap);
        END IF;
    END LOOP;
END;
$$;
});

my $load_script = $node->basedir . '/load.sql';
append_to_file($load_script, q{
\set n random(1, 5)
\set outcome random(1, 8)
BEGIN;
INSERT INTO c (phase, client) SELECT :phase, :client_id FROM generate_series(1, :n);
INSERT INTO c7 (phase, client) SELECT :phase, :client_id FROM generate_series(1, :n);
\if :outcome = 1
ROLLBACK;
\else
COMMIT;
\endif
});

# Start a command in the background; returns the handle and its output.
sub bg_run
{
	my (@cmd) = @_;
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start(\@cmd, '<', \undef, '>', \$out, '2>', \$err);
	return { handle => $h, out => \$out, err => \$err };
}

# Wait for a background command; returns its exit status (-1: killed
# after "limit" seconds).
sub wait_done
{
	my ($job, $limit) = @_;
	my $h = $job->{handle};
	my $deadline = time() + $limit;
	while ($h->pumpable && time() < $deadline)
	{
		$h->pump_nb;
		usleep(50_000);
	}
	my $timed_out = $h->pumpable;
	$h->kill_kill if $timed_out;
	$h->finish;
	return $timed_out ? -1 : $h->result(0);
}

# Writers: synchronous ones, and asynchronous ones whose commits are lost
# in a crash unless something flushed them.
sub start_writers
{
	my ($on, $phase, @limit) = @_;
	my @jobs;
	for my $sync ('on', 'off')
	{
		local $ENV{PGOPTIONS} = "-c synchronous_commit=$sync";
		push @jobs, bg_run(
			$on->installed_command('pgbench'), '-n',
			'-h', $on->host, '-p', $on->port,
			'-c', '3', '-j', '1', @limit, '-D', "phase=$phase",
			'-f', $load_script, 'postgres');
	}
	return @jobs;
}

sub start_consumers
{
	return (
		bg_run($node->installed_command('psql'), '-XAtq', '-v', 'ON_ERROR_STOP=1',
			'-d', $node->connstr('postgres'), '-c', "CALL consume('c', 'fast', 50, 0)"),
		bg_run($node->installed_command('psql'), '-XAtq', '-v', 'ON_ERROR_STOP=1',
			'-d', $node->connstr('postgres'), '-c', "CALL consume('c', 'slow', 10, 0.001)"),
		bg_run($node->installed_command('psql'), '-XAtq', '-v', 'ON_ERROR_STOP=1',
			'-d', $node->connstr('postgres'), '-c', "CALL consume('c7', 'fast', 20, 0)"));
}

my @writers = start_writers($node, 1, '-T', '60');
my @consumers = start_consumers();
$node->poll_query_until('postgres', q{
SELECT (SELECT count(*) FROM c) > 1500
   AND (SELECT count(*) FROM applied WHERE consumer = 'slow') > 300})
  or die 'consumers did not get going';
$node->stop('immediate');
wait_done($_, 30) for @writers, @consumers;
$node->start;

my ($pos_after_crash) = row("SELECT stream_seq.position('c', 'slow')");
cmp_ok($pos_after_crash, '>', 0, "consumers: positions survive the crash ($pos_after_crash)");

@writers = start_writers($node, 2, '-t', '60');
@consumers = start_consumers();
for my $w (@writers)
{
	is(wait_done($w, 60), 0, 'consumers: writers after the crash ran cleanly')
	  or diag ${ $w->{err} };
}
# a synchronous commit: flushes the asynchronous writers' last commits too
$node->safe_psql('postgres', 'UPDATE control SET writers_done = true');
for my $cons (@consumers)
{
	is(wait_done($cons, 60), 0, 'consumers: consumer ran to the end')
	  or diag ${ $cons->{err} };
}

for my $case (['c', 'fast'], ['c', 'slow'], ['c7', 'fast'])
{
	my ($tab, $name) = @$case;
	my $what = "consumer $name of $tab";
	check_unique($tab, "consumers");
	my ($committed, $applied, $distinct, $missed, $phantom, $pos, $max) = row(qq{
SELECT (SELECT count(*) FROM $tab),
       (SELECT count(*) FROM applied WHERE consumer = '$name' AND stream = '$tab'),
       (SELECT count(DISTINCT seq) FROM applied WHERE consumer = '$name' AND stream = '$tab'),
       (SELECT count(*) FROM $tab t WHERE NOT EXISTS (
          SELECT FROM applied a WHERE a.consumer = '$name' AND a.stream = '$tab'
                                  AND a.id = t.id AND a.seq = t.seq)),
       (SELECT count(*) FROM applied a WHERE a.consumer = '$name' AND a.stream = '$tab'
          AND NOT EXISTS (SELECT FROM $tab t WHERE a.id = t.id AND a.seq = t.seq)),
       stream_seq.position('$tab', '$name'),
       (SELECT max(seq) FROM $tab)});
	cmp_ok($committed, '>', 1500, "$what: rows committed across the crash");
	is($distinct, $applied, "$what: no row applied twice");
	is($missed, 0, "$what: no committed row missed");
	is($phantom, 0, "$what: nothing applied that did not survive, or with another number");
	is($applied, $committed, "$what: applied = committed ($committed)");
	is($pos, $max, "$what: position ends at the last number");
}

###########################################################################
# 4. Standby promotion.
###########################################################################

$node->safe_psql('postgres', q{
SET stream_seq.head_interval = 10;
CREATE TABLE p (id bigserial PRIMARY KEY, phase int NOT NULL, client int);
SELECT stream_seq.enable('p');
INSERT INTO p (phase) SELECT 0 FROM generate_series(1, 15);
});
my $p_script = $node->basedir . '/p.sql';
append_to_file($p_script, q{
\set n random(1, 4)
INSERT INTO p (phase, client) SELECT :phase, :client_id FROM generate_series(1, :n);
});

$node->backup('standby_backup');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'standby_backup', has_streaming => 1);
$standby->start;
$node->wait_for_catchup($standby, 'replay');

like(sql_error("SELECT stream_seq.horizon('p')", $standby), qr/^0A000: /,
	'standby: horizon() fails with 0A000');
# a monitoring query on the standby before the load
$standby->psql('postgres', "SELECT stream_seq.head('p')");

my $p_load = bg_run(
	$node->installed_command('pgbench'), '-n', '-h', $node->host, '-p', $node->port,
	'-c', '4', '-j', '2', '-t', '150', '-D', 'phase=1', '-f', $p_script, 'postgres');
is(wait_done($p_load, 60), 0, 'standby: load on the primary ran cleanly')
  or diag ${ $p_load->{err} };
$node->wait_for_catchup($standby, 'replay');

my ($sb_count, $sb_max) = row('SELECT count(*), max(seq) FROM p', $standby);
my ($pr_count, $pr_max) = row('SELECT count(*), max(seq) FROM p');
is("$sb_count|$sb_max", "$pr_count|$pr_max", 'standby: caught up with the primary');
like(sql_error("SELECT stream_seq.horizon('p')", $standby), qr/^0A000: /,
	'standby: horizon() still fails with 0A000 after replay');
note 'standby: head() reports '
  . $standby->safe_psql('postgres', "SELECT stream_seq.head('p')")
  . " after replaying up to $sb_max";

$node->stop;
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'standby was not promoted';

# Before any new number: the replayed rows are the stream.
my ($pp_h, $pp_head) =
  row("SELECT stream_seq.horizon('p'), stream_seq.head('p')", $standby);
is($pp_head, $sb_max, 'promoted, idle: head() is the replayed maximum');
is($pp_h, $sb_max + 1, 'promoted, idle: horizon is replayed maximum + 1');

my $p_after = bg_run(
	$standby->installed_command('pgbench'), '-n', '-h', $standby->host,
	'-p', $standby->port, '-c', '4', '-j', '2', '-t', '30', '-D', 'phase=2',
	'-f', $p_script, 'postgres');
is(wait_done($p_after, 60), 0, 'promoted: load on the promoted standby ran cleanly')
  or diag ${ $p_after->{err} };
my ($new_count, $p_min, $below) = row(qq{
SELECT count(*), min(seq), count(*) FILTER (WHERE seq <= $sb_max)
  FROM p WHERE phase = 2}, $standby);
cmp_ok($new_count, '>', 0, 'promoted: new rows');
is($below, 0, "promoted: every new number above the replayed maximum ($sb_max)");
cmp_ok($p_min, '>', $sb_max, 'promoted: lowest new number above the replayed maximum');
{
	my ($total, $distinct, $nulls) = row(
		'SELECT count(*), count(DISTINCT seq), count(*) FILTER (WHERE seq IS NULL) FROM p',
		$standby);
	is($nulls, 0, 'promoted: every row has a number');
	is($distinct, $total, 'promoted: no number is used twice');
	is($total, $sb_count + $new_count, 'promoted: replayed rows kept');
}
my ($p_h, $p_head, $p_max) =
  row("SELECT stream_seq.horizon('p'), stream_seq.head('p'), max(seq) FROM p", $standby);
is($p_head, $p_max, 'promoted: head() is the highest number handed out');
is($p_h, $p_head + 1, 'promoted: idle horizon is head + 1');

$standby->stop;
done_testing();
