-- The upgrade path: streams made under 0.1.0 keep working after
-- ALTER EXTENSION stream_seq UPDATE, and gain what 0.2.0 and 0.3.0 add;
-- the updated extension has exactly the objects a fresh install has.
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS stream_seq CASCADE;
CREATE EXTENSION stream_seq VERSION '0.1.0';
\set SHOW_CONTEXT never

CREATE TABLE up (payload text);
SELECT stream_seq.enable('up');
INSERT INTO up VALUES ('under 0.1.0'), ('also 0.1.0');
SELECT stream_seq.create_consumer('up', 'c');
SELECT stream_seq.advance('up', 'c', 1);
SELECT head_seq FROM stream_seq.stream;
-- the old versions' internal registration, still reachable until the
-- update, accepts only a head sequence owned by the stream column
CREATE TABLE up_foreign (payload text, seq bigint);
CREATE SEQUENCE someone_elses;
SELECT stream_seq._register('up_foreign', 'seq', 'someone_elses', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM stream_seq.stream WHERE relid = 'up_foreign'::regclass;
DROP TABLE up_foreign;
DROP SEQUENCE someone_elses;

ALTER EXTENSION stream_seq UPDATE TO '0.2.0';
-- a stream made under 0.2.0, with a block of numbers in use
CREATE TABLE up2 (payload text);
SELECT stream_seq.enable('up2');
INSERT INTO up2 VALUES ('under 0.2.0');
SELECT last_value AS old_head FROM up2_seq_stream_head \gset

ALTER EXTENSION stream_seq UPDATE TO '0.3.0';
-- 0.3.0's read() cannot read a partitioned table: enable() refuses one
-- until the update
CREATE TABLE up_parted (day int NOT NULL, payload text) PARTITION BY RANGE (day);
CREATE TABLE up_parted_1 PARTITION OF up_parted FOR VALUES FROM (1) TO (2);
SELECT stream_seq.enable('up_parted');
\echo :LAST_ERROR_SQLSTATE

ALTER EXTENSION stream_seq UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'stream_seq';
SELECT stream_seq.enable('up_parted');
INSERT INTO up_parted (day, payload) VALUES (1, 'partitioned, 0.4.0');
SELECT stream_seq.create_consumer('up_parted', 'pc');
SELECT seq, "row"->>'payload' AS payload FROM stream_seq.read('up_parted', 'pc');
SELECT stream_seq.disable('up_parted');
DROP TABLE up_parted;

-- the streams, their numbers and their consumer survive
INSERT INTO up VALUES ('under 0.3.0');
SELECT seq, payload FROM up ORDER BY seq;
SELECT stream_seq.horizon('up'), stream_seq.position('up', 'c');
SELECT seq, "row"->>'payload' AS payload FROM stream_seq.read('up', 'c');
-- each moved to a head sequence of its own in the extension's schema, not
-- a member of the extension, recording at least what the old one did;
-- the old sequences are gone
SELECT relid, head_seq FROM stream_seq.stream ORDER BY relid::text;
SELECT count(*) AS members FROM pg_depend
 WHERE refclassid = 'pg_extension'::regclass AND deptype = 'e'
   AND objid IN (SELECT head_seq FROM stream_seq.stream);
SELECT last_value >= :old_head + 1000 AS head_kept FROM stream_seq.up2_seq_head;
SELECT count(*) FROM pg_class WHERE relname LIKE 'up%stream_head';
INSERT INTO up2 VALUES ('under 0.3.0');
SELECT seq > 1, payload FROM up2 ORDER BY seq;
-- the TRUNCATE trigger was added to the 0.1.0 stream
SELECT tgname FROM pg_trigger WHERE tgrelid = 'up'::regclass ORDER BY tgname;
-- the DDL guards apply to them, and their unique index is protected
ALTER TABLE up ALTER COLUMN seq SET NOT NULL;
\echo :LAST_ERROR_SQLSTATE
DROP INDEX up_seq_idx;
\echo :LAST_ERROR_SQLSTATE

-- the same functions, with the same properties, as a fresh install
CREATE TEMP TABLE updated AS
SELECT p.oid::regprocedure::text AS function, p.proisstrict, p.provolatile,
       p.prosecdef, l.lanname, pg_catalog.obj_description(p.oid, 'pg_proc') AS comment,
       p.proacl::text AS acl
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
 WHERE p.pronamespace = 'stream_seq'::regnamespace;
CREATE TEMP TABLE updated_views AS
SELECT c.relname, c.reloptions::text, pg_get_viewdef(c.oid) AS def
  FROM pg_class c WHERE c.relnamespace = 'stream_seq'::regnamespace AND c.relkind = 'v';

SELECT stream_seq.disable('up');
SELECT stream_seq.disable('up2');
DROP TABLE up, up2;
DROP EXTENSION stream_seq;
CREATE EXTENSION stream_seq;
SELECT coalesce(u.function, f.function) AS differing_function
  FROM updated u FULL JOIN (
       SELECT p.oid::regprocedure::text AS function, p.proisstrict, p.provolatile,
              p.prosecdef, l.lanname, pg_catalog.obj_description(p.oid, 'pg_proc') AS comment,
              p.proacl::text AS acl
         FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
        WHERE p.pronamespace = 'stream_seq'::regnamespace) f USING (function)
 WHERE u IS DISTINCT FROM f AND (u.function IS NULL OR f.function IS NULL
       OR (u.proisstrict, u.provolatile, u.prosecdef, u.lanname, u.comment, u.acl)
          IS DISTINCT FROM (f.proisstrict, f.provolatile, f.prosecdef, f.lanname, f.comment, f.acl));
SELECT count(*) AS differing_views
  FROM updated_views u FULL JOIN (
       SELECT c.relname, c.reloptions::text, pg_get_viewdef(c.oid) AS def
         FROM pg_class c WHERE c.relnamespace = 'stream_seq'::regnamespace AND c.relkind = 'v') f
       USING (relname)
 WHERE (u.reloptions, u.def) IS DISTINCT FROM (f.reloptions, f.def);

-- 0.4.1 -> 0.4.2: streams enabled before the update, plain and
-- partitioned (partitions included), get the replica trigger, firing in
-- replica mode, and a replicated number then moves the counter
DROP EXTENSION stream_seq;
CREATE EXTENSION stream_seq VERSION '0.4.1';
CREATE TABLE up41 (id int);
SELECT stream_seq.enable('up41');
CREATE TABLE up41p (id int, k int) PARTITION BY LIST (k);
CREATE TABLE up41p_1 PARTITION OF up41p FOR VALUES IN (1);
SELECT stream_seq.enable('up41p');
INSERT INTO up41 VALUES (1);
ALTER EXTENSION stream_seq UPDATE TO '0.4.2';
SELECT tgrelid::regclass, tgenabled FROM pg_trigger
 WHERE tgname = 'stream_seq_replica' ORDER BY tgrelid::regclass::text;
SET session_replication_role = replica;
INSERT INTO up41 (id, seq) VALUES (2, 100);
INSERT INTO up41p (id, k, seq) VALUES (1, 1, 50);
RESET session_replication_role;
INSERT INTO up41 VALUES (3);
INSERT INTO up41p VALUES (2, 1);
SELECT id, seq FROM up41 ORDER BY seq;
SELECT id, seq FROM up41p ORDER BY seq;
SELECT stream_seq.disable('up41');
SELECT stream_seq.disable('up41p');
DROP TABLE up41, up41p;

-- 0.4.2 -> 0.5.0: a stream, a group and parked rows made before the
-- update keep working; the parked rows wait for replay() as before; the
-- new columns are empty until used
DROP EXTENSION stream_seq;
CREATE EXTENSION stream_seq VERSION '0.4.2';
CREATE TABLE up42 (id int);
SELECT stream_seq.enable('up42');
INSERT INTO up42 SELECT generate_series(1, 5);
SELECT stream_seq.create_group('up42', 'g42', 'id', 2);
SELECT stream_seq.park('up42', 'g42', 2, 'before the update');
-- (the library of 0.5.0 serves the SQL objects of 0.4.2 until the update)
BEGIN;
SELECT seq, reason FROM stream_seq.replay('up42', 'g42');
ROLLBACK;
ALTER EXTENSION stream_seq UPDATE TO '0.5.0';
SELECT seq, reason, attempts, due_at, dead FROM stream_seq.parked_rows;
SELECT consumer, max_attempts, parked, dead_letters FROM stream_seq.consumers;
SELECT relid, time_column FROM stream_seq.stream;
INSERT INTO up42 VALUES (6);
SELECT id, seq FROM up42 WHERE id = 6;
SELECT stream_seq.set_retry_policy('up42', 'g42', 2, '0 seconds', 1, '0 seconds');
SELECT stream_seq.park('up42', 'g42', 3, 'after the update');
SELECT seq, attempts FROM stream_seq.due('up42', 'g42');
SELECT seq FROM stream_seq.replay('up42', 'g42');
SELECT id FROM stream_seq.read_rows(NULL::up42, 'g42', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT id, seq FROM stream_seq.page_rows(NULL::up42, 4);
CREATE TABLE up42t (id int);
SELECT stream_seq.enable('up42t', time_column => 'at');
INSERT INTO up42t VALUES (1);
SELECT id, seq, at IS NOT NULL AS has_time FROM up42t;
SELECT stream_seq.disable('up42');
SELECT stream_seq.disable('up42t');
DROP TABLE up42, up42t;

-- 0.5.1 -> 0.6.0: under the SQL objects of 0.5.1 (no guard_insert
-- trigger) the library refuses a row inserted with a number at once, the
-- upsert of a loaded row too, as before; the update adds the trigger to
-- every stream and its partitions, and the upsert works
DROP EXTENSION stream_seq;
CREATE EXTENSION stream_seq VERSION '0.5.1';
CREATE TABLE up51 (id int PRIMARY KEY, v int);
SELECT stream_seq.enable('up51');
CREATE TABLE up51p (id int, day int, v int, PRIMARY KEY (id, day)) PARTITION BY LIST (day);
CREATE TABLE up51p_1 PARTITION OF up51p FOR VALUES IN (1);
SELECT stream_seq.enable('up51p', time_column => 'at');
INSERT INTO up51 VALUES (1, 1);
INSERT INTO up51p VALUES (1, 1, 1);
INSERT INTO up51 (id, v, seq) VALUES (1, 2, 1) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v;
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.last_numbers('up51');
\echo :LAST_ERROR_SQLSTATE
-- a look-alike trigger of that name (0.5.1 did not reserve it) stops the
-- update, which changes nothing, until it is renamed
CREATE TABLE up51x (id int);
SELECT stream_seq.enable('up51x');
CREATE FUNCTION up51x_noop() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER stream_seq_guard_insert AFTER INSERT ON up51x FOR EACH ROW
  EXECUTE FUNCTION up51x_noop();
ALTER EXTENSION stream_seq UPDATE TO '0.6.0';
\echo :LAST_ERROR_SQLSTATE
SELECT extversion FROM pg_extension WHERE extname = 'stream_seq';
ALTER TRIGGER stream_seq_guard_insert ON up51x RENAME TO not_the_guard;
DROP TRIGGER not_the_guard ON up51x;
ALTER EXTENSION stream_seq UPDATE TO '0.6.0';
SELECT tgrelid::regclass, tgname, pg_get_triggerdef(oid) LIKE '%WHEN%' AS has_when
  FROM pg_trigger WHERE tgname = 'stream_seq_guard_insert' ORDER BY tgrelid::regclass::text;
INSERT INTO up51 (id, v, seq) VALUES (1, 2, 1) ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v;
INSERT INTO up51p (id, day, v, seq, at) SELECT id, day, 2, seq, at FROM up51p
  ON CONFLICT (id, day) DO UPDATE SET v = EXCLUDED.v, seq = EXCLUDED.seq, at = EXCLUDED.at;
SELECT id, v, seq FROM up51;
SELECT id, v, seq FROM up51p;
INSERT INTO up51 (id, v, seq) VALUES (2, 2, 100);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO up51p (id, day, v, at) VALUES (2, 1, 2, now());
\echo :LAST_ERROR_SQLSTATE
INSERT INTO up51 VALUES (3, 3);
SELECT first = last AND last = (SELECT seq FROM up51 WHERE id = 3) AS last_numbers
  FROM stream_seq.last_numbers('up51');
DROP TABLE up51, up51p, up51x;
DROP FUNCTION up51x_noop();

-- 0.6.0 -> 0.7.0: under the SQL objects of 0.6.0 the library numbers rows
-- through that version's triggers (its deferred trigger captures them,
-- they are stored with NULL); the update moves every stream to the
-- capture index and placeholders, without touching a row: the indexes
-- that said "seq IS NOT NULL" (the stream's, a group's, one of the
-- user's) say "seq > 0", the INSERT triggers go, COPY is batched; a stream
-- with a number below 1 keeps NULL and is numbered by an update
DROP EXTENSION stream_seq;
CREATE EXTENSION stream_seq VERSION '0.6.0';
CREATE TABLE up60 (id int PRIMARY KEY, k int, v int);
SELECT stream_seq.enable('up60');
CREATE INDEX up60_mine ON up60 (k, seq) WHERE seq IS NOT NULL;
SELECT stream_seq.create_group('up60', 'g', 'k', 2);
CREATE TABLE up60p (id int, day int, v int) PARTITION BY LIST (day);
CREATE TABLE up60p_1 PARTITION OF up60p FOR VALUES IN (1);
SELECT stream_seq.enable('up60p', time_column => 'at');
CREATE TABLE up60low (id int, seq bigint);
INSERT INTO up60low VALUES (1, -5);
SELECT stream_seq.enable('up60low');
INSERT INTO up60 VALUES (1, 1, 1), (2, 2, 2);
INSERT INTO up60p VALUES (1, 1, 1);
INSERT INTO up60low (id) VALUES (2);
SELECT id, seq FROM up60 ORDER BY id;
ALTER EXTENSION stream_seq UPDATE TO '0.7.0';
SELECT extversion FROM pg_extension WHERE extname = 'stream_seq';
SELECT c.relname, pg_get_expr(i.indpred, i.indrelid) AS pred
  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE i.indrelid IN ('up60'::regclass, 'up60p'::regclass, 'up60p_1'::regclass, 'up60low'::regclass)
 ORDER BY 1;
SELECT tgrelid::regclass, tgname, tgenabled FROM pg_trigger
 WHERE tgrelid IN ('up60'::regclass, 'up60p'::regclass, 'up60p_1'::regclass, 'up60low'::regclass)
 ORDER BY 1, 2;
SELECT attrelid::regclass, attname, pg_get_expr(d.adbin, d.adrelid) AS default
  FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
 WHERE attrelid IN ('up60'::regclass, 'up60p_1'::regclass, 'up60low'::regclass)
   AND attname IN ('seq', 'at') ORDER BY 1, 2;
INSERT INTO up60 VALUES (3, 1, 3);
COPY up60 (id, k, v) FROM STDIN;
4	2	4
5	1	5
\.
INSERT INTO up60p VALUES (2, 1, 2);
INSERT INTO up60low (id) VALUES (3);
SELECT id, seq FROM up60 ORDER BY seq;
SELECT id, seq, at IS NOT NULL AND at > '-infinity' AS has_time FROM up60p ORDER BY seq;
SELECT id, seq FROM up60low ORDER BY id;
-- rows numbered in place: one version each
SELECT count(*) AS versions FROM heap_page_items(get_raw_page('up60', 0)) WHERE lp_flags = 1;
SELECT count(*) AS rows_read FROM stream_seq.read_slot('up60', 'g', 0, 100);
-- running it again changes nothing
SELECT stream_seq.upgrade_write_path('up60');
DROP TABLE up60, up60p, up60low;
