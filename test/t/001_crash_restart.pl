
# Copyright (c) stream_seq contributors
#
# 001_crash_restart.pl: stream numbers are never handed out twice across a
# crash (immediate stop) or a clean restart, even when the newest rows were
# deleted before the restart, and every committed row carries a number.
#
# Shared memory is empty after a restart: the counter is rebuilt from
# max(seq) + 1 and the first assignment jumps to a fresh block from the
# stream's head sequence (src/catalog.c).  Two streams are used: "t" with
# the default head interval and "t5" with an interval of 5, so that blocks
# are refilled constantly and a restart always lands near a block boundary.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use StreamSeqTest;

my $node = new_node('crash', "max_connections = 30\n");

$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE t (id bigserial PRIMARY KEY, phase int NOT NULL,
                client int, payload text);
SELECT stream_seq.enable('t');
SET stream_seq.head_interval = 5;
CREATE TABLE t5 (id bigserial PRIMARY KEY, phase int NOT NULL, payload text);
SELECT stream_seq.enable('t5');
});

# Writer scripts: multi-row transactions on both streams, and single-row
# autocommit inserts.  "phase" tells the rows of each load apart.
my $multi = $node->basedir . '/multi.sql';
my $single = $node->basedir . '/single.sql';
append_to_file($multi, q{
\set n random(1, 5)
\set k random(1, 3)
BEGIN;
INSERT INTO t (phase, client, payload)
  SELECT :phase, :client_id, 'multi' FROM generate_series(1, :n);
INSERT INTO t5 (phase, payload) SELECT :phase, 'multi' FROM generate_series(1, :k);
INSERT INTO t (phase, client, payload) VALUES (:phase, :client_id, 'single');
COMMIT;
});
append_to_file($single, q{
INSERT INTO t (phase, client, payload) VALUES (:phase, :client_id, 'auto');
});

# Start load "phase" in the background: six pgbench clients running the
# writer scripts, for as long as "limit" says (-T seconds or -t
# transactions).  Waited for with wait_done().
sub start_load
{
	my ($phase, @limit) = @_;
	return bg_pgbench($node, undef, '-c', '6', '-j', '3', @limit,
		'-D', "phase=$phase", '-f', "$multi\@3", '-f', "$single\@1");
}

# Idle stream after a restart: horizon = head + 1 and head = max(seq).
sub check_idle_after_restart
{
	my ($tab, $what) = @_;
	my ($horizon, $head, $max) = row($node,
		"SELECT stream_seq.horizon('$tab'), coalesce(stream_seq.head('$tab'), 0), coalesce(max(seq), 0) FROM $tab");
	is($horizon, $head + 1, "$what: idle horizon of $tab is head + 1 ($horizon)");
	is($head, $max, "$what: head of $tab restarts at max(seq) ($max)");
}

# Run load "phase", stop the node with "mode" while it runs, restart, then
# check that numbers a reader saw before the stop survived unchanged and
# that the next load gets only numbers above everything before.
sub load_stop_restart
{
	my ($phase, $mode) = @_;
	my $what = "$mode stop under load (phase $phase)";

	my ($base) = row($node, "SELECT count(*) FROM t");
	my $load = start_load($phase, '-T', '60');
	$node->poll_query_until('postgres',
		"SELECT count(*) >= $base + 1500 AND (SELECT count(*) FROM t5) > 0 FROM t")
	  or die "load did not start";

	# what a reader sees before the stop: rows, and the heads handed out
	$node->safe_psql('postgres', qq{
CREATE TABLE seen_t_$phase AS SELECT id, seq FROM t WHERE seq IS NOT NULL;
CREATE TABLE seen_t5_$phase AS SELECT id, seq FROM t5 WHERE seq IS NOT NULL;
});
	my ($head_t, $head_t5) =
	  row($node, "SELECT stream_seq.head('t'), stream_seq.head('t5')");
	# flush the WAL that recorded those heads: a synchronous commit of the
	# test's own, written after them, flushes everything before it
	$node->safe_psql('postgres', q{
SET synchronous_commit = on;
CREATE TABLE IF NOT EXISTS flush_wal (x int);
INSERT INTO flush_wal VALUES (1);
});

	$node->stop($mode);
	my $rc = wait_done($load);
	note "pgbench phase $phase exited with $rc after the $mode stop";
	$node->start;

	check_idle_after_restart('t', "after $what");
	check_idle_after_restart('t5', "after $what");
	check_unique($node, 't', "after $what");
	check_unique($node, 't5', "after $what");

	for my $tab ('t', 't5')
	{
		my ($lost, $changed, $nrows) = row($node, qq{
SELECT count(*) FILTER (WHERE t.id IS NULL),
       count(*) FILTER (WHERE t.seq IS DISTINCT FROM s.seq),
       count(*)
  FROM seen_${tab}_$phase s LEFT JOIN $tab t USING (id)});
		cmp_ok($nrows, '>', 0, "$what: rows of $tab were seen before the stop");
		is($lost, 0, "$what: committed rows of $tab seen before the stop survive");
		is($changed, 0, "$what: rows of $tab keep their numbers across the stop");
	}

	# the state after restart, then more writes
	$node->safe_psql('postgres', qq{
CREATE TABLE before_t_$phase AS SELECT id, seq FROM t;
CREATE TABLE before_t5_$phase AS SELECT id, seq FROM t5;
});
	my ($max_t) = row($node, "SELECT max(seq) FROM t");
	my ($max_t5) = row($node, "SELECT max(seq) FROM t5");
	note "$what: t max(seq) $max_t (head seen before stop $head_t), "
	  . "t5 max(seq) $max_t5 (head seen before stop $head_t5)";

	my $next_phase = $phase + 1;
	my $more = start_load($next_phase, '-t', '60');
	is(wait_done($more), 0, "$what: load after restart ran cleanly")
	  or diag ${ $more->{err} };

	check_unique($node, 't', "after $what and more writes");
	check_unique($node, 't5', "after $what and more writes");

	my %head_seen = (t => $head_t, t5 => $head_t5);
	for my $tab ('t', 't5')
	{
		my ($new_rows, $new_min, $old_max, $below, $changed) = row($node, qq{
SELECT (SELECT count(*) FROM $tab WHERE phase = $next_phase),
       (SELECT min(seq) FROM $tab WHERE phase = $next_phase),
       (SELECT max(seq) FROM before_${tab}_$phase),
       (SELECT count(*) FROM $tab t
         WHERE NOT EXISTS (SELECT FROM before_${tab}_$phase b WHERE b.id = t.id)
           AND t.seq <= (SELECT max(seq) FROM before_${tab}_$phase)),
       (SELECT count(*) FROM before_${tab}_$phase b
          LEFT JOIN $tab t USING (id) WHERE t.seq IS DISTINCT FROM b.seq)});
		cmp_ok($new_rows, '>', 0, "$what: new rows in $tab");
		is($below, 0,
			"$what: every new number of $tab is above every number before the stop");
		cmp_ok($new_min, '>', $old_max,
			"$what: lowest new number of $tab above max before the stop");
		cmp_ok($new_min, '>', $head_seen{$tab},
			"$what: lowest new number of $tab above the head seen before the stop");
		is($changed, 0, "$what: old rows of $tab unchanged by later writes");
	}
	return $next_phase + 1;
}

my $phase = 1;
$phase = load_stop_restart($phase, 'immediate');
$phase = load_stop_restart($phase, 'fast');
# a second crash, after the counters were rebuilt once
$phase = load_stop_restart($phase, 'immediate');

my ($idle_h, $idle_head) =
  row($node, "SELECT stream_seq.horizon('t'), stream_seq.head('t')");
is($idle_h, $idle_head + 1, 'idle horizon is head + 1 after the loads');

# Deleting the newest rows before a restart must not let their numbers be
# handed out again: max(seq) + 1 would, the head sequence must not.
$node->safe_psql('postgres', q{
CREATE TABLE d (id bigserial PRIMARY KEY, phase int NOT NULL);
SELECT stream_seq.enable('d');
SET stream_seq.head_interval = 5;
CREATE TABLE d5 (id bigserial PRIMARY KEY, phase int NOT NULL);
SELECT stream_seq.enable('d5');
});

my $dphase = 100;

# Insert rows in a few transactions; returns max(seq).
sub fill
{
	my ($tab, $rows) = @_;
	$dphase++;
	for my $i (1 .. 3)
	{
		$node->safe_psql('postgres',
			"INSERT INTO $tab (phase) SELECT $dphase FROM generate_series(1, $rows)");
	}
	my ($max) = row($node, "SELECT max(seq) FROM $tab");
	return $max;
}

# Fill "tab", delete the rows "delete_where" picks (the newest or all),
# stop in "mode" and start again: new rows get numbers above every deleted
# one.
sub delete_restart_insert
{
	my ($tab, $mode, $delete_where, $label) = @_;
	my $what = "$label, $mode restart";

	my $max_before = fill($tab, 7);
	$node->safe_psql('postgres', "DELETE FROM $tab WHERE $delete_where");
	my ($max_after_delete) = row($node, "SELECT coalesce(max(seq), 0) FROM $tab");
	cmp_ok($max_after_delete, '<', $max_before, "$what: newest rows of $tab deleted");

	stop_start($node, $mode);
	check_idle_after_restart($tab, $what);

	$dphase++;
	$node->safe_psql('postgres',
		"INSERT INTO $tab (phase) SELECT $dphase FROM generate_series(1, 4)");
	$node->safe_psql('postgres', "INSERT INTO $tab (phase) VALUES ($dphase)");
	my ($new_min, $new_count) =
	  row($node, "SELECT min(seq), count(*) FROM $tab WHERE phase = $dphase");
	is($new_count, 5, "$what: rows inserted after restart");
	cmp_ok($new_min, '>', $max_before,
		"$what: new numbers of $tab above the deleted ones (max was $max_before)");
	check_unique($node, $tab, $what);
}

for my $tab ('d', 'd5')
{
	delete_restart_insert($tab, 'fast',
		"seq > (SELECT max(seq) - 5 FROM $tab)", 'delete newest 5 rows');
	delete_restart_insert($tab, 'immediate',
		"seq > (SELECT max(seq) - 5 FROM $tab)", 'delete newest 5 rows');
	delete_restart_insert($tab, 'immediate', 'true', 'delete every row');
	delete_restart_insert($tab, 'fast', 'true', 'delete every row');
}

$node->stop;
done_testing();
