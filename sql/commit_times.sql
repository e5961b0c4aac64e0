-- Commit times: the time column enable() names, written with the number
-- in the same commit-time version; position_at() and seeking by time.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
CREATE EXTENSION IF NOT EXISTS pageinspect;
\set SHOW_CONTEXT never

-- a new column, added by enable(); the rows enable() numbers get its time
CREATE TABLE tev (id int, payload text);
INSERT INTO tev VALUES (0, 'before the stream');
SELECT stream_seq.enable('tev', time_column => 'committed_at');
SELECT attname, format_type(atttypid, atttypmod), attnotnull, atthasdef
  FROM pg_attribute WHERE attrelid = 'tev'::regclass AND attname = 'committed_at';
SELECT seq_column, time_column FROM stream_seq.stream WHERE relid = 'tev'::regclass;
SELECT tgname, pg_get_triggerdef(oid) LIKE '%UPDATE OF seq, committed_at ON%' AS guards_both
  FROM pg_trigger WHERE tgrelid = 'tev'::regclass AND tgname = 'stream_seq_guard';

-- rows of one transaction share a time; later transactions never have an
-- earlier one; the time lies within the committing transaction
CREATE TEMP TABLE xact_start (t timestamptz);
BEGIN;
INSERT INTO xact_start VALUES (now());
INSERT INTO tev VALUES (1, 'a'), (2, 'b');
INSERT INTO tev VALUES (3, 'c');
COMMIT;
SELECT count(DISTINCT committed_at) AS times, bool_and(committed_at >= (SELECT t FROM xact_start)) AS after_start,
       bool_and(committed_at <= clock_timestamp()) AS not_future
  FROM tev WHERE id BETWEEN 1 AND 3;
INSERT INTO tev VALUES (4, 'd');
BEGIN;
INSERT INTO tev VALUES (5, 'e');
SAVEPOINT s;
INSERT INTO tev VALUES (99, 'rolled back');
ROLLBACK TO SAVEPOINT s;
INSERT INTO tev VALUES (6, 'f');
COMMIT;
INSERT INTO tev SELECT g, 'many' FROM generate_series(7, 40) g;
SELECT id, seq, committed_at IS NULL AS no_time FROM tev WHERE id < 7 ORDER BY seq;
SELECT bool_and(committed_at >= previous) AS never_earlier
  FROM (SELECT committed_at, lag(committed_at) OVER (ORDER BY seq) AS previous
          FROM tev WHERE committed_at IS NOT NULL) x;

-- the time column is written by stream_seq only
INSERT INTO tev (id, committed_at) VALUES (100, now());
\echo :LAST_ERROR_SQLSTATE
UPDATE tev SET committed_at = now() WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
UPDATE tev SET payload = 'changed' WHERE id = 1;
SELECT payload, committed_at IS NOT NULL AS kept FROM tev WHERE id = 1;
-- nor by a BEFORE UPDATE trigger of the table on an UPDATE of other
-- columns; writing back the time a row has writes nothing
CREATE FUNCTION tev_retime() RETURNS trigger LANGUAGE plpgsql
  AS $$ BEGIN NEW.committed_at := NEW.committed_at + interval '1 day'; RETURN NEW; END $$;
CREATE TRIGGER tev_retime BEFORE UPDATE ON tev
  FOR EACH ROW EXECUTE FUNCTION tev_retime();
UPDATE tev SET payload = 'retimed by a trigger' WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER tev_retime ON tev;
DROP FUNCTION tev_retime();
UPDATE tev SET committed_at = committed_at, seq = seq WHERE id = 1;
SELECT payload FROM tev WHERE id = 1;

-- position_at() against a search of every row: for each row's time, a
-- microsecond either side, and the ends
CREATE TEMP TABLE probes AS
SELECT committed_at + d * interval '1 microsecond' AS t
  FROM tev, (VALUES (-1), (0), (1)) v(d) WHERE committed_at IS NOT NULL
UNION SELECT '-infinity' UNION SELECT 'infinity';
SELECT count(*) AS probes,
       count(*) FILTER (WHERE stream_seq.position_at('tev', t) IS DISTINCT FROM
             coalesce((SELECT min(seq) FROM tev WHERE committed_at >= t),
                      stream_seq.horizon('tev')) - 1) AS wrong
  FROM probes;
-- before every time: the position before the first row
SELECT stream_seq.position_at('tev', '-infinity') AS from_minus_infinity;

-- the horizon bounds it: a number taken but not committed is not passed
-- (its transaction is still running in another session; see the
-- isolation spec commit_time_seek)

-- seeking: create_consumer, create_group and reset take a time
SELECT stream_seq.create_consumer('tev', 'from_4', (SELECT committed_at FROM tev WHERE id = 4));
SELECT stream_seq.position('tev', 'from_4') = (SELECT seq - 1 FROM tev WHERE id = 4) AS before_row_4;
SELECT (SELECT "row"->>'id' FROM stream_seq.read('tev', 'from_4', 1)) AS first_read;
SELECT stream_seq.reset('tev', 'from_4', 'infinity'::timestamptz);
SELECT stream_seq.position('tev', 'from_4') = stream_seq.horizon('tev') - 1 AS at_the_end;
-- (create_group() builds an index: the time comes in a variable, not a
-- subquery reading the table in the same statement)
SELECT committed_at AS time_of_7 FROM tev WHERE id = 7 \gset
SELECT stream_seq.create_group('tev', 'g_from_7', 'id', 2, :'time_of_7'::timestamptz);
SELECT bool_and(position = (SELECT seq - 1 FROM tev WHERE id = 7)) AS slots_before_row_7
  FROM stream_seq.consumer_slots WHERE consumer = 'g_from_7';
SELECT stream_seq.reset('tev', 'g_from_7', (SELECT committed_at FROM tev WHERE id = 1), 1);
SELECT slot, position = (SELECT seq - 1 FROM tev WHERE id = 1) AS before_row_1
  FROM stream_seq.consumer_slots WHERE consumer = 'g_from_7' ORDER BY slot;
-- a plain number still picks the bigint version
SELECT stream_seq.reset('tev', 'from_4', 0);
SELECT stream_seq.position('tev', 'from_4');

-- bad input
SELECT stream_seq.position_at(NULL, now());
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.position_at('tev', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_consumer('tev', 'never', NULL::timestamptz);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.reset('tev', 'from_4', NULL::timestamptz);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.position_at('pg_class', now());
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE tplain (id int);
SELECT stream_seq.enable('tplain');
SELECT stream_seq.position_at('tplain', now());
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_consumer('tplain', 'c', now());
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS consumers_made FROM stream_seq.consumer WHERE stream = 'tplain'::regclass;

-- enable() checks an existing time column, and changes nothing when it fails
CREATE TABLE tbad (id int, t_text text, t_nn timestamptz NOT NULL DEFAULT now(),
                   t_def timestamptz DEFAULT now(), t_ok timestamptz);
SELECT stream_seq.enable('tbad', time_column => 't_text');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.enable('tbad', time_column => 't_nn');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.enable('tbad', time_column => 't_def');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.enable('tbad', time_column => 'seq');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.enable('tbad', time_column => 'xmin');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS streams, (SELECT count(*) FROM pg_attribute WHERE attrelid = 'tbad'::regclass AND attname = 'seq') AS seq_columns
  FROM stream_seq.stream WHERE relid = 'tbad'::regclass;
SELECT stream_seq.enable('tbad', time_column => 't_ok');
INSERT INTO tbad (id) VALUES (1);
SELECT t_ok IS NOT NULL AS written FROM tbad;

-- DDL on the time column: a rename is followed, what would break it refused
ALTER TABLE tev RENAME COLUMN committed_at TO numbered_at;
SELECT time_column FROM stream_seq.stream WHERE relid = 'tev'::regclass;
INSERT INTO tev VALUES (41, 'after rename');
SELECT numbered_at IS NOT NULL AS written FROM tev WHERE id = 41;
SELECT stream_seq.position_at('tev', 'infinity') = stream_seq.horizon('tev') - 1 AS still_seeks;
ALTER TABLE tev ALTER COLUMN numbered_at SET DEFAULT now();
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE tbad ALTER COLUMN t_ok SET NOT NULL;
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE tev ALTER COLUMN numbered_at TYPE timestamp;
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE tev DROP COLUMN numbered_at;
\echo :LAST_ERROR_SQLSTATE

-- the in-place write covers the time column too: an index on it whose
-- predicate leaves out unnumbered rows ("seq > 0") keeps rows numbered in
-- place, one version each; one without makes the commit-time write an
-- update (two versions), and says so when it is made
CREATE TABLE thot (id int);
SELECT stream_seq.enable('thot', time_column => 'ts');
CREATE INDEX thot_ts ON thot (ts) WHERE seq > 0;
INSERT INTO thot SELECT g FROM generate_series(1, 5) g;
SELECT count(*) AS versions
  FROM heap_page_items(get_raw_page('thot', 0)) WHERE lp_flags = 1;
CREATE TABLE tfull (id int);
SELECT stream_seq.enable('tfull', time_column => 'ts');
CREATE INDEX tfull_ts ON tfull (ts);
INSERT INTO tfull SELECT g FROM generate_series(1, 5) g;
SELECT count(*) AS versions
  FROM heap_page_items(get_raw_page('tfull', 0)) WHERE lp_flags = 1;
SET enable_seqscan = off;
SELECT count(*) AS through_index FROM thot WHERE ts IS NOT NULL;
SELECT count(*) AS through_index FROM tfull WHERE ts > '-infinity';
RESET enable_seqscan;

-- a partitioned stream whose partition has its columns in another order
CREATE TABLE tpart (id int, k int, payload text, at timestamptz, seq bigint) PARTITION BY LIST (k);
CREATE TABLE tpart_1 (payload text, at timestamptz, seq bigint, k int, id int);
ALTER TABLE tpart ATTACH PARTITION tpart_1 FOR VALUES IN (1);
CREATE TABLE tpart_2 PARTITION OF tpart FOR VALUES IN (2);
SELECT stream_seq.enable('tpart', time_column => 'at');
INSERT INTO tpart VALUES (1, 1, 'one'), (2, 2, 'two');
INSERT INTO tpart VALUES (3, 1, 'three');
SELECT id, seq, at IS NOT NULL AS has_time FROM tpart ORDER BY seq;
SELECT stream_seq.position_at('tpart', (SELECT at FROM tpart WHERE id = 3)) AS before_three;

-- times never go down as numbers go up, wherever a time comes from:
-- rows numbered by enable() after a disable() get the enable()'s time,
-- above the times already there
CREATE TABLE tre (id int);
SELECT stream_seq.enable('tre', time_column => 'ts');
INSERT INTO tre SELECT g FROM generate_series(1, 5) g;
SELECT min(ts) AS first_time FROM tre \gset
SELECT stream_seq.disable('tre');
INSERT INTO tre SELECT g FROM generate_series(6, 8) g;
SELECT stream_seq.enable('tre', time_column => 'ts');
INSERT INTO tre SELECT g FROM generate_series(9, 20) g;
SELECT count(*) FILTER (WHERE ts IS NULL) AS no_time,
       bool_and(ts >= previous) FILTER (WHERE previous IS NOT NULL) AS rising
  FROM (SELECT ts, lag(ts) OVER (ORDER BY seq) AS previous FROM tre) x;
SELECT stream_seq.position_at('tre', :'first_time') AS from_the_first_time;
-- replicated rows: an earlier time than one taken here is raised to it,
-- a missing one is filled in
SET session_replication_role = replica;
INSERT INTO tre (id, seq, ts) VALUES (100, 5000, '2000-01-01'), (101, 5001, NULL);
RESET session_replication_role;
INSERT INTO tre VALUES (102);
SELECT id, ts >= (SELECT max(ts) FROM tre WHERE id < 100) AS not_earlier
  FROM tre WHERE id >= 100 ORDER BY seq;
SELECT count(*) FILTER (WHERE ts IS NULL) AS no_time,
       bool_and(ts >= previous) FILTER (WHERE previous IS NOT NULL) AS rising
  FROM (SELECT ts, lag(ts) OVER (ORDER BY seq) AS previous FROM tre) x;
-- times a table brings along must already go up with its numbers
CREATE TABLE tmig (id int, seq bigint, ts timestamptz);
INSERT INTO tmig VALUES (1, 1, '2026-01-03'), (2, 2, '2026-01-01'), (3, 3, '2026-01-02');
SELECT stream_seq.enable('tmig', time_column => 'ts');
\echo :LAST_ERROR_SQLSTATE
UPDATE tmig SET ts = NULL WHERE id = 1;
SELECT stream_seq.enable('tmig', time_column => 'ts');
SELECT stream_seq.position_at('tmig', '2026-01-02') AS before_the_second_day;
-- a time in the future: new rows take it until the clock catches up
CREATE TABLE tfut (id int, seq bigint, ts timestamptz);
INSERT INTO tfut VALUES (1, 1, '2999-01-01');
SELECT stream_seq.enable('tfut', time_column => 'ts');
INSERT INTO tfut (id) VALUES (2);
SELECT id, seq, ts FROM tfut ORDER BY seq;
-- a partition's time column takes NULL until commit too
CREATE TABLE tpd (id int, k text) PARTITION BY LIST (k);
CREATE TABLE tpd_1 PARTITION OF tpd FOR VALUES IN ('k1');
SELECT stream_seq.enable('tpd', time_column => 'ts');
ALTER TABLE tpd_1 ALTER COLUMN ts SET NOT NULL;
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE tpd_1 ALTER COLUMN ts SET DEFAULT now();
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE tpd_2 (id int, k text, seq bigint, ts timestamptz DEFAULT now());
ALTER TABLE tpd ATTACH PARTITION tpd_2 FOR VALUES IN ('k2');
\echo :LAST_ERROR_SQLSTATE
INSERT INTO tpd VALUES (1, 'k1');
SELECT id, ts IS NOT NULL AS has_time FROM tpd;
DROP TABLE tre, tmig, tfut, tpd, tpd_2;

-- what would not see the values written at commit is refused, on the
-- stream column and the time column: CHECK, foreign key, generated column
CREATE TABLE tcheck (id int, seq bigint CHECK (seq < 100));
SELECT stream_seq.enable('tcheck');
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE tgen (id int, seq bigint, twice bigint GENERATED ALWAYS AS (seq * 2) STORED);
SELECT stream_seq.enable('tgen');
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE tref (n bigint PRIMARY KEY);
CREATE TABLE tfk (id int, seq bigint REFERENCES tref);
SELECT stream_seq.enable('tfk');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS streams FROM stream_seq.stream WHERE relid IN ('tcheck'::regclass, 'tgen'::regclass, 'tfk'::regclass);
CREATE TABLE tcons (id int CHECK (id > 0), note text);
SELECT stream_seq.enable('tcons', time_column => 'ts');
ALTER TABLE tcons ADD CHECK (ts < '2000-01-01');
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE tcons ADD CHECK (tcons IS NOT NULL);
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE tcons ADD COLUMN day date GENERATED ALWAYS AS ((ts AT TIME ZONE 'UTC')::date) STORED;
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE tcons ADD FOREIGN KEY (seq) REFERENCES tref;
\echo :LAST_ERROR_SQLSTATE
-- other columns may be constrained
ALTER TABLE tcons ADD CHECK (note <> '');
INSERT INTO tcons VALUES (1, 'ok');
SELECT id, seq, ts IS NOT NULL AS has_time FROM tcons;
CREATE TABLE tcp (id int, k int) PARTITION BY LIST (k);
CREATE TABLE tcp_1 PARTITION OF tcp FOR VALUES IN (1);
SELECT stream_seq.enable('tcp');
ALTER TABLE tcp_1 ADD CHECK (seq > 0);
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE tcp_2 (id int, k int, seq bigint CHECK (seq > 0));
ALTER TABLE tcp ATTACH PARTITION tcp_2 FOR VALUES IN (2);
\echo :LAST_ERROR_SQLSTATE
DROP TABLE tcheck, tgen, tfk, tref, tcons, tcp, tcp_2;

-- retention by age on a stream with a time column: rows numbered before
-- now() - keep_for go, the rest stay (the cut is put between two rows of
-- different times, in the transaction that applies it)
CREATE TABLE tret (id int);
SELECT stream_seq.enable('tret', time_column => 'at');
INSERT INTO tret VALUES (1), (2), (3);
SELECT pg_sleep(0.01);
INSERT INTO tret VALUES (4);
BEGIN;
SELECT stream_seq.set_retention('tret', keep_for => now() - (
         (SELECT at FROM tret WHERE id = 3) +
         ((SELECT at FROM tret WHERE id = 4) - (SELECT at FROM tret WHERE id = 3)) / 2));
SELECT removed_rows, sqlstate FROM stream_seq.apply_retention('tret');
COMMIT;
SELECT id FROM tret ORDER BY seq;
SELECT stream_seq.first('tret') = (SELECT seq FROM tret WHERE id = 4) AS starts_at_row_4;
DROP TABLE tret;

-- rows numbered before the stream had its time column have none:
-- keep_for does not know their age and removes nothing while they are
-- there (keep_rows, or trim(), can)
CREATE TABLE tuntimed (id int);
SELECT stream_seq.enable('tuntimed');
INSERT INTO tuntimed SELECT g FROM generate_series(1, 5) g;
SELECT stream_seq.disable('tuntimed');
SELECT stream_seq.enable('tuntimed', time_column => 'at');
INSERT INTO tuntimed VALUES (6);
SELECT count(*) FILTER (WHERE at IS NULL) AS without_time FROM tuntimed;
SELECT stream_seq.set_retention('tuntimed', keep_for => '1 microsecond');
SELECT pg_sleep(0.01);
SELECT removed_rows, held_by, held_at FROM stream_seq.apply_retention('tuntimed');
SELECT count(*) AS rows_kept FROM tuntimed;
SELECT stream_seq.trim('tuntimed', 6);
SELECT removed_rows, held_by FROM stream_seq.apply_retention('tuntimed');
SELECT count(*) AS rows_kept FROM tuntimed;
DROP TABLE tuntimed;

-- an ordinary role: its own stream with a time column, and no SELECT on
-- another's
CREATE ROLE times_owner;
CREATE ROLE times_nobody;
GRANT CREATE ON SCHEMA public TO times_owner;
GRANT USAGE ON SCHEMA stream_seq TO times_owner, times_nobody;
SET ROLE times_owner;
CREATE TABLE towned (id int);
SELECT stream_seq.enable('towned', time_column => 'at');
INSERT INTO towned VALUES (1);
SELECT stream_seq.position_at('towned', 'infinity');
SELECT stream_seq.create_consumer('towned', 'mine', '-infinity'::timestamptz);
SELECT stream_seq.position('towned', 'mine');
SET ROLE times_nobody;
SELECT stream_seq.position_at('towned', now());
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_consumer('towned', 'theirs', now());
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

SELECT stream_seq.disable(relid) FROM stream_seq.stream ORDER BY relid::text;
SELECT count(*) FROM stream_seq.stream;
DROP TABLE tev, tplain, tbad, thot, tfull, tpart, towned;
REVOKE ALL ON SCHEMA public FROM times_owner;
REVOKE ALL ON SCHEMA stream_seq FROM times_owner, times_nobody;
DROP ROLE times_owner, times_nobody;
