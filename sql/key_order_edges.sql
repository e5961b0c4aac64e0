-- Per-key order at its edges: keys longer than a btree entry, and the
-- other cases of the group's key that the key_order suite leaves out.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
\set SHOW_CONTEXT never

-- A key of 6400 bytes that does not compress: a row of it parks, holds
-- its key, and its held rows come back in order.  (The index of parked
-- keys holds a hash of the key: a btree entry holds at most 2704 bytes.)
CREATE TABLE kel (k text, v int);
SELECT stream_seq.enable('kel');
INSERT INTO kel
SELECT (SELECT string_agg(md5(i::text || ':' || (g % 2)), '') FROM generate_series(1, 200) i), g
  FROM generate_series(1, 6) g;
SELECT stream_seq.create_group('kel', 'g', 'k', 1);
SELECT stream_seq.set_key_order('kel', 'g', 'until_released');
SELECT stream_seq.set_retry_policy('kel', 'g', 1, '0 seconds', 1, '0 seconds');
SELECT token FROM stream_seq.claim('kel', 'g', 'w1', '1 minute') \gset
SELECT seq, length("row"->>'k') AS key_length, "row"->>'v' AS v
  FROM stream_seq.read_slot('kel', 'g', 0, :token);
BEGIN;
SELECT stream_seq.park('kel', 'g', 1, 'boom');
SELECT stream_seq.advance_slot('kel', 'g', 0, :token, 2);
COMMIT;
-- rows 3 and 5 (the key of row 1) are held; 4 and 6 go on, one a page
SELECT seq FROM stream_seq.read_slot('kel', 'g', 0, :token);
SELECT stream_seq.advance_slot('kel', 'g', 0, :token, 4);
SELECT seq FROM stream_seq.read_slot('kel', 'g', 0, :token);
SELECT stream_seq.advance_slot('kel', 'g', 0, :token, 6);
SELECT seq, length(key) AS key_length, held, dead, waits_behind
  FROM stream_seq.parked_rows ORDER BY seq;
-- the dead letter holds its key until released
SELECT seq FROM stream_seq.due('kel', 'g');
SELECT stream_seq.release_key('kel', 'g', (SELECT k FROM kel WHERE v = 1), 'skip it');
SELECT seq FROM stream_seq.due('kel', 'g');
SELECT seq FROM stream_seq.due('kel', 'g');
SELECT seq FROM stream_seq.due('kel', 'g');
SELECT seq, held, dead, release_reason FROM stream_seq.parked_rows ORDER BY seq;
SELECT stream_seq.drop_consumer('kel', 'g');

-- A key whose text depends on a setting is refused: sessions printing it
-- differently would put one key's rows into different slots.
CREATE TABLE keb (k bytea, f float8, v int);
SELECT stream_seq.enable('keb');
INSERT INTO keb SELECT '\x0102'::bytea, 0.1::float8 + 0.2::float8, g FROM generate_series(1, 3) g;
\set VERBOSITY default
SELECT stream_seq.create_group('keb', 'gb', 'k', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_group('keb', 'gf', 'f', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_group('keb', 'gf', 'f::text', 1);
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY terse
SELECT count(*) AS groups, (SELECT count(*) FROM pg_indexes WHERE tablename = 'keb') AS indexes
  FROM stream_seq.consumer WHERE stream = 'keb'::regclass;
SELECT stream_seq.create_group('keb', 'ok_b', 'encode(k, ''hex'')', 1),
       stream_seq.create_group('keb', 'ok_f', 'f::numeric', 1);
SELECT stream_seq.drop_consumer('keb', 'ok_b'), stream_seq.drop_consumer('keb', 'ok_f');

-- Groups an earlier library made with such keys (here made by hand) keep
-- working; a key is named by its text whatever the session's settings: a
-- bytea key parked under bytea_output 'hex' holds its rows for a read
-- under 'escape', and a float8 key parked under extra_float_digits 0 for
-- a read under the default.
SELECT stream_seq.create_group('keb', 'gb', 'encode(k, ''hex'')', 1),
       stream_seq.create_group('keb', 'gf', 'f::numeric', 1);
CREATE INDEX keb_gb_old ON keb ((stream_seq.slot_of((k)::text, 1)), seq) WHERE seq > 0;
CREATE INDEX keb_gf_old ON keb ((stream_seq.slot_of((f)::text, 1)), seq) WHERE seq > 0;
UPDATE stream_seq.consumer SET slot_index = 'public.keb_gb_old',
       slot_expr = pg_get_indexdef('keb_gb_old'::regclass, 1, false)
 WHERE stream = 'keb'::regclass AND consumer = 'gb';
UPDATE stream_seq.consumer SET slot_index = 'public.keb_gf_old',
       slot_expr = pg_get_indexdef('keb_gf_old'::regclass, 1, false)
 WHERE stream = 'keb'::regclass AND consumer = 'gf';
SELECT stream_seq.set_key_order('keb', 'gb', 'until_applied');
SELECT stream_seq.set_key_order('keb', 'gf', 'until_applied');
SELECT token AS tb FROM stream_seq.claim('keb', 'gb', 'w1', '1 minute') \gset
SELECT token AS tf FROM stream_seq.claim('keb', 'gf', 'w1', '1 minute') \gset
BEGIN;
SET LOCAL extra_float_digits = 0;
SELECT stream_seq.park('keb', 'gb', 1, 'boom');
SELECT stream_seq.advance_slot('keb', 'gb', 0, :tb, 1);
SELECT stream_seq.park('keb', 'gf', 1, 'boom');
SELECT stream_seq.advance_slot('keb', 'gf', 0, :tf, 1);
COMMIT;
BEGIN;
SET LOCAL bytea_output = escape;
SELECT seq FROM stream_seq.read_slot('keb', 'gb', 0, :tb);
COMMIT;
SELECT seq FROM stream_seq.read_slot('keb', 'gf', 0, :tf);
SELECT consumer, seq, key, held FROM stream_seq.parked_rows
 WHERE stream = 'keb'::regclass ORDER BY consumer, seq;
-- release_key() names the key so
SELECT stream_seq.release_key('keb', 'gb', '\x0102', 'by its hex'),
       stream_seq.release_key('keb', 'gf', '0.30000000000000004', 'shortest exact');
SELECT stream_seq.drop_consumer('keb', 'gb'), stream_seq.drop_consumer('keb', 'gf');

-- What due() and replay() may take of a key: its rows up to the first that
-- holds it, that one included (a dead letter before it does not hold the
-- key under 'until_applied'), and every row whose key is NULL.
CREATE TABLE ken (k int, v int);
SELECT stream_seq.enable('ken');
INSERT INTO ken VALUES (1, 1), (1, 2), (NULL, 3), (1, 4), (2, 5), (NULL, 6), (2, 7);
SELECT stream_seq.create_group('ken', 'g', 'k', 1);
SELECT stream_seq.set_key_order('ken', 'g', 'until_applied');
SELECT stream_seq.set_retry_policy('ken', 'g', 1, '0 seconds', 1, '0 seconds');
SELECT stream_seq.park('ken', 'g', 1, 'dead at once');
SELECT stream_seq.set_retry_policy('ken', 'g', 5, '1 hour', 1, '1 hour');
SELECT stream_seq.park('ken', 'g', s, 'boom') FROM unnest(ARRAY[2, 3, 5, 6]) s;
SELECT token FROM stream_seq.claim('ken', 'g', 'w1', '1 minute') \gset
SELECT stream_seq.advance_slot('ken', 'g', 0, :token, 3);
-- 4 (key 1) is held; 5, parked already, is passed over; the page ends
-- before 7 (key 2)
SELECT seq FROM stream_seq.read_slot('ken', 'g', 0, :token);
SELECT seq, key, held, dead, waits_behind FROM stream_seq.parked_rows
 WHERE stream = 'ken'::regclass ORDER BY seq;
-- nothing is due before its hour
SELECT seq FROM stream_seq.due('ken', 'g');
BEGIN;
SELECT seq FROM stream_seq.replay('ken', 'g');
ROLLBACK;
SELECT stream_seq.drop_consumer('ken', 'g');

-- A read that parked held rows, prepared: the held rows and the move of
-- the slot past them commit together, with the prepared transaction;
-- meanwhile the slot is where it was and nothing is held.
CREATE TABLE kep (k int, v int);
SELECT stream_seq.enable('kep');
INSERT INTO kep SELECT g % 2, g FROM generate_series(1, 6) g;
SELECT stream_seq.create_group('kep', 'g', 'k', 1);
SELECT stream_seq.set_key_order('kep', 'g', 'until_applied');
SELECT token FROM stream_seq.claim('kep', 'g', 'w1', '1 minute') \gset
SELECT stream_seq.park('kep', 'g', 1, 'boom');
SELECT stream_seq.advance_slot('kep', 'g', 0, :token, 2);
-- ROLLBACK PREPARED: neither
BEGIN;
SELECT seq FROM stream_seq.read_slot('kep', 'g', 0, :token);
PREPARE TRANSACTION 'key_order_edges_read';
ROLLBACK PREPARED 'key_order_edges_read';
SELECT position FROM stream_seq.consumer_slots WHERE stream = 'kep'::regclass;
SELECT seq, held FROM stream_seq.parked_rows WHERE stream = 'kep'::regclass ORDER BY seq;
-- COMMIT PREPARED: both
BEGIN;
SELECT seq FROM stream_seq.read_slot('kep', 'g', 0, :token);
PREPARE TRANSACTION 'key_order_edges_read';
SELECT position FROM stream_seq.consumer_slots WHERE stream = 'kep'::regclass;
SELECT seq, held FROM stream_seq.parked_rows WHERE stream = 'kep'::regclass ORDER BY seq;
COMMIT PREPARED 'key_order_edges_read';
SELECT position FROM stream_seq.consumer_slots WHERE stream = 'kep'::regclass;
SELECT seq, held FROM stream_seq.parked_rows WHERE stream = 'kep'::regclass ORDER BY seq;

SELECT stream_seq.disable('kel'), stream_seq.disable('keb'), stream_seq.disable('ken'),
       stream_seq.disable('kep');
DROP TABLE kel, keb, ken, kep;
SELECT count(*) AS left_parked FROM stream_seq.parked;
