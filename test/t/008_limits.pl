
# Copyright (c) stream_seq contributors
#
# 008_limits.pl: shared memory is bounded: with stream_seq.max_streams = 2,
# a third stream in use gets a clear error (SQLSTATE 53400) and changes
# nothing; disabling or dropping a stream frees its slot for another.  With
# more streams enabled than slots (after a restart), the streams view and
# metrics() show the others in full.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

my $node = new_node('limits', "stream_seq.max_streams = 2\n");
$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE a (x int); CREATE TABLE b (x int); CREATE TABLE c (x int);
SELECT stream_seq.enable('a');
SELECT stream_seq.enable('b');
});
is($node->safe_psql('postgres', 'SHOW stream_seq.max_streams'), '2',
	'the setting is defined when preloaded');

my $third = psql_result($node, q{SELECT stream_seq.enable('c')});
isnt($third->{rc}, 0, 'a third stream is refused');
like($third->{err}, qr/53400: too many stream tables in use/, '... with 53400');
like($third->{err}, qr/HINT:  Increase "stream_seq.max_streams"/, '... and a hint naming the setting');
is( $node->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM stream_seq.stream WHERE relid = 'c'::regclass)
	     + (SELECT count(*) FROM pg_trigger WHERE tgrelid = 'c'::regclass)
	     + (SELECT count(*) FROM pg_attribute WHERE attrelid = 'c'::regclass AND attname = 'seq')}),
	'0', '... and changes nothing');

# the two streams keep working
$node->safe_psql('postgres', q{INSERT INTO a VALUES (1); INSERT INTO b VALUES (1)});
is($node->safe_psql('postgres', q{SELECT stream_seq.horizon('a') || ',' || stream_seq.horizon('b')}),
	'2,2', 'the streams in use keep working');

# disable() frees a slot; DROP TABLE frees another
$node->safe_psql('postgres', q{SELECT stream_seq.disable('a')});
$node->safe_psql('postgres', q{SELECT stream_seq.enable('c'); INSERT INTO c VALUES (1)});
is($node->safe_psql('postgres', q{SELECT seq FROM c}), '1',
	'a slot freed by disable() serves a new stream');
$node->safe_psql('postgres', q{DROP TABLE b; SELECT stream_seq.enable('a'); INSERT INTO a VALUES (2)});
is($node->safe_psql('postgres', q{SELECT count(*) FROM a WHERE seq IS NOT NULL}), '2',
	'a slot freed by DROP TABLE serves another');

# More streams enabled than slots: a restart empties the slots, and
# enable() takes one only for the stream it enables.  The streams view and
# metrics() show a stream no slot is free for with its figures NULL, and
# the others in full (a's head is past the block a clean restart skips);
# only a use of that stream gets 53400.
stop_start($node, 'fast');
$node->safe_psql('postgres', q{CREATE TABLE d (x int); SELECT stream_seq.enable('d'); INSERT INTO d VALUES (1)});
is(val($node, q{SELECT count(*) FROM stream_seq.stream}), '3',
	'three streams enabled with two slots');
is( query($node, q{
SELECT stream_name || ':' || coalesce(head::text, 'NULL') || ':' || coalesce((horizon > head)::text, 'NULL')
  FROM stream_seq.metrics('stream') ORDER BY stream}),
	"public.a:1001:true\npublic.c:NULL:NULL\npublic.d:1:true",
	'metrics(): the stream without a slot has NULL figures, the others all of theirs');
is( query($node, q{
SELECT stream || ':' || coalesce(head::text, 'NULL') || ':' || coalesce((horizon > head)::text, 'NULL')
  FROM stream_seq.streams ORDER BY stream}),
	"a:1001:true\nc:NULL:NULL\nd:1:true",
	'the streams view too');
like(query($node, q{SELECT stream_seq.horizon('c')}), qr/53400/,
	'using that stream gets 53400');

$node->stop;
done_testing();
