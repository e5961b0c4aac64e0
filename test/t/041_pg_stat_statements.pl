
# Copyright (c) stream_seq contributors
#
# 041_pg_stat_statements.pl: with pg_stat_statements preloaded before
# stream_seq and pg_stat_statements.track = top, the statements stream_seq
# runs on its own do not show as top-level statements: not those of the
# retention launcher and workers, not those run at COMMIT by the
# commit-time numbering (catalog reads, the head sequence), nor those run
# from a procedure or in a CALL with pg_stat_statements.track_utility
# off (where pg_stat_statements counts no nesting).  Every statement of
# the user's workload carries the marker "u-stmt"; after the workload
# (inserts past several head blocks, a consumer, a retention policy the
# worker applies, a procedure), every top-level entry of
# pg_stat_statements must carry it.  Then the same with stream_seq
# preloaded first, and with track = all (internal statements are not
# shown there either: their cost is in the calling statement's).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

# pg_stat_statements comes with the server's contrib: skip where a build
# has none
my $probe = PostgreSQL::Test::Cluster->new('probe');
plan skip_all => 'pg_stat_statements is not installed'
  unless -e $probe->config_data('--pkglibdir') . '/pg_stat_statements.so';

my $node = new_node('pgss',
	"shared_preload_libraries = 'pg_stat_statements,stream_seq'\n"
	  . "pg_stat_statements.track = top\n"
	  . "stream_seq.retention_interval = 1\n"
	  . "stream_seq.head_interval = 5\n");

$node->safe_psql('postgres', q{
CREATE EXTENSION pg_stat_statements;
CREATE EXTENSION stream_seq;
CREATE ROLE app LOGIN;
GRANT CREATE ON SCHEMA public TO app;
GRANT USAGE ON SCHEMA stream_seq TO app;
CREATE TABLE ev (id bigint, v text);
ALTER TABLE ev OWNER TO app;
});
$node->safe_psql('postgres', q{
SET ROLE app;
SELECT stream_seq.enable('ev', 'id');
SELECT stream_seq.create_consumer('ev', 'c1');
SELECT stream_seq.set_retention('ev', keep_rows => 3, respect_consumers => false);
CREATE PROCEDURE ins(n int) LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO ev (v) SELECT 'p' || g FROM generate_series(1, n) g /* u-stmt */;
  COMMIT;
  INSERT INTO ev (v) VALUES ('q') /* u-stmt */;
END $$;
});

# The newest retention run of "ev", as a time in microseconds.
sub last_run
{
	my ($n) = @_;
	return $n->safe_psql('postgres',
		"SELECT coalesce(extract(epoch FROM max(ran_at)) * 1e6, 0)::bigint /* u-stmt */ "
		  . "FROM stream_seq.retention_runs");
}

# Run the workload as "app" (each statement marked), wait for two runs of
# the retention worker that began after it, and return the top-level
# entries of pg_stat_statements that are not marked.
sub unmarked_top_level
{
	my ($n, $utility) = @_;
	$n->safe_psql('postgres', "SELECT pg_stat_statements_reset() /* u-stmt */");
	my $since = $n->safe_psql('postgres',
		"SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint /* u-stmt */");
	$n->safe_psql('postgres', qq{
SET pg_stat_statements.track_utility = $utility /* u-stmt */;
SET ROLE app /* u-stmt */;
INSERT INTO ev (v) SELECT 'a' || g FROM generate_series(1, 12) g /* u-stmt */;
BEGIN /* u-stmt */;
INSERT INTO ev (v) VALUES ('b') /* u-stmt */;
SET CONSTRAINTS ALL IMMEDIATE /* u-stmt */;
INSERT INTO ev (v) VALUES ('c') /* u-stmt */;
COMMIT /* u-stmt */;
CALL ins(7) /* u-stmt */;
SELECT count(*) FROM ev WHERE id < stream_seq.horizon('ev') /* u-stmt */;
SELECT count(*) FROM stream_seq.read('ev', 'c1', 100) /* u-stmt */;
SELECT stream_seq.advance('ev', 'c1', stream_seq.horizon('ev') - 1) /* u-stmt */;
SELECT stream_seq.trim('ev', stream_seq.horizon('ev') - 2, true) /* u-stmt */;
SELECT count(*) FROM stream_seq.streams /* u-stmt */;
SELECT count(*) FROM stream_seq.holders /* u-stmt */;
});
	# two worker runs that started after the workload: the second ran
	# wholly after it
	for my $i (1 .. 2)
	{
		my $before = last_run($n);
		$before = $since if $before < $since;
		$n->poll_query_until('postgres',
			"SELECT coalesce(max(ran_at) > to_timestamp($before / 1e6), false) /* u-stmt */ "
			  . "FROM stream_seq.retention_runs")
		  or die "no retention run";
	}
	return $n->safe_psql('postgres', q{
SELECT string_agg(query, E'\n---\n' ORDER BY query) /* u-stmt */
  FROM pg_stat_statements
 WHERE toplevel AND query NOT LIKE '%u-stmt%'});
}

# Whether the read and the workload did anything at all (a test that
# tracks nothing would pass): the marked statements are there.
sub marked_count
{
	my ($n) = @_;
	return $n->safe_psql('postgres',
		"SELECT count(*) /* u-stmt */ FROM pg_stat_statements "
		  . "WHERE toplevel AND query LIKE '%u-stmt%'");
}

is(unmarked_top_level($node, 'on'), '',
	'track = top, track_utility on: no internal statement at top level');
cmp_ok(marked_count($node), '>=', 10, 'the workload is tracked');
is(unmarked_top_level($node, 'off'), '',
	'track = top, track_utility off: no internal statement at top level');

# the other order of shared_preload_libraries
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = 'stream_seq,pg_stat_statements'\n");
$node->restart;
is(unmarked_top_level($node, 'on'), '',
	'stream_seq preloaded first: no internal statement at top level');
cmp_ok(marked_count($node), '>=', 10, 'the workload is tracked');

# track = all: the internal statements are not shown as nested ones
# either
$node->append_conf('postgresql.conf', "pg_stat_statements.track = all\n");
$node->reload;
unmarked_top_level($node, 'on');
is( $node->safe_psql('postgres', q{
SELECT string_agg(query, E'\n---\n' ORDER BY query) /* u-stmt */
  FROM pg_stat_statements
 WHERE query ~ 'stream_seq\.(stream|consumer|retention_run|retention_policy)\M'
   AND query NOT LIKE '%u-stmt%'}),
	'',
	'track = all: no internal statement on the catalog tables');

# the session's own setting is what it was
is( $node->safe_psql('postgres', q{
SET ROLE app;
SELECT stream_seq.trim('ev', stream_seq.horizon('ev') - 1, true) >= 0;
SELECT (stream_seq.apply_retention('ev')).ran_at IS NOT NULL;
SHOW pg_stat_statements.track;
}),
	"t\nt\nall", 'the session keeps its pg_stat_statements.track');

# without pg_stat_statements loaded (its settings in the configuration
# file are placeholders): no warning, nothing set
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'stream_seq'\n");
my $offset = log_offset($node);
$node->restart;
is( $node->safe_psql('postgres', q{
SET ROLE app;
INSERT INTO ev (v) SELECT 'z' || g FROM generate_series(1, 12) g;
SELECT (stream_seq.apply_retention('ev')).sqlstate IS NULL;
SHOW pg_stat_statements.track;
}),
	"t\nall", 'without pg_stat_statements: the placeholder is left alone');
my $before = last_run($node);
$node->poll_query_until('postgres',
	"SELECT max(ran_at) > to_timestamp($before / 1e6) FROM stream_seq.retention_runs")
  or die "no retention run";
unlike(log_since($node, $offset), qr/WARNING|ERROR/,
	'without pg_stat_statements: nothing in the log');

$node->stop;
done_testing();
