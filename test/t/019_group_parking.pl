
# Copyright (c) stream_seq contributors
#
# 019_group_parking.pl: workers of a consumer group set aside the rows their
# handler cannot apply (park) and still reach the head; the parked rows are
# listed with their attempts and, replayed in a transaction that applies
# them, applied exactly once; a reset of one slot, then of the whole group,
# delivers again exactly the rows after the reset point.
#
# A stream table "ev" with a key column k (1,000 keys), a group "g" of 8
# slots keyed by it.  8 pgbench writers insert 20,000 rows in four rounds;
# between rounds the test inserts one row whose payload is 'poison', each
# of another slot.  The handler, handle(), inserts a row into the oracle
# table given and fails (SQLSTATE 22000) on a poison row until the test
# "fixes" it.  Workers (3 processes, direct connections) loop: claim, then
# for each slot held, one transaction: read a page into a temporary table,
# apply it under a savepoint; if the handler fails, roll back to the
# savepoint and apply the page row by row, each under a savepoint of its
# own, parking (stream_seq.park) the rows that fail; advance the slot
# past the page; commit.
#
# Checked:
#  - the group reaches the head: no row is above its slot's position;
#  - the oracle holds every committed row but the 3 poison ones, each once,
#    per key in increasing seq; parked_rows lists exactly the 3, attempts 1,
#    with the handler's error as the reason;
#  - reset of the slot of one poison row to 50 rows of the slot before it:
#    the workers (applying into a second oracle table) deliver exactly the
#    slot's rows after that point, the poison row is parked again (attempts
#    2), the other slots do not move, and consumer_slots records the reset;
#  - reset of every slot of the group to 300 numbers below the head: exactly
#    the rows above that are delivered again (into a third table);
#  - replay() takes parked rows in the caller's transaction: a concurrent
#    replay skips the rows another holds, and a rolled back replay leaves
#    them parked; with the handler fixed, a replay in a transaction that
#    applies them applies each exactly once, and nothing stays parked;
#  - no server process crashed.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep time);
use StreamSeqTest;

my $t_start = time();
unlink glob "$PostgreSQL::Test::Utils::log_path/019_worker_*.log";
my $node = new_node('group_parking', "max_connections = 40\n");
my $log_start = log_offset($node);

$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE ev (id bigserial PRIMARY KEY, k int NOT NULL, payload text NOT NULL);
SELECT stream_seq.enable('ev');
SELECT stream_seq.create_group('ev', 'g', 'k', 8);
CREATE SEQUENCE apply_order;
-- the oracle, and the tables the rows delivered again after each reset go to
CREATE TABLE applied (seq bigint PRIMARY KEY, k int NOT NULL, id bigint NOT NULL,
                      ord bigint NOT NULL DEFAULT nextval('apply_order'),
                      worker text NOT NULL);
CREATE TABLE again_slot (LIKE applied INCLUDING ALL);
CREATE TABLE again_group (LIKE applied INCLUDING ALL);

-- the handler: applies one row into "target"; fails on a poison row until
-- it is fixed
CREATE TABLE handler_fixed (fixed boolean NOT NULL);
INSERT INTO handler_fixed VALUES (false);
CREATE FUNCTION handle(p_seq bigint, r jsonb, p_worker text, target regclass)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF r->>'payload' = 'poison' AND NOT (SELECT fixed FROM handler_fixed) THEN
        RAISE EXCEPTION 'cannot handle row %: poison', p_seq
          USING ERRCODE = 'data_exception';
    END IF;
    EXECUTE format('INSERT INTO %s (seq, k, id, worker) VALUES ($1, $2, $3, $4)', target)
      USING p_seq, (r->>'k')::int, (r->>'id')::bigint, p_worker;
END;
$$;
-- the rows of the worker's temporary table "page", in order
CREATE FUNCTION apply_page(p_worker text, target regclass)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n bigint := 0;
BEGIN
    FOR r IN SELECT seq, "row" FROM page ORDER BY seq LOOP
        PERFORM handle(r.seq, r."row", p_worker, target);
        n := n + 1;
    END LOOP;
    RETURN n;
END;
$$;
});

# rows left to apply: rows above the position of their slot
my $pending_sql = q{
SELECT count(*) FROM ev e
  JOIN stream_seq.consumer_slots s
    ON s.stream = 'ev'::regclass AND s.consumer = 'g'
   AND s.slot = stream_seq.slot_of(e.k::text, 8)
 WHERE e.seq > s.position};

my $stop_file = $node->basedir . '/workers.stop';

# The worker loop, applying into table "target".  Returns 0 if it ended
# cleanly (stop file), 1 after an error it does not expect: besides the
# handler's (22000), only SS001 (fenced: roll back and claim again) is
# expected; a deadlock (40P01) is not: slots are locked in slot order.
sub worker
{
	my ($name, $target) = @_;
	my $s = session($node, $node->connstr('postgres'));
	my %n = (pages => 0, rows => 0, parked => 0, fenced => 0);
	print "$name: started, pid $$\n";

	# "what" failed with result "r": roll back, count, and say whether the
	# worker goes on
	my $failed = sub {
		my ($what, $r) = @_;
		print "$name: $what: $r->{sqlstate} $r->{message}\n";
		return 0 if $r->{sqlstate} eq 'dead';
		$s->query('ROLLBACK');
		if ($r->{sqlstate} eq 'SS001')
		{
			$n{fenced}++;
			return 1;
		}
		return 0;
	};
	# runs "sql"; its result, or undef if it failed (rolled back)
	my $step = sub {
		my ($what, $sql) = @_;
		my $r = $s->query($sql);
		return $r unless defined $r->{sqlstate};
		die "$name: gave up\n" unless $failed->($what, $r);
		return undef;
	};

	while (!-e $stop_file)
	{
		my $r = $step->('claim',
			qq{SELECT slot, token FROM stream_seq.claim('ev', 'g', '$name', '2 s')});
		next unless $r;
		my $applied = 0;
	  SLOT:
		for my $held (grep { $_ ne '' } split /\n/, $r->{out})
		{
			my ($slot, $token) = split /\|/, $held;
			$step->('begin', 'BEGIN') or last;
			$step->('read', qq{
CREATE TEMP TABLE page ON COMMIT DROP AS
  SELECT seq, "row" FROM stream_seq.read_slot('ev', 'g', $slot, $token, 100)})
			  or last;
			my $page = $step->('count', 'SELECT count(*), coalesce(max(seq), 0) FROM page')
			  or last;
			my ($rows, $last) = split /\|/, $page->{out};
			if ($rows > 0)
			{
				$step->('savepoint', 'SAVEPOINT bulk') or last;
				my $bulk = $s->query("SELECT apply_page('$name', '$target')");
				if (($bulk->{sqlstate} // '') eq '22000')
				{
					# row by row, parking what fails
					$step->('rollback to', 'ROLLBACK TO SAVEPOINT bulk') or last;
					my $seqs = $step->('list', 'SELECT seq FROM page ORDER BY seq')
					  or last;
					for my $seq (split /\n/, $seqs->{out})
					{
						$step->('savepoint', 'SAVEPOINT one') or last SLOT;
						my $one = $s->query(
							qq{SELECT handle(seq, "row", '$name', '$target') FROM page WHERE seq = $seq});
						if (($one->{sqlstate} // '') eq '22000')
						{
							(my $reason = $one->{message}) =~ s/'/''/g;
							$step->('rollback to', 'ROLLBACK TO SAVEPOINT one')
							  or last SLOT;
							$step->('park',
								"SELECT stream_seq.park('ev', 'g', $seq, '$reason')")
							  or last SLOT;
							$n{parked}++;
							print "$name: parked $seq: $one->{message}\n";
						}
						elsif (defined $one->{sqlstate})
						{
							die "$name: gave up\n" unless $failed->('handle', $one);
							last SLOT;
						}
						else
						{
							$step->('release', 'RELEASE SAVEPOINT one') or last SLOT;
						}
					}
				}
				elsif (defined $bulk->{sqlstate})
				{
					die "$name: gave up\n" unless $failed->('apply', $bulk);
					last;
				}
				$step->('advance',
					"SELECT stream_seq.advance_slot('ev', 'g', $slot, $token, $last)")
				  or last;
			}
			$step->('commit', 'COMMIT') or last;
			$n{pages}++ if $rows > 0;
			$n{rows} += $rows;
			$applied += $rows;
		}
		usleep(50_000) unless $applied;
	}
	for (1 .. 5)
	{
		last if $step->('release', "SELECT stream_seq.release('ev', 'g', '$name')");
	}
	$s->close;
	print "$name: done: "
	  . join(' ', map { "$_=$n{$_}" } sort keys %n) . "\n";
	return 0;
}

my $next_worker = 1;

# "n" workers applying into "target"; returns their names and pids
sub start_workers
{
	my ($n, $target) = @_;
	unlink $stop_file;
	my %w;
	for (1 .. $n)
	{
		my $name = 'w' . $next_worker++;
		my $log = "$PostgreSQL::Test::Utils::log_path/019_worker_$name.log";
		$w{$name} = bg_fork($log, sub { worker($name, $target) });
	}
	return \%w;
}

# waits (2 minutes at most) until no row is left above its slot's position,
# then stops the workers; checks both, as tests named after "what"
sub drain_and_stop
{
	my ($workers, $what) = @_;
	my $pending;
	my $deadline = time() + 120;
	while (time() < $deadline)
	{
		$pending = $node->safe_psql('postgres', $pending_sql);
		last if $pending == 0;
		usleep(200_000);
	}
	is($pending, 0, "$what: the group reached the head");
	append_to_file($stop_file, "stop\n");
	for my $name (sort keys %$workers)
	{
		is(wait_pid($workers->{$name}, 60), 0, "$what: worker $name ended cleanly")
		  or diag slurp_file(
			"$PostgreSQL::Test::Utils::log_path/019_worker_$name.log");
	}
}

# rows applied into "table" out of seq order within a key (rows replayed
# later excepted), and keys with several rows
sub order_check
{
	my ($table) = @_;
	return row($node, qq{
SELECT count(*) FILTER (WHERE prev_seq > seq),
       count(DISTINCT k) FILTER (WHERE prev_seq IS NOT NULL)
  FROM (SELECT k, seq, lag(seq) OVER (PARTITION BY k ORDER BY ord) AS prev_seq
          FROM $table WHERE worker <> 'replayer') a});
}

# three keys of three different slots, for the poison rows
my @poison_keys = map {
	$node->safe_psql('postgres',
		"SELECT min(k) FROM generate_series(1, 1000) k WHERE stream_seq.slot_of(k::text, 8) = $_")
} (1, 3, 5);

my $writer_script = $node->basedir . '/writer.sql';
append_to_file($writer_script, q{
INSERT INTO ev (k, payload) SELECT 1 + (random() * 999)::int, 'ok' FROM generate_series(1, 25);
});

# phase 1: 4 rounds of 5,000 rows, a poison row after each of the first 3
my $workers = start_workers(3, 'applied');
my @poison;
for my $round (1 .. 4)
{
	my $w = bg_pgbench($node, undef, '-c', '8', '-j', '2', '-t', '25',
		'-f', $writer_script);
	is(wait_done($w, 120), 0, "writers, round $round") or diag ${ $w->{err} };
	last if $round == 4;
	push @poison, $node->safe_psql('postgres',
		"INSERT INTO ev (k, payload) VALUES ($poison_keys[$round - 1], 'poison') RETURNING id");
}
# the numbers of the poison rows
@poison = map {
	$node->safe_psql('postgres', "SELECT seq FROM ev WHERE id = $_")
} @poison;
my $poison_list = join(',', @poison);
note "poison rows: $poison_list";
drain_and_stop($workers, 'parking');

check_unique($node, 'ev', 'parking');
my ($committed, $applied, $missing, $extra) = row($node, qq{
SELECT (SELECT count(*) FROM ev),
       (SELECT count(*) FROM applied),
       (SELECT string_agg(seq::text, ',' ORDER BY seq) FROM ev e
         WHERE NOT EXISTS (SELECT FROM applied a WHERE a.seq = e.seq)),
       (SELECT count(*) FROM applied a WHERE NOT EXISTS (
          SELECT FROM ev e WHERE e.seq = a.seq AND e.id = a.id AND e.k = a.k))});
is($committed, 20_003, 'parking: 20,000 rows and 3 poison rows committed');
is($missing, $poison_list, 'parking: every row applied but the 3 poison rows');
is($extra, 0, 'parking: nothing applied that was not committed');
is($applied, $committed - 3, 'parking: each row applied once');
my ($out_of_order, $keys_checked) = order_check('applied');
is($out_of_order, 0, 'parking: within each key, rows were applied in increasing seq');
cmp_ok($keys_checked, '>=', 900, "parking: keys with several rows checked: $keys_checked");
is( $node->safe_psql('postgres', q{
SELECT string_agg(format('%s:%s:%s', seq, attempts,
                         reason = 'cannot handle row ' || seq || ': poison'), ',' ORDER BY seq)
  FROM stream_seq.parked_rows WHERE stream = 'ev'::regclass AND consumer = 'g'}),
	join(",", map { "$_:1:t" } @poison),
	'parking: parked_rows lists exactly the 3 poison rows, 1 attempt each, with the reason');

# phase 2: the slot of the first poison row goes back to 50 of its rows
# before it
my $reset_slot = $node->safe_psql('postgres',
	"SELECT stream_seq.slot_of(k::text, 8) FROM ev WHERE seq = $poison[0]");
my $reset_to = $node->safe_psql('postgres', qq{
SELECT seq FROM ev
 WHERE stream_seq.slot_of(k::text, 8) = $reset_slot AND seq < $poison[0]
 ORDER BY seq DESC OFFSET 50 LIMIT 1});
my $before = $node->safe_psql('postgres', q{
SELECT string_agg(slot || ':' || position, ',' ORDER BY slot) FROM stream_seq.consumer_slots
 WHERE stream = 'ev'::regclass AND consumer = 'g'});
my ($old_position) = $before =~ /(?:^|,)$reset_slot:(\d+)/;
$node->safe_psql('postgres', "SELECT stream_seq.reset('ev', 'g', $reset_to, $reset_slot)");
is( $node->safe_psql('postgres', qq{
SELECT format('%s|%s|%s|%s', position, reset_from, reset_by = current_user::regrole,
              reset_at IS NOT NULL)
  FROM stream_seq.consumer_slots
 WHERE stream = 'ev'::regclass AND consumer = 'g' AND slot = $reset_slot}),
	"$reset_to|$old_position|t|t",
	"slot reset: consumer_slots records it (slot $reset_slot, from $old_position to $reset_to)");
$workers = start_workers(2, 'again_slot');
drain_and_stop($workers, 'slot reset');
my ($expected, $delivered, $wrong) = row($node, qq{
SELECT (SELECT count(*) FROM ev
         WHERE stream_seq.slot_of(k::text, 8) = $reset_slot AND seq > $reset_to),
       (SELECT count(*) FROM again_slot),
       (SELECT count(*) FROM (
          (SELECT seq FROM ev WHERE stream_seq.slot_of(k::text, 8) = $reset_slot
                                AND seq > $reset_to AND seq <> $poison[0]
           EXCEPT SELECT seq FROM again_slot)
          UNION ALL
          (SELECT seq FROM again_slot
           EXCEPT SELECT seq FROM ev WHERE stream_seq.slot_of(k::text, 8) = $reset_slot
                                       AND seq > $reset_to AND seq <> $poison[0])) d)});
cmp_ok($expected, '>', 50, "slot reset: rows of slot $reset_slot after the reset point: $expected");
is($wrong, 0, 'slot reset: exactly the slot\'s rows after the reset point were delivered again');
is($delivered, $expected - 1, 'slot reset: each once, the poison row parked again');
($out_of_order) = order_check('again_slot');
is($out_of_order, 0, 'slot reset: within each key, in increasing seq');
is( $node->safe_psql('postgres', q{
SELECT string_agg(slot || ':' || position, ',' ORDER BY slot) FROM stream_seq.consumer_slots
 WHERE stream = 'ev'::regclass AND consumer = 'g'}),
	$before,
	'slot reset: every slot back where it was, the others never moved');
is( $node->safe_psql('postgres', q{
SELECT string_agg(seq || ':' || attempts, ',' ORDER BY seq) FROM stream_seq.parked_rows
 WHERE stream = 'ev'::regclass AND consumer = 'g'}),
	"$poison[0]:2,$poison[1]:1,$poison[2]:1",
	'slot reset: the poison row delivered again was parked again (2 attempts)');

# phase 3: every slot of the group goes back to 300 below the head
my $group_to = $node->safe_psql('postgres', 'SELECT max(seq) - 300 FROM ev');
$node->safe_psql('postgres', "SELECT stream_seq.reset('ev', 'g', $group_to)");
is( $node->safe_psql('postgres', qq{
SELECT count(*) FROM stream_seq.consumer_slots
 WHERE stream = 'ev'::regclass AND consumer = 'g'
   AND position = $group_to AND reset_from IS NOT NULL}),
	8,
	'group reset: every slot moved');
$workers = start_workers(2, 'again_group');
drain_and_stop($workers, 'group reset');
my ($group_expected, $group_delivered, $group_wrong) = row($node, qq{
SELECT (SELECT count(*) FROM ev WHERE seq > $group_to),
       (SELECT count(*) FROM again_group),
       (SELECT count(*) FROM (
          (SELECT seq FROM ev WHERE seq > $group_to EXCEPT SELECT seq FROM again_group)
          UNION ALL
          (SELECT seq FROM again_group EXCEPT SELECT seq FROM ev WHERE seq > $group_to)) d)});
is($group_expected, 300, 'group reset: 300 rows above the reset point');
is($group_wrong, 0, 'group reset: exactly the rows above the reset point were delivered again');
is($group_delivered, 300, 'group reset: each once');

# phase 4: replay.  A replay holds the rows it took until it ends: a
# concurrent one skips them; rolled back, they stay parked.
my $r1 = session($node, $node->connstr('postgres'));
my $r2 = session($node, $node->connstr('postgres'));
$r1->rows('BEGIN');
is(join(',', map { $_->[0] } $r1->rows(q{SELECT seq FROM stream_seq.replay('ev', 'g', 1)})),
	$poison[0], 'replay: the first replay takes the lowest parked row');
$r2->rows('BEGIN');
is( join(',', map { $_->[0] } $r2->rows(q{SELECT seq FROM stream_seq.replay('ev', 'g')})),
	"$poison[1],$poison[2]",
	'replay: a concurrent replay skips the row the first one holds');
$r2->rows('ROLLBACK');
$r1->rows('ROLLBACK');
is( $node->safe_psql('postgres', q{
SELECT count(*) FROM stream_seq.parked_rows WHERE stream = 'ev'::regclass AND consumer = 'g'}),
	3,
	'replay: rolled back, every row is still parked');

# the handler is fixed; one replay applies them, in its transaction
$node->safe_psql('postgres', 'UPDATE handler_fixed SET fixed = true');
$r1->rows('BEGIN');
$r1->rows(q{CREATE TEMP TABLE replayed ON COMMIT DROP AS
  SELECT * FROM stream_seq.replay('ev', 'g')});
is( join(',', map { "$_->[0]:$_->[1]:$_->[2]" } $r1->rows(q{
SELECT seq, attempts, "row"->>'payload' FROM replayed ORDER BY seq})),
	"$poison[0]:2:poison,$poison[1]:1:poison,$poison[2]:1:poison",
	'replay: returns the parked rows, with their attempts and the rows themselves');
$r1->rows(q{SELECT count(handle(seq, "row", 'replayer', 'applied'))
  FROM (SELECT * FROM replayed ORDER BY seq) r});
$r1->rows('COMMIT');
$r1->close;
$r2->close;
my ($replayed, $total, $distinct) = row($node, qq{
SELECT (SELECT string_agg(seq::text, ',' ORDER BY seq) FROM applied WHERE worker = 'replayer'),
       (SELECT count(*) FROM applied), (SELECT count(DISTINCT seq) FROM applied)});
is($replayed, $poison_list, 'replay: the 3 rows applied by the replay');
is($total, $committed, 'replay: now every committed row is applied');
is($distinct, $total, 'replay: each exactly once');
is( $node->safe_psql('postgres', q{
SELECT (SELECT count(*) FROM stream_seq.parked_rows) || ',' ||
       (SELECT count(*) FROM stream_seq.replay('ev', 'g'))}),
	'0,0',
	'replay: nothing is left parked');

my $log = log_since($node, $log_start);
unlike($log, qr/PANIC|TRAP:|terminated by signal|server process .* was terminated/,
	'no server process crashed');

$node->stop;
note sprintf('wall time %.0f s', time() - $t_start);
done_testing();
