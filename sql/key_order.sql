-- Per-key order through retries: a group that keeps it holds the later
-- rows of a key while a row of it is parked (read_slot() parks them as
-- held rows and goes on with the other keys); due() and replay() hand them
-- back one at a time, in order, each once the one before it was applied.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
\set SHOW_CONTEXT never

CREATE TABLE ko (k int, v text);
SELECT stream_seq.enable('ko');
-- keys 1, 2, 0, 1, 2, 0, ... in rows 1..12
INSERT INTO ko SELECT g % 3, 'v' || g FROM generate_series(1, 12) g;
SELECT stream_seq.create_group('ko', 'g', 'k', 1);
SELECT stream_seq.set_retry_policy('ko', 'g', 2, '0 seconds', 1, '0 seconds');
SELECT consumer, key_order, held FROM stream_seq.consumers WHERE consumer = 'g';

-- bad input; none of it changes anything
SELECT stream_seq.set_key_order(NULL, 'g', 'until_applied');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_key_order('ko', NULL, 'until_applied');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_key_order('ko', 'g', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_key_order('ko', 'g', 'sometimes');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_key_order('ko', 'g', '');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_key_order('ko', 'nobody', 'until_applied');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_key_order('pg_class', 'g', 'until_applied');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_consumer('ko', 'plain');
SELECT stream_seq.set_key_order('ko', 'plain', 'until_applied');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.release_key('ko', 'plain', '1', 'no key');
\echo :LAST_ERROR_SQLSTATE
SELECT consumer, key_order FROM stream_seq.consumers WHERE stream = 'ko'::regclass ORDER BY consumer;

SELECT stream_seq.set_key_order('ko', 'g', 'until_applied');
SELECT consumer, key_order FROM stream_seq.consumers WHERE consumer = 'g';
SELECT token FROM stream_seq.claim('ko', 'g', 'w1', '1 minute') \gset
-- a page holds one row of each key: it ends before the next row of a key
-- it has (a worker that parks a failed row must not apply a later one of
-- its key in the same page)
SELECT seq, "row"->>'k' AS k FROM stream_seq.read_slot('ko', 'g', 0, :token);
SELECT seq, "row"->>'k' AS k FROM stream_seq.read_slot('ko', 'g', 0, :token, 2);
SELECT k, v, seq FROM stream_seq.read_slot_rows(NULL::ko, 'g', 0, :token);

-- a park rolled back to a savepoint holds nothing
BEGIN;
SAVEPOINT s;
SELECT stream_seq.park('ko', 'g', 1, 'boom');
SELECT seq, key, held FROM stream_seq.parked_rows;
ROLLBACK TO SAVEPOINT s;
SELECT count(*) AS parked FROM stream_seq.parked_rows;
ROLLBACK;

-- row 1 (key 1) fails and is parked: its key is held
BEGIN;
SELECT stream_seq.park('ko', 'g', 1, 'boom');
SELECT stream_seq.advance_slot('ko', 'g', 0, :token, 3);
COMMIT;
SELECT seq, key, held, attempts, waits_behind FROM stream_seq.parked_rows ORDER BY seq;
-- row 4 (key 1) is parked as held, the slot moves past it, and the other
-- keys go on
SELECT seq, "row"->>'k' AS k FROM stream_seq.read_slot('ko', 'g', 0, :token);
SELECT slot, position FROM stream_seq.consumer_slots WHERE consumer = 'g';
SELECT seq, key, held, attempts, reason, due_at IS NOT NULL AS scheduled, dead, waits_behind
  FROM stream_seq.parked_rows ORDER BY seq;
SELECT stream_seq.advance_slot('ko', 'g', 0, :token, 6);
-- read in a transaction rolled back: the held row and the move go with it
BEGIN;
SELECT k, v, seq FROM stream_seq.read_slot_rows(NULL::ko, 'g', 0, :token);
SELECT seq FROM stream_seq.parked_rows WHERE held ORDER BY seq;
ROLLBACK;
SELECT seq FROM stream_seq.parked_rows WHERE held ORDER BY seq;
SELECT k, v, seq FROM stream_seq.read_slot_rows(NULL::ko, 'g', 0, :token);
SELECT stream_seq.advance_slot('ko', 'g', 0, :token, 9);
SELECT consumer, parked, dead_letters, held FROM stream_seq.consumers WHERE consumer = 'g';
-- metrics() counts them apart: held rows are not failures, nor rows
-- waiting for a replay by hand
SELECT consumer, parked, dead_letters, held, retries_due, oldest_parked_seconds
  FROM stream_seq.metrics('consumer') WHERE stream = 'ko'::regclass ORDER BY consumer;

-- due(): the parked row first, alone: its held rows wait behind it
BEGIN;
SELECT seq, attempts, "row"->>'v' AS v FROM stream_seq.due('ko', 'g');
PREPARE TRANSACTION 'key_order_due';
-- another worker meanwhile: the row is taken, not applied yet, and still
-- holds its key
SELECT count(*) AS due_meanwhile FROM stream_seq.due('ko', 'g');
COMMIT PREPARED 'key_order_due';
SELECT seq, held, waits_behind FROM stream_seq.parked_rows ORDER BY seq;
-- row 1 applied: row 4 is next; it fails, and holds its key in turn
BEGIN;
SELECT seq, attempts, "row"->>'v' AS v FROM stream_seq.due('ko', 'g');
SELECT stream_seq.park('ko', 'g', 4, 'boom again');
COMMIT;
SELECT seq, held, attempts, dead, waits_behind FROM stream_seq.parked_rows ORDER BY seq;
SELECT consumer, parked, dead_letters, held FROM stream_seq.consumers WHERE consumer = 'g';
-- it fails once more: a dead letter, which under 'until_applied' lets its
-- key go on: row 7 comes back
BEGIN;
SELECT seq, attempts FROM stream_seq.due('ko', 'g');
SELECT stream_seq.park('ko', 'g', 4, 'boom for good');
COMMIT;
SELECT seq, held, attempts, dead, waits_behind FROM stream_seq.parked_rows ORDER BY seq;
SELECT seq, attempts, "row"->>'v' AS v FROM stream_seq.due('ko', 'g');
SELECT seq, held, dead FROM stream_seq.parked_rows ORDER BY seq;
-- the key is no longer held: its next rows are read
SELECT seq, "row"->>'k' AS k FROM stream_seq.read_slot('ko', 'g', 0, :token);
SELECT stream_seq.advance_slot('ko', 'g', 0, :token, 12);

-- replay() takes the dead letter by hand (every parked row, dead or not)
SELECT seq, "row"->>'v' AS v, attempts FROM stream_seq.replay('ko', 'g');

-- 'until_released': a dead letter holds its key until release_key()
SELECT stream_seq.set_key_order('ko', 'g', 'until_released');
SELECT stream_seq.set_retry_policy('ko', 'g', 1);
INSERT INTO ko SELECT g % 3, 'v' || g FROM generate_series(13, 18) g;
SELECT seq, "row"->>'k' AS k FROM stream_seq.read_slot('ko', 'g', 0, :token);
BEGIN;
SELECT stream_seq.park('ko', 'g', 14, 'poison');
SELECT stream_seq.advance_slot('ko', 'g', 0, :token, 15);
COMMIT;
SELECT seq, "row"->>'k' AS k FROM stream_seq.read_slot('ko', 'g', 0, :token);
SELECT stream_seq.advance_slot('ko', 'g', 0, :token, 16);
-- row 17 (key 2) is held behind the dead letter, row 18 (key 0) is read
SELECT seq, "row"->>'k' AS k FROM stream_seq.read_slot('ko', 'g', 0, :token);
SELECT stream_seq.advance_slot('ko', 'g', 0, :token, 18);
SELECT seq, key, held, dead, waits_behind FROM stream_seq.parked_rows WHERE seq > 12 ORDER BY seq;
SELECT count(*) AS due FROM stream_seq.due('ko', 'g');
-- trim() keeps the dead letter and the held row
SELECT stream_seq.drop_consumer('ko', 'plain');
SELECT stream_seq.trim('ko', 19);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.trim('ko', 14);
SELECT stream_seq.first('ko');
-- and so does a retention policy that respects consumers
SELECT stream_seq.set_retention('ko', keep_rows => 1);
SELECT removed_rows, removed_before, held_by, held_at FROM stream_seq.apply_retention('ko');
SELECT stream_seq.drop_retention('ko');
-- release_key(): bad input, then the operator lets key 2 go on
SELECT stream_seq.release_key('ko', 'g', NULL, 'skipped');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.release_key('ko', 'g', '2', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.release_key('ko', 'nobody', '2', 'skipped');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.release_key('ko', 'g', 'no such key', 'nothing held');
-- in a transaction rolled back to a savepoint: still held
BEGIN;
SAVEPOINT s;
SELECT stream_seq.release_key('ko', 'g', '2', 'skipped by hand');
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT seq, released_at IS NULL AS not_released FROM stream_seq.parked_rows WHERE seq = 14;
SELECT stream_seq.release_key('ko', 'g', '2', 'skipped by hand');
SELECT stream_seq.release_key('ko', 'g', '2', 'again') AS released_again;
SELECT seq, dead, release_reason, released_at IS NOT NULL AS released, waits_behind
  FROM stream_seq.parked_rows WHERE seq > 12 ORDER BY seq;
SELECT seq, attempts, "row"->>'v' AS v FROM stream_seq.due('ko', 'g');
-- the dead letter is still there for replay() or revive()
SELECT seq, dead FROM stream_seq.parked_rows ORDER BY seq;

-- replay() keeps the order too: one row of a key per call
SELECT stream_seq.set_retry_policy('ko', 'g', NULL);
INSERT INTO ko VALUES (5, 'a'), (5, 'b'), (5, 'c');
SELECT seq, "row"->>'v' AS v FROM stream_seq.read_slot('ko', 'g', 0, :token);
BEGIN;
SELECT stream_seq.park('ko', 'g', 19, 'by hand only');
SELECT stream_seq.advance_slot('ko', 'g', 0, :token, 19);
COMMIT;
SELECT seq, "row"->>'v' AS v FROM stream_seq.read_slot('ko', 'g', 0, :token);
SELECT seq, held, waits_behind FROM stream_seq.parked_rows WHERE key = '5' ORDER BY seq;
SELECT count(*) AS due FROM stream_seq.due('ko', 'g');
SELECT seq, "row"->>'v' AS v, attempts FROM stream_seq.replay('ko', 'g');
SELECT seq, "row"->>'v' AS v, attempts FROM stream_seq.replay('ko', 'g');
SELECT seq, "row"->>'v' AS v, attempts FROM stream_seq.replay('ko', 'g');
SELECT seq, "row"->>'v' AS v, attempts FROM stream_seq.replay('ko', 'g');

-- rows whose key is NULL are not held and may repeat in a page
INSERT INTO ko VALUES (NULL, 'n1'), (NULL, 'n2'), (6, 'd'), (6, 'e');
SELECT seq, "row"->>'v' AS v FROM stream_seq.read_slot('ko', 'g', 0, :token);
SELECT k, v, seq FROM stream_seq.read_slot_rows(NULL::ko, 'g', 0, :token);

-- the page's plans are kept for the session: a renamed table gets its own
BEGIN;
SELECT stream_seq.park('ko', 'g', 24, 'hold key 6');
SELECT stream_seq.advance_slot('ko', 'g', 0, :token, 24);
COMMIT;
ALTER TABLE ko RENAME TO ko_renamed;
SELECT seq, "row"->>'v' AS v FROM stream_seq.read_slot('ko_renamed', 'g', 0, :token);
SELECT seq, held, waits_behind FROM stream_seq.parked_rows WHERE key = '6' ORDER BY seq;
SELECT slot, position FROM stream_seq.consumer_slots WHERE consumer = 'g';
ALTER TABLE ko_renamed RENAME TO ko;

-- a renamed key column: the group's slot expression is printed again from
-- its index (every read failed with 42703 on the old name), and key 6 is
-- still held
ALTER TABLE ko RENAME COLUMN k TO key_k;
SELECT slot_expr FROM stream_seq.consumer WHERE consumer = 'g';
INSERT INTO ko VALUES (7, 'f'), (6, 'g');
SELECT seq, "row"->>'v' AS v FROM stream_seq.read_slot('ko', 'g', 0, :token);
SELECT stream_seq.advance_slot('ko', 'g', 0, :token, 26);
SELECT seq, "row"->>'v' AS v FROM stream_seq.read_slot('ko', 'g', 0, :token);
SELECT seq, held, waits_behind FROM stream_seq.parked_rows WHERE key = '6' ORDER BY seq;
-- a rename rolled back leaves the expression as it was
BEGIN;
ALTER TABLE ko RENAME COLUMN key_k TO k2;
ROLLBACK;
ALTER TABLE ko RENAME COLUMN key_k TO k;
SELECT slot_expr FROM stream_seq.consumer WHERE consumer = 'g';

-- 'off': rows are read at once again
SELECT stream_seq.set_key_order('ko', 'g', 'off');
SELECT consumer, key_order FROM stream_seq.consumers WHERE consumer = 'g';

-- a row parked before the group kept per-key order holds nothing, also
-- when it is parked again
SELECT stream_seq.create_group('ko', 'g2', 'k', 1);
SELECT stream_seq.park('ko', 'g2', 24, 'before');
SELECT stream_seq.set_key_order('ko', 'g2', 'until_applied');
SELECT stream_seq.park('ko', 'g2', 24, 'again'), stream_seq.park('ko', 'g2', 25, 'after');
SELECT seq, key, held, attempts FROM stream_seq.parked_rows WHERE consumer = 'g2' ORDER BY seq;
SELECT stream_seq.drop_consumer('ko', 'g2');

-- an ordinary role without privileges
CREATE ROLE ko_nobody;
GRANT USAGE ON SCHEMA stream_seq TO ko_nobody;
SET ROLE ko_nobody;
SELECT stream_seq.set_key_order('ko', 'g', 'until_applied');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.release_key('ko', 'g', '2', 'not mine');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM stream_seq.parked_rows;
RESET ROLE;
GRANT SELECT ON ko TO ko_nobody;
SET ROLE ko_nobody;
SELECT stream_seq.set_key_order('ko', 'g', 'until_applied');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM stream_seq.parked_rows;
SELECT stream_seq._key_order_page('ko', 'g', 0, 1, 0, NULL, 10);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT consumer, key_order FROM stream_seq.consumers WHERE consumer = 'g';

SELECT stream_seq.drop_consumer('ko', 'g');
SELECT count(*) AS left_parked FROM stream_seq.parked;
SELECT stream_seq.disable('ko');
DROP TABLE ko;
REVOKE USAGE ON SCHEMA stream_seq FROM ko_nobody;
DROP ROLE ko_nobody;
