-- Retries and dead letters: a consumer's retry policy; park() schedules a
-- row for another try, or makes it a dead letter past the maximum; due()
-- hands back the rows that are due; revive() and replay() by hand.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
\set SHOW_CONTEXT never

CREATE TABLE rev (k int, payload text);
SELECT stream_seq.enable('rev');
INSERT INTO rev SELECT g % 3, 'p' || g FROM generate_series(1, 20) g;
SELECT stream_seq.create_consumer('rev', 'c');

-- without a policy, a parked row waits for replay(): nothing is due
SELECT stream_seq.park('rev', 'c', 1, 'no policy');
SELECT seq, attempts, due_at, dead FROM stream_seq.parked_rows;
SELECT count(*) AS due FROM stream_seq.due('rev', 'c');
-- ... unless park() is given a delay: 0 is due at once
SELECT stream_seq.park('rev', 'c', 2, 'retry at once', '0 seconds');
SELECT seq, attempts, reason, "row"->>'payload' AS payload FROM stream_seq.due('rev', 'c');
SELECT seq, due_at IS NULL AS by_hand_only FROM stream_seq.parked_rows ORDER BY seq;

-- a policy: at most 3 failures, waiting 1 minute, then 2, at most 3
SELECT stream_seq.set_retry_policy('rev', 'c', 3, '1 minute', 2, '3 minutes');
SELECT consumer, max_attempts, retry_delay, retry_backoff, retry_max_delay
  FROM stream_seq.consumers WHERE consumer = 'c';
SELECT stream_seq.park('rev', 'c', 3, 'first');
SELECT seq, attempts, due_at - last_failed AS waits, dead FROM stream_seq.parked_rows WHERE seq = 3;
SELECT stream_seq.park('rev', 'c', 3, 'second');
SELECT seq, attempts, due_at - last_failed AS waits, dead FROM stream_seq.parked_rows WHERE seq = 3;
-- not due yet
SELECT count(*) AS due FROM stream_seq.due('rev', 'c');
SELECT stream_seq.park('rev', 'c', 3, 'third');
SELECT seq, attempts, reason, due_at, dead FROM stream_seq.parked_rows WHERE seq = 3;
SELECT consumer, parked, dead_letters FROM stream_seq.consumers WHERE consumer = 'c';
-- the cap: the 4th wait of 1, 2, 4, 8 minutes is capped at 3
SELECT stream_seq.set_retry_policy('rev', 'c', 10, '1 minute', 2, '3 minutes');
SELECT stream_seq.park('rev', 'c', 4), stream_seq.park('rev', 'c', 4),
       stream_seq.park('rev', 'c', 4), stream_seq.park('rev', 'c', 4);
SELECT seq, attempts, due_at - last_failed AS waits FROM stream_seq.parked_rows WHERE seq = 4;
-- a fixed delay (backoff 1), and a delay given to park() overrides it
SELECT stream_seq.set_retry_policy('rev', 'c', 10, '5 seconds', 1, '5 seconds');
SELECT stream_seq.park('rev', 'c', 5), stream_seq.park('rev', 'c', 5), stream_seq.park('rev', 'c', 5);
SELECT stream_seq.park('rev', 'c', 6, 'come back tomorrow', '1 day');
SELECT seq, attempts, due_at - last_failed AS waits FROM stream_seq.parked_rows WHERE seq IN (5, 6) ORDER BY seq;
-- ... but not past the maximum
SELECT stream_seq.set_retry_policy('rev', 'c', 1);
SELECT stream_seq.park('rev', 'c', 7, 'once is enough', '0 seconds');
SELECT seq, attempts, due_at, dead FROM stream_seq.parked_rows WHERE seq = 7;

-- due() hands back due rows, lowest first, in the caller's transaction
SELECT stream_seq.set_retry_policy('rev', 'c', 5, '0 seconds', 2, '0 seconds');
SELECT stream_seq.park('rev', 'c', 9, 'a'), stream_seq.park('rev', 'c', 8, 'b');
BEGIN;
SELECT seq, attempts, reason FROM stream_seq.due('rev', 'c');
ROLLBACK;
SELECT seq FROM stream_seq.parked_rows WHERE due_at <= now() AND NOT dead ORDER BY seq;
-- a failure in the retry parks it again: one more attempt
BEGIN;
SELECT seq, attempts FROM stream_seq.due('rev', 'c', 1);
SELECT stream_seq.park('rev', 'c', 8, 'failed on retry');
COMMIT;
SELECT seq, attempts, reason, dead FROM stream_seq.parked_rows WHERE seq = 8;
-- a due() rolled back to a savepoint gives the row back: the next due()
-- of the transaction takes it again
BEGIN;
SAVEPOINT s;
SELECT seq FROM stream_seq.due('rev', 'c', 1);
ROLLBACK TO SAVEPOINT s;
SELECT seq FROM stream_seq.due('rev', 'c', 1);
COMMIT;
SELECT seq FROM stream_seq.parked_rows WHERE seq IN (8, 9) ORDER BY seq;
-- in a prepared transaction: taken when it commits
BEGIN;
SELECT seq FROM stream_seq.due('rev', 'c', 1);
PREPARE TRANSACTION 'retries_due';
SELECT count(*) AS taken_by_another FROM stream_seq.due('rev', 'c');
COMMIT PREPARED 'retries_due';
SELECT count(*) AS left_parked FROM stream_seq.parked_rows WHERE seq IN (8, 9);

-- dead letters: not due; revive() makes them due again, replay() takes
-- them by hand
SELECT seq, attempts, dead FROM stream_seq.parked_rows WHERE dead ORDER BY seq;
SELECT count(*) AS due_dead FROM stream_seq.due('rev', 'c');
SELECT stream_seq.set_retry_policy('rev', 'c', 2, '0 seconds', 2, '0 seconds');
SELECT stream_seq.revive('rev', 'c', 7);
SELECT seq, dead, due_at <= now() AS due FROM stream_seq.parked_rows WHERE seq = 7;
SELECT stream_seq.revive('rev', 'c', 7) AS revived_again;
BEGIN;
SELECT seq, attempts FROM stream_seq.due('rev', 'c');
-- failing again at the maximum (2): dead again
SELECT stream_seq.park('rev', 'c', 7, 'still broken');
COMMIT;
SELECT seq, attempts, dead FROM stream_seq.parked_rows WHERE seq = 7;
SELECT seq, "row"->>'payload' AS payload, reason, attempts FROM stream_seq.replay('rev', 'c', 2);
SELECT stream_seq.revive('rev', 'c') AS revived_all;
SELECT count(*) FILTER (WHERE dead) AS dead, count(*) AS parked FROM stream_seq.parked_rows;

-- trim() keeps the rows of dead letters and scheduled retries
SELECT stream_seq.advance('rev', 'c', 20);
SELECT stream_seq.trim('rev', 21);
\echo :LAST_ERROR_SQLSTATE

-- a group: any worker's due() takes the group's due rows
SELECT stream_seq.create_group('rev', 'g', 'k', 2);
SELECT stream_seq.set_retry_policy('rev', 'g', 2, '0 seconds', 1, '0 seconds');
SELECT count(*) FROM stream_seq.claim('rev', 'g', 'w');
SELECT stream_seq.park('rev', 'g', 10, 'slot work failed');
SELECT seq, attempts FROM stream_seq.due('rev', 'g');
SELECT stream_seq.park('rev', 'g', 11), stream_seq.park('rev', 'g', 11);
SELECT consumer, parked, dead_letters FROM stream_seq.consumers WHERE consumer = 'g';

-- bad input; none of it changes anything
SELECT stream_seq.set_retry_policy('rev', 'c', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_retry_policy('rev', 'c', -1);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_retry_policy('rev', 'c', 3, '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_retry_policy('rev', 'c', 3, '1 second', 0.5);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_retry_policy('rev', 'c', 3, '1 second', 11);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_retry_policy('rev', 'c', 3, '1 second', 'NaN');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_retry_policy('rev', 'c', 3, '1 hour', 2, '1 minute');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_retry_policy('rev', 'c', 3, '1 hour', 2, '101 years');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_retry_policy('rev', 'c', 3, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_retry_policy('rev', NULL, 3);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_retry_policy('rev', 'nobody', 3);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_retry_policy('pg_class', 'c', 3);
\echo :LAST_ERROR_SQLSTATE
SELECT max_attempts, retry_delay FROM stream_seq.consumers WHERE consumer = 'c';
SELECT stream_seq.park('rev', 'c', 12, 'negative', '-1 second');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM stream_seq.parked_rows WHERE seq = 12;
SELECT * FROM stream_seq.due('rev', 'c', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.due('rev', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.due('rev', 'nobody');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.revive('rev', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.due('pg_class', 'c');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.replay('pg_class', 'c');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.revive('rev', 'c', -9223372036854775808) AS revived;
-- the extremes of a policy: the longest waits stay representable
SELECT stream_seq.set_retry_policy('rev', 'c', 2147483647, '100 years', 10, '100 years');
SELECT stream_seq.park('rev', 'c', 13), stream_seq.park('rev', 'c', 13);
SELECT seq, attempts, due_at - last_failed AS waits FROM stream_seq.parked_rows WHERE seq = 13;
-- no policy again: rows parked from now on wait for replay()
SELECT stream_seq.set_retry_policy('rev', 'c', NULL);
SELECT max_attempts, retry_delay, retry_backoff, retry_max_delay FROM stream_seq.consumers WHERE consumer = 'c';
SELECT stream_seq.park('rev', 'c', 14);
SELECT due_at, dead FROM stream_seq.parked_rows WHERE seq = 14;

-- a worker that takes due rows one call at a time: parking a row again in
-- the transaction that took it counts one more attempt, even after a
-- second due() (or replay()) in that transaction, so a poison row becomes
-- a dead letter at the maximum
CREATE TABLE hist (k int);
SELECT stream_seq.enable('hist');
INSERT INTO hist SELECT g FROM generate_series(1, 3) g;
SELECT stream_seq.create_consumer('hist', 'w');
SELECT stream_seq.set_retry_policy('hist', 'w', 3, '0 seconds', 1, '0 seconds');
SELECT stream_seq.park('hist', 'w', 1, 'first'), stream_seq.park('hist', 'w', 2, 'first');
BEGIN;
SELECT seq, attempts FROM stream_seq.due('hist', 'w', 1);
SELECT seq, attempts FROM stream_seq.due('hist', 'w', 1);
SELECT stream_seq.park('hist', 'w', 1, 'again'), stream_seq.park('hist', 'w', 2, 'again');
COMMIT;
SELECT seq, attempts, reason, dead FROM stream_seq.parked_rows
 WHERE stream = 'hist'::regclass ORDER BY seq;
BEGIN;
SELECT seq, attempts FROM stream_seq.due('hist', 'w', 1);
SELECT seq, attempts FROM stream_seq.replay('hist', 'w', 1);
SAVEPOINT s;
SELECT seq, attempts FROM stream_seq.due('hist', 'w', 1);
RELEASE SAVEPOINT s;
SELECT stream_seq.park('hist', 'w', 1, 'third'), stream_seq.park('hist', 'w', 2, 'third');
COMMIT;
SELECT seq, attempts, reason, dead FROM stream_seq.parked_rows
 WHERE stream = 'hist'::regclass ORDER BY seq;
-- rows resolved by a transaction that committed are removed by the next
SELECT stream_seq.revive('hist', 'w');
BEGIN;
SELECT seq FROM stream_seq.due('hist', 'w');
COMMIT;
SELECT seq, resolved FROM stream_seq.parked WHERE stream = 'hist'::regclass ORDER BY seq;
SELECT count(*) AS due FROM stream_seq.due('hist', 'w');
SELECT count(*) AS kept FROM stream_seq.parked WHERE stream = 'hist'::regclass;

-- the wait runs from the failure (the park() call), not from the start of
-- the parking transaction
SELECT stream_seq.set_retry_policy('hist', 'w', 5, '1 hour', 1, '1 hour');
BEGIN;
SELECT pg_sleep(0.2);
SELECT stream_seq.park('hist', 'w', 3, 'late in the transaction');
SELECT due_at - last_failed AS waits, last_failed = first_failed AS first,
       last_failed > now() AS after_start
  FROM stream_seq.parked_rows WHERE stream = 'hist'::regclass AND seq = 3;
COMMIT;
SELECT stream_seq.park('hist', 'w', 3, 'again', '0 seconds');
SELECT last_failed > first_failed AS later, due_at = last_failed AS due_at_failure
  FROM stream_seq.parked_rows WHERE stream = 'hist'::regclass AND seq = 3;
-- and due() looks at the clock at its call, not at its transaction's start
BEGIN;
SELECT stream_seq.park('hist', 'w', 3, 'retry soon', '0.1 seconds');
SELECT pg_sleep(0.2);
SELECT seq FROM stream_seq.due('hist', 'w');
COMMIT;

-- bad arguments of due() and replay(): a clean error, no internal SQL
\set SHOW_CONTEXT errors
SELECT * FROM stream_seq.due('hist', 'w', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.replay('hist', 'w', -1);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.due('hist', 'w', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.replay(NULL, 'w');
\echo :LAST_ERROR_SQLSTATE
\set SHOW_CONTEXT never
SELECT stream_seq.disable('hist');
DROP TABLE hist;

-- an ordinary role: its own consumer, and nothing of another's
CREATE ROLE retry_owner;
CREATE ROLE retry_other;
GRANT USAGE ON SCHEMA stream_seq TO retry_owner, retry_other;
GRANT SELECT ON rev TO retry_owner, retry_other;
SET ROLE retry_owner;
SELECT stream_seq.create_consumer('rev', 'mine');
SELECT stream_seq.set_retry_policy('rev', 'mine', 2, '0 seconds', 1, '0 seconds');
SELECT stream_seq.park('rev', 'mine', 1, 'mine failed');
SELECT seq, attempts FROM stream_seq.due('rev', 'mine');
SELECT stream_seq.park('rev', 'mine', 2), stream_seq.park('rev', 'mine', 2);
SELECT stream_seq.revive('rev', 'mine');
SET ROLE retry_other;
SELECT stream_seq.set_retry_policy('rev', 'mine', 5);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.park('rev', 'mine', 3);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.due('rev', 'mine');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.revive('rev', 'mine');
\echo :LAST_ERROR_SQLSTATE
-- it sees the parked rows of the streams it may read
SELECT consumer, seq, attempts, dead FROM stream_seq.parked_rows WHERE consumer = 'mine' ORDER BY seq;
RESET ROLE;
REVOKE SELECT ON rev FROM retry_other;
SET ROLE retry_other;
SELECT count(*) AS visible FROM stream_seq.parked_rows;
RESET ROLE;

SELECT stream_seq.disable('rev');
SELECT count(*) AS parked_left FROM stream_seq.parked;
DROP TABLE rev;
REVOKE ALL ON SCHEMA stream_seq FROM retry_owner, retry_other;
DROP ROLE retry_owner, retry_other;
