-- Writing to stream tables: numbers at commit, every kind of write
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
\set SHOW_CONTEXT never

CREATE TABLE w (id int PRIMARY KEY, payload text);
SELECT stream_seq.enable('w');

-- numbers do not exist before commit: the inserting transaction sees the
-- placeholder 0 (RETURNING too), and no index on the column holds the row
BEGIN;
INSERT INTO w VALUES (1, 'a'), (2, 'b') RETURNING id, seq;
SELECT id, seq FROM w ORDER BY id;
COMMIT;
SELECT id, seq FROM w ORDER BY id;

-- a multi-row transaction gets consecutive numbers in insertion order
BEGIN;
INSERT INTO w SELECT g, 'multi' FROM generate_series(10, 14) g;
INSERT INTO w VALUES (15, 'later statement');
COMMIT;
SELECT id, seq FROM w WHERE id >= 10 ORDER BY seq;

-- COPY
COPY w (id, payload) FROM STDIN;
20	copied
21	copied
\.
SELECT id, seq FROM w WHERE id >= 20 ORDER BY seq;

-- INSERT ... ON CONFLICT: a new row is numbered, an updated row keeps its
-- number, and nothing may write the number
INSERT INTO w VALUES (1, 'conflict'), (30, 'new')
  ON CONFLICT (id) DO UPDATE SET payload = excluded.payload;
SELECT id, payload, seq FROM w WHERE id IN (1, 30) ORDER BY id;
INSERT INTO w VALUES (1, 'x') ON CONFLICT (id) DO UPDATE SET seq = 1000;
\echo :LAST_ERROR_SQLSTATE
INSERT INTO w VALUES (1, 'x') ON CONFLICT DO NOTHING;

-- writing the number by hand
INSERT INTO w (id, payload, seq) VALUES (40, 'by hand', 1000);
\echo :LAST_ERROR_SQLSTATE
UPDATE w SET seq = seq + 1000 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
-- NULL, which is also how SET seq = DEFAULT reaches the triggers, keeps
-- the number (0.6.0)
UPDATE w SET seq = NULL WHERE id = 1 RETURNING seq IS NOT NULL AS kept;
COPY w (id, payload, seq) FROM STDIN;
41	copied	5000
\.
\echo :LAST_ERROR_SQLSTATE
-- writing back the number a row has writes nothing (as an ORM saves
-- every column of a row it loaded); a BEFORE UPDATE trigger of the table
-- that changes the number is refused, on an UPDATE of other columns and
-- when it fires after the guard (triggers fire in the order of their names)
SELECT seq AS seq_of_1 FROM w WHERE id = 1 \gset
UPDATE w SET seq = seq, payload = payload WHERE id = 1;
SELECT seq = :seq_of_1 AS same_number FROM w WHERE id = 1;
CREATE FUNCTION w_renumber() RETURNS trigger LANGUAGE plpgsql
  AS $$ BEGIN NEW.seq := NEW.seq + 1000; RETURN NEW; END $$;
CREATE TRIGGER a_renumber BEFORE UPDATE ON w
  FOR EACH ROW EXECUTE FUNCTION w_renumber();
UPDATE w SET payload = 'renumbered by a trigger' WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
ALTER TRIGGER a_renumber ON w RENAME TO z_renumber;
UPDATE w SET seq = seq WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER z_renumber ON w;
DROP FUNCTION w_renumber();
SELECT payload, seq = :seq_of_1 AS same_number FROM w WHERE id = 1;
-- updating other columns keeps the number
UPDATE w SET payload = 'updated' WHERE id = 2;
SELECT id, payload, seq FROM w WHERE id = 2;

-- rows updated or deleted in the inserting transaction; savepoints (a
-- row deleted by its own transaction leaves a gap: the numbers follow
-- the order the rows were stored in, taken in one reservation)
BEGIN;
INSERT INTO w VALUES (50, 'inserted then updated');
UPDATE w SET payload = 'updated twice' WHERE id = 50;
UPDATE w SET payload = 'updated three times' WHERE id = 50;
INSERT INTO w VALUES (51, 'inserted then deleted');
DELETE FROM w WHERE id = 51;
SAVEPOINT s1;
INSERT INTO w VALUES (52, 'rolled back');
ROLLBACK TO SAVEPOINT s1;
SAVEPOINT s2;
INSERT INTO w VALUES (53, 'released');
RELEASE SAVEPOINT s2;
SAVEPOINT s3;
UPDATE w SET payload = 'update rolled back' WHERE id = 50;
ROLLBACK TO SAVEPOINT s3;
COMMIT;
SELECT id, payload, seq FROM w WHERE id >= 50 ORDER BY seq;

-- numbers are written at commit only: SET CONSTRAINTS ALL IMMEDIATE
-- numbers nothing early (it did before 0.7.0); a savepoint rolled back
-- drops its rows from the numbering
BEGIN;
INSERT INTO w VALUES (60, 'outer');
SAVEPOINT s;
SET CONSTRAINTS ALL IMMEDIATE;
INSERT INTO w VALUES (61, 'inner, rolled back');
SELECT id, seq > 0 AS numbered FROM w WHERE id >= 60 ORDER BY id;
ROLLBACK TO SAVEPOINT s;
SELECT id, seq > 0 AS numbered FROM w WHERE id >= 60 ORDER BY id;
INSERT INTO w VALUES (62, 'after');
COMMIT;
SELECT id, payload, seq > 0 AS numbered FROM w WHERE id >= 60 ORDER BY id;
SELECT count(*) = count(DISTINCT seq) AS unique_numbers,
       count(*) FILTER (WHERE seq IS NULL OR seq = 0) AS unnumbered
  FROM w;

-- an aborted commit leaves a gap, never a reused number
CREATE TABLE w_fk_target (id int PRIMARY KEY);
ALTER TABLE w ADD COLUMN ref int REFERENCES w_fk_target DEFERRABLE INITIALLY DEFERRED;
SELECT stream_seq.head('w') AS head_before \gset
INSERT INTO w (id, payload, ref) VALUES (70, 'fails at commit', 42);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO w (id, payload) VALUES (71, 'after the failure');
SELECT seq > :head_before AS above_all FROM w WHERE id = 71;
SELECT count(*) FROM w WHERE id = 70;
-- a deferred foreign key is checked against the version that commits,
-- also for a row its transaction updated before commit (the commit-time
-- write supersedes the version the update queued its check for)
INSERT INTO w_fk_target VALUES (1);
BEGIN;
INSERT INTO w (id, payload, ref) VALUES (72, 'updated to a missing key', 1);
UPDATE w SET ref = 999 WHERE id = 72;
COMMIT;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM w WHERE id = 72;
BEGIN;
INSERT INTO w (id, payload, ref) VALUES (73, 'updated to a key that exists', 999);
UPDATE w SET ref = 1 WHERE id = 73;
UPDATE w SET payload = 'updated twice' WHERE id = 73;
COMMIT;
SELECT payload, ref, seq IS NOT NULL AS numbered FROM w WHERE id = 73;

-- several stream tables in one transaction
CREATE TABLE w2 (payload text);
SELECT stream_seq.enable('w2');
BEGIN;
INSERT INTO w (id, payload) VALUES (80, 'first stream');
INSERT INTO w2 VALUES ('second stream'), ('second stream again');
COMMIT;
SELECT payload, seq FROM w2 ORDER BY seq;
SELECT seq IS NOT NULL AS numbered FROM w WHERE id = 80;

-- PREPARE TRANSACTION of stream writes is refused; other prepared
-- transactions are unaffected
BEGIN;
INSERT INTO w (id, payload) VALUES (90, 'prepared');
PREPARE TRANSACTION 'stream_write';
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM w WHERE id = 90;
SELECT count(*) FROM pg_prepared_xacts;
CREATE TABLE plain (x int);
BEGIN;
INSERT INTO plain VALUES (1);
SELECT count(*) FROM w;
PREPARE TRANSACTION 'plain_write';
COMMIT PREPARED 'plain_write';
SELECT x FROM plain;
-- a prepared transaction that only updates other columns of stream rows
BEGIN;
UPDATE w SET payload = 'updated in prepared' WHERE id = 2;
PREPARE TRANSACTION 'stream_update';
COMMIT PREPARED 'stream_update';
SELECT payload FROM w WHERE id = 2;

-- indexes of every kind get the numbered version: an exclusion constraint
-- and a unique index on other columns (not checked again: their key did
-- not change), and indexes over the stream column (checked: their key did)
CREATE TABLE wx (id int, tag text, seq bigint, EXCLUDE USING btree (id WITH =));
CREATE UNIQUE INDEX wx_tag ON wx (tag);
CREATE UNIQUE INDEX wx_seq_mod ON wx ((seq % 1000)) WHERE seq IS NOT NULL;
CREATE INDEX wx_tag_seq ON wx (tag, seq);
SELECT stream_seq.enable('wx');
INSERT INTO wx (id, tag) VALUES (1, 'a'), (2, 'b');
BEGIN;
INSERT INTO wx (id, tag) VALUES (3, 'c');
UPDATE wx SET tag = 'c2' WHERE id = 3;
COMMIT;
SET enable_seqscan = off;
SELECT id, tag, seq FROM wx WHERE id = 3;
SELECT id, tag, seq FROM wx WHERE tag = 'b';
SELECT id, tag, seq FROM wx WHERE seq % 1000 = 3;
SELECT id, tag, seq FROM wx WHERE tag = 'a' AND seq = 1;
RESET enable_seqscan;
INSERT INTO wx (id, tag) VALUES (1, 'dup');
\echo :LAST_ERROR_SQLSTATE
-- an index over the stream column is checked at commit: a number written
-- then collides with a row that came in with one of its own (enable()
-- kept it), and the commit fails
SELECT stream_seq.disable('wx');
INSERT INTO wx (id, tag, seq) VALUES (10, 'old', 1004), (12, 'five', 5);
SELECT stream_seq.enable('wx');
INSERT INTO wx (id, tag) VALUES (11, 'new');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM wx WHERE id = 11;
SELECT stream_seq.disable('wx');
DROP TABLE wx;

-- the stream view
SELECT stream, seq_column, head, horizon = head + 1 AS idle, committing
  FROM stream_seq.streams ORDER BY stream::text;

SELECT stream_seq.disable('w');
SELECT stream_seq.disable('w2');
DROP TABLE w, w2, w_fk_target, plain;
