
# Copyright (c) stream_seq contributors
#
# 009_renumbering.pl: a stream number is never handed out a second time,
# whatever resets, recreates or replaces what records the head:
#
#  1. TRUNCATE ... RESTART IDENTITY, then numbers handed out after it whose
#     rows were deleted (the newest), then a restart (fast stop in one round,
#     immediate stop in another): the next number is above all of them.
#  2. disable() then enable() continues above every number the table ever
#     handed out, whether its rows were deleted, trimmed, truncated or only
#     the newest deleted; with disable() and enable() as separate
#     transactions, in one transaction, and with a restart (fast and
#     immediate stop) between them.
#  3. Migrating a bigserial column (documented in doc/usage.md): the stream
#     continues above the old sequence's last value, even when the row that
#     took it was deleted; also when the column was the primary key.
#
# Every check compares against numbers the test itself saw handed out; the
# way the head is recorded is not looked at.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

# Checks use query(), not safe_psql, so that a refused statement fails the
# checks instead of ending the script.
my $node = new_node('renumbering');
$node->safe_psql('postgres', 'CREATE EXTENSION stream_seq');

# The numbers of a table, in order, comma-separated.
sub numbers
{
	my ($table) = @_;
	return query($node, "SELECT string_agg(seq::text, ',' ORDER BY seq) FROM $table");
}

# Insert one row in its own transaction and return its number.
sub insert_one
{
	my ($table, $payload) = @_;
	my $out = query($node, qq{INSERT INTO $table (payload) VALUES ('$payload');
SELECT max(seq) FROM $table WHERE payload = '$payload'});
	return $out eq '' ? 'no number' : $out;
}

###########################################################################
# 1. TRUNCATE ... RESTART IDENTITY, deleted newest rows, restart.
###########################################################################

foreach my $mode ('fast', 'immediate')
{
	my $t = "tr_$mode";
	$node->safe_psql('postgres', qq{
CREATE TABLE $t (payload text);
SELECT stream_seq.enable('$t');
INSERT INTO $t (payload) SELECT 'first' FROM generate_series(1, 10);
});
	is(numbers($t), join(',', 1 .. 10), "truncate, $mode: first rows numbered 1-10");

	$node->safe_psql('postgres', qq{TRUNCATE $t RESTART IDENTITY});
	$node->safe_psql('postgres',
		qq{INSERT INTO $t (payload) SELECT 'second' FROM generate_series(1, 10)});
	is(numbers($t), join(',', 11 .. 20),
		"truncate, $mode: numbering continues at 11 after TRUNCATE RESTART IDENTITY");

	$node->safe_psql('postgres', qq{DELETE FROM $t WHERE seq >= 16});
	is(numbers($t), join(',', 11 .. 15), "truncate, $mode: rows 16-20 deleted");

	stop_start($node, $mode);

	my $n = insert_one($t, 'after restart');
	like($n, qr/^\d+$/, "truncate, $mode: the row inserted after the restart has a number");
	cmp_ok($n, '>', 20,
		"truncate, $mode: after the restart, the new number is above every number handed out (20)");
	is(query($node, "SELECT count(*) - count(DISTINCT seq) FROM $t"), '0',
		"truncate, $mode: no number twice in the table");
}

###########################################################################
# 2. disable() then enable().
###########################################################################

# How the rows go before disable(); the rows kept and their numbers.
my %removal = (
	delete_all => [ q{DELETE FROM %s}, '' ],
	trim_all => [ q{SELECT stream_seq.trim('%s', stream_seq.horizon('%s'))}, '' ],
	truncate => [ q{TRUNCATE %s}, '' ],
	delete_newest => [ q{DELETE FROM %s WHERE seq > 4}, '1,2,3,4' ],
);
# How disable() and enable() are run.
my @modes = ('separate', 'one_transaction', 'restart_fast', 'restart_immediate');

# Set up the stream, hand out numbers 1-10, note head(), remove the rows.
my %old_head;
foreach my $mode (@modes)
{
	foreach my $how (sort keys %removal)
	{
		my $t = "de_${how}_$mode";
		$node->safe_psql('postgres', qq{
CREATE TABLE $t (payload text);
SELECT stream_seq.enable('$t');
INSERT INTO $t (payload) SELECT 'a' FROM generate_series(1, 6);
INSERT INTO $t (payload) SELECT 'b' FROM generate_series(1, 4);
});
		$old_head{$t} = query($node, qq{SELECT stream_seq.head('$t')});
		is($old_head{$t}, '10', "disable/enable, $how, $mode: head() is 10 before");
		my $sql = $removal{$how}[0];
		$sql =~ s/%s/$t/g;
		$node->safe_psql('postgres', $sql);
		is(numbers($t), $removal{$how}[1], "disable/enable, $how, $mode: rows removed");
	}
}

# disable() and enable(), each mode its own way.
foreach my $mode (@modes)
{
	my @tables = map { "de_${_}_$mode" } sort keys %removal;
	if ($mode eq 'separate')
	{
		foreach my $t (@tables)
		{
			$node->safe_psql('postgres', qq{SELECT stream_seq.disable('$t')});
			$node->safe_psql('postgres', qq{SELECT stream_seq.enable('$t')});
		}
	}
	elsif ($mode eq 'one_transaction')
	{
		foreach my $t (@tables)
		{
			$node->safe_psql('postgres', qq{BEGIN;
SELECT stream_seq.disable('$t');
SELECT stream_seq.enable('$t');
COMMIT;});
		}
	}
	else
	{
		(my $stop = $mode) =~ s/^restart_//;
		$node->safe_psql('postgres', qq{SELECT stream_seq.disable('$_')})
		  foreach @tables;
		stop_start($node, $stop);
		$node->safe_psql('postgres', qq{SELECT stream_seq.enable('$_')})
		  foreach @tables;
	}
}

# The next number is above everything handed out before disable().
foreach my $mode (@modes)
{
	foreach my $how (sort keys %removal)
	{
		my $t = "de_${how}_$mode";
		is(query($node, qq{SELECT count(*) FROM stream_seq.streams WHERE stream = '$t'::regclass}),
			'1', "disable/enable, $how, $mode: a stream again");
		my $n = insert_one($t, 'after enable');
		like($n, qr/^\d+$/, "disable/enable, $how, $mode: the new row has a number");
		cmp_ok($n, '>', $old_head{$t},
			"disable/enable, $how, $mode: new number above the head before disable() ($old_head{$t})");
		is(query($node, qq{SELECT string_agg(seq::text, ',' ORDER BY seq) FROM $t
                     WHERE payload <> 'after enable'}),
			$removal{$how}[1], "disable/enable, $how, $mode: kept rows keep their numbers");
	}
}

###########################################################################
# 3. Migrating a bigserial table.
###########################################################################

# A plain bigserial column.
$node->safe_psql('postgres', q{
CREATE TABLE m (seq bigserial, payload text);
INSERT INTO m (payload) SELECT 'old' FROM generate_series(1, 5);
DELETE FROM m WHERE seq = 5;
ALTER TABLE m ALTER COLUMN seq DROP DEFAULT, ALTER COLUMN seq DROP NOT NULL;
});
is(query($node, q{SELECT stream_seq.enable('m', 'seq')}), '', 'bigserial: enable() succeeds');
is(numbers('m'), '1,2,3,4', 'bigserial: existing values kept');
{
	my $n = insert_one('m', 'new');
	like($n, qr/^\d+$/, 'bigserial: the new row has a number');
	cmp_ok($n, '>', 5,
		"bigserial: new number above the old sequence's last value (5), whose row was deleted");
}

# A bigserial primary key, migrated as doc/usage.md documents.
$node->safe_psql('postgres', q{
CREATE TABLE m2 (seq bigserial PRIMARY KEY, payload text);
INSERT INTO m2 (payload) SELECT 'old' FROM generate_series(1, 5);
DELETE FROM m2 WHERE seq = 5;
});
is( query($node, q{
ALTER TABLE m2 DROP CONSTRAINT m2_pkey, ALTER COLUMN seq DROP DEFAULT,
  ALTER COLUMN seq DROP NOT NULL;
SELECT stream_seq.enable('m2', 'seq');}),
	'', 'bigserial primary key: the documented migration succeeds');
is(numbers('m2'), '1,2,3,4', 'bigserial primary key: existing values kept');
{
	my $n = insert_one('m2', 'new');
	like($n, qr/^\d+$/, 'bigserial primary key: the new row has a number');
	cmp_ok($n, '>', 5,
		"bigserial primary key: new number above the old sequence's last value (5), whose row was deleted");
}
is(query($node, q{SELECT count(*) - count(DISTINCT seq) FROM m2}), '0',
	'bigserial primary key: no number twice');

$node->stop;
done_testing();
