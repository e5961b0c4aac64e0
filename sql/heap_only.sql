-- The commit-time version of a row as a heap-only tuple: when it is used,
-- when it is not, and that every index still agrees with the heap
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
CREATE EXTENSION IF NOT EXISTS amcheck;
CREATE EXTENSION IF NOT EXISTS pageinspect;
\set SHOW_CONTEXT never

-- heap-only versions, HOT-updated roots and all line pointers of a table
CREATE FUNCTION versions(tbl regclass, OUT heap_only bigint, OUT hot_updated bigint,
                         OUT other_pages bigint)
LANGUAGE sql AS $$
  SELECT count(*) FILTER (WHERE (t_infomask2 & 32768) <> 0),
         count(*) FILTER (WHERE (t_infomask2 & 16384) <> 0),
         count(*) FILTER (WHERE t_ctid IS NOT NULL AND (t_ctid::text::point)[0] <> b)
  FROM generate_series(0, pg_relation_size(tbl) / current_setting('block_size')::int - 1) b,
       heap_page_items(get_raw_page(tbl::text, b::int))
$$;

-- every index of a table checked against the heap, and the heap itself
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

-- the stream's own index is partial (WHERE seq IS NOT NULL): the row as
-- inserted has no entry in it, so its numbered version is heap-only and
-- only that index gets an entry
CREATE TABLE h (id int PRIMARY KEY, payload text, seq bigint);
SELECT stream_seq.enable('h');
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
SELECT same_both_ways('SELECT id FROM h WHERE seq IS NULL');
SELECT same_both_ways('SELECT seq FROM h WHERE seq > 0');
-- pruning reclaims the inserted versions without touching any index
VACUUM h;
SELECT * FROM versions('h');
SELECT check_all('h');
SELECT same_both_ways('SELECT seq FROM h WHERE seq > 10');
SELECT same_both_ways('SELECT id, seq FROM h WHERE id BETWEEN 3 AND 7');

-- a large value (TOAST) and an expression index on the number that is
-- partial too: still heap-only, and both stream indexes get their entry
CREATE INDEX h_seq_expr ON h ((seq * 2)) WHERE seq IS NOT NULL;
INSERT INTO h VALUES (30, repeat('x', 10000)), (31, 'small');
SELECT count(*) AS heap_only_after_expr FROM heap_page_items(get_raw_page('h', 0))
  WHERE (t_infomask2 & 32768) <> 0;
SELECT check_all('h');
SELECT same_both_ways('SELECT id FROM h WHERE seq * 2 > 40');

-- the ordinary update, and why
-- (1) an index on the number without a predicate holds the inserted
--     version under NULL: a heap-only version would give it two keys
CREATE TABLE full_idx (id int PRIMARY KEY, seq bigint);
SELECT stream_seq.enable('full_idx');
CREATE INDEX full_idx_seq_all ON full_idx (seq);
INSERT INTO full_idx SELECT g FROM generate_series(1, 10) g;
SELECT * FROM versions('full_idx');
SELECT check_all('full_idx');
SELECT same_both_ways('SELECT id FROM full_idx WHERE seq IS NULL');
SELECT same_both_ways('SELECT id, seq FROM full_idx WHERE seq > 3');
-- (2) a predicate the inserted version satisfies
CREATE TABLE null_pred (id int PRIMARY KEY, seq bigint);
SELECT stream_seq.enable('null_pred');
CREATE INDEX null_pred_unnumbered ON null_pred (id) WHERE seq IS NULL;
INSERT INTO null_pred SELECT g FROM generate_series(1, 10) g;
SELECT * FROM versions('null_pred');
SELECT check_all('null_pred');
SET enable_seqscan = off;
SELECT count(*) AS unnumbered FROM null_pred WHERE seq IS NULL;
RESET enable_seqscan;
-- ... unless that predicate excludes the row for another reason
DROP INDEX null_pred_unnumbered;
CREATE INDEX null_pred_other ON null_pred (id) WHERE seq IS NULL AND id < 0;
INSERT INTO null_pred SELECT g FROM generate_series(11, 15) g;
SELECT heap_only FROM versions('null_pred');
SELECT check_all('null_pred');
-- (3) the row was updated again in its transaction: the live version is
--     not the chain's root (row 2's second version is heap-only from the
--     UPDATE, its numbered version an ordinary one; row 1's is heap-only)
CREATE TABLE h2 (id int PRIMARY KEY, payload text, seq bigint);
SELECT stream_seq.enable('h2');
BEGIN;
INSERT INTO h2 VALUES (1, 'a'), (2, 'b');
UPDATE h2 SET payload = 'b2' WHERE id = 2;
COMMIT;
SELECT * FROM versions('h2');
SELECT id, payload, seq FROM h2 ORDER BY id;
SELECT check_all('h2');
-- (4) numbers written before commit (SET CONSTRAINTS ... IMMEDIATE)
BEGIN;
SET CONSTRAINTS ALL IMMEDIATE;
INSERT INTO h2 VALUES (3, 'c');
COMMIT;
SELECT * FROM versions('h2');
-- (5) turned off
SET stream_seq.heap_only = off;
INSERT INTO h2 VALUES (4, 'd');
RESET stream_seq.heap_only;
SELECT * FROM versions('h2');
INSERT INTO h2 VALUES (5, 'e');
SELECT * FROM versions('h2');
SELECT check_all('h2');

-- (6) an index that uses the whole row (here in its predicate) covers the
--     number too: its key is checked when the number is written, and
--     PostgreSQL never makes such an update heap-only
CREATE TABLE whole (id int PRIMARY KEY, k int, seq bigint);
SELECT stream_seq.enable('whole');
CREATE UNIQUE INDEX whole_k ON whole (k) WHERE whole IS NOT NULL;
INSERT INTO whole VALUES (1, 7);
INSERT INTO whole VALUES (2, 7);
SELECT id, k, seq FROM whole ORDER BY id;
SELECT * FROM versions('whole');
SELECT check_all('whole');

-- Snapshots of the writing transaction that see a row as inserted must not
-- reach its numbered version through the number's index.  A cursor WITH
-- HOLD runs after the numbers are written, with its own snapshot:
CREATE TABLE cur (id int PRIMARY KEY, seq bigint);
SELECT stream_seq.enable('cur');
INSERT INTO cur VALUES (1);
SET enable_seqscan = off;
SET enable_bitmapscan = off;
BEGIN;
INSERT INTO cur VALUES (2), (3);
DECLARE held CURSOR WITH HOLD FOR SELECT id, seq FROM cur WHERE seq > 0 ORDER BY seq;
COMMIT;
FETCH ALL FROM held;
CLOSE held;
-- a cursor read after SET CONSTRAINTS ... IMMEDIATE wrote the numbers
BEGIN;
INSERT INTO cur VALUES (4), (5);
DECLARE open_cursor CURSOR FOR SELECT id, seq FROM cur WHERE seq > 0 ORDER BY seq;
SET CONSTRAINTS ALL IMMEDIATE;
FETCH ALL FROM open_cursor;
COMMIT;
-- a read-only deferred trigger that fires after stream_seq's sees the
-- numbers written so far, never a row without its number
CREATE FUNCTION cur_seen() RETURNS trigger LANGUAGE plpgsql STABLE AS $$
BEGIN
  RAISE NOTICE 'row %: %', NEW.id,
    (SELECT string_agg(id || '=' || coalesce(seq::text, 'null'), ',' ORDER BY id)
       FROM cur WHERE seq > 3);
  RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER zz_seen AFTER INSERT ON cur
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION cur_seen();
SET client_min_messages = notice;
BEGIN;
INSERT INTO cur VALUES (6), (7);
COMMIT;
SET client_min_messages = warning;
-- a cursor opened before COMMIT and read by a deferred trigger that fires
-- after stream_seq's
CREATE TABLE fetched (what text);
CREATE FUNCTION fetch_open_cursor() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  c refcursor := 'open_before_commit';
  r record;
BEGIN
  LOOP
    FETCH c INTO r;
    EXIT WHEN NOT FOUND;
    INSERT INTO fetched VALUES (r::text);
  END LOOP;
  RETURN NULL;
END $$;
CREATE TABLE other (id int);
CREATE CONSTRAINT TRIGGER zz_fetch AFTER INSERT ON other
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fetch_open_cursor();
BEGIN;
INSERT INTO cur VALUES (8);
DECLARE open_before_commit CURSOR FOR SELECT id, seq FROM cur WHERE seq > 7;
INSERT INTO other VALUES (1);
COMMIT;
SELECT * FROM fetched;
-- SET CONSTRAINTS ... IMMEDIATE inside a deferred trigger, while the
-- statement around it goes on reading
CREATE FUNCTION immediate_now() RETURNS int LANGUAGE plpgsql AS $$
BEGIN
  SET CONSTRAINTS ALL IMMEDIATE;
  RETURN 1;
END $$;
CREATE FUNCTION insert_and_read() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO cur VALUES (NEW.id);
  INSERT INTO fetched SELECT 'nested: ' || x::text
    FROM (SELECT immediate_now() AS f OFFSET 0) s,
         LATERAL (SELECT id, seq FROM cur WHERE seq > 7 AND s.f = 1) x;
  RETURN NULL;
END $$;
CREATE TABLE nested (id int);
CREATE CONSTRAINT TRIGGER zz_nested AFTER INSERT ON nested
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION insert_and_read();
INSERT INTO nested VALUES (9);
SELECT * FROM fetched;
-- SET CONSTRAINTS ... IMMEDIATE from a plpgsql expression, which starts
-- no query: while the planner evaluates a STABLE function, and inside a
-- deferred trigger; the snapshot of the code around it still sees the row
-- as inserted
CREATE FUNCTION make_immediate() RETURNS int LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  SET CONSTRAINTS ALL IMMEDIATE;
  RETURN 0;
END $$;
CREATE FUNCTION peek(want int) RETURNS int LANGUAGE plpgsql STABLE AS $$
DECLARE
  z int;
  r text;
BEGIN
  z := make_immediate();
  SELECT string_agg(format('(%s,%s)', id, coalesce(seq::text, 'null')), ',') INTO r
    FROM cur WHERE seq > 0 AND id + 0 = want;
  RAISE NOTICE 'peek %: %', want, coalesce(r, 'none');
  RETURN 0;
END $$;
SET client_min_messages = notice;
BEGIN;
INSERT INTO cur VALUES (10);
SELECT count(*) FROM cur WHERE id = peek(10);
COMMIT;
SET client_min_messages = warning;
CREATE FUNCTION reader(want int) RETURNS int LANGUAGE plpgsql STABLE AS $$
DECLARE
  r text;
BEGIN
  SELECT string_agg(format('(%s,%s)', id, coalesce(seq::text, 'null')), ',') INTO r
    FROM cur WHERE seq > 0 AND id + 0 = want;
  RAISE NOTICE 'reader %: %', want, coalesce(r, 'none');
  RETURN 0;
END $$;
CREATE FUNCTION insert_immediate_read() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
  z int;
BEGIN
  INSERT INTO cur VALUES (NEW.id);
  z := make_immediate() + reader(NEW.id);
  RETURN NULL;
END $$;
CREATE TABLE expr (id int);
CREATE CONSTRAINT TRIGGER zz_expr AFTER INSERT ON expr
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION insert_immediate_read();
SET client_min_messages = notice;
INSERT INTO expr VALUES (11);
SET client_min_messages = warning;
RESET enable_seqscan;
RESET enable_bitmapscan;
SELECT * FROM versions('cur');
SELECT check_all('cur');

-- a group's slot index is partial too: its entry comes with the number
CREATE TABLE g (id int PRIMARY KEY, customer int, seq bigint);
SELECT stream_seq.enable('g');
SELECT stream_seq.create_group('g', 'workers', 'customer', 4);
INSERT INTO g SELECT i, i % 3 FROM generate_series(1, 12) i;
SELECT heap_only FROM versions('g');
SELECT check_all('g');
SELECT same_both_ways('SELECT id, seq FROM g WHERE stream_seq.slot_of(customer::text, 4) = '
                      || stream_seq.slot_of('1', 4) || ' AND seq > 0');

-- an ordinary role's stream, on a page too full for every new version:
-- those that do not fit are ordinary updates, and the indexes agree
CREATE ROLE heap_only_writer;
GRANT CREATE, USAGE ON SCHEMA public TO heap_only_writer;
GRANT USAGE ON SCHEMA stream_seq TO heap_only_writer;
SET ROLE heap_only_writer;
CREATE TABLE own (id int PRIMARY KEY, payload text, seq bigint) WITH (fillfactor = 100);
SELECT stream_seq.enable('own');
SELECT format('INSERT INTO own SELECT g, repeat(''p'', 100) FROM generate_series(%s, %s) g',
              i * 10 + 1, i * 10 + 10)
  FROM generate_series(0, 19) i \gexec
RESET ROLE;
SELECT heap_only > 0 AS some_heap_only, other_pages > 0 AS some_moved FROM versions('own');
SELECT check_all('own');
SELECT same_both_ways('SELECT id, seq FROM own WHERE seq BETWEEN 50 AND 60');
SELECT count(*) = 200 AS all_numbered, count(DISTINCT seq) = 200 AS unique_numbers
  FROM own WHERE seq IS NOT NULL;

DROP TABLE h, full_idx, null_pred, h2, cur, own, fetched, other, nested, expr, whole;
SELECT stream_seq.drop_consumer('g', 'workers');
DROP TABLE g;
DROP FUNCTION versions(regclass), check_all(regclass), same_both_ways(text), cur_seen(),
  fetch_open_cursor(), immediate_now(), insert_and_read(), make_immediate(), peek(int),
  reader(int), insert_immediate_read();
REVOKE ALL ON SCHEMA public FROM heap_only_writer;
REVOKE ALL ON SCHEMA stream_seq FROM heap_only_writer;
DROP ROLE heap_only_writer;
