
# Copyright (c) stream_seq contributors
#
# 013_late_rows.pl: a row inserted into a stream table after the commit's
# deferred triggers have fired (here by another extension's pre-commit
# callback) would commit without a number, and no reader would ever return
# it.  The commit must fail instead, whichever of the two callbacks runs
# first: a small module, built here, inserts a row from its pre-commit
# callback, loaded once after stream_seq (its callback runs first) and once
# preloaded before it (stream_seq's runs first).  Either way the
# transaction fails with SQLSTATE 0A000, nothing of it commits, and no row
# of the stream is ever left without a number.

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

sub check_table
{
	my ($what) = @_;
	is($node->safe_psql('postgres', 'SELECT count(*) FROM t WHERE seq IS NULL'),
		'0', "$what: no row of the stream is without a number");
	is($node->safe_psql('postgres', "SELECT count(*) FROM t WHERE payload IN ('late', 'normal')"),
		'0', "$what: nothing of the failed transactions committed");
	is($node->safe_psql('postgres', "SELECT count(*) FROM other"),
		'0', "$what: the other table's row did not commit either");
}

# 1. The module's callback runs before stream_seq's.
my $load = "LOAD '$dir/late_insert.so';\n";
is(late_commit($load, "BEGIN; INSERT INTO t (payload) VALUES ('normal'); COMMIT;"),
	'0A000', 'loaded after: a transaction that wrote the stream fails at commit');
is(late_commit($load, "BEGIN; INSERT INTO other VALUES (1); COMMIT;"),
	'0A000', 'loaded after: a transaction that did not write the stream fails too');
check_table('loaded after');

# 2. stream_seq's callback runs first.
$node->append_conf('postgresql.conf',
	"shared_preload_libraries = '$dir/late_insert.so, stream_seq'\n");
$node->restart;
is(late_commit('', "BEGIN; INSERT INTO t (payload) VALUES ('normal'); COMMIT;"),
	'0A000', 'preloaded before: a transaction that wrote the stream fails at commit');
is(late_commit('', "BEGIN; INSERT INTO other VALUES (1); COMMIT;"),
	'0A000', 'preloaded before: a transaction that did not write the stream fails too');
check_table('preloaded before');

# Without the late insert, writing works as always.
$node->safe_psql('postgres', "INSERT INTO t (payload) VALUES ('ordinary')");
is($node->safe_psql('postgres', "SELECT count(*), count(seq) FROM t"),
	'1|1', 'an ordinary insert is numbered');

$node->stop;
done_testing();
