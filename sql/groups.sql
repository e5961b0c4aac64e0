-- Consumer groups: slots by a hash of a key, leases with fencing, parked
-- rows, resets; the SQL surface and every error
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
\set SHOW_CONTEXT never
\set VERBOSITY default

CREATE TABLE gev (id bigserial PRIMARY KEY, customer int, payload text);
SELECT stream_seq.enable('gev');
INSERT INTO gev (customer, payload) SELECT g % 10, 'p' || g FROM generate_series(1, 40) g;

-- a group of 4 slots keyed by customer; its index finds a slot's rows
SELECT stream_seq.create_group('gev', 'g', 'customer', 4);
SELECT indexdef FROM pg_indexes WHERE tablename = 'gev' AND indexname LIKE '%slot_idx';
SELECT consumer, position, slots FROM stream_seq.consumers;
SELECT slot, position, worker, token FROM stream_seq.consumer_slots ORDER BY slot;
-- every row belongs to exactly one slot, all rows of a key to the same one
SELECT (SELECT count(DISTINCT stream_seq.slot_of(customer::text, 4)) FROM gev) AS slots_used,
       bool_and(n = 1) AS one_slot_per_key
  FROM (SELECT count(DISTINCT stream_seq.slot_of(customer::text, 4)) n
          FROM gev GROUP BY customer) k;
SELECT stream_seq.slot_of(NULL, 4), stream_seq.slot_of('x', 1);
-- a slot count below 1 is an error, not a division by zero or a slot
-- that does not exist
SELECT stream_seq.slot_of('a', 0);
SELECT stream_seq.slot_of('a', -3);
SELECT stream_seq.slot_of('a', NULL);

-- two workers share the slots: the second gets its half once the first
-- claims again and gives back what is above its share
SELECT * FROM stream_seq.claim('gev', 'g', 'w1', '1 minute');
SELECT * FROM stream_seq.claim('gev', 'g', 'w2', '1 minute');
SELECT * FROM stream_seq.claim('gev', 'g', 'w1', '1 minute');
SELECT * FROM stream_seq.claim('gev', 'g', 'w2', '1 minute');
SELECT slot, worker, token FROM stream_seq.consumer_slots ORDER BY slot;

-- the shares add up to the slots: three workers on eight get 3, 3 and 2
SELECT stream_seq.create_group('gev', 'g8', 'customer', 8);
SELECT count(*) FROM stream_seq.claim('gev', 'g8', 'a', '1 minute');
SELECT count(*) FROM stream_seq.claim('gev', 'g8', 'b', '1 minute');
SELECT count(*) FROM stream_seq.claim('gev', 'g8', 'c', '1 minute');
SELECT count(*) FROM stream_seq.claim('gev', 'g8', 'a', '1 minute');
SELECT count(*) FROM stream_seq.claim('gev', 'g8', 'b', '1 minute');
SELECT count(*) FROM stream_seq.claim('gev', 'g8', 'c', '1 minute');
SELECT worker, count(*) FROM stream_seq.consumer_slots
 WHERE consumer = 'g8' GROUP BY worker ORDER BY worker;
SELECT stream_seq.drop_consumer('gev', 'g8');

-- reading and advancing a slot with its token
SELECT count(*) AS rows_in_slot_2 FROM stream_seq.read_slot('gev', 'g', 2, 2, 1000);
SELECT bool_and(stream_seq.slot_of(("row"->>'customer'), 4) = 2) AS only_its_rows,
       min(seq) < max(seq) AS in_order
  FROM stream_seq.read_slot('gev', 'g', 2, 2, 1000);
BEGIN;
SELECT max(seq) AS last FROM stream_seq.read_slot('gev', 'g', 2, 2, 3) \gset
SELECT stream_seq.advance_slot('gev', 'g', 2, 2, :last);
COMMIT;
SELECT stream_seq.slot_position('gev', 'g', 2) = :last AS advanced;
SELECT count(*) AS rows_left FROM stream_seq.read_slot('gev', 'g', 2, 2, 1000);
SELECT slot, backlog FROM stream_seq.consumer_slots WHERE consumer = 'g' ORDER BY slot;
-- reading and advancing in one statement: one snapshot, one horizon
SELECT stream_seq.advance_slot('gev', 'g', 2, 2, max(p.seq))
  FROM stream_seq.read_slot('gev', 'g', 2, 2, 2) p;
SELECT count(*) AS rows_left FROM stream_seq.read_slot('gev', 'g', 2, 2, 1000);
SELECT stream_seq.slot_position('gev', 'g', 2) AS last \gset

-- a worker that lost its slot is fenced: SS001, and nothing changes
SELECT stream_seq.release('gev', 'g', 'w2');
SELECT * FROM stream_seq.claim('gev', 'g', 'w1', '1 minute');
SELECT stream_seq.advance_slot('gev', 'g', 2, 2, :last + 5);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.read_slot('gev', 'g', 2, 2, 10);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.slot_position('gev', 'g', 2) = :last AS unchanged;

-- errors
SELECT stream_seq.advance_slot('gev', 'g', 2, 3, :last - 1);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.advance_slot('gev', 'g', 2, 3, 1000000);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.advance_slot('gev', 'g', 4, 1, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.advance_slot('gev', 'g', -1, 1, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.advance_slot('gev', 'g', 2, NULL, 1);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.read_slot('gev', 'g', 2, 3, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.claim('gev', 'g', '', '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.claim('gev', 'g', 'w1', '0');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.claim('gev', 'g', 'w1', '2 days');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.claim('gev', 'g', 'w1', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.claim('gev', 'nope', 'w1');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_group('gev', 'g', 'customer', 4);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_group('gev', 'g0', 'customer', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_group('gev', 'g0', 'customer', 1025);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_group('gev', 'g0', '', 4);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_group('gev', 'g0', 'no_such_column', 4);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_group('gev', 'g0', 'random()', 4);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_group('gev', 'g0', NULL, 4);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_group('gev', 'g0', 'customer', 4, 1000000);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS groups FROM stream_seq.consumers WHERE slots IS NOT NULL;
-- a group is not read or advanced as a plain consumer, and the other way
SELECT * FROM stream_seq.read('gev', 'g');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.advance('gev', 'g', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_consumer('gev', 'plain');
SELECT * FROM stream_seq.claim('gev', 'plain', 'w1');
\echo :LAST_ERROR_SQLSTATE

-- keys may be expressions of the table's columns
SELECT stream_seq.create_group('gev', 'by_expr', 'customer % 3', 2);
SELECT (SELECT count(*) FROM stream_seq.read_slot('gev', 'by_expr', 0, 0, 1000))
     + (SELECT count(*) FROM stream_seq.read_slot('gev', 'by_expr', 1, 0, 1000)) AS all_rows;
SELECT stream_seq.drop_consumer('gev', 'by_expr');
SELECT count(*) AS slot_indexes FROM pg_indexes WHERE tablename = 'gev' AND indexname LIKE '%slot_idx';

-- parking: a row set aside in the transaction that advances past it;
-- replay() returns it, and removes it when the caller commits
SELECT * FROM stream_seq.claim('gev', 'g', 'w1', '1 minute') ORDER BY slot LIMIT 0;
SELECT min(seq) AS poison FROM stream_seq.read_slot('gev', 'g', 0, 1, 10) \gset
BEGIN;
SELECT stream_seq.park('gev', 'g', :poison, 'handler failed');
SELECT stream_seq.advance_slot('gev', 'g', 0, 1, :poison);
COMMIT;
SELECT stream_seq.park('gev', 'g', :poison, 'failed again');
SELECT consumer, seq = :poison AS poison, reason, attempts FROM stream_seq.parked_rows;
BEGIN;
SELECT seq = :poison AS poison, "row"->>'payload' IS NOT NULL AS has_row, reason, attempts
  FROM stream_seq.replay('gev', 'g');
ROLLBACK;
SELECT count(*) AS still_parked FROM stream_seq.parked_rows;
-- a replayed row that fails again is parked again: one more attempt, its
-- history kept
BEGIN;
SELECT count(*) AS replayed FROM stream_seq.replay('gev', 'g');
SELECT stream_seq.park('gev', 'g', :poison, 'failed on replay');
COMMIT;
SELECT reason, attempts, first_failed < last_failed AS history_kept FROM stream_seq.parked_rows;
BEGIN;
SELECT count(*) AS replayed FROM stream_seq.replay('gev', 'g');
COMMIT;
SELECT count(*) AS parked_after_commit FROM stream_seq.parked_rows;
SELECT stream_seq.park('gev', 'g', 1000000);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.park('gev', 'g', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.replay('gev', 'g', 0);
\echo :LAST_ERROR_SQLSTATE

-- trim() does not pass a slot, nor a parked row
SELECT stream_seq.trim('gev', 10);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.park('gev', 'plain', 3, 'kept for later');
SELECT stream_seq.reset('gev', 'g', 20);
SELECT stream_seq.advance('gev', 'plain', 20);
SELECT stream_seq.trim('gev', 10);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM stream_seq.replay('gev', 'plain');

-- reset: backwards or forwards, one slot or all, recorded
SELECT stream_seq.reset('gev', 'g', 5, 1);
SELECT slot, position, reset_from, reset_by FROM stream_seq.consumer_slots ORDER BY slot;
SELECT stream_seq.reset('gev', 'g', 0);
SELECT slot, position, reset_from FROM stream_seq.consumer_slots ORDER BY slot;
SELECT stream_seq.reset('gev', 'plain', 2);
SELECT consumer, position, reset_from, reset_by FROM stream_seq.consumers ORDER BY consumer;
SELECT stream_seq.reset('gev', 'g', 1000000);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.reset('gev', 'g', -1);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.reset('gev', 'g', 1, 9);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.reset('gev', 'plain', 1, 0);
\echo :LAST_ERROR_SQLSTATE

-- privileges: only the table's owner creates a group; another role sees
-- nothing of a group of a table it may not read, and may not move it
CREATE ROLE group_other;
GRANT USAGE ON SCHEMA stream_seq TO group_other;
SET ROLE group_other;
SELECT stream_seq.create_group('gev', 'mine', 'customer', 2);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM stream_seq.consumer_slots;
SELECT count(*) FROM stream_seq.parked_rows;
SELECT * FROM stream_seq.claim('gev', 'g', 'intruder');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.reset('gev', 'g', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.consumer_slot;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
GRANT SELECT ON gev TO group_other;
SET ROLE group_other;
SELECT count(*) FROM stream_seq.consumer_slots;
SELECT * FROM stream_seq.claim('gev', 'g', 'intruder');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.park('gev', 'g', 1);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

-- disable() takes the groups, their slots and their index with it
SELECT stream_seq.disable('gev');
SELECT count(*) AS slot_indexes FROM pg_indexes WHERE tablename = 'gev' AND indexname LIKE '%slot_idx';
SELECT (SELECT count(*) FROM stream_seq.consumer_slot) AS slots,
       (SELECT count(*) FROM stream_seq.parked) AS parked,
       (SELECT count(*) FROM stream_seq.consumer_worker) AS workers;
DROP TABLE gev;
REVOKE USAGE ON SCHEMA stream_seq FROM group_other;
DROP ROLE group_other;

-- a slot whose keys get no rows is never advanced by a worker that
-- advances past what it read; retention counts each slot as finished up
-- to just below its next row (the horizon if it has none), so it stops
-- only before a row some slot has still to read, and moves the slots it
-- passed up to where it trimmed: they read on from there.  As an ordinary
-- role that owns the table.
CREATE ROLE group_owner;
GRANT USAGE, CREATE ON SCHEMA public TO group_owner;
GRANT USAGE ON SCHEMA stream_seq TO group_owner;
SET ROLE group_owner;
CREATE TABLE gidle (k int NOT NULL, seq bigint);
SELECT stream_seq.enable('gidle');
SELECT stream_seq.create_group('gidle', 'g', 'k', 2);
-- every row has a key of one slot
INSERT INTO gidle SELECT 7 FROM generate_series(1, 6);
SELECT stream_seq.slot_of('7', 2) AS busy_slot \gset
SELECT 1 - :busy_slot AS idle_slot \gset
SELECT stream_seq.trim('gidle', 4);
\echo :LAST_ERROR_SQLSTATE
SELECT token FROM stream_seq.claim('gidle', 'g', 'w', '1 minute') WHERE slot = :busy_slot \gset
SELECT stream_seq.advance_slot('gidle', 'g', :busy_slot, :token, 3);
SELECT stream_seq.trim('gidle', 4) AS trimmed;
SELECT slot, position FROM stream_seq.consumer_slots WHERE stream = 'gidle'::regclass ORDER BY slot;
SELECT stream_seq.trim('gidle', 5);
\echo :LAST_ERROR_SQLSTATE
-- the idle slot reads on after the trim
SELECT token AS idle_token FROM stream_seq.claim('gidle', 'g', 'w', '1 minute') WHERE slot = :idle_slot \gset
SELECT count(*) FROM stream_seq.read_slot('gidle', 'g', :idle_slot, :idle_token);
-- a row for the idle slot's keys holds retention just below it
SELECT k FROM generate_series(1, 50) k WHERE stream_seq.slot_of(k::text, 2) = :idle_slot LIMIT 1 \gset
INSERT INTO gidle VALUES (:k);
SELECT stream_seq.advance_slot('gidle', 'g', :busy_slot, :token, 7);
SELECT stream_seq.trim('gidle', 8);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.trim('gidle', 7) AS trimmed;
SELECT seq FROM stream_seq.read_slot('gidle', 'g', :idle_slot, :idle_token);
SELECT stream_seq.advance_slot('gidle', 'g', :idle_slot, :idle_token, 7);
-- a table that forces row-level security on its owner may hide rows from
-- it: then only the slots' positions count (the idle slot at 7 holds
-- retention there); without the forcing, the owner sees that the idle
-- slot has no row after 7
INSERT INTO gidle VALUES (7), (7);
SELECT stream_seq.advance_slot('gidle', 'g', :busy_slot, :token, 9);
ALTER TABLE gidle ENABLE ROW LEVEL SECURITY, FORCE ROW LEVEL SECURITY;
CREATE POLICY nothing ON gidle USING (false);
SELECT stream_seq.trim('gidle', 10);
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE gidle NO FORCE ROW LEVEL SECURITY;
SELECT stream_seq.trim('gidle', 10) AS trimmed;
SELECT slot, position FROM stream_seq.consumer_slots WHERE stream = 'gidle'::regclass ORDER BY slot;
SELECT stream_seq.disable('gidle');
DROP TABLE gidle;
RESET ROLE;
REVOKE ALL ON SCHEMA public FROM group_owner;
REVOKE ALL ON SCHEMA stream_seq FROM group_owner;
DROP ROLE group_owner;
