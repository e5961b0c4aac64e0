
# Copyright (c) stream_seq contributors
#
# 040_metrics_exporter.pl: the real postgres_exporter (Debian's
# prometheus-postgres-exporter) with doc/examples/prometheus/queries.yaml,
# scraped over loopback, against a cluster with two streams, a consumer
# that caught up, a lagging consumer with a dead letter, a group with a
# leased slot, and a commit stalled while it holds a number (it waits,
# once its row is numbered, for an advisory lock the test holds:
# stream_seq.hold_after_numbering).  The exporter discovers every database of the cluster
# (--auto-discover-databases), one of which has no stream_seq.
#
#  (a) as a role that is only a member of pg_monitor (no SELECT on the
#      stream tables): every series of queries.yaml, with the values the
#      scenario makes; once the stalled commit ends, the horizon passes it;
#  (b) the database without the extension gives no stream_seq series but
#      stream_seq_extension_installed 0, and no error;
#  (c) as a role without pg_monitor: no stream_seq series, _callable 0,
#      and no error;
#  (d) in all of them nothing in the server log (no "relation ... does not
#      exist" every scrape) and no error from the exporter;
#  (e) every metric doc/examples/prometheus/alerts.yml uses is a series
#      the exporter exports; with promtool installed, the rules are valid.

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use HTTP::Tiny;
use Time::HiRes qw(usleep time);
use StreamSeqTest;

my $exporter = '/usr/bin/prometheus-postgres-exporter';
if (!-x $exporter)
{
	# test/run-tests.sh installs it when run as root (as CI does)
	die "$exporter is missing; test/run-tests.sh installs it as root"
	  if $> == 0;
	plan skip_all =>
	  "postgres_exporter is not installed ($exporter); run: sudo apt-get install -y prometheus-postgres-exporter";
}

my $t_start = time();
my $queries = source_root() . '/doc/examples/prometheus/queries.yaml';
my $alerts = source_root() . '/doc/examples/prometheus/alerts.yml';

# the exporter connects over TCP: --auto-discover-databases builds the
# other databases' connection strings from a URL
my $node = new_node('metrics_exporter', "listen_addresses = '127.0.0.1'\n");
$node->append_conf('pg_hba.conf', "host all all 127.0.0.1/32 trust\n");
$node->reload;
# queries.yaml reads metrics() through query_to_xml()
my ($xml_rc) = $node->psql('postgres', q{SELECT '<a/>'::xml});
if ($xml_rc != 0)
{
	plan skip_all =>
	  'the server was built without libxml (configure --with-libxml): queries.yaml needs query_to_xml()';
}

$node->safe_psql('postgres', q{
CREATE ROLE app LOGIN;
CREATE ROLE exporter LOGIN IN ROLE pg_monitor;
CREATE ROLE nobody LOGIN;
CREATE EXTENSION stream_seq;
CREATE DATABASE noext;
GRANT USAGE ON SCHEMA stream_seq TO app;
GRANT CREATE ON SCHEMA public TO app;
SET ROLE app;
CREATE TABLE orders (id bigserial PRIMARY KEY, payload text);
SELECT stream_seq.enable('orders');
INSERT INTO orders (payload) SELECT 'private ' || g FROM generate_series(1, 30) g;
SELECT stream_seq.create_consumer('orders', 'billing');
SELECT stream_seq.advance('orders', 'billing', 30);
SELECT stream_seq.create_consumer('orders', 'audit');
SELECT stream_seq.advance('orders', 'audit', 10);
SELECT stream_seq.set_retry_policy('orders', 'audit', 1);
SELECT stream_seq.park('orders', 'audit', 5, 'bad row');
SELECT stream_seq.create_group('orders', 'workers', 'id', 2);
SELECT count(*) FROM stream_seq.claim('orders', 'workers', 'w1', '1 hour');
CREATE TABLE quiet (payload text);
SELECT stream_seq.enable('quiet');
});
is( $node->safe_psql('postgres',
		q{SELECT has_table_privilege('exporter', 'orders', 'SELECT')}),
	'f', 'the exporter role may not read the stream table');

# the stalled commit: the test holds the lock, the writer's COMMIT waits
# on it once its row has its number (stream_seq.hold_after_numbering)
my $holder = session($node, $node->connstr('postgres'));
$holder->rows('SELECT pg_advisory_lock(4242)');
my $writer = bg_psql($node,
	q{SET stream_seq.hold_after_numbering = 4242; BEGIN; INSERT INTO orders (payload) VALUES ('stalled'); COMMIT;});
$node->poll_query_until('postgres', q{
SELECT count(*) = 1 FROM pg_stat_activity
 WHERE wait_event_type = 'Lock' AND wait_event = 'advisory'
   AND query LIKE '%stalled%'})
  or die 'the writer did not stall in its commit';
is( $node->safe_psql('postgres',
		q{SELECT count(*) FROM stream_seq.holders WHERE state = 'committing'}),
	'1', 'the writer holds a number while committing');

# an exporter of the test's own on a free loopback port; undef if it did
# not answer within the TAP timeout
my @exporters;
sub start_exporter
{
	my ($role) = @_;
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $dsn = sprintf('postgresql://%s@127.0.0.1:%d/postgres?sslmode=disable',
		$role, $node->port);
	local $ENV{DATA_SOURCE_NAME} = $dsn;
	my $job = bg_run(
		$exporter, '--auto-discover-databases',
		'--disable-default-metrics', '--disable-settings-metrics',
		'--no-collector.database', '--no-collector.bgwriter',
		"--extend.query-path=$queries",
		"--web.listen-address=127.0.0.1:$port");
	push @exporters, $job;
	my $url = "http://127.0.0.1:$port/metrics";
	my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
	while (time() < $deadline)
	{
		my $r = HTTP::Tiny->new(timeout => 10)->get("http://127.0.0.1:$port/");
		return { job => $job, url => $url } if $r->{success};
		$job->{handle}->pump_nb;
		usleep(100_000);
	}
	return undef;
}

# Stops an exporter; returns its log (its error output).
sub stop_exporter
{
	my ($e) = @_;
	my $h = $e->{job}{handle};
	$h->signal('TERM') if $h->pumpable;
	eval { $h->finish; };
	@exporters = grep { $_ != $e->{job} } @exporters;
	return ${ $e->{job}{err} };
}

END
{
	for my $job (@exporters)
	{
		eval { $job->{handle}->kill_kill; };
	}
}

# One scrape: the samples as name{labels} => value, labels sorted and
# without the exporter's "server"; and the whole text.
sub scrape
{
	my ($e) = @_;
	my $r = HTTP::Tiny->new(timeout => 60)->get($e->{url});
	die "scrape of $e->{url} failed: $r->{status} $r->{content}"
	  unless $r->{success};
	my %samples;
	for my $line (split /\n/, $r->{content})
	{
		next if $line =~ /^#/ || $line eq '';
		my ($name, $labels, $value) = $line =~ /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/
		  or next;
		my @labels = grep { !/^server=/ } ($labels // '') =~ /(\w+="[^"]*")/g;
		$samples{ $name . '{' . join(',', sort @labels) . '}' } = $value;
	}
	return (\%samples, $r->{content});
}

# the value of a series of database postgres
sub sample
{
	my ($samples, $name, %labels) = @_;
	$labels{datname} = 'postgres';
	my $key = $name . '{'
	  . join(',', map { qq{$_="$labels{$_}"} } sort keys %labels) . '}';
	return $samples->{$key};
}

my $log_start = log_offset($node);

# ---------------------------------------------------------------------
# (a) a pg_monitor role
my $e = start_exporter('exporter');
ok(defined $e, 'the exporter answers on loopback');
my $t_scrape = time();
my ($s, $text) = scrape($e);
my $scrape_seconds = time() - $t_scrape;
note sprintf('one scrape took %.3f s', $scrape_seconds);
note join("\n", map { "$_ $s->{$_}" } grep { /^stream_seq_/ } sort keys %$s);

is($s->{'pg_up{}'}, '1', 'the exporter is connected');
is($s->{'pg_exporter_last_scrape_error{}'}, '0', 'the scrape had no error');
like($text, qr/^pg_exporter_user_queries_load_error\{[^}]*\} 0$/m,
	'queries.yaml loaded');

my %o = (stream => 'public.orders');
is(sample($s, 'stream_seq_extension_installed'), '1', 'installed in postgres');
is(sample($s, 'stream_seq_extension_callable'), '1', 'callable by pg_monitor');
is(sample($s, 'stream_seq_stream_head', %o), '31',
	'head: the stalled commit took 31');
is(sample($s, 'stream_seq_stream_horizon', %o), '31',
	'horizon: held at the stalled commit');
is(sample($s, 'stream_seq_stream_first', %o), '1', 'first');
is(sample($s, 'stream_seq_stream_waiting_numbers', %o), '1',
	'one number waits behind the horizon');
is(sample($s, 'stream_seq_stream_durable_lag_numbers', %o), '0', 'durable lag');
is(sample($s, 'stream_seq_stream_committing_transactions', %o), '1',
	'one transaction committing');
cmp_ok(sample($s, 'stream_seq_stream_oldest_commit_seconds', %o), '>', 0,
	'the stalled commit has an age');
cmp_ok(sample($s, 'stream_seq_stream_tracked_entries', %o), '>=', 1,
	'tracked entries');
is(sample($s, 'stream_seq_stream_evicted_entries_total', %o), '0', 'no eviction');
cmp_ok(sample($s, 'stream_seq_stream_assigned_transactions_total', %o), '>=', 2,
	'transactions that took numbers');
is(sample($s, 'stream_seq_stream_head', stream => 'public.quiet'), '0',
	'an empty stream: head 0');
like($text, qr/^# TYPE stream_seq_stream_evicted_entries_total counter$/m,
	'a _total is a counter');
like($text, qr/^# HELP stream_seq_stream_oldest_commit_seconds Seconds /m,
	'help texts from queries.yaml');

my %b = (%o, consumer => 'billing');
my %a = (%o, consumer => 'audit');
my %w = (%o, consumer => 'workers');
is(sample($s, 'stream_seq_consumer_lag_numbers', %b), '0', 'billing caught up');
is(sample($s, 'stream_seq_consumer_backlog_rows', %b), '0', 'billing: no backlog');
is(sample($s, 'stream_seq_consumer_position', %a), '10', 'audit at 10');
is(sample($s, 'stream_seq_consumer_lag_numbers', %a), '20', 'audit: lag of 20');
is(sample($s, 'stream_seq_consumer_backlog_rows', %a), '20',
	'audit: 20 rows to read');
is(sample($s, 'stream_seq_consumer_backlog_capped', %a), '0', 'exact');
is(sample($s, 'stream_seq_consumer_dead_letters', %a), '1', 'audit: a dead letter');
is(sample($s, 'stream_seq_consumer_parked_rows', %a), '0',
	'dead letters are not counted as parked');
is(sample($s, 'stream_seq_consumer_held_rows', %a), '0',
	'no rows held behind a parked row of their key');
cmp_ok(sample($s, 'stream_seq_consumer_since_advance_seconds', %a), '>=', 0,
	'since_advance_seconds');
is(sample($s, 'stream_seq_consumer_slots', %w), '2', 'workers: 2 slots');
is(sample($s, 'stream_seq_consumer_slots', %a), '0', 'audit: plain');
is(sample($s, 'stream_seq_consumer_backlog_rows', %w), '30',
	'workers: 30 rows to read');
is(sample($s, 'stream_seq_consumer_resize_pending', %w), '0', 'no resize');
is(sample($s, 'stream_seq_consumer_retries_due_rows', %a), '0', 'no retry due');
is(sample($s, 'stream_seq_consumer_oldest_parked_seconds', %a), '0',
	'nothing parked for replay');
is(sample($s, 'stream_seq_consumer_oldest_due_seconds', %a), '0', 'nothing due');
my $slot_rows = 0;
for my $slot (0, 1)
{
	my %sl = (%w, slot => $slot);
	is(sample($s, 'stream_seq_slot_leased', %sl), '1', "slot $slot leased by w1");
	is(sample($s, 'stream_seq_slot_position', %sl), '0', "slot $slot at 0");
	is(sample($s, 'stream_seq_slot_lag_numbers', %sl), '30', "slot $slot: lag 30");
	is(sample($s, 'stream_seq_slot_backlog_capped', %sl), '0', "slot $slot: exact");
	ok(defined sample($s, 'stream_seq_slot_since_advance_seconds', %sl),
		"slot $slot: since_advance_seconds");
	$slot_rows += sample($s, 'stream_seq_slot_backlog_rows', %sl) // 0;
}
is($slot_rows, 30, "the slots' backlogs add up to the group's");
unlike($text, qr/private \d|\bstalled\b/, 'no row contents in the scrape');

# (b) the database without the extension
is($s->{'stream_seq_extension_installed{datname="noext"}'}, '0',
	'noext: not installed');
is($s->{'stream_seq_extension_callable{datname="noext"}'}, '0',
	'noext: not callable');
is( scalar(grep { /^stream_seq_(stream|consumer|slot)_.*datname="noext"/ } keys %$s),
	0, 'noext: no stream_seq series');

# the commit ends: the horizon passes it
$holder->rows('SELECT pg_advisory_unlock(4242)');
is(wait_done($writer), 0, 'the stalled commit commits');
($s, $text) = scrape($e);
is(sample($s, 'stream_seq_stream_committing_transactions', %o), '0',
	'after the commit: none committing');
is(sample($s, 'stream_seq_stream_horizon', %o), '32', 'the horizon passed it');
is(sample($s, 'stream_seq_stream_oldest_commit_seconds', %o), '0',
	'no commit to age');
is(sample($s, 'stream_seq_consumer_backlog_rows', %a), '21',
	'audit: one more row to read');
is(sample($s, 'stream_seq_consumer_backlog_rows', %b), '1', 'billing too');
my $exporter_log = stop_exporter($e);
unlike($exporter_log, qr/level=(error|warn)/, 'the exporter logged no error')
  or diag($exporter_log);

# (e) what the alerting rules use is exported
my %names = map { /^([^{]+)/; ($1 => 1) } keys %$s;
my %used = map { ($_ => 1) } slurp_file($alerts) =~ /\b(stream_seq_\w+)/g;
ok(scalar(keys %used) >= 8, 'alerts.yml uses the metrics');
ok($names{$_}, "alerts.yml: $_ is exported") for sort keys %used;
SKIP:
{
	my $promtool = '/usr/bin/promtool';
	skip 'promtool (Debian package prometheus) is not installed', 1
	  unless -x $promtool;
	my ($out, $err) = run_command([ $promtool, 'check', 'rules', $alerts ]);
	like($out, qr/SUCCESS/, 'promtool check rules alerts.yml')
	  or diag($out . $err);
}

# ---------------------------------------------------------------------
# (c) a role without pg_monitor
$e = start_exporter('nobody');
ok(defined $e, 'the second exporter answers');
($s, $text) = scrape($e);
is($s->{'pg_exporter_last_scrape_error{}'}, '0', 'nobody: the scrape had no error');
is(sample($s, 'stream_seq_extension_installed'), '1', 'nobody: installed');
is(sample($s, 'stream_seq_extension_callable'), '0', 'nobody: not callable');
is(scalar(grep { /^stream_seq_(stream|consumer|slot)_/ } keys %$s),
	0, 'nobody: no stream_seq series');
$exporter_log = stop_exporter($e);
unlike($exporter_log, qr/level=(error|warn)/, 'nobody: the exporter logged no error')
  or diag($exporter_log);

# (d) nothing in the server log, nothing wrong in the exporters' logs
my $log = log_since($node, $log_start);
unlike($log, qr/ERROR|does not exist|permission denied/,
	'no error in the server log from the scrapes')
  or diag($log);

# ---------------------------------------------------------------------
# (f) one stream's trouble: "quiet" locked ACCESS EXCLUSIVE by another
#     transaction.  The exporter's role has lock_timeout 1 s, so a scrape
#     that waited for the lock would fail (55P03) and export nothing of
#     any stream.  metrics() does not wait for it: quiet is unavailable,
#     its other series NaN, and orders' series are all there.
$node->safe_psql('postgres', q{ALTER ROLE exporter SET lock_timeout = '1s'});
$e = start_exporter('exporter');
ok(defined $e, 'the exporter answers again');
$holder->rows('BEGIN');
$holder->rows('LOCK TABLE quiet IN ACCESS EXCLUSIVE MODE');
($s, $text) = scrape($e);
is($s->{'pg_exporter_last_scrape_error{}'}, '0',
	'quiet locked: the scrape had no error');
is(sample($s, 'stream_seq_stream_unavailable', stream => 'public.quiet'), '1',
	'quiet locked: quiet is unavailable');
is(sample($s, 'stream_seq_stream_head', stream => 'public.quiet'), 'NaN',
	'quiet locked: its head is NaN');
is(sample($s, 'stream_seq_stream_unavailable', %o), '0',
	'quiet locked: orders is available');
is(sample($s, 'stream_seq_stream_horizon', %o), '32',
	'quiet locked: orders has its horizon');
is(sample($s, 'stream_seq_consumer_backlog_rows', %a), '21',
	'quiet locked: orders\' consumers have their backlogs');
$holder->rows('ROLLBACK');
($s, $text) = scrape($e);
is(sample($s, 'stream_seq_stream_unavailable', stream => 'public.quiet'), '0',
	'unlocked: quiet is available again');
is(sample($s, 'stream_seq_stream_head', stream => 'public.quiet'), '0',
	'unlocked: its head is back');

# The stream's indexes locked (REINDEX in an open transaction): counting
# backlogs needs them, and waits for them at most 100 ms (under a
# lock_timeout of 10 s here); orders' stream figures stay, its backlogs
# are NULL, and quiet's series are complete.
$holder->rows('BEGIN');
$holder->rows('REINDEX TABLE orders');
my $t_locked = time();
my $r = query($node, q{SET lock_timeout = '10s';
SELECT kind || ':' || coalesce(stream_name, '') || ':' || coalesce(consumer, '')
       || ':' || (head IS NOT NULL) || ':' || (backlog_rows IS NOT NULL)
  FROM stream_seq.metrics() WHERE kind <> 'slot'
 ORDER BY kind, stream_name, consumer});
my $locked_seconds = time() - $t_locked;
is($r, join("\n", 'consumer:public.orders:audit:false:false',
	'consumer:public.orders:billing:false:false',
	'consumer:public.orders:workers:false:false',
	'stream:public.orders::true:false', 'stream:public.quiet::true:false'),
	'indexes locked: orders has its head, its backlogs are NULL');
cmp_ok($locked_seconds, '<', 5,
	'indexes locked: the call waited for the lock at most about its bound');
note sprintf('metrics() with the indexes of a stream locked: %.3f s', $locked_seconds);
$holder->rows('ROLLBACK');
my $unlock_log = stop_exporter($e);
unlike($unlock_log, qr/level=(error|warn)/, 'locked stream: the exporter logged no error')
  or diag($unlock_log);

# (g) a scrape timeout: the exporter's role gets statement_timeout 500 ms,
#     and a group whose slot expression is slow makes metrics() for the
#     consumers and the slots run out of it in the middle of counting, at
#     every scrape.  The streams' series still come.  Once the group is
#     gone, the next scrape on the same connections has every series and
#     no error: the cancelled calls left their sessions usable.
$node->safe_psql('postgres', q{
CREATE TABLE slowly (k int);
SELECT stream_seq.enable('slowly');
INSERT INTO slowly SELECT g FROM generate_series(1, 40) g;
CREATE FUNCTION slowkey(int) RETURNS text LANGUAGE sql IMMUTABLE
  AS $$SELECT pg_catalog.pg_sleep(0.05)::text || $1$$;
SELECT stream_seq.create_group('slowly', 'g', 'public.slowkey(k)', 2, 0::bigint);
ALTER ROLE exporter SET statement_timeout = '500ms';
});
my $timeout_log_start = log_offset($node);
$e = start_exporter('exporter');
ok(defined $e, 'the exporter answers with statement_timeout');
for my $n (1, 2)
{
	($s, $text) = scrape($e);
	is($s->{'pg_exporter_last_scrape_error{}'}, '1',
		"timed out, scrape $n: the consumers' and slots' queries failed");
	is(sample($s, 'stream_seq_stream_horizon', %o), '32',
		"timed out, scrape $n: the streams' series came");
}
# (a session left in a transaction by a cancel would hold its locks: the
# drop would wait for it)
is(try_sql($node, q{SET lock_timeout = '10s'; SELECT stream_seq.drop_consumer('slowly', 'g')}),
	'ok', 'the slow group is dropped: no cancelled call holds a lock');
($s, $text) = scrape($e);
is($s->{'pg_exporter_last_scrape_error{}'}, '0',
	'after the timeouts: the scrape had no error');
is(sample($s, 'stream_seq_consumer_backlog_rows', %a), '21',
	'after the timeouts: the consumers\' series are back');
is(sample($s, 'stream_seq_slot_leased', %w, slot => 0), '1',
	'after the timeouts: the slots\' series are back');
stop_exporter($e);
my $timeout_log = log_since($node, $timeout_log_start);
like($timeout_log, qr/canceling statement due to statement timeout/,
	'the server log has the timeouts');
unlike($timeout_log, qr/FATAL|unexpected state|leak|still active|current transaction is aborted/,
	'and nothing a cancelled call left behind')
  or diag($timeout_log);
$node->safe_psql('postgres', q{
ALTER ROLE exporter RESET statement_timeout;
ALTER ROLE exporter RESET lock_timeout;
});
$holder->close;

note sprintf('040 took %.1f s', time() - $t_start);
done_testing();
