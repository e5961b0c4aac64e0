-- The write path: rows captured by the capture index as they are stored,
-- with placeholders in the stream and time columns; numbered at commit in
-- place (one version a row) or by an update, and why; what the inserting
-- transaction sees; what the planner does with the "seq > 0" indexes; DDL
-- in the inserting transaction; and that every index agrees with the heap
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
CREATE EXTENSION IF NOT EXISTS amcheck;
CREATE EXTENSION IF NOT EXISTS pageinspect;
\set SHOW_CONTEXT never

-- the line pointers of a table with a tuple: versions there are, and how
-- many of them an update made (a row numbered in place has one version)
CREATE FUNCTION versions(tbl regclass, OUT versions bigint, OUT by_update bigint)
LANGUAGE sql AS $$
  SELECT count(*), count(*) FILTER (WHERE (t_infomask & 8192) <> 0)
  FROM generate_series(0, pg_relation_size(tbl) / current_setting('block_size')::int - 1) b,
       heap_page_items(get_raw_page(tbl::text, b::int))
  WHERE lp_flags = 1
$$;

-- every btree index of a table checked against the heap, and the heap
CREATE FUNCTION check_all(tbl regclass) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  i regclass;
  problems bigint;
BEGIN
  FOR i IN SELECT indexrelid FROM pg_index JOIN pg_class c ON c.oid = indexrelid
           JOIN pg_am a ON a.oid = c.relam
           WHERE indrelid = tbl AND a.amname = 'btree' ORDER BY indexrelid LOOP
    PERFORM bt_index_check(i, true);
  END LOOP;
  SELECT count(*) INTO problems FROM verify_heapam(tbl);
  RETURN CASE WHEN problems = 0 THEN 'clean' ELSE problems || ' heap problems' END;
END $$;

-- the same query through a sequential scan and through an index scan
CREATE FUNCTION same_both_ways(query text) RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
  by_seqscan text;
  by_index text;
BEGIN
  SET LOCAL enable_indexscan = off;
  SET LOCAL enable_indexonlyscan = off;
  SET LOCAL enable_bitmapscan = off;
  EXECUTE format('SELECT string_agg(r::text, '','' ORDER BY r::text) FROM (%s) r', query)
    INTO by_seqscan;
  SET LOCAL enable_indexscan = on;
  SET LOCAL enable_indexonlyscan = on;
  SET LOCAL enable_seqscan = off;
  EXECUTE format('SELECT string_agg(r::text, '','' ORDER BY r::text) FROM (%s) r', query)
    INTO by_index;
  RESET enable_seqscan;
  RESET enable_indexscan;
  RESET enable_indexonlyscan;
  RESET enable_bitmapscan;
  IF by_index IS DISTINCT FROM by_seqscan THEN
    RAISE WARNING 'query % gave % by index, % by sequential scan', query, by_index, by_seqscan;
  END IF;
  RETURN by_index IS NOT DISTINCT FROM by_seqscan;
END $$;

-- what a stream table has: the placeholder default, the unique index that
-- leaves unnumbered rows out, the capture index; no trigger on INSERT
CREATE TABLE h (id int PRIMARY KEY, payload text, seq bigint);
SELECT stream_seq.enable('h');
\d h

-- rows numbered in place: one version each, in the order they were stored
-- (the row of the savepoint rolled back keeps its line pointer until
-- pruning)
INSERT INTO h SELECT g, 'row ' || g FROM generate_series(1, 20) g;
BEGIN;
INSERT INTO h VALUES (21, 'kept');
SAVEPOINT s;
INSERT INTO h VALUES (22, 'rolled back');
ROLLBACK TO SAVEPOINT s;
SAVEPOINT t;
INSERT INTO h VALUES (23, 'released');
RELEASE SAVEPOINT t;
COMMIT;
SELECT * FROM versions('h');
SELECT id, seq FROM h WHERE id > 18 ORDER BY seq;
SELECT check_all('h');
SELECT same_both_ways('SELECT id, seq FROM h WHERE seq > 5 AND seq < 9');
SELECT same_both_ways('SELECT id, seq FROM h WHERE seq = 21');
SELECT same_both_ways('SELECT id, seq FROM h WHERE id = 21');
SELECT same_both_ways('SELECT seq FROM h WHERE seq IS NOT NULL');
COPY h (id, payload) FROM STDIN;
40	copied
41	copied
\.
SELECT id, seq FROM h WHERE id >= 40 ORDER BY seq;
SELECT * FROM versions('h');

-- what the inserting transaction sees before commit: the placeholder 0,
-- in RETURNING too; its rows are in no index on the column, and the
-- planner knows it: for that transaction the table keeps the predicate
-- "seq > 0", which "seq = 0" does not imply, so even with sequential
-- scans off the query reads the table and finds them.  A generic plan
-- made before the transaction's first row (here: before the INSERT) and
-- run after it with 0 still reaches the index: it does not find them.
SET plan_cache_mode = force_generic_plan;
PREPARE mine(bigint) AS SELECT count(*) FROM h WHERE seq = $1;
EXECUTE mine(0);
BEGIN;
INSERT INTO h VALUES (50, 'mine') RETURNING id, seq;
SELECT id, seq FROM h WHERE id = 50;
SELECT count(*) AS null_seq FROM h WHERE seq IS NULL;
SET LOCAL enable_seqscan = off;
SET LOCAL enable_bitmapscan = off;
SELECT count(*) AS with_seqscan_off FROM h WHERE seq = 0;
PREPARE mine_now(bigint) AS SELECT count(*) FROM h WHERE seq = $1;
EXECUTE mine_now(0);
EXECUTE mine(0);
SET LOCAL enable_seqscan = on;
SET LOCAL enable_indexscan = off;
SELECT count(*) AS through_the_table FROM h WHERE seq = 0;
COMMIT;
SELECT seq > 0 AS numbered FROM h WHERE id = 50;
-- after the commit a new plan uses the index again
EXPLAIN (COSTS OFF) EXECUTE mine_now(0);
DEALLOCATE mine;
DEALLOCATE mine_now;
RESET plan_cache_mode;

-- the planner: "seq > 0" is shown as "seq IS NOT NULL", which any strict
-- clause implies: a generic plan of the reader's query, a join on the
-- column and a prepared lookup use the index (20,000 rows, analyzed; the
-- plan after ten executions)
CREATE TABLE big (id int, payload text);
SELECT stream_seq.enable('big');
INSERT INTO big SELECT g, 'p' FROM generate_series(1, 20000) g;
ANALYZE big;
PREPARE page_of(bigint, int) AS
  SELECT seq FROM big WHERE seq > $1 AND seq < stream_seq.horizon('big') ORDER BY seq LIMIT $2;
\o /dev/null
SELECT format('EXECUTE page_of(%s, 10)', i * 100) FROM generate_series(1, 10) i \gexec
\o
EXPLAIN (COSTS OFF) EXECUTE page_of(1000, 10);
SET plan_cache_mode = force_generic_plan;
EXPLAIN (COSTS OFF) EXECUTE page_of(1000, 10);
PREPARE by_number(bigint) AS SELECT id FROM big WHERE seq = $1;
EXPLAIN (COSTS OFF) EXECUTE by_number(5);
EXECUTE by_number(5);
RESET plan_cache_mode;
EXPLAIN (COSTS OFF) SELECT b.id FROM big b JOIN (VALUES (5::bigint), (7)) v(s) ON b.seq = v.s;
DEALLOCATE page_of;
DEALLOCATE by_number;
-- a column of the same table compared with 0 elsewhere is left alone
CREATE INDEX big_id_pos ON big (id) WHERE id > 0;
EXPLAIN (COSTS OFF) SELECT id FROM big WHERE id = 5;
SET plan_cache_mode = force_generic_plan;
PREPARE by_id(int) AS SELECT id FROM big WHERE id = $1;
EXPLAIN (COSTS OFF) EXECUTE by_id(5);
DEALLOCATE by_id;
RESET plan_cache_mode;
DROP TABLE big;

-- an index on the number without that predicate takes unnumbered rows: a
-- unique one would find them all duplicates, and is refused; another one
-- makes the write an update, and the warning says so
CREATE TABLE full_idx (id int PRIMARY KEY, seq bigint);
SELECT stream_seq.enable('full_idx');
CREATE UNIQUE INDEX full_idx_seq_unique ON full_idx (seq);
\echo :LAST_ERROR_SQLSTATE
SET client_min_messages = warning;
CREATE INDEX full_idx_seq_all ON full_idx (seq);
INSERT INTO full_idx SELECT g FROM generate_series(1, 10) g;
SELECT * FROM versions('full_idx');
SELECT check_all('full_idx');
SELECT same_both_ways('SELECT id, seq FROM full_idx WHERE seq > 3');
-- with the predicate, rows are numbered in place again
DROP INDEX full_idx_seq_all;
CREATE INDEX full_idx_seq_numbered ON full_idx (seq, id) WHERE seq > 0;
INSERT INTO full_idx SELECT g FROM generate_series(11, 15) g;
SELECT * FROM versions('full_idx');
SELECT check_all('full_idx');

-- an expression index on the number, and a large value (TOAST): numbered
-- in place, the expression index gets its entry from the numbered row
CREATE INDEX h_seq_expr ON h ((seq * 2)) WHERE seq > 0;
INSERT INTO h VALUES (30, repeat('x', 10000)), (31, 'small');
SELECT check_all('h');
SELECT same_both_ways('SELECT id FROM h WHERE seq * 2 > 40');

-- by an update, and why
-- (1) a row updated by its own transaction before commit: its live version
--     is numbered by an update; a row deleted leaves a gap
CREATE TABLE h2 (id int PRIMARY KEY, payload text, seq bigint);
SELECT stream_seq.enable('h2');
BEGIN;
INSERT INTO h2 VALUES (1, 'a'), (2, 'b'), (3, 'c');
UPDATE h2 SET payload = 'b2' WHERE id = 2;
DELETE FROM h2 WHERE id = 3;
INSERT INTO h2 VALUES (4, 'd');
COMMIT;
SELECT * FROM versions('h2');
SELECT id, payload, seq FROM h2 ORDER BY id;
SELECT check_all('h2');
-- (2) a row inserted with NULL written explicitly has no room
INSERT INTO h2 VALUES (5, 'null', NULL);
SELECT id, seq > 0 AS numbered FROM h2 WHERE id = 5;
-- (3) turned off (a superuser's setting); an ordinary role cannot
SET stream_seq.in_place = off;
INSERT INTO h2 VALUES (6, 'e');
RESET stream_seq.in_place;
INSERT INTO h2 VALUES (7, 'f');
SELECT * FROM versions('h2');
SELECT check_all('h2');
-- not by an update: COPY ... FREEZE, whose frozen rows every snapshot that
-- can read the table sees at once; their storage is new in the loading
-- transaction, which no other session reads before the commit, so they
-- are numbered in place (one version each)
CREATE TABLE frozen (id int, seq bigint);
BEGIN;
TRUNCATE frozen;
SELECT stream_seq.enable('frozen');
COMMIT;
BEGIN;
TRUNCATE frozen;
COPY frozen (id) FROM STDIN (FREEZE);
1
2
\.
COMMIT;
SELECT id, seq FROM frozen ORDER BY seq;
SELECT * FROM versions('frozen');
SELECT check_all('frozen');

-- an index that uses the whole row covers the number too
CREATE TABLE whole (id int PRIMARY KEY, k int, seq bigint);
SELECT stream_seq.enable('whole');
CREATE UNIQUE INDEX whole_k ON whole (k) WHERE whole IS NOT NULL;
\echo :LAST_ERROR_SQLSTATE
CREATE INDEX whole_k2 ON whole (k) WHERE whole IS NOT NULL;
INSERT INTO whole VALUES (1, 7);
INSERT INTO whole VALUES (2, 7);
SELECT id, k, seq FROM whole ORDER BY id;
SELECT * FROM versions('whole');
SELECT check_all('whole');

-- rows a deferred trigger inserts at commit are numbered; deferred
-- triggers run before the numbering and see the placeholder
CREATE TABLE outbox (id int, seq bigint);
SELECT stream_seq.enable('outbox');
CREATE TABLE orders (id int);
CREATE FUNCTION to_outbox() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO outbox (id) VALUES (NEW.id);
  RAISE NOTICE 'order %: outbox row %', NEW.id,
    (SELECT seq FROM outbox WHERE id = NEW.id);
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER zz_outbox AFTER INSERT ON orders
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION to_outbox();
SET client_min_messages = notice;
BEGIN;
INSERT INTO orders VALUES (1), (2);
COMMIT;
SET client_min_messages = warning;
SELECT id, seq > 0 AS numbered FROM outbox ORDER BY seq;

-- a procedure's COMMIT numbers what came before it
CREATE PROCEDURE two_commits() LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO outbox (id) VALUES (10);
  COMMIT;
  INSERT INTO outbox (id) VALUES (11);
END $$;
CALL two_commits();
SELECT id, seq > 0 AS numbered FROM outbox WHERE id >= 10 ORDER BY seq;

-- DDL after the rows in the inserting transaction: a rewrite (the
-- captured positions point into storage that is gone: the rows are found
-- by reading the table), TRUNCATE, DROP TABLE, disable() (refused)
CREATE TABLE ddl (id int, v int, seq bigint);
CREATE INDEX ddl_id ON ddl (id);
SELECT stream_seq.enable('ddl');
BEGIN;
INSERT INTO ddl VALUES (1, 1), (2, 2);
ALTER TABLE ddl ALTER COLUMN v TYPE bigint;
INSERT INTO ddl VALUES (3, 3);
COMMIT;
SELECT id, seq FROM ddl ORDER BY seq;
SELECT check_all('ddl');
BEGIN;
INSERT INTO ddl VALUES (4, 4);
TRUNCATE ddl;
INSERT INTO ddl VALUES (5, 5);
COMMIT;
SELECT id, seq > 3 AS numbered_above FROM ddl ORDER BY seq;
BEGIN;
INSERT INTO ddl VALUES (6, 6);
CLUSTER ddl USING ddl_id;
COMMIT;
SELECT id, seq > 3 AS numbered_above FROM ddl ORDER BY seq;
SELECT check_all('ddl');
-- rows the transaction updated after the rewrite or TRUNCATE (the
-- version found by reading the table is the update's) or before it (the
-- rewrite copies the live version), HOT or not, are numbered too
SELECT max(seq) AS before_max FROM ddl \gset
BEGIN;
INSERT INTO ddl VALUES (9, 9), (10, 10);
TRUNCATE ddl;
INSERT INTO ddl VALUES (11, 11), (12, 12), (13, 13);
UPDATE ddl SET v = -11 WHERE id = 11;
UPDATE ddl SET id = -12 WHERE id = 12;
UPDATE ddl SET v = -12 WHERE id = -12;
COMMIT;
SELECT id, v, seq > :before_max AS numbered_above FROM ddl ORDER BY id;
BEGIN;
INSERT INTO ddl VALUES (14, 14), (15, 15);
UPDATE ddl SET v = -14 WHERE id = 14;
CLUSTER ddl USING ddl_id;
UPDATE ddl SET v = -15 WHERE id = 15;
ALTER TABLE ddl ALTER COLUMN v TYPE numeric;
UPDATE ddl SET v = -13 WHERE id = 13;
COMMIT;
SELECT id, v, seq > :before_max AS numbered_above FROM ddl ORDER BY id;
SELECT count(*) AS unnumbered FROM ddl WHERE seq <= 0;
SELECT check_all('ddl');
-- a table whose storage the transaction created (CREATE TABLE, or a
-- TRUNCATE before) is truncated in place by a TRUNCATE: the rows
-- captured before it point past the table's end, or at rows stored since
BEGIN;
CREATE TABLE fresh (id int, payload text, seq bigint);
SELECT stream_seq.enable('fresh');
INSERT INTO fresh SELECT g, repeat('p', 1000) FROM generate_series(1, 20) g;
TRUNCATE fresh;
INSERT INTO fresh VALUES (21, 'a'), (22, 'b');
UPDATE fresh SET payload = 'bb' WHERE id = 22;
COMMIT;
SELECT id, payload, seq > 0 AS numbered FROM fresh ORDER BY seq;
SELECT count(DISTINCT seq) AS distinct_numbers FROM fresh;
BEGIN;
TRUNCATE fresh;
INSERT INTO fresh SELECT g FROM generate_series(23, 27) g;
TRUNCATE fresh;
COMMIT;
SELECT count(*) FROM fresh;
SELECT check_all('fresh');
DROP TABLE fresh;

-- a second capture index is refused (it would record every row twice,
-- and a transaction's rows would not get consecutive numbers); REINDEX
-- rebuilds the one there is
CREATE INDEX ddl_capture2 ON ddl USING stream_seq_capture (seq);
\echo :LAST_ERROR_SQLSTATE
CREATE INDEX CONCURRENTLY ddl_capture2 ON ddl USING stream_seq_capture (v);
\echo :LAST_ERROR_SQLSTATE
CREATE INDEX IF NOT EXISTS ddl_stream_seq_capture ON ddl USING stream_seq_capture (seq);
SELECT count(*) AS capture_indexes FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
  JOIN pg_am a ON a.oid = c.relam WHERE i.indrelid = 'ddl'::regclass AND a.amname = 'stream_seq_capture';
REINDEX TABLE CONCURRENTLY ddl;
SELECT max(seq) AS before_max FROM ddl \gset
INSERT INTO ddl VALUES (16, 16), (17, 17), (18, 18);
SELECT id, seq - :before_max AS after_max FROM ddl WHERE id >= 16 ORDER BY seq;
-- a copy of the stream's definition (LIKE ... INCLUDING ALL) has its
-- capture index and placeholder defaults, but is no stream: its rows are
-- not captured, and rows copied from the stream keep their numbers
CREATE TABLE ddl_copy (LIKE ddl INCLUDING ALL);
INSERT INTO ddl_copy SELECT * FROM ddl;
INSERT INTO ddl_copy (id, v) VALUES (100, 100);
COPY ddl_copy (id, v) FROM STDIN;
101	101
\.
SELECT count(*) AS copied, count(*) FILTER (WHERE seq = 0) AS placeholders,
       count(DISTINCT seq) FILTER (WHERE seq > 0) AS distinct_numbers FROM ddl_copy;
SELECT count(*) AS ddl_rows FROM ddl;
DROP TABLE ddl_copy;
BEGIN;
INSERT INTO ddl VALUES (7, 7);
SELECT stream_seq.disable('ddl');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN;
INSERT INTO ddl VALUES (8, 8);
DROP TABLE ddl;
COMMIT;
-- a partition detached after rows were stored in it leaves the stream
-- with them: they keep the placeholders, the stream's other rows of the
-- transaction are numbered
CREATE TABLE parted (k int, id int) PARTITION BY LIST (k);
CREATE TABLE parted1 PARTITION OF parted FOR VALUES IN (1);
CREATE TABLE parted2 PARTITION OF parted FOR VALUES IN (2);
SELECT stream_seq.enable('parted', time_column => 'at');
BEGIN;
INSERT INTO parted (k, id) VALUES (1, 1), (2, 2);
ALTER TABLE parted DETACH PARTITION parted1;
INSERT INTO parted (k, id) VALUES (2, 3);
COMMIT;
SELECT tableoid::regclass, id, seq, at > '-infinity' AS timed FROM parted ORDER BY seq;
SELECT tableoid::regclass, id, seq, at FROM parted1;
SELECT check_all('parted2');
DROP TABLE parted, parted1;

-- a cancel that arrives while the commit numbers the rows (here sent by
-- the transaction's last deferred trigger, just before) aborts the
-- commit: the rows are not committed, and the session and the stream go
-- on
CREATE TABLE cancelled (id int, seq bigint);
SELECT stream_seq.enable('cancelled');
INSERT INTO cancelled VALUES (0);
CREATE FUNCTION cancel_own_backend() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RETURN CASE WHEN pg_cancel_backend(pg_backend_pid()) THEN NULL END;
END $$;
CREATE TABLE cancelling (id int);
CREATE CONSTRAINT TRIGGER cancelling AFTER INSERT ON cancelling
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION cancel_own_backend();
BEGIN;
INSERT INTO cancelled SELECT g FROM generate_series(1, 100) g;
INSERT INTO cancelling VALUES (1);
COMMIT;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM cancelled;
INSERT INTO cancelled VALUES (101);
SELECT id, seq > 1 AS numbered_after, seq < stream_seq.horizon('cancelled') AS readable
  FROM cancelled ORDER BY seq;
SELECT check_all('cancelled');
DROP TABLE cancelled, cancelling;
DROP FUNCTION cancel_own_backend();

-- a cursor WITH HOLD of the inserting transaction is read at its commit,
-- before the numbering: it shows the placeholders after the commit
CREATE TABLE held (id int, seq bigint);
SELECT stream_seq.enable('held', time_column => 'at');
BEGIN;
INSERT INTO held VALUES (1);
DECLARE held_rows CURSOR WITH HOLD FOR SELECT id, seq, at FROM held;
DECLARE held_readable CURSOR WITH HOLD FOR
  SELECT id FROM held WHERE seq > 0 AND seq < stream_seq.horizon('held');
COMMIT;
FETCH ALL FROM held_rows;
FETCH ALL FROM held_readable;
CLOSE held_rows;
CLOSE held_readable;
SELECT id, seq > 0 AS numbered, at > '-infinity' AS timed FROM held;
-- so is the query of a procedure's FOR loop that commits inside the loop
CREATE PROCEDURE held_loop() LANGUAGE plpgsql AS $$
DECLARE
  r record;
BEGIN
  INSERT INTO held VALUES (2), (3);
  FOR r IN SELECT id, seq FROM held WHERE id > 1 ORDER BY id LOOP
    RAISE NOTICE 'row % read with number %', r.id, r.seq;
    COMMIT;
  END LOOP;
END $$;
SET client_min_messages = notice;
CALL held_loop();
SET client_min_messages = warning;
SELECT id, seq > 0 AS numbered FROM held ORDER BY id;
DROP PROCEDURE held_loop();
DROP TABLE held;

-- PREPARE TRANSACTION of a transaction that stored stream rows is
-- refused, and leaves nothing
CREATE TABLE h3 (id int, seq bigint);
SELECT stream_seq.enable('h3');
BEGIN;
INSERT INTO h3 VALUES (1);
PREPARE TRANSACTION 'stored';
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM h3;

-- a group's slot index leaves unnumbered rows out too: numbered in place,
-- its entry comes with the number
CREATE TABLE g (id int PRIMARY KEY, customer int, seq bigint);
SELECT stream_seq.enable('g');
SELECT stream_seq.create_group('g', 'workers', 'customer', 4);
INSERT INTO g SELECT i, i % 3 FROM generate_series(1, 12) i;
SELECT * FROM versions('g');
SELECT check_all('g');
SELECT same_both_ways('SELECT id, seq FROM g WHERE stream_seq.slot_of(customer::text, 4) = '
                      || stream_seq.slot_of('1', 4) || ' AND seq > 0');

-- an ordinary role's stream, on full pages: every row in place
CREATE ROLE write_path_writer;
GRANT CREATE, USAGE ON SCHEMA public TO write_path_writer;
GRANT USAGE ON SCHEMA stream_seq TO write_path_writer;
SET ROLE write_path_writer;
CREATE TABLE own (id int PRIMARY KEY, payload text, seq bigint) WITH (fillfactor = 100);
SELECT stream_seq.enable('own');
\o /dev/null
SELECT format('INSERT INTO own SELECT g, repeat(''p'', 100) FROM generate_series(%s, %s) g',
              i * 10 + 1, i * 10 + 10)
  FROM generate_series(0, 19) i \gexec
\o
SET stream_seq.in_place = off;
\echo :LAST_ERROR_SQLSTATE
SET stream_seq.hold_after_numbering = 1;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT * FROM versions('own');
SELECT check_all('own');
SELECT same_both_ways('SELECT id, seq FROM own WHERE seq BETWEEN 50 AND 60');
SELECT count(*) = 200 AS all_numbered, count(DISTINCT seq) = 200 AS unique_numbers
  FROM own WHERE seq > 0;

-- a publication whose row filter uses a column outside the replica
-- identity could not publish the UPDATE that numbers rows when wal_level
-- is logical: the INSERT fails at once, with PostgreSQL's message and a
-- hint that says why an INSERT meets it
CREATE TABLE pubrf (id int PRIMARY KEY, k int);
SELECT stream_seq.enable('pubrf');
SET client_min_messages = error;
CREATE PUBLICATION pubrf_pub FOR TABLE pubrf WHERE (k > 0);
RESET client_min_messages;
INSERT INTO pubrf VALUES (1, 1);
DROP PUBLICATION pubrf_pub;
INSERT INTO pubrf VALUES (1, 1);
SELECT id, seq > 0 AS numbered FROM pubrf;
DROP TABLE pubrf;

-- A plain INSERT into a stream table leaves out the indexes whose
-- predicate is "seq > 0" on the stream column (insertindexes.c): none of
-- its rows can enter them before the commit gives them their entries.
-- Each index must still hold exactly its rows, for INSERT, multi-row
-- INSERT, ON CONFLICT DO UPDATE (which opens every index), prepared statements, a
-- nested INSERT from a trigger or a function, a user's own partial
-- indexes (one on another column's "> 0", which is not left out).
CREATE TABLE pred (id int PRIMARY KEY, customer int, payload int, seq bigint);
SELECT stream_seq.enable('pred');
SELECT stream_seq.create_group('pred', 'by_customer', 'customer', 4);
CREATE INDEX pred_big_payload ON pred (payload) WHERE payload > 10;
CREATE INDEX pred_numbered_payload ON pred (payload) WHERE seq > 0;
CREATE INDEX pred_positive_payload ON pred (id) WHERE payload > 0;
GRANT SELECT, INSERT, UPDATE ON pred TO write_path_writer;
CREATE FUNCTION pred_echo() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.id < 3 THEN
    INSERT INTO pred VALUES (NEW.id + 1000, NEW.customer, NEW.payload + 10);
  END IF;
  RETURN NULL;
END $$;
CREATE TRIGGER pred_echo AFTER INSERT ON pred FOR EACH ROW EXECUTE FUNCTION pred_echo();
CREATE FUNCTION pred_nested(i int) RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO pred VALUES (200 + i, i, i + 20);
  RETURN true;
END $$;
SET ROLE write_path_writer;
INSERT INTO pred VALUES (1, 1, 5);
INSERT INTO pred VALUES (2, 2, 50), (3, 3, 7), (4, 1, 70);
PREPARE pred_ins(int, int) AS INSERT INTO pred VALUES ($1, $1 % 5, $2);
EXECUTE pred_ins(5, 1);
EXECUTE pred_ins(6, 11);
EXECUTE pred_ins(7, 2);
EXECUTE pred_ins(8, 22);
EXECUTE pred_ins(9, 3);
EXECUTE pred_ins(10, 33);
EXECUTE pred_ins(11, 4);
DEALLOCATE pred_ins;
INSERT INTO pred VALUES (10, 0, 0) ON CONFLICT DO NOTHING;
INSERT INTO pred VALUES (11, 0, 44) ON CONFLICT (id) DO UPDATE SET payload = excluded.payload;
INSERT INTO pred VALUES (12, 2, 12) ON CONFLICT (id) DO UPDATE SET payload = excluded.payload;
INSERT INTO pred VALUES (6, 0, 66) ON CONFLICT (id) DO UPDATE SET payload = excluded.payload;
-- ON CONFLICT DO NOTHING leaves out the "seq > 0" indexes that are not
-- its arbiters: a new row is stored and a conflicting one skipped; a row
-- with another row's number is skipped where the stream's index is an
-- arbiter (no conflict target: every unique index is), and refused where
-- it is not, as before
INSERT INTO pred VALUES (600, 1, 600), (1, 1, 1) ON CONFLICT (id) DO NOTHING;
INSERT INTO pred (id, customer, payload, seq)
  SELECT 601, 1, 601, seq FROM pred WHERE id = 1 ON CONFLICT DO NOTHING;
INSERT INTO pred (id, customer, payload, seq)
  SELECT 602, 1, 602, seq FROM pred WHERE id = 1 ON CONFLICT (id) DO NOTHING;
-- rows the transaction stores but does not keep
BEGIN;
INSERT INTO pred VALUES (13, 3, 13);
SAVEPOINT s;
INSERT INTO pred VALUES (14, 4, 14);
ROLLBACK TO SAVEPOINT s;
INSERT INTO pred VALUES (15, 0, 15);
COMMIT;
-- a cancel in the middle of an INSERT: the session goes on
SET statement_timeout = '200ms';
INSERT INTO pred SELECT 100 + g, g, g FROM generate_series(1, 3) g, pg_sleep(0.3);
RESET statement_timeout;
INSERT INTO pred VALUES (16, 1, 16);
-- an INSERT whose rows come from a function that inserts too
INSERT INTO pred SELECT 300 + g, g, g FROM generate_series(1, 4) g WHERE pred_nested(g);
-- a row with a number is refused, as by every INSERT
INSERT INTO pred (id, customer, payload, seq) VALUES (17, 1, 1, 7);
RESET ROLE;
SELECT count(*) AS rows, count(*) FILTER (WHERE seq > 0) AS numbered,
       count(DISTINCT seq) AS distinct_numbers FROM pred;
SELECT check_all('pred');
SELECT same_both_ways('SELECT id FROM pred WHERE payload > 10');
SELECT same_both_ways('SELECT id FROM pred WHERE payload > 0');
SELECT same_both_ways('SELECT id, seq FROM pred WHERE seq > 5');
SELECT id, payload, seq > 0 AS numbered FROM pred WHERE id IN (1, 600, 601, 602) ORDER BY id;
-- session_replication_role set to replica by the statement itself, after
-- it began with the "seq > 0" indexes left out: a row that comes with a
-- number then would be let in (replica mode) without its entries, so it
-- is refused, and the statement changes nothing
CREATE FUNCTION pred_to_replica(n bigint) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
  PERFORM set_config('session_replication_role', 'replica', false);
  RETURN n;
END $$;
BEGIN;
SAVEPOINT s;
INSERT INTO pred (id, customer, payload, seq) SELECT 18, 1, 1, pred_to_replica(900);
ROLLBACK TO SAVEPOINT s;
SHOW session_replication_role;
COMMIT;
SELECT count(*) FROM pred WHERE id = 18 OR seq = 900;
-- begun in replica mode, the INSERT opens every index: the row keeps its
-- number and has its entries
BEGIN;
SET LOCAL session_replication_role = replica;
INSERT INTO pred (id, customer, payload, seq) VALUES (19, 1, 1, 900);
COMMIT;
SELECT id, seq FROM pred WHERE id = 19;
SELECT check_all('pred');
DELETE FROM pred WHERE id = 19;
-- the operator of "seq > 0" is not run by the INSERT: an INSERT does not
-- test a row against the predicate of an index it leaves out (COPY, which
-- opens every index, does)
BEGIN;
REVOKE EXECUTE ON FUNCTION int84gt(bigint, integer) FROM PUBLIC;
SET ROLE write_path_writer;
INSERT INTO pred VALUES (20, 1, 20);
SAVEPOINT s;
COPY pred (id, customer, payload) FROM stdin;
21	1	21
\.
ROLLBACK TO SAVEPOINT s;
RESET ROLE;
GRANT EXECUTE ON FUNCTION int84gt(bigint, integer) TO PUBLIC;
COMMIT;
SELECT id, seq > 0 AS numbered FROM pred WHERE id IN (20, 21);
-- many "seq > 0" indexes, left out by every INSERT: each gets its entries
-- at commit
DO $$
BEGIN
  FOR i IN 1..34 LOOP
    EXECUTE format('CREATE INDEX pred_many_%s ON pred (payload) WHERE seq > 0', i);
  END LOOP;
END $$;
BEGIN;
DO $$
BEGIN
  FOR i IN 30..90 LOOP
    INSERT INTO pred VALUES (i, i % 4, i);
  END LOOP;
END $$;
COMMIT;
SELECT count(*) FROM pred WHERE id BETWEEN 30 AND 90 AND seq > 0;
SELECT check_all('pred');
SELECT same_both_ways('SELECT id FROM pred WHERE seq > 0 AND payload BETWEEN 30 AND 90');
DO $$
BEGIN
  FOR i IN 1..34 LOOP
    EXECUTE format('DROP INDEX pred_many_%s', i);
  END LOOP;
END $$;
SELECT check_all('pred');
-- the INSERT holds no lock on the indexes it leaves out, nor on the
-- capture index (which stores nothing); the commit locks the indexes
-- that get the rows' entries
CREATE TEMP TABLE pred_locked (relname name);
CREATE FUNCTION pred_note_locks() RETURNS int LANGUAGE sql AS $$
  INSERT INTO pred_locked SELECT c.relname FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
   WHERE l.pid = pg_backend_pid() AND c.relname LIKE 'pred%' AND c.relkind = 'i';
  SELECT 400
$$;
INSERT INTO pred SELECT 400, 1, pred_note_locks();
SELECT relname FROM pred_locked ORDER BY 1;
SELECT count(*) FROM pred WHERE id = 400 AND seq > 0;
DROP TABLE pred_locked;
DROP FUNCTION pred_note_locks();
-- a table with a BEFORE INSERT statement trigger keeps the usual path,
-- its indexes opened at the first row: a REINDEX there still works
CREATE FUNCTION pred_reindex() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  REINDEX INDEX pred_pkey;
  RETURN NULL;
END $$;
CREATE TRIGGER pred_reindex BEFORE INSERT ON pred
  FOR EACH STATEMENT EXECUTE FUNCTION pred_reindex();
INSERT INTO pred VALUES (500, 1, 1);
DROP TRIGGER pred_reindex ON pred;
SELECT count(*) FROM pred WHERE id = 500 AND seq > 0;
SELECT check_all('pred');
-- DDL on an index the INSERT left out, run by the INSERT itself between
-- its rows: the INSERT does not hold the index open, so REINDEX, ALTER
-- INDEX and DROP INDEX of it are accepted (those of an index it opened
-- are refused, 55006); the rows stored before and after it get their
-- entries at commit, in the rebuilt index too
CREATE FUNCTION pred_ddl(ddl text, i int) RETURNS int LANGUAGE plpgsql AS $$
BEGIN
  IF i = 2 THEN
    EXECUTE ddl;
  END IF;
  RETURN i;
END $$;
BEGIN;
INSERT INTO pred SELECT 600 + g, 1, pred_ddl('REINDEX INDEX pred_numbered_payload', g)
  FROM generate_series(1, 3) g;
INSERT INTO pred SELECT 610 + g, 1, pred_ddl('ALTER INDEX pred_numbered_payload SET (fillfactor = 70)', g)
  FROM generate_series(1, 3) g;
INSERT INTO pred SELECT 620 + g, 1, pred_ddl('REINDEX INDEX pred_pkey', g)
  FROM generate_series(1, 3) g;
ROLLBACK;
BEGIN;
INSERT INTO pred SELECT 600 + g, 1, pred_ddl('REINDEX INDEX pred_numbered_payload', g)
  FROM generate_series(1, 3) g;
INSERT INTO pred SELECT 610 + g, 1, pred_ddl('ALTER INDEX pred_numbered_payload SET (fillfactor = 70)', g)
  FROM generate_series(1, 3) g;
COMMIT;
SELECT count(*) FROM pred WHERE id BETWEEN 601 AND 613 AND seq > 0;
SELECT check_all('pred');
SELECT same_both_ways('SELECT id FROM pred WHERE seq > 0 AND payload BETWEEN 1 AND 3');
BEGIN;
INSERT INTO pred SELECT 630 + g, 1, pred_ddl('DROP INDEX pred_numbered_payload', g)
  FROM generate_series(1, 3) g;
COMMIT;
SELECT count(*) FROM pred WHERE id BETWEEN 631 AND 633 AND seq > 0;
SELECT check_all('pred');
-- nor is the guard trigger switched off, the table left out of its
-- stream, or an index created, by the INSERT between its rows
INSERT INTO pred SELECT 640 + g, 1, pred_ddl('ALTER TABLE pred DISABLE TRIGGER stream_seq_guard', g)
  FROM generate_series(1, 3) g;
INSERT INTO pred SELECT 640 + g, 1, pred_ddl('CREATE INDEX ON pred (payload) WHERE seq > 0', g)
  FROM generate_series(1, 3) g;
INSERT INTO pred SELECT 640 + g, 1, pred_ddl('SELECT stream_seq.disable(''pred'')', g)
  FROM generate_series(1, 3) g;
SELECT count(*) FROM pred WHERE id BETWEEN 641 AND 643;
-- a BEFORE ROW trigger of the application's that gives the row a number:
-- refused, as in every INSERT
CREATE FUNCTION pred_number() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  NEW.seq := NEW.id + 100000;
  RETURN NEW;
END $$;
CREATE TRIGGER pred_number BEFORE INSERT ON pred
  FOR EACH ROW WHEN (NEW.id = 650) EXECUTE FUNCTION pred_number();
INSERT INTO pred VALUES (649, 1, 1), (650, 1, 1);
DROP TRIGGER pred_number ON pred;
SELECT count(*) FROM pred WHERE id IN (649, 650);
SELECT check_all('pred');
SELECT stream_seq.drop_consumer('pred', 'by_customer');
DROP TABLE pred;
DROP FUNCTION pred_echo(), pred_nested(int), pred_to_replica(bigint), pred_reindex(),
  pred_ddl(text, int), pred_number();

DROP TABLE h, full_idx, h2, frozen, whole, outbox, orders, h3, own;
DROP PROCEDURE two_commits();
SELECT stream_seq.drop_consumer('g', 'workers');
DROP TABLE g;
DROP FUNCTION versions(regclass), check_all(regclass), same_both_ways(text), to_outbox();
REVOKE ALL ON SCHEMA public FROM write_path_writer;
REVOKE ALL ON SCHEMA stream_seq FROM write_path_writer;
DROP ROLE write_path_writer;
