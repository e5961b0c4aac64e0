
# Copyright (c) stream_seq contributors
#
# 003_not_preloaded.pl: without shared_preload_libraries the extension can
# be created (with a WARNING saying so, since 0.4.2), but everything that needs its shared memory fails with
# SQLSTATE 55000 (object_not_in_prerequisite_state) and a hint naming
# shared_preload_libraries; that includes writing to a stream table that
# was enabled while the library was preloaded.  Nothing is numbered behind
# the extension's back, and preloading again resumes numbering above the
# old numbers.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

# Checks that "sql" fails with SQLSTATE 55000 and a hint naming
# shared_preload_libraries.  A session that dies (FATAL) fails the check
# instead of ending the script.
sub fails_55000
{
	my ($node, $sql, $what) = @_;
	my $r = psql_result($node, $sql);
	diag "$what: psql exited with $r->{rc}: $r->{err}"
	  if !defined $r->{sqlstate};
	is($r->{sqlstate}, '55000', "$what fails with SQLSTATE 55000");
	like($r->{hint} // '', qr/shared_preload_libraries/,
		"$what: hint names shared_preload_libraries");
}

# A node that never preloaded the library.
my $plain = PostgreSQL::Test::Cluster->new('plain');
$plain->init;
$plain->start;

is(query($plain, "LOAD 'stream_seq'"), '',
	'the library loads into a session without shared_preload_libraries');
my ($rc, $out, $err) = $plain->psql('postgres', 'CREATE EXTENSION stream_seq');
is($rc, 0, 'CREATE EXTENSION works without shared_preload_libraries')
  or diag $err;
like($err, qr/WARNING:\s+stream_seq is not loaded via "shared_preload_libraries"/,
	'CREATE EXTENSION warns that the library is not preloaded');
like($err, qr/HINT:.*shared_preload_libraries/, 'the warning has the hint');
$plain->safe_psql('postgres', 'CREATE TABLE t (id int, payload text)');

fails_55000($plain, q{SELECT stream_seq.enable('t')}, 'enable()');
fails_55000($plain, q{SELECT stream_seq.horizon('t')}, 'horizon()');
fails_55000($plain, q{SELECT stream_seq.head('t')}, 'head()');

# enable() changed nothing
is( query($plain, q{
SELECT (SELECT count(*) FROM stream_seq.stream)
    || ',' || (SELECT count(*) FROM pg_attribute
                WHERE attrelid = 't'::regclass AND attname = 'seq')
    || ',' || (SELECT count(*) FROM pg_trigger WHERE tgrelid = 't'::regclass)}),
	'0,0,0',
	'failed enable() left no catalog row, column or trigger');

# The error text, as a user sees it in psql.
my $shown = psql_result($plain, q{SELECT stream_seq.enable('t')})->{err};
like($shown, qr/ERROR:\s+55000: stream_seq must be loaded via "shared_preload_libraries"/,
	'enable() error message as shown by psql');
like($shown, qr/HINT:.*shared_preload_libraries/, 'enable() hint as shown by psql');
$plain->stop;

# A stream enabled while preloaded, then the server restarted without it.
my $node = new_node('unloaded');
$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE s (id bigserial PRIMARY KEY, payload text);
SELECT stream_seq.enable('s');
INSERT INTO s (payload) SELECT 'before' FROM generate_series(1, 10);
});
my ($max_before) = $node->safe_psql('postgres', 'SELECT max(seq) FROM s');
is($max_before, 10, 'stream numbered while preloaded');

$node->adjust_conf('postgresql.conf', 'shared_preload_libraries', "''");
$node->restart;
is($node->safe_psql('postgres', 'SHOW shared_preload_libraries'), '',
	'restarted without the preload');

fails_55000($node, q{INSERT INTO s (payload) VALUES ('x')},
	'INSERT into a stream table');
fails_55000($node,
	q{INSERT INTO s (payload) SELECT 'x' FROM generate_series(1, 3)},
	'multi-row INSERT into a stream table');
fails_55000($node, q{COPY s (payload) FROM PROGRAM 'echo x'},
	'COPY into a stream table');
fails_55000($node, q{SELECT stream_seq.horizon('s')},
	'horizon() of an enabled stream');
fails_55000($node, q{SELECT * FROM stream_seq.streams}, 'the streams view');

is( query($node,
		"SELECT count(*) || ',' || count(seq) || ',' || max(seq) FROM s"),
	'10,10,10',
	'no row was added or numbered without the preload');

# reading the table itself still works
is(query($node, "SELECT count(*) FROM s WHERE seq > 5"),
	'5', 'stream table is still readable without the preload');

# Preload again: writes resume, above the old numbers.
$node->adjust_conf('postgresql.conf', 'shared_preload_libraries',
	"'stream_seq'");
$node->restart;
is( query($node,
		q{INSERT INTO s (payload) SELECT 'after' FROM generate_series(1, 3)}),
	'', 'INSERT works after preloading again');
is( query($node, q{
SELECT count(*) || ',' || count(DISTINCT seq) || ',' || bool_and(seq > 10)
  FROM s WHERE payload = 'after'}),
	'3,3,true',
	'after preloading again, new rows are numbered above the old ones');
is( query($node,
		"SELECT stream_seq.horizon('s') = stream_seq.head('s') + 1"),
	't', 'idle horizon is head + 1 after preloading again');

$node->stop;
done_testing();
