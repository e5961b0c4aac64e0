# Copyright (c) stream_seq contributors
#
# 039_applications.pl: the recipes of doc/applications.md, run through the
# real libraries as an application runs them: as an ordinary role, through
# pgbouncer in transaction mode, over TCP.  Each stack's program lives in
# test/apps/STACK/ and works on a stream table of its own, doing the same
# tasks in the same order, so that every stack must print the same lines:
#
#   insert       the number inside the inserting transaction (the placeholder
#                0, since 0.7.0; NULL before), and
#                after the commit (read back)
#   bulk         the numbers of a bulk insert (COPY, executemany, a batch,
#                insert_all, bulkCreate ...)
#   save         save of a loaded row, with the page's declaration that
#                keeps the stream column read-only
#   save-plain   the same with a plain declaration (the number written
#                back as it was read, or not at all)
#   merge        the ORM's merge of an object built by hand (number unknown)
#   upsert       INSERT ... ON CONFLICT of a loaded row and a new row,
#                without the stream column
#   upsert-plain the same with the loaded row's number in VALUES: refused
#                (428C9) by a server without the write rules of 0.6.0
#                (which come with stream_seq.last_numbers()), kept with them
#   page         pages of 2 rows below the horizon, and the type the
#                language gives the number
#
# and a few lines of its own (types, DDL that enable() refuses, the
# prepared statements each driver's setting avoids, failing through the
# pooler without it).
#
# Libraries: Debian's packages (test/run-tests.sh installs them as root:
# python3-sqlalchemy, python3-django, python3-psycopg, python3-psycopg2,
# python3-asyncpg, libpostgresql-jdbc-java, libhibernate3-java,
# libjavassist-java, default-jdk-headless, ruby-activerecord, ruby-pg,
# nodejs, npm) and npm's (test/apps/node/package.json, installed by this
# test into a cache outside the source tree: STREAM_SEQ_NPM_CACHE, else
# /var/cache/stream_seq/npm when writable, else ~/.cache/stream_seq/npm).
# Run as root (as CI runs it), a missing Debian package fails the test;
# otherwise that stack is skipped with the reason, and so is the npm stack
# when the registry cannot be reached.  pgx (Go, golang-go and
# golang-github-jackc-pgx-v4-dev) runs where those are installed, and is
# skipped with the reason elsewhere: make test does not install them.

use strict;
use warnings;

use File::Compare ();
use File::Copy ();
use File::Path ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use StreamSeqTest;

my $root = source_root();
my $apps = "$root/test/apps";
my $python = '/usr/bin/python3';    # Debian's, with Debian's modules
my $t_start = time();

my $node = new_node('applications');
$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE ROLE app LOGIN;
GRANT CREATE ON SCHEMA public TO app;
GRANT USAGE ON SCHEMA stream_seq TO app;
});
my $bouncer = start_pgbouncer($node, users => ['app'], pool_size => 5);
my $port = $bouncer->{port};
my $dsn = "host=127.0.0.1 port=$port dbname=postgres user=app";
note "pgbouncer $bouncer->{version} on port $port";

# The write rules of 0.6.0 (doc/applications.md, "The rules") come with
# stream_seq.last_numbers(): with them an upsert of a loaded row (its
# number in VALUES) keeps the row, and SET seq = NULL of a numbered row (an
# object whose number was never read) keeps the number; before them both
# are refused (428C9).  Either way the stacks must agree with the server.
my $rules = $node->safe_psql('postgres', q{
SELECT count(*) > 0 FROM pg_proc
 WHERE proname = 'last_numbers' AND pronamespace = 'stream_seq'::regnamespace});
$rules = $rules eq 't';
ok($rules, 'the SQL objects have the write rules of 0.6.0 (last_numbers() exists)');
my $set_null = $rules ? 'accepted' : '428C9';

my %line = (
	insert => 'insert 0 1',
	bulk => 'bulk 2 3 4',
	save => 'save 1 b',
	'save-plain' => 'save-plain 1 c',
	merge => 'merge 1 m',
	upsert => 'upsert 2 u 5 n',
	'upsert-plain' => 'upsert-plain ' . ($rules ? '3 p' : '428C9'),
);

# the lines a stack must print: the common tasks it does, in order, then
# the page line with the language's type, then lines of its own
sub expected
{
	my ($tasks, $type, @own) = @_;
	return [ (map { $line{$_} } @$tasks), "page 1,2|3,4|5 $type", @own ];
}

# the Debian packages among "packages" that are not installed; run as
# root, a missing one fails (test/run-tests.sh installs them)
sub missing
{
	my @missing = grep {
		`dpkg-query -W -f='\${Status}' $_ 2>/dev/null` !~ /install ok installed/
	} @_;
	fail("Debian packages @missing are installed (test/run-tests.sh installs them as root)")
	  if @missing && $> == 0;
	return @missing ? "not installed: @missing" : undef;
}

# Runs one stack's program; compares its output, line by line, with
# "want" (a hash of stack name => expected lines when the program prints
# several stacks, each line then starting with the stack's name).
my %seconds;
sub run_stack
{
	my ($name, $want, @cmd) = @_;
	my $t0 = time();
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run(\@cmd, '<', \undef, '>', \$out, '2>', \$err);
	$seconds{$name} = time() - $t0;
	ok($ok, "$name runs") or diag "@cmd\n$out$err";
	my @got = split /\n/, $out;
	if (ref $want eq 'HASH')
	{
		foreach my $stack (sort keys %$want)
		{
			my @mine = map { s/^\Q$stack\E //r } grep { /^\Q$stack\E / } @got;
			is(join("\n", @mine), join("\n", @{ $want->{$stack} }),
				"$stack: every task gives what doc/applications.md says");
		}
	}
	else
	{
		is(join("\n", @got), join("\n", @$want),
			"$name: every task gives what doc/applications.md says");
	}
}

# what the tables hold at the end: every stack's rows numbered, unique
sub check_tables
{
	my ($stack, @tables) = @_;
	foreach my $t (@tables)
	{
		is( $node->safe_psql('postgres',
				"SELECT count(*), count(seq), count(DISTINCT seq) FROM $t"),
			($t eq 'ev_django' ? '6|6|6' : '5|5|5'),
			"$stack: $t holds its rows, each with a number of its own");
	}
}

my @common = qw(insert bulk save save-plain merge upsert upsert-plain);

# a cache directory outside the source tree: /var/cache/stream_seq/NAME
# where it can be written (test/run-tests.sh makes it so when run as
# root), else ~/.cache/stream_seq/NAME
sub cache_dir
{
	my ($name) = @_;
	my $dir = "/var/cache/stream_seq/$name";
	$dir = "$ENV{HOME}/.cache/stream_seq/$name"
	  unless -w $dir || (!-e $dir && $> == 0);
	File::Path::make_path($dir);
	return $dir;
}

# Python: SQLAlchemy 1.4, Django 3.2, psycopg 3, psycopg 2, asyncpg
SKIP:
{
	my $why = missing('python3-sqlalchemy', 'python3-psycopg2');
	skip $why, 3 if $why;
	run_stack('sqlalchemy', expected(\@common, 'int', 'computed 42P16', 'bulk-update 4 k'),
		$python, "$apps/python/sqlalchemy_app.py", $dsn, 'ev_sqlalchemy');
	check_tables('sqlalchemy', 'ev_sqlalchemy');
}
SKIP:
{
	my $why = missing('python3-django', 'python3-psycopg2');
	skip $why, 3 if $why;
	# Django's INSERT names every column of the model, so seq is stored as
	# NULL (not the placeholder): NULL until commit, then numbered by an
	# update
	my $django = expected([qw(insert bulk save save-plain merge upsert)], 'int',
		"save-stale-plain $set_null", 'save-stale 6 t');
	$django->[0] = 'insert None 1';
	run_stack('django', $django,
		$python, "$apps/python/django_app.py", $dsn, 'ev_django');
	check_tables('django', 'ev_django');
}
foreach my $d ([ 'psycopg', 'python3-psycopg' ],
	[ 'psycopg2', 'python3-psycopg2' ],
	[ 'asyncpg', 'python3-asyncpg' ])
{
	my ($driver, $package) = @$d;
  SKIP:
	{
		my $why = missing($package);
		skip $why, 3 if $why;
		run_stack(
			$driver,
			expected(
				[qw(insert bulk save upsert upsert-plain)], 'int',
				# psycopg 3's default prepare_threshold through the pooler:
				# the second client finds the name taken
				$driver eq 'psycopg' ? ('default-prepare 42P05') : ()),
			$python, "$apps/python/drivers.py", $driver, $dsn, "ev_$driver");
		check_tables($driver, "ev_$driver");
	}
}

# Java: pgjdbc and Hibernate 3.6, compiled now, one JVM for both
SKIP:
{
	my @jars = map { "/usr/share/java/$_.jar" } qw(postgresql hibernate3
	  hibernate-commons-annotations geronimo-jpa_2.0_spec geronimo-jta-1.2-spec
	  dom4j antlr commons-collections3 slf4j-api slf4j-nop javassist);
	my $why = missing('default-jdk-headless', 'libpostgresql-jdbc-java',
		'libhibernate3-java', 'libjavassist-java');
	skip $why, 6 if $why;
	my $classes = PostgreSQL::Test::Utils::tempdir();
	# a short run: the JIT's first tier only, one GC thread (halves the
	# start-up of both)
	my @jvm = ('-XX:TieredStopAtLevel=1', '-XX:+UseSerialGC');
	my $cp = join(':', @jars);
	my $t0 = time();
	my ($out, $err) = ('', '');
	ok( IPC::Run::run(
			[ 'javac', (map { "-J$_" } @jvm), '-d', $classes, '-cp', $cp,
				"$apps/java/Apps.java" ],
			'<', \undef, '>', \$out, '2>', \$err),
		'Apps.java compiles') or diag "$out$err";
	$seconds{javac} = time() - $t0;
	run_stack('java',
		{
			jdbc => expected([qw(insert bulk save upsert upsert-plain)],
				'long', 'types getLong=0 wasNull=false getObject=0',
				# pgjdbc's default prepareThreshold through the pooler
				'default-prepare 42P05'),
			hibernate => expected(\@common, 'long', "merge-plain $set_null"),
		},
		'java', @jvm, '-cp', "$classes:$cp", 'Apps', '127.0.0.1', $port, 'app');
	check_tables('java', 'ev_jdbc', 'ev_hibernate');
}

# Node: node-postgres, Knex, Sequelize and TypeORM from npm, installed into
# the cache when package.json changed (or the first time)
SKIP:
{
	# npm comes with nodejs where nodejs is not Debian's
	my $why = missing('nodejs', -x '/usr/bin/npm' ? () : 'npm');
	skip $why, 9 if $why;
	my $cache = $ENV{STREAM_SEQ_NPM_CACHE} // cache_dir('npm');
	File::Path::make_path("$cache/apps");
	my $t0 = time();
	if (File::Compare::compare("$apps/node/package.json", "$cache/apps/package.json") != 0
		|| !-d "$cache/apps/node_modules")
	{
		File::Copy::copy("$apps/node/package.json", "$cache/apps/package.json")
		  or die "copy package.json: $!";
		my ($out, $err) = ('', '');
		my $ok = IPC::Run::run(
			[
				'npm', 'install', '--no-audit', '--no-fund', '--no-package-lock',
				'--prefix', "$cache/apps", '--cache', "$cache/cache"
			],
			'<', \undef, '>', \$out, '2>', \$err);
		if (!$ok)
		{
			unlink "$cache/apps/package.json";
			skip "npm install of test/apps/node/package.json failed (registry not reachable?): $err", 9;
		}
	}
	$seconds{npm} = time() - $t0;
	local $ENV{NODE_PATH} = "$cache/apps/node_modules";
	run_stack('node',
		{
			pg => expected([qw(insert bulk save upsert upsert-plain)],
				'bigint', 'types string number',
				# named statements: the second client gets the first's
				# server connection, where the name exists
				'named ok 42P05'),
			knex => expected([qw(insert bulk save save-plain upsert upsert-plain)],
				'bigint'),
			sequelize => expected([qw(insert bulk save save-plain upsert upsert-plain)],
				'bigint'),
			typeorm => expected(\@common, 'bigint'),
		},
		'node', "$apps/node/apps.js", $port, 'app');
	check_tables('node', map { "ev_$_" } qw(pg knex sequelize typeorm));
}

# Ruby: ActiveRecord 6.1
SKIP:
{
	my $why = missing('ruby-activerecord', 'ruby-pg');
	skip $why, 3 if $why;
	run_stack('activerecord',
		expected([qw(insert bulk save merge upsert upsert-plain)], 'integer'),
		'ruby', "$apps/ruby/activerecord_app.rb", '127.0.0.1', $port, 'app',
		'ev_activerecord');
	check_tables('activerecord', 'ev_activerecord');
}

# Go: pgx v4 from Debian's packages, built in GOPATH mode (no module
# download).  Not among the packages test/run-tests.sh installs (about 75
# packages, and a first build of some 20 s of CPU): run where they are.
SKIP:
{
	my $gopath = '/usr/share/gocode';
	skip 'Go stack not run: golang-go and golang-github-jackc-pgx-v4-dev '
	  . 'are not installed (not among the packages make test installs)', 3
	  unless -x '/usr/bin/go' && -d "$gopath/src/github.com/jackc/pgx/v4";
	my $bin = PostgreSQL::Test::Utils::tempdir() . '/pgx_app';
	my $t0 = time();
	my ($out, $err) = ('', '');
	local $ENV{GO111MODULE} = 'off';
	local $ENV{GOPATH} = $gopath;
	local $ENV{GOCACHE} = cache_dir('go-build');
	local $ENV{GOFLAGS} = '';
	ok( IPC::Run::run(
			[ '/usr/bin/go', 'build', '-o', $bin, "$apps/go/pgx_app.go" ],
			'<', \undef, '>', \$out, '2>', \$err),
		'pgx_app.go builds') or diag "$out$err";
	$seconds{'go build'} = time() - $t0;
	run_stack('pgx',
		expected([qw(insert bulk save upsert upsert-plain)], 'int64',
			# the default statement cache: a statement prepared on one server
			# connection, run on another
			'default-cache 26000'),
		$bin, $dsn, 'ev_pgx');
	check_tables('pgx', 'ev_pgx');
}

# every connection went through the pooler as the ordinary role
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner
		   WHERE c.relname LIKE 'ev\\_%' AND c.relkind = 'r' AND r.rolname <> 'app'}),
	'0', "every stack's tables belong to the ordinary role");

stop_pgbouncer($bouncer);
$node->stop;
note sprintf('seconds: %s; total %.1f',
	join(', ', map { sprintf '%s %.1f', $_, $seconds{$_} } sort keys %seconds),
	time() - $t_start);
done_testing();
