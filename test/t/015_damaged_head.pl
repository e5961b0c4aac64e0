
# Copyright (c) stream_seq contributors
#
# 015_damaged_head.pl: a recorded head (the stream's head sequence) set too
# low by hand is reported by name at the next start and moved forward, and
# no number is handed out twice (also on a trimmed, empty stream, where
# only first() shows the damage); one set far too high is reported and
# kept.  An undamaged head is not reported after a clean restart; a rebuilt
# one not after the next.
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

my $node = new_node('head');

$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
SET stream_seq.head_interval = 10;
CREATE TABLE h (id bigserial PRIMARY KEY, phase int NOT NULL);
SELECT stream_seq.enable('h');
INSERT INTO h (phase) SELECT 1 FROM generate_series(1, 30);
INSERT INTO h (phase) SELECT 1 FROM generate_series(1, 7);
});
my ($head_seq) = row($node, q{SELECT head_seq FROM stream_seq.stream WHERE relid = 'h'::regclass});

# An undamaged head is not reported after a clean restart.
my $offset = log_offset($node);
$node->restart;
write_ok($node, "INSERT INTO h (phase) VALUES (2)", 'head: insert after a clean restart');
unlike(log_since($node, $offset), qr/recorded head of stream table "h"/,
	'head: an undamaged recorded head is not reported after a clean restart');

# Too low: below the table's maximum.
my ($max_h) = row($node, 'SELECT max(seq) FROM h');
$node->safe_psql('postgres', "SELECT setval('$head_seq', 1)");
$offset = log_offset($node);
$node->restart;
$node->safe_psql('postgres', "SELECT stream_seq.horizon('h')");
like(log_since($node, $offset),
	qr/WARNING:  recorded head of stream table "h" is behind its rows/,
	'head too low: reported by name at the first use after the start');
for my $i (1 .. 4)
{
	write_ok($node, "INSERT INTO h (phase) SELECT 3 FROM generate_series(1, $i * 3)",
		"head too low: insert $i after the restart");
}
my ($low_min, $low_count) = row($node, 'SELECT min(seq), count(*) FROM h WHERE phase = 3');
is($low_count, 30, 'head too low: rows inserted after the restart');
cmp_ok($low_min, '>', $max_h, "head too low: new numbers above the table's maximum ($max_h)");
check_unique($node, 'h', 'head too low');
like(log_since($node, $offset), qr/moving recorded head of stream table "h" forward/,
	'head too low: moved forward at the first refill');
my ($max_h2) = row($node, 'SELECT max(seq) FROM h');
my ($recorded) = row($node, "SELECT last_value + 10 FROM $head_seq");
cmp_ok($recorded, '>', $max_h2, 'head too low: the recorded head covers the table again');
$offset = log_offset($node);
$node->restart;
write_ok($node, "INSERT INTO h (phase) VALUES (4)", 'head too low: insert after the next restart');
unlike(log_since($node, $offset), qr/recorded head of stream table "h"/,
	'head too low: not reported again after the next restart (rebuilt)');

# Far too high: reported, and kept (rows above the table's maximum may
# have been deleted, their numbers must not come back).
$node->safe_psql('postgres', "SELECT setval('$head_seq', 10000000)");
$offset = log_offset($node);
$node->restart;
$node->safe_psql('postgres', "SELECT stream_seq.horizon('h')");
like(log_since($node, $offset),
	qr/LOG:  recorded head of stream table "h" is ahead of its rows/,
	'head too high: logged by name at the first use after the start');
write_ok($node, "INSERT INTO h (phase) SELECT 5 FROM generate_series(1, 12)",
	'head too high: insert after the restart');
my ($high_min, $high_count) = row($node, 'SELECT min(seq), count(*) FROM h WHERE phase = 5');
is($high_count, 12, 'head too high: rows inserted after the restart');
cmp_ok($high_min, '>=', 10000000 + 10,
	'head too high: numbering continues above the recorded head (kept)');
check_unique($node, 'h', 'head too high');
$offset = log_offset($node);
$node->restart;
write_ok($node, "INSERT INTO h (phase) VALUES (6)", 'head too high: insert after the next restart');
unlike(log_since($node, $offset), qr/recorded head of stream table "h"/,
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
my ($he_first) = row($node, "SELECT stream_seq.horizon('he')");
$node->safe_psql('postgres', "SELECT stream_seq.trim('he', $he_first)");
my ($he_head_seq) = row($node, q{SELECT head_seq FROM stream_seq.stream WHERE relid = 'he'::regclass});
$node->safe_psql('postgres', "SELECT setval('$he_head_seq', 1)");
$offset = log_offset($node);
$node->restart;
write_ok($node, "INSERT INTO he (phase) SELECT 2 FROM generate_series(1, 5)",
	'head too low, trimmed stream: insert after the restart');
my ($he_min) = row($node, 'SELECT min(seq) FROM he WHERE phase = 2');
cmp_ok($he_min, '>=', $he_first,
	"head too low, trimmed stream: new numbers not below first() ($he_first)");
is(val($node, "SELECT count(*) FROM stream_seq.read('he', 'c')"), 5,
	'head too low, trimmed stream: the consumer at the trim point reads the new rows');
like(log_since($node, $offset),
	qr/WARNING:  recorded head of stream table "he" is behind its rows/,
	'head too low, trimmed stream: reported by name');


$node->stop;
done_testing();
