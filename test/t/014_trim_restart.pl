
# Copyright (c) stream_seq contributors
#
# 014_trim_restart.pl: trim everything, restart (fast, then immediate),
# insert: new numbers are above the trimmed ones, first() reports the trim
# point, trim() refuses to pass the horizon (22023) and a consumer (55000,
# unless forced), and read() for a consumer behind a forced trim fails with
# 55000 naming it, before and after the restart, until it is advanced past
# the trimmed rows.  After the fast restart, the recorded head is not
# reported as damaged.
#
# Every write after a restart goes through write_ok(): a number handed out
# twice fails there (the unique index refuses it) without ending the
# script.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

my $node = new_node('trim');

$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
SET stream_seq.head_interval = 5;
CREATE TABLE tr (id bigserial PRIMARY KEY, phase int NOT NULL);
SELECT stream_seq.enable('tr');
SELECT stream_seq.create_consumer('tr', 'laggard');
SELECT stream_seq.create_consumer('tr', 'keeper');
});

# Fill "tr" with four transactions of rows marked with a new phase; returns
# its max(seq) and horizon.
my $trim_phase = 0;
sub fill_tr
{
	$trim_phase++;
	for my $n (3, 7, 1, 4)
	{
		$node->safe_psql('postgres',
			"INSERT INTO tr (phase) SELECT $trim_phase FROM generate_series(1, $n)");
	}
	return row($node, "SELECT max(seq), stream_seq.horizon('tr') FROM tr");
}

# One round: fill, trim everything (forced past the consumer "laggard"),
# stop in "mode" and start, insert; "laggard" then skips the trimmed rows
# and is recreated at the start, behind the next round's trim.
sub trim_everything_restart
{
	my ($mode) = @_;
	my $what = "trim everything, $mode restart";

	my ($max, $h) = fill_tr();
	is($h, $max + 1, "$what: idle horizon is max + 1 before the trim");
	$node->safe_psql('postgres',
		"SELECT stream_seq.advance('tr', 'keeper', $max)");

	like(try_sql($node, "SELECT stream_seq.trim('tr', $h)"),
		qr/^55000: .*consumer "laggard"/,
		"$what: trim past a consumer fails with 55000 naming it");
	like(try_sql($node, "SELECT stream_seq.trim('tr', $h + 1, force => true)"),
		qr/^22023: /, "$what: trim above the horizon fails with 22023");
	my ($total) = row($node, 'SELECT count(*) FROM tr');
	is(val($node, "SELECT stream_seq.trim('tr', $h, force => true)"), $total,
		"$what: forced trim returns the count deleted ($total)");
	is(val($node, 'SELECT count(*) FROM tr'), 0, "$what: the table is empty");
	is(val($node, "SELECT stream_seq.first('tr')"), $h, "$what: first() is the trim point");
	like(try_sql($node, "SELECT * FROM stream_seq.read('tr', 'laggard')"),
		qr/^55000: .*consumer "laggard"/,
		"$what: read() for the consumer behind the trim fails with 55000 naming it");
	is(val($node, "SELECT count(*) FROM stream_seq.read('tr', 'keeper')"), 0,
		"$what: read() for the consumer at the trim point works");

	my $offset = log_offset($node);
	stop_start($node, $mode);

	is(val($node, "SELECT stream_seq.first('tr')"), $h, "$what: first() survives the restart");
	like(try_sql($node, "SELECT * FROM stream_seq.read('tr', 'laggard')"),
		qr/^55000: .*consumer "laggard"/,
		"$what: read() for the consumer behind the trim still fails");

	write_ok($node, "INSERT INTO tr (phase) SELECT -$trim_phase FROM generate_series(1, 3)",
		"$what: insert after the restart");
	write_ok($node, "INSERT INTO tr (phase) VALUES (-$trim_phase)", "$what: another insert");
	my ($min, $count) = row($node, "SELECT min(seq), count(*) FROM tr WHERE phase = -$trim_phase");
	is($count, 4, "$what: rows inserted after the restart");
	cmp_ok($min, '>', $max, "$what: new numbers ($min...) above the trimmed ones (up to $max)");
	check_unique($node, 'tr', $what);
	unlike(log_since($node, $offset), qr/recorded head of stream table "tr"/,
		"$what: the recorded head is not reported as damaged")
	  if $mode ne 'immediate';

	# the hint's way out: skip the trimmed rows
	$node->safe_psql('postgres',
		"SELECT stream_seq.advance('tr', 'laggard', stream_seq.first('tr') - 1)");
	is(val($node, "SELECT count(*) FROM stream_seq.read('tr', 'laggard')"), 4,
		"$what: the consumer that skipped the trimmed rows reads the new ones");
	is(val($node, "SELECT count(*) FROM stream_seq.read('tr', 'keeper')"), 4,
		"$what: the consumer at the trim point reads the new ones");
	# behind the next trim again
	$node->safe_psql('postgres', q{
SELECT stream_seq.drop_consumer('tr', 'laggard');
SELECT stream_seq.create_consumer('tr', 'laggard');
});
}

trim_everything_restart('fast');
trim_everything_restart('immediate');


$node->stop;
done_testing();
