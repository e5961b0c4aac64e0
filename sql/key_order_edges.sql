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
