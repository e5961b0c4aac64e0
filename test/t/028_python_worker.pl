# Copyright (c) stream_seq contributors
#
# 028_python_worker.pl: the example worker of doc/consumers.md
# (doc/examples/group_worker.py, psycopg 3) runs as printed, through
# pgbouncer in transaction mode, against writers that run at the same
# time (savepoints, and more than 64 subtransactions in some
# transactions).  Two workers share a group of 4 slots keyed by
# customer_id; some rows are poison (the handler's table refuses them),
# two at a time.
# Once the writers stop and the workers have caught up:
#
#  - every committed row was applied exactly once, or, if poison, parked
#    (after the worker's three attempts), never both;
#  - under per-key order (set_key_order(), 'until_applied') and a retry
#    policy of 2 attempts, the poison customer's rows held behind a
#    parked row came back through the worker's due() calls, each failed
#    again and ended a dead letter after 2 attempts: no row is left held;
#  - the rows of each customer were applied in number order;
#  - on SIGTERM each worker released its slots and exited 0;
#  - it logs the slots it holds and each row it parks, and exits 1 with
#    the message on a group or a database that does not exist, or a
#    column its handler writes that does not exist (parking nothing).

use strict;
use warnings;

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);
use StreamSeqTest;

my $worker_py = source_root() . "/doc/examples/group_worker.py";
ok(-f $worker_py, 'the example worker exists');

my $node = new_node('python_worker', "max_connections = 50\n");
$node->safe_psql('postgres', q{
CREATE EXTENSION stream_seq;
CREATE TABLE events (id bigserial PRIMARY KEY, customer_id int, payload jsonb);
SELECT stream_seq.enable('events');
SELECT stream_seq.create_group('events', 'shipping', 'customer_id', 4);
-- a customer's rows in order through retries: the rows behind a parked
-- row are held, and come back through due(), which the worker calls
SELECT stream_seq.set_retry_policy('events', 'shipping', 2, '0 s', 1, '0 s');
SELECT stream_seq.set_key_order('events', 'shipping', 'until_applied');
-- the worker's table, as in the docs, with an order of application and a
-- check that makes rows of customer -1 poison
CREATE TABLE shipping_applied (seq bigint PRIMARY KEY, customer_id int
                               CHECK (customer_id >= 0), payload jsonb,
                               applied bigserial);
});
my $bouncer = start_pgbouncer($node, pool_size => 10);

my $dsn = $bouncer->{connstr} . ' dbname=postgres';
my @workers = map {
	bg_run('python3', $worker_py, $dsn, 'events', 'shipping', "shipping-$_")
} 1 .. 2;

my $writer = $node->basedir . '/writer.sql';
append_to_file($writer, q{
\set c random(0, 20)
BEGIN;
INSERT INTO events (customer_id, payload) VALUES (:c, '{"kind": "order"}');
SAVEPOINT s;
INSERT INTO events (customer_id, payload) VALUES (:c, '{"kind": "rolled back"}');
ROLLBACK TO SAVEPOINT s;
INSERT INTO events (customer_id, payload) VALUES (:c, '{"kind": "shipped"}');
COMMIT;
});
my $overflow = $node->basedir . '/overflow.sql';
append_to_file($overflow, q{
DO $$
BEGIN
    FOR i IN 1..70 LOOP
        BEGIN
            INSERT INTO events (customer_id, payload)
            VALUES (i % 21, '{"kind": "many"}');
        EXCEPTION WHEN others THEN RAISE;
        END;
    END LOOP;
END $$;
});
my $poison = $node->basedir . '/poison.sql';
# two poison rows in one transaction: adjacent numbers, one page, so a
# park rolled back by the next row's failure must not lose its count
append_to_file($poison, q{
INSERT INTO events (customer_id, payload)
VALUES (-1, '{"kind": "poison"}'), (-1, '{"kind": "poison"}');
});
my $writers = bg_pgbench($node, undef, '-c', '3', '-t', '150',
	'-f', "$writer\@20", '-f', "$overflow\@1", '-f', "$poison\@1");
is(wait_done($writers), 0, 'writers ran') or diag ${ $writers->{err} };

my $total = val($node, 'SELECT count(*) FROM events');
my $poisoned = val($node, 'SELECT count(*) FROM events WHERE customer_id = -1');
cmp_ok($poisoned, '>', 0, 'some rows are poison');

# wait until every row is applied or parked
my $deadline = time() + $PostgreSQL::Test::Utils::timeout_default;
my $done;
while (time() < $deadline)
{
	$done = val($node, q{SELECT (SELECT count(*) FROM shipping_applied)
	                          + (SELECT count(*) FROM stream_seq.parked_rows)});
	last if $done >= $total;
	$_->{handle}->pump_nb for @workers;    # their logs, lest a full pipe block them
	usleep(200_000);
}
is($done, $total, 'the workers caught up: every row applied or parked')
  or diag map { $_->{handle}->pump_nb; ${ $_->{err} } } @workers;

# the poison rows come back through due() until each is a dead letter
my $pending;
while (time() < $deadline)
{
	$pending = val($node, q{SELECT count(*) FROM stream_seq.parked_rows WHERE NOT dead});
	last if $pending == 0;
	$_->{handle}->pump_nb for @workers;
	usleep(200_000);
}
is($pending, '0', 'per-key order: no row left held or waiting for its retry')
  or diag map { $_->{handle}->pump_nb; ${ $_->{err} } } @workers;
is(val($node, q{SELECT count(*) || '/' || count(*) FILTER (WHERE dead AND attempts = 2)
                  FROM stream_seq.parked_rows}),
	"$poisoned/$poisoned", 'per-key order: every poison row a dead letter after 2 attempts');

foreach my $w (@workers)
{
	$w->{handle}->signal('TERM');
	is(wait_done($w, 60), 0, 'a worker exits 0 on SIGTERM')
	  or diag ${ $w->{err} };
}

is(val($node, q{SELECT count(*) FROM events e
                 WHERE (SELECT count(*) FROM shipping_applied a WHERE a.seq = e.seq)
                     + (SELECT count(*) FROM stream_seq.parked_rows p WHERE p.seq = e.seq) <> 1}),
	'0', 'every row applied once or parked, never both, never twice');
is(val($node, q{SELECT count(*) FROM stream_seq.parked_rows p
                  JOIN events e ON e.seq = p.seq WHERE e.customer_id <> -1}),
	'0', 'only poison rows were parked');
is(val($node, q{SELECT count(*) FROM (
                  SELECT seq < lag(seq) OVER (PARTITION BY customer_id ORDER BY applied) AS back
                    FROM shipping_applied) o WHERE back}),
	'0', 'the rows of each customer were applied in number order');
is(val($node, q{SELECT count(*) FROM stream_seq.consumer_slots WHERE worker IS NOT NULL}),
	'0', 'the workers released their slots');

like(${ $workers[0]->{err} }, qr/INFO shipping-1 of group shipping of events holds slots \[/,
	'a worker logs the slots it holds');
like(${ $workers[0]->{err} } . ${ $workers[1]->{err} }, qr/WARNING row \d+ parked after 3 attempts: /,
	'and each row it parks');

# errors that trying again cannot cure: exit 1 with the message
$node->safe_psql('postgres', q{
CREATE SCHEMA alt;
CREATE TABLE alt.shipping_applied (seq bigint PRIMARY KEY, customer_id int);
INSERT INTO events (customer_id, payload) VALUES (1, '{}');
});
foreach my $case (
	[ "$dsn", 'no_such_group', qr/consumer "no_such_group" of stream table "events" does not exist/ ],
	[ $node->connstr('no_such_db'), 'shipping', qr/database "no_such_db" does not exist/ ],
	# a table of the handler's without the column it writes, first on the
	# search path: every row would fail, so it stops instead of parking
	[ $node->connstr('postgres') . ' options=-csearch_path=alt,public', 'shipping',
	  qr/column "payload" of relation "shipping_applied" does not exist/ ])
{
	my ($conninfo, $group, $message) = @{$case};
	my $w = bg_run('python3', $worker_py, $conninfo, 'events', $group, 'shipping-9');
	is(wait_done($w, 60), 1, "exit 1: $group") or diag ${ $w->{err} };
	like(${ $w->{err} }, qr/ERROR shipping-9 stopping: .*$message/, 'with the message');
}
is(val($node, q{SELECT count(*) FROM stream_seq.parked_rows p JOIN events e ON e.seq = p.seq
                 WHERE e.customer_id <> -1}),
	'0', 'the handler\'s SQL error parked nothing');

stop_pgbouncer($bouncer);
done_testing();
