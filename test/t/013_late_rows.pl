
# Copyright (c) stream_seq contributors
#
# 013_late_rows.pl: a row inserted into a stream table by another
# extension's pre-commit callback.  Its index entries capture it as any
# row; what decides is whether stream_seq's commit pass has run yet.  A
# small module, built here, inserts a row from its pre-commit callback,
# loaded once after stream_seq (its callback runs first: the row is
# captured before the pass and numbered with the rest of the transaction)
# and once preloaded before it (stream_seq's pass runs first: the row would
# commit without a number, and no reader would ever return it, so the
# commit fails with SQLSTATE 0A000 and nothing of it commits).  Either way
# no row of the stream is left without a number.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use StreamSeqTest;

# The module: on pre-commit, insert one row into the table named by the
# setting late_insert.target, if set.
my $dir = PostgreSQL::Test::Utils::tempdir;
append_to_file("$dir/late_insert.c", q{
#include "postgres.h"
#include "access/xact.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

static char *late_table = NULL;
static bool inserting = false;

static void
late_insert(XactEvent event, void *arg)
{
	if (event != XACT_EVENT_PRE_COMMIT || inserting ||
		late_table == NULL || late_table[0] == '\0')
		return;
	inserting = true;
	PG_TRY();
	{
		PushActiveSnapshot(GetTransactionSnapshot());
		SPI_connect();
		SPI_execute(psprintf("INSERT INTO %s (payload) VALUES ('late')", late_table),
					false, 0);
		SPI_finish();
		PopActiveSnapshot();
	}
	PG_FINALLY();
	{
		inserting = false;
	}
	PG_END_TRY();
}

void
_PG_init(void)
{
	DefineCustomStringVariable("late_insert.target", "table to insert into at pre-commit",
							   NULL, &late_table, "", PGC_USERSET, 0, NULL, NULL, NULL);
	RegisterXactCallback(late_insert, NULL);
}
});
my $incdir = `pg_config --includedir-server`;
chomp $incdir;
my ($stdout, $stderr);
my $built = IPC::Run::run([ 'gcc', '-shared', '-fPIC', "-I$incdir",
		'-o', "$dir/late_insert.so", "$dir/late_insert.c" ],
	'>', \$stdout, '2>', \$stderr);
ok($built, 'the test module builds') or diag $stderr;

my $node = new_node('late');
$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE t (id bigserial PRIMARY KEY, payload text);
SELECT stream_seq.enable('t');
CREATE TABLE other (x int);
});

# Runs "sql" in a session that ran "load" and set late_insert.target;
# returns the SQLSTATE of its error, or 'ok'.
sub late_commit
{
	my ($load, $sql) = @_;
	return sqlstate($node, "${load}SET late_insert.target = 't';\n$sql");
}

# No row of the stream is without its number (NULL or the placeholder 0).
sub check_numbered
{
	my ($what) = @_;
	is($node->safe_psql('postgres', 'SELECT count(*) FROM t WHERE seq IS NULL OR seq <= 0'),
		'0', "$what: no row of the stream is without a number");
}

# 1. The module's callback runs before stream_seq's: the late row is
# captured before the commit pass and numbered with the transaction's rows.
my $load = "LOAD '$dir/late_insert.so';\n";
is(late_commit($load, "BEGIN; INSERT INTO t (payload) VALUES ('normal'); COMMIT;"),
	'ok', 'loaded after: a transaction that wrote the stream commits');
is(late_commit($load, "BEGIN; INSERT INTO other VALUES (1); COMMIT;"),
	'ok', 'loaded after: a transaction that did not write the stream commits');
check_numbered('loaded after');
# (each session's SET of late_insert.target is a transaction too, which
# gets its late row)
is( $node->safe_psql('postgres', q{
SELECT string_agg(payload || '=' || seq, ' ' ORDER BY seq) FROM t}),
	'late=1 normal=2 late=3 late=4 late=5',
	'loaded after: the late rows are numbered with their transactions, in the order stored');
is($node->safe_psql('postgres', 'SELECT count(*) FROM other'),
	'1', 'loaded after: the other table\'s row committed');
$node->safe_psql('postgres', 'TRUNCATE t, other');

# 2. stream_seq's callback runs first: the late row comes after the pass.
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = '$dir/late_insert.so, stream_seq'\n");
$node->restart;
is(late_commit('', "BEGIN; INSERT INTO t (payload) VALUES ('normal'); COMMIT;"),
	'0A000', 'preloaded before: a transaction that wrote the stream fails at commit');
is(late_commit('', "BEGIN; INSERT INTO other VALUES (1); COMMIT;"),
	'0A000', 'preloaded before: a transaction that did not write the stream fails too');
check_numbered('preloaded before');
is($node->safe_psql('postgres', "SELECT count(*) FROM t"),
	'0', 'preloaded before: nothing of the failed transactions committed');
is($node->safe_psql('postgres', "SELECT count(*) FROM other"),
	'0', 'preloaded before: the other table\'s row did not commit either');

# Without the late insert, writing works as always.
$node->safe_psql('postgres', "INSERT INTO t (payload) VALUES ('ordinary')");
is($node->safe_psql('postgres', "SELECT count(*), count(*) FILTER (WHERE seq > 5) FROM t"),
	'1|1', 'an ordinary insert is numbered, above the numbers of before');

$node->stop;
done_testing();
