-- What applications write (ORMs, drivers): every shape of doc/applications.md
-- "The rules", on an ordinary, a timed and a partitioned stream, as an
-- ordinary role; and last_numbers().
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
CREATE EXTENSION IF NOT EXISTS amcheck;
CREATE EXTENSION IF NOT EXISTS pageinspect;
\set SHOW_CONTEXT never

-- heap-only versions of a table (pageinspect), and every btree index of it
-- checked against the heap
CREATE FUNCTION app_heap_only(tbl regclass) RETURNS bigint LANGUAGE sql AS $$
  SELECT count(*) FILTER (WHERE (t_infomask2 & 32768) <> 0)
  FROM generate_series(0, pg_relation_size(tbl) / current_setting('block_size')::int - 1) b,
       heap_page_items(get_raw_page(tbl::text, b::int))
$$;
CREATE FUNCTION app_check(tbl regclass) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  i regclass;
BEGIN
  FOR i IN SELECT indexrelid FROM pg_index JOIN pg_class c ON c.oid = indexrelid
           JOIN pg_am a ON a.oid = c.relam
           WHERE indrelid = tbl AND a.amname = 'btree' ORDER BY indexrelid LOOP
    PERFORM bt_index_check(i, true);
  END LOOP;
  RETURN CASE WHEN (SELECT count(*) FROM verify_heapam(tbl)) = 0 THEN 'clean' ELSE 'heap problems' END;
END $$;

CREATE ROLE app_user;
CREATE TABLE events (id int PRIMARY KEY, customer_id int, payload jsonb);
SELECT stream_seq.enable('events');
CREATE TABLE tevents (id int PRIMARY KEY, v int);
SELECT stream_seq.enable('tevents', time_column => 'at');
CREATE TABLE pevents (id int, day int, v int, PRIMARY KEY (id, day)) PARTITION BY LIST (day);
CREATE TABLE pevents_1 PARTITION OF pevents FOR VALUES IN (1);
CREATE TABLE pevents_2 PARTITION OF pevents FOR VALUES IN (2);
SELECT stream_seq.enable('pevents');
CREATE TABLE secret (id int PRIMARY KEY);
SELECT stream_seq.enable('secret');
GRANT USAGE ON SCHEMA stream_seq TO app_user;
GRANT SELECT, INSERT, UPDATE, DELETE ON events, tevents, pevents, pevents_1, pevents_2 TO app_user;
GRANT INSERT ON secret TO app_user;

-- the index that captures each row stored and refuses a row inserted with
-- a number (no INSERT trigger); on every partition
SELECT i.indrelid::regclass, pg_get_indexdef(i.indexrelid)
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam
 WHERE a.amname = 'stream_seq_capture' ORDER BY i.indrelid::regclass::text;

SET ROLE app_user;

-- a session that committed nothing: NULL, NULL
SELECT * FROM stream_seq.last_numbers('events');

INSERT INTO events VALUES (1, 1, '{}'), (2, 2, '{}');
INSERT INTO tevents (id, v) VALUES (1, 1), (2, 2);
INSERT INTO pevents (id, day, v) VALUES (1, 1, 1), (2, 2, 2);
SELECT id, seq FROM events ORDER BY id;

-- last_numbers: the numbers of the last commit on that stream
SELECT first, last FROM stream_seq.last_numbers('events');
SELECT first, last FROM stream_seq.last_numbers('pevents');
SELECT (l.first, l.last) = (SELECT min(seq), max(seq) FROM tevents) AS tevents_matches
  FROM stream_seq.last_numbers('tevents') l;

-- ---------------------------------------------------------------------
-- UPDATE
-- ---------------------------------------------------------------------

-- writing back the row's own number changes nothing (Django save(),
-- Hibernate's full-column UPDATE, Knex update(loadedRow))
UPDATE events SET seq = seq WHERE id = 1;
UPDATE events SET customer_id = 2, payload = NULL, seq = 1 WHERE id = 1;
-- DEFAULT, and NULL (the same to a trigger), keep the number
UPDATE events SET seq = DEFAULT WHERE id = 1;
UPDATE events SET customer_id = 3, seq = NULL WHERE id = 2;
SELECT id, customer_id, seq FROM events ORDER BY id;
-- any other value is refused, with a hint naming the applications page
\set VERBOSITY default
UPDATE events SET seq = 7 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
UPDATE events SET seq = seq + 1;
\echo :LAST_ERROR_SQLSTATE
UPDATE events SET seq = 2 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
-- a BEFORE UPDATE trigger of the table that fires after the guard and
-- takes the number away is refused (the guard_update trigger)
RESET ROLE;
CREATE FUNCTION app_unnumber() RETURNS trigger LANGUAGE plpgsql
  AS $$ BEGIN NEW.seq := NULL; RETURN NEW; END $$;
CREATE TRIGGER z_unnumber BEFORE UPDATE ON events
  FOR EACH ROW EXECUTE FUNCTION app_unnumber();
SET ROLE app_user;
UPDATE events SET seq = seq, customer_id = 2 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP TRIGGER z_unnumber ON events;
DROP FUNCTION app_unnumber();
SET ROLE app_user;

-- a row inserted earlier in the transaction, not numbered yet: NULL to
-- NULL (SQLAlchemy merge() of an object with seq None, Django save() of a
-- new object) and DEFAULT are accepted, a number is not
BEGIN;
INSERT INTO events VALUES (3, 3, '{}');
UPDATE events SET customer_id = 6, seq = NULL WHERE id = 3;
UPDATE events SET seq = DEFAULT, payload = '{"saved": 2}' WHERE id = 3;
SELECT id, seq FROM events WHERE id = 3;
SAVEPOINT s;
UPDATE events SET seq = 100 WHERE id = 3;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK TO SAVEPOINT s;
COMMIT;
-- numbered at commit through the ordinary write (the row was updated)
SELECT id, customer_id, payload, seq FROM events ORDER BY id;
SELECT first, last FROM stream_seq.last_numbers('events');

-- the time column, the same
UPDATE tevents SET at = at, seq = seq, v = 10 WHERE id = 1;
UPDATE tevents SET at = DEFAULT, seq = DEFAULT WHERE id = 1;
UPDATE tevents SET at = NULL WHERE id = 2;
SELECT id, v, seq, at IS NOT NULL AS has_time FROM tevents ORDER BY id;
-- the message names the column the statement changed, not every column
-- the guard watches
UPDATE tevents SET seq = seq + 1 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
UPDATE tevents SET at = at + interval '1 second' WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
BEGIN;
INSERT INTO tevents (id, v) VALUES (3, 3);
UPDATE tevents SET at = NULL, seq = NULL, v = 30 WHERE id = 3;
UPDATE tevents SET at = now() WHERE id = 3;
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;

-- the partitioned stream, the same
UPDATE pevents SET seq = seq, v = 10 WHERE id = 1;
UPDATE pevents SET seq = DEFAULT WHERE id = 2;
UPDATE pevents_1 SET seq = 1 WHERE id = 1;
SELECT tableoid::regclass, id, v, seq FROM pevents ORDER BY id;
UPDATE pevents SET seq = 50 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
-- through the partition, the message names the stream
UPDATE pevents_1 SET seq = 50 WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
-- moving a numbered row to another partition is an insert with a number
UPDATE pevents SET day = 2, seq = DEFAULT WHERE id = 1;
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY terse

-- ---------------------------------------------------------------------
-- INSERT with a number: the upsert rule
-- ---------------------------------------------------------------------

-- the upsert of a loaded row (its number in VALUES) that conflicts: an
-- update of the row, which keeps its number (Sequelize upsert(),
-- ActiveRecord upsert_all, Knex onConflict().merge())
INSERT INTO events (id, customer_id, seq) VALUES (1, 3, 1)
  ON CONFLICT (id) DO UPDATE SET customer_id = EXCLUDED.customer_id;
INSERT INTO events (id, customer_id, payload, seq) VALUES (2, 4, '{"up": 1}', 2)
  ON CONFLICT (id) DO UPDATE SET customer_id = EXCLUDED.customer_id,
                                 payload = EXCLUDED.payload, seq = EXCLUDED.seq;
SELECT id, customer_id, payload, seq FROM events WHERE id IN (1, 2) ORDER BY id;
-- a number in EXCLUDED that is not the row's own is refused by the update
-- rule
INSERT INTO events (id, customer_id, seq) VALUES (1, 5, 2)
  ON CONFLICT (id) DO UPDATE SET seq = EXCLUDED.seq;
\echo :LAST_ERROR_SQLSTATE
-- a row that does not conflict is inserted, and refused as it is stored:
-- nothing stays
INSERT INTO events (id, customer_id, seq) VALUES (10, 1, 1000)
  ON CONFLICT (id) DO UPDATE SET customer_id = EXCLUDED.customer_id;
\echo :LAST_ERROR_SQLSTATE
INSERT INTO events (id, customer_id, seq) VALUES (10, 1, 1000);
\echo :LAST_ERROR_SQLSTATE
-- ... whatever its number, another row's too: the capture index refuses it
-- before the stream's unique index looks (its OID is lower)
INSERT INTO events (id, customer_id, seq) VALUES (10, 1, 1);
\echo :LAST_ERROR_SQLSTATE
-- DO NOTHING of a conflicting row does nothing
INSERT INTO events (id, customer_id, seq) VALUES (1, 9, 1) ON CONFLICT DO NOTHING;
INSERT INTO events (id, customer_id, seq) VALUES (1, 9, 1) ON CONFLICT (id) DO NOTHING;
-- ... also thousands of them under SET CONSTRAINTS ALL IMMEDIATE, which
-- takes no numbers: the next row gets the next number (0.6.0 was
-- reported to lose a block of numbers here)
SELECT stream_seq.head('events') AS head_before \gset
BEGIN;
SET CONSTRAINTS ALL IMMEDIATE;
INSERT INTO events (id, customer_id) SELECT 1, g FROM generate_series(1, 3000) g
  ON CONFLICT (id) DO NOTHING;
COMMIT;
BEGIN;
INSERT INTO events (id, customer_id) VALUES (70, 70);
COMMIT;
SELECT seq - :head_before AS after_the_head FROM events WHERE id = 70;
DELETE FROM events WHERE id = 70;
-- multi-row VALUES: loaded rows that conflict and a new row without a
-- number
INSERT INTO events (id, customer_id, seq) VALUES (1, 11, 1), (2, 12, 2), (4, 14, NULL)
  ON CONFLICT (id) DO UPDATE SET customer_id = EXCLUDED.customer_id, seq = EXCLUDED.seq;
-- ... and one new row with a number: all refused
INSERT INTO events (id, customer_id, seq) VALUES (1, 21, 1), (5, 15, 500)
  ON CONFLICT (id) DO UPDATE SET customer_id = EXCLUDED.customer_id;
\echo :LAST_ERROR_SQLSTATE
-- INSERT ... SELECT and COPY of rows with numbers
INSERT INTO events (id, customer_id, seq) SELECT id + 100, customer_id, seq + 1000 FROM events;
\echo :LAST_ERROR_SQLSTATE
COPY events (id, customer_id, seq) FROM STDIN;
20	1	2000
\.
SELECT id, customer_id, seq FROM events ORDER BY id;

-- a number the stream has not handed out, and one below the counter that
-- no row has (its row was deleted), are refused alike
INSERT INTO events (id, customer_id, seq) SELECT 60, 60, stream_seq.head('events') + 1;
\echo :LAST_ERROR_SQLSTATE
BEGIN;
SELECT seq AS gap FROM events WHERE id = 4 \gset
DELETE FROM events WHERE id = 4;
INSERT INTO events (id, customer_id, seq) VALUES (4, 14, :gap);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;

-- a savepoint: the refused row rolls back with it, the transaction goes on
BEGIN;
INSERT INTO events (id, customer_id) VALUES (6, 16);
SAVEPOINT s;
INSERT INTO events (id, customer_id, seq) VALUES (7, 17, 700);
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT id, seq IS NOT NULL AS numbered FROM events WHERE id IN (6, 7) ORDER BY id;

-- a PL/pgSQL exception block that catches the refusal keeps nothing of it
DO $$
BEGIN
  INSERT INTO events (id, customer_id, seq) VALUES (8, 18, 800);
EXCEPTION WHEN generated_always THEN
  RAISE NOTICE 'refused: %', SQLSTATE;
END $$;
-- SET CONSTRAINTS ALL IMMEDIATE changes nothing: the row is refused as it
-- is stored, rows are numbered at commit; an upsert of a loaded row works
-- there as well
BEGIN;
SET CONSTRAINTS ALL IMMEDIATE;
DELETE FROM events WHERE id = 4;
INSERT INTO events (id, customer_id, seq) VALUES (4, 14, :gap);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
SET CONSTRAINTS ALL IMMEDIATE;
INSERT INTO events (id, customer_id, seq) VALUES (6, 26, NULL), (1, 31, 1)
  ON CONFLICT (id) DO UPDATE SET customer_id = EXCLUDED.customer_id, seq = EXCLUDED.seq;
COMMIT;
SELECT id, customer_id, seq IS NOT NULL AS numbered FROM events WHERE id IN (1, 6, 8) ORDER BY id;
-- a row refused in a savepoint rolled back takes no number:
-- last_numbers() gives only the numbers written
BEGIN;
SET CONSTRAINTS ALL IMMEDIATE;
DELETE FROM events WHERE id = 4;
SAVEPOINT s;
INSERT INTO events (id, customer_id, seq) VALUES (4, 14, :gap);
\echo :LAST_ERROR_SQLSTATE
ROLLBACK TO s;
INSERT INTO events (id, customer_id) VALUES (9, 9);
COMMIT;
SELECT first = seq AND last = seq AS only_the_row_written
  FROM stream_seq.last_numbers('events'), events WHERE id = 9;

-- the time column: the upsert of a loaded row, and a row with a time
INSERT INTO tevents (id, v, seq, at) SELECT id, 20, seq, at FROM tevents WHERE id = 1
  ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v, seq = EXCLUDED.seq, at = EXCLUDED.at;
SELECT id, v FROM tevents WHERE id = 1;
INSERT INTO tevents (id, v, at) VALUES (9, 9, now())
  ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v;
\echo :LAST_ERROR_SQLSTATE

-- the partitioned stream: the rule holds on each partition
INSERT INTO pevents (id, day, v, seq) VALUES (1, 1, 11, 1)
  ON CONFLICT (id, day) DO UPDATE SET v = EXCLUDED.v, seq = EXCLUDED.seq;
INSERT INTO pevents_2 (id, day, v, seq) VALUES (2, 2, 22, 2)
  ON CONFLICT (id, day) DO UPDATE SET v = EXCLUDED.v;
SELECT tableoid::regclass, id, v, seq FROM pevents ORDER BY id;
INSERT INTO pevents (id, day, v, seq) VALUES (3, 1, 3, 300)
  ON CONFLICT (id, day) DO UPDATE SET v = EXCLUDED.v;
\echo :LAST_ERROR_SQLSTATE
-- on a partitioned stream the index is not unique: a number another row
-- has is refused by the guard as well
INSERT INTO pevents (id, day, v, seq) VALUES (3, 2, 3, 1);
\echo :LAST_ERROR_SQLSTATE

-- ---------------------------------------------------------------------
-- The commit-time write after all this: heap-only for rows as inserted,
-- ordinary for rows updated first, every index in agreement
-- ---------------------------------------------------------------------
INSERT INTO events (id, customer_id) VALUES (30, 30);
BEGIN;
INSERT INTO events (id, customer_id) VALUES (31, 31);
UPDATE events SET seq = NULL, customer_id = 32 WHERE id = 31;
COMMIT;
SELECT id, customer_id, seq IS NOT NULL AS numbered FROM events WHERE id >= 30 ORDER BY id;
RESET ROLE;
SELECT app_heap_only('events') > 0 AS some_heap_only;
SELECT app_check('events') AS events, app_check('tevents') AS tevents,
       app_check('pevents_1') AS pevents_1, app_check('pevents_2') AS pevents_2;
-- numbers are still unique and every row has one
SELECT count(*) = count(DISTINCT seq) AND count(seq) = count(*) AS all_numbered FROM events;
SET ROLE app_user;

-- ---------------------------------------------------------------------
-- last_numbers()
-- ---------------------------------------------------------------------
INSERT INTO events (id, customer_id) VALUES (40, 1), (41, 1), (42, 1);
SELECT (l.first, l.last) = (SELECT min(seq), max(seq) FROM events WHERE id >= 40) AS matches,
       l.last - l.first AS span
  FROM stream_seq.last_numbers('events') l;
SELECT last AS events_last FROM stream_seq.last_numbers('events') \gset
-- a transaction that rolls back leaves it as it was
BEGIN;
INSERT INTO events (id, customer_id) VALUES (43, 1);
ROLLBACK;
SELECT last = :events_last AS unchanged FROM stream_seq.last_numbers('events');
-- so does one that fails at commit, after its numbers were taken (a
-- deferred trigger of the table that fires after the numbering)
RESET ROLE;
CREATE FUNCTION app_fail() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.customer_id < 0 THEN
    RAISE EXCEPTION 'refused at commit';
  END IF;
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER z_fail AFTER INSERT ON events
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION app_fail();
SET ROLE app_user;
BEGIN;
INSERT INTO events (id, customer_id) VALUES (44, -1);
COMMIT;
RESET ROLE;
DROP TRIGGER z_fail ON events;
DROP FUNCTION app_fail();
SET ROLE app_user;
SELECT last = :events_last AS unchanged FROM stream_seq.last_numbers('events');
-- and one whose rows all rolled back to a savepoint
BEGIN;
SAVEPOINT s;
INSERT INTO events (id, customer_id) VALUES (45, 1);
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT last = :events_last AS unchanged FROM stream_seq.last_numbers('events');
-- rows that survive a savepoint's rollback: only theirs
BEGIN;
INSERT INTO events (id, customer_id) VALUES (46, 1);
SAVEPOINT s;
INSERT INTO events (id, customer_id) VALUES (47, 1), (48, 1);
ROLLBACK TO SAVEPOINT s;
COMMIT;
SELECT first = last AND last = (SELECT seq FROM events WHERE id = 46) AS only_46
  FROM stream_seq.last_numbers('events');
-- PREPARE TRANSACTION of stream writes is refused: it stays as it was
SELECT last AS events_last FROM stream_seq.last_numbers('events') \gset
BEGIN;
INSERT INTO events (id, customer_id) VALUES (49, 1);
PREPARE TRANSACTION 'app_p';
\echo :LAST_ERROR_SQLSTATE
SELECT last = :events_last AS unchanged FROM stream_seq.last_numbers('events');
-- a transaction that writes nothing to the stream does not clear it; one
-- that writes to two streams sets both
INSERT INTO pevents (id, day, v) VALUES (5, 1, 5);
SELECT last = :events_last AS unchanged FROM stream_seq.last_numbers('events');
BEGIN;
INSERT INTO events (id, customer_id) VALUES (50, 1);
INSERT INTO pevents (id, day, v) VALUES (6, 2, 6), (7, 1, 7);
COMMIT;
SELECT e.last = (SELECT seq FROM events WHERE id = 50) AS events_set,
       (p.first, p.last) = (SELECT min(seq), max(seq) FROM pevents WHERE id IN (6, 7)) AS pevents_set
  FROM stream_seq.last_numbers('events') e, stream_seq.last_numbers('pevents') p;
-- one that writes to ten streams sets all ten (more streams than the
-- session keeps track of one by one); one that rolls back leaves them
RESET ROLE;
SET client_min_messages = warning;
DO $$
BEGIN
  FOR i IN 1..10 LOOP
    EXECUTE format('CREATE TABLE app_many_%s (id int, seq bigint)', i);
    PERFORM stream_seq.enable(format('app_many_%s', i)::regclass);
  END LOOP;
END $$;
RESET client_min_messages;
CREATE FUNCTION app_many_set() RETURNS int LANGUAGE plpgsql AS $$
DECLARE
  n int := 0;
  s bigint;
  l record;
BEGIN
  FOR i IN 1..10 LOOP
    EXECUTE format('SELECT max(seq) FROM app_many_%s', i) INTO s;
    SELECT * INTO l FROM stream_seq.last_numbers(format('app_many_%s', i)::regclass);
    IF l.first = s AND l.last = s THEN
      n := n + 1;
    END IF;
  END LOOP;
  RETURN n;
END $$;
BEGIN;
DO $$
BEGIN
  FOR i IN 1..10 LOOP
    EXECUTE format('INSERT INTO app_many_%s VALUES (%s)', i, i);
  END LOOP;
END $$;
COMMIT;
SELECT app_many_set() AS streams_set;
BEGIN;
DO $$
BEGIN
  FOR i IN 1..10 LOOP
    EXECUTE format('INSERT INTO app_many_%s VALUES (%s)', i, i + 10);
  END LOOP;
END $$;
ROLLBACK;
SELECT app_many_set() AS streams_unchanged;
DO $$
BEGIN
  FOR i IN 1..10 LOOP
    EXECUTE format('DROP TABLE app_many_%s', i);
  END LOOP;
END $$;
DROP FUNCTION app_many_set();
SET ROLE app_user;
-- the recipe "wait until my event is visible to consumers": wait() past
-- the last number, then every row up to it is below the horizon
SELECT stream_seq.wait('events', last - 1, '10 seconds') > last AS visible
  FROM stream_seq.last_numbers('events');
-- NULL, a table that is not a stream, a stream the role may not read
SELECT * FROM stream_seq.last_numbers(NULL);
SELECT * FROM stream_seq.last_numbers('pg_class');
\echo :LAST_ERROR_SQLSTATE
INSERT INTO secret VALUES (1);
SELECT * FROM stream_seq.last_numbers('secret');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- another session: nothing yet
\c
SELECT * FROM stream_seq.last_numbers('events');

DROP TABLE events, tevents, pevents, secret;
DROP FUNCTION app_heap_only(regclass);
DROP FUNCTION app_check(regclass);
REVOKE USAGE ON SCHEMA stream_seq FROM app_user;
DROP ROLE app_user;
