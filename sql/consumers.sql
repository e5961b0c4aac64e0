-- Consumers: positions, advance, read, wait, and every error
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
\set SHOW_CONTEXT never

CREATE TABLE ev (payload text, n int);
SELECT stream_seq.enable('ev');
INSERT INTO ev SELECT 'e' || g, g FROM generate_series(1, 5) g;

SELECT stream_seq.create_consumer('ev', 'billing');
SELECT stream_seq.create_consumer('ev', 'audit', 3);
SELECT stream_seq.position('ev', 'billing'), stream_seq.position('ev', 'audit');

-- read(): the next page after the position, below the horizon, in order
SELECT * FROM stream_seq.read('ev', 'billing', 2);
SELECT * FROM stream_seq.read('ev', 'audit');
SELECT "row"->>'payload' AS payload FROM stream_seq.read('ev', 'billing', 100);

-- advance() is transactional: rolled back with the caller's work
CREATE TABLE applied (seq bigint);
BEGIN;
INSERT INTO applied SELECT seq FROM stream_seq.read('ev', 'billing', 2);
SELECT stream_seq.advance('ev', 'billing', (SELECT max(seq) FROM applied));
ROLLBACK;
SELECT stream_seq.position('ev', 'billing'), count(*) AS applied FROM applied;
BEGIN;
INSERT INTO applied SELECT seq FROM stream_seq.read('ev', 'billing', 2);
SELECT stream_seq.advance('ev', 'billing', (SELECT max(seq) FROM applied));
COMMIT;
SELECT stream_seq.position('ev', 'billing'), count(*) AS applied FROM applied;
SELECT * FROM stream_seq.read('ev', 'billing', 2);

-- the view
SELECT stream, consumer, position, lag, since_advance >= '0' AS recent
  FROM stream_seq.consumers ORDER BY consumer;

-- errors: backwards, at or past the horizon, unknown stream or consumer,
-- duplicates, bad arguments
SELECT stream_seq.advance('ev', 'billing', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.advance('ev', 'billing', stream_seq.horizon('ev'));
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.advance('ev', 'billing', stream_seq.horizon('ev') - 1);
SELECT stream_seq.advance('ev', 'billing', stream_seq.horizon('ev') - 1);
SELECT stream_seq.advance('ev', 'nobody', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.position('ev', 'nobody');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.read('ev', 'nobody');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.drop_consumer('ev', 'nobody');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_consumer('ev', 'billing');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_consumer('ev', '');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_consumer('ev', 'future', 1000);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.read('ev', 'billing', 0);
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE plain (x int);
SELECT stream_seq.create_consumer('plain', 'c');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.position('plain', 'c');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.wait('ev', 0, '-1 s');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.position('ev', NULL);

-- wait(): returns at once when rows after the position are readable, and
-- after the timeout otherwise, with the horizon either way
SELECT stream_seq.wait('ev', 0, '10 s') = stream_seq.horizon('ev');
SELECT stream_seq.wait('ev', stream_seq.horizon('ev') - 1, '50 ms')
       = stream_seq.horizon('ev');
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT stream_seq.wait('ev', 0, '1 s');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;

-- privileges: create needs SELECT; the creator owns its consumer; others
-- may neither advance nor drop it; the catalog is not writable directly
CREATE ROLE consumer_a;
CREATE ROLE consumer_b;
GRANT USAGE ON SCHEMA stream_seq TO consumer_a, consumer_b;
SET ROLE consumer_a;
SELECT stream_seq.create_consumer('ev', 'a');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.read('ev', 'billing');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
GRANT SELECT ON ev TO consumer_a, consumer_b;
SET ROLE consumer_a;
SELECT stream_seq.create_consumer('ev', 'a');
SELECT stream_seq.advance('ev', 'a', 2);
SELECT consumer, position FROM stream_seq.consumers ORDER BY consumer;
UPDATE stream_seq.consumer SET position = 0;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SET ROLE consumer_b;
SELECT stream_seq.advance('ev', 'a', 3);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.drop_consumer('ev', 'a');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.position('ev', 'a');
RESET ROLE;
-- the table owner may move any consumer of its table
SELECT stream_seq.advance('ev', 'a', 3);
SELECT stream_seq.drop_consumer('ev', 'a');

-- a call meant to create or change something never silently does nothing:
-- NULL arguments are errors (head() is NULL on a stream with no number yet)
CREATE TABLE ev_empty (payload text);
SELECT stream_seq.enable('ev_empty');
SELECT stream_seq.head('ev_empty');
SELECT stream_seq.create_consumer('ev_empty', 'from_head', start_after => stream_seq.head('ev_empty'));
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_consumer('ev_empty', 'from_head',
                                  start_after => coalesce(stream_seq.head('ev_empty'), 0));
SELECT stream_seq.position('ev_empty', 'from_head');
SELECT stream_seq.create_consumer('ev_empty', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_consumer(NULL, 'x');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.advance('ev_empty', 'from_head', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.advance('ev_empty', NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.drop_consumer('ev_empty', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.wait('ev_empty', NULL, '0');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.wait('ev_empty', 0, NULL);
\echo :LAST_ERROR_SQLSTATE
-- extreme positions and timeouts: nothing overflows
INSERT INTO ev_empty VALUES ('one');
SELECT stream_seq.wait('ev_empty', 0, '100000000 years');
SELECT clock_timestamp() AS before_wait \gset
SELECT stream_seq.wait('ev_empty', 9223372036854775807, '200 milliseconds');
SELECT clock_timestamp() - :'before_wait'::timestamptz >= interval '200 milliseconds' AS waited_for_the_timeout;
SELECT stream_seq.wait('ev_empty', -9223372036854775808, '0');
SELECT stream_seq.wait('ev_empty', 0, '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.advance('ev_empty', 'from_head', 9223372036854775807);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_consumer('ev_empty', 'far', start_after => 9223372036854775807);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_consumer('ev_empty', 'early', start_after => -9223372036854775808);
SELECT stream_seq.position('ev_empty', 'early');
SELECT stream_seq.disable('ev_empty');
DROP TABLE ev_empty;

-- the position a transaction read (advance()'s fence) goes with it: a
-- prepared transaction reads and advances; after COMMIT PREPARED the next
-- transaction of the session advances without having read, unfenced
SELECT stream_seq.create_consumer('ev', 'prepared');
BEGIN;
SELECT count(*) > 0 AS read_some FROM stream_seq.read('ev', 'prepared', 2);
SELECT stream_seq.advance('ev', 'prepared', 1);
PREPARE TRANSACTION 'consumer_advance';
COMMIT PREPARED 'consumer_advance';
BEGIN;
SELECT stream_seq.advance('ev', 'prepared', 2);
COMMIT;
SELECT stream_seq.position('ev', 'prepared');
SELECT stream_seq.drop_consumer('ev', 'prepared');

-- disable() removes the stream's consumers
SELECT stream_seq.disable('ev');
SELECT count(*) FROM stream_seq.consumer;
DROP TABLE ev, applied, plain;

-- start positions by name: start => 'earliest', 'latest' or a time as text
CREATE TABLE ev_start (id bigserial PRIMARY KEY, customer_id int);
SELECT stream_seq.enable('ev_start', 'seq', 'committed_at');
INSERT INTO ev_start (customer_id) SELECT g FROM generate_series(1, 3) g;
INSERT INTO ev_start (customer_id) VALUES (4);
-- which function each call resolves to (a function's body is resolved
-- when it is made, and runs none of them): typed and named calls as
-- before the text overload, an untyped literal in third (fifth) place,
-- ambiguous before, to it
CREATE FUNCTION resolved() RETURNS void LANGUAGE sql
BEGIN ATOMIC
  SELECT stream_seq.create_consumer('ev_start', 'c');
  SELECT stream_seq.create_consumer('ev_start', 'c', 2);
  SELECT stream_seq.create_consumer('ev_start', 'c', start_after => 2);
  SELECT stream_seq.create_consumer('ev_start', 'c', now());
  SELECT stream_seq.create_consumer('ev_start', 'c', '2026-01-01'::date);
  SELECT stream_seq.create_consumer('ev_start', 'c', start_at => '2026-01-01');
  SELECT stream_seq.create_consumer('ev_start', 'c', start => 'latest');
  SELECT stream_seq.create_consumer('ev_start', 'c', '2026-01-01');
  SELECT stream_seq.create_group('ev_start', 'g', 'customer_id', 2);
  SELECT stream_seq.create_group('ev_start', 'g', 'customer_id', 2, 2);
  SELECT stream_seq.create_group('ev_start', 'g', 'customer_id', 2, start_at => now());
  SELECT stream_seq.create_group('ev_start', 'g', 'customer_id', 2, start => 'earliest');
  SELECT stream_seq.create_group('ev_start', 'g', 'customer_id', 2, 'latest');
END;
SELECT pg_get_functiondef('resolved'::regproc);
DROP FUNCTION resolved();
SELECT stream_seq.create_consumer('ev_start', 'from_earliest', start => 'earliest');
SELECT stream_seq.create_consumer('ev_start', 'from_latest', start => 'latest');
SELECT stream_seq.create_consumer('ev_start', 'from_latest_upper', ' Latest ');
SELECT stream_seq.create_consumer('ev_start', 'from_infinity', start => 'infinity');
SELECT stream_seq.create_consumer('ev_start', 'from_minus_infinity', start => '-infinity');
-- a time as text: before the first row numbered at or after it
SELECT committed_at AS time_of_3 FROM ev_start WHERE id = 3 \gset
SELECT stream_seq.create_consumer('ev_start', 'from_3', :'time_of_3');
SELECT stream_seq.create_group('ev_start', 'group_latest', 'customer_id', 2, start => 'latest');
SELECT stream_seq.create_group('ev_start', 'group_earliest', 'customer_id', 2, 'earliest');
SELECT consumer, position, position = stream_seq.horizon('ev_start') - 1 AS at_latest
  FROM stream_seq.consumers WHERE stream = 'ev_start'::regclass ORDER BY consumer;
-- 'latest' reads what commits after it, and nothing before
SELECT count(*) FROM stream_seq.read('ev_start', 'from_latest');
INSERT INTO ev_start (customer_id) VALUES (5);
SELECT "row"->>'customer_id' AS customer_id FROM stream_seq.read('ev_start', 'from_latest');
-- NULL and values that name no position: errors, and nothing is created
SELECT stream_seq.create_consumer('ev_start', 'bad', start => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_consumer('ev_start', 'bad', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_consumer('ev_start', 'bad', start => 'newest');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_consumer('ev_start', 'bad', start => '');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_consumer('ev_start', 'bad', start => '5');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_consumer('ev_start', 'bad', start => '294277-01-01 00:00+00');
\echo :LAST_ERROR_SQLSTATE
DO $$
BEGIN
  PERFORM stream_seq.create_consumer('ev_start', 'bad', start => repeat('x', 100000));
EXCEPTION WHEN invalid_parameter_value THEN
  RAISE WARNING 'a long value is refused with %', SQLSTATE;
END $$;
SELECT stream_seq.create_group('ev_start', 'bad', 'customer_id', 2, start => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_group('ev_start', 'bad', 'customer_id', 2, start => 'oldest');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_consumer(NULL, 'bad', start => 'latest');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_consumer('ev_start', NULL, start => 'earliest');
\echo :LAST_ERROR_SQLSTATE
-- an existing name stays as it is
SELECT stream_seq.create_consumer('ev_start', 'from_earliest', start => 'latest');
\echo :LAST_ERROR_SQLSTATE
-- a time needs a time column
CREATE TABLE ev_untimed (payload text);
SELECT stream_seq.enable('ev_untimed');
SELECT stream_seq.create_consumer('ev_untimed', 'bad', start => '2026-01-01');
\echo :LAST_ERROR_SQLSTATE
INSERT INTO ev_untimed VALUES ('one'), ('two');
SELECT stream_seq.create_consumer('ev_untimed', 'from_latest', start => 'latest');
SELECT stream_seq.position('ev_untimed', 'from_latest');
SELECT stream_seq.disable('ev_untimed');
DROP TABLE ev_untimed;
SELECT count(*) AS created FROM stream_seq.consumer WHERE consumer = 'bad';
-- an ordinary role: without USAGE on the schema, then without SELECT on
-- the table, it creates nothing
SET ROLE consumer_b;
SELECT stream_seq.create_consumer('ev_start', 'theirs', start => 'latest');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
REVOKE USAGE ON SCHEMA stream_seq FROM consumer_b;
SET ROLE consumer_b;
SELECT stream_seq.create_consumer('ev_start', 'theirs', start => 'latest');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
GRANT USAGE ON SCHEMA stream_seq TO consumer_b;
SET ROLE consumer_b;
SELECT stream_seq.create_consumer('ev_start', 'theirs', start => 'earliest');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_group('ev_start', 'theirs', 'customer_id', 2, start => 'latest');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT count(*) AS created FROM stream_seq.consumer WHERE consumer = 'theirs';
SELECT stream_seq.disable('ev_start');
DROP TABLE ev_start;

REVOKE ALL ON SCHEMA stream_seq FROM consumer_a, consumer_b;
DROP ROLE consumer_a, consumer_b;
