-- Resizing a consumer group (resize_group(), src/resize.c): the SQL
-- surface, every error, the pending state and the switch, cancelling,
-- ROLLBACK, savepoints, PREPARE TRANSACTION, and the indexes it leaves
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
\set SHOW_CONTEXT never
\set VERBOSITY default

CREATE TABLE rev (id bigserial PRIMARY KEY, k int, payload text);
SELECT stream_seq.enable('rev');
INSERT INTO rev (k, payload) SELECT g % 10, 'p' || g FROM generate_series(1, 20) g;
SELECT stream_seq.create_group('rev', 'g', 'k', 2);
SELECT stream_seq.create_consumer('rev', 'plain');

-- errors: NULL, a count out of range, no such consumer, a plain consumer
SELECT stream_seq.resize_group('rev', 'g', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_group('rev', NULL, 2);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_group('rev', 'g', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_group('rev', 'g', -1);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_group('rev', 'g', 1025);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_group('rev', 'nobody', 2);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_group('rev', 'plain', 2);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_group('pg_class', 'g', 2);
\echo :LAST_ERROR_SQLSTATE
-- an ordinary role, even one that may read the table, does not own it
CREATE ROLE resize_other;
GRANT USAGE ON SCHEMA stream_seq TO resize_other;
GRANT SELECT ON rev TO resize_other;
SET ROLE resize_other;
SELECT stream_seq.resize_group('rev', 'g', 4);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
REVOKE ALL ON rev FROM resize_other;
REVOKE ALL ON SCHEMA stream_seq FROM resize_other;
DROP ROLE resize_other;

-- to the same count: nothing to do, done
SELECT stream_seq.resize_group('rev', 'g', 2);
SELECT count(*) AS indexes FROM pg_indexes WHERE tablename = 'rev' AND indexdef LIKE '%slot_of%';

-- a worker holds both slots and has finished a page of slot 0
SELECT slot, token FROM stream_seq.claim('rev', 'g', 'w1', '1 minute') ORDER BY slot;
SELECT stream_seq.advance_slot('rev', 'g', 0, 1, max(seq))
  FROM stream_seq.read_slot('rev', 'g', 0, 1, 2);
SELECT slot, position FROM stream_seq.consumer_slots ORDER BY slot;

-- resize to 4: rows up to the fence are unfinished, so it is pending;
-- the fence is horizon - 1 (20); the views show it; a new index for 4
SELECT stream_seq.resize_group('rev', 'g', 4);
SELECT consumer, slots, resize_to, resize_fence, resized_from
  FROM stream_seq.consumers WHERE consumer = 'g';
SELECT slot, position, token, read_upto FROM stream_seq.consumer_slots ORDER BY slot;
SELECT indexdef FROM pg_indexes WHERE tablename = 'rev' AND indexdef LIKE '%slot_of%' ORDER BY 1;
-- every token went up: the page read before the resize cannot be finished
SELECT stream_seq.advance_slot('rev', 'g', 1, 1, 5);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM stream_seq.read_slot('rev', 'g', 1, 1);
\echo :LAST_ERROR_SQLSTATE
-- another count while one is pending: refused; the pending one: still pending
SELECT stream_seq.resize_group('rev', 'g', 3);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_group('rev', 'g', 4);

-- rows written now are above the fence: the old slots do not read them
INSERT INTO rev (k, payload) SELECT g % 10, 'q' || g FROM generate_series(1, 20) g;
SELECT slot, token FROM stream_seq.claim('rev', 'g', 'w1', '1 minute') ORDER BY slot;
SELECT max(seq) <= 20 AS none_above_fence, count(*) AS rows
  FROM (SELECT seq FROM stream_seq.read_slot('rev', 'g', 0, 2, 1000)
        UNION ALL SELECT seq FROM stream_seq.read_slot('rev', 'g', 1, 2, 1000)) r;
-- a claim switches only once every old slot has finished up to the fence
SELECT stream_seq.advance_slot('rev', 'g', 0, 2, max(seq))
  FROM stream_seq.read_slot('rev', 'g', 0, 2, 1000);
SELECT count(*) AS slots_held FROM stream_seq.claim('rev', 'g', 'w1', '1 minute');
SELECT slots, resize_to FROM stream_seq.consumers WHERE consumer = 'g';
SELECT stream_seq.advance_slot('rev', 'g', 1, 2, max(seq))
  FROM stream_seq.read_slot('rev', 'g', 1, 2, 1000);
SELECT slot, token FROM stream_seq.claim('rev', 'g', 'w1', '1 minute') ORDER BY slot;
SELECT consumer, slots, resize_to, resize_fence, resized_from
  FROM stream_seq.consumers WHERE consumer = 'g';
SELECT slot, position, worker, token, read_upto FROM stream_seq.consumer_slots ORDER BY slot;
-- an old token fails, on a slot that is still there and on one that is not
SELECT stream_seq.advance_slot('rev', 'g', 1, 2, 25);
\echo :LAST_ERROR_SQLSTATE
-- the new slots hold exactly the rows above the fence, each key in one
SELECT count(*) AS rows, min(seq) > 20 AS all_above_fence,
       bool_and(stream_seq.slot_of("row"->>'k', 4) = slot) AS right_slot
  FROM generate_series(0, 3) slot,
       LATERAL stream_seq.read_slot('rev', 'g', slot, 4, 1000);
-- the old index is kept until the next resize_group(); to the same count
-- it drops it and does nothing else
SELECT count(*) AS indexes FROM pg_indexes WHERE tablename = 'rev' AND indexdef LIKE '%slot_of%';
SELECT stream_seq.resize_group('rev', 'g', 4);
SELECT indexdef FROM pg_indexes WHERE tablename = 'rev' AND indexdef LIKE '%slot_of%' ORDER BY 1;

-- back to 4 while a resize to 1 is pending cancels it, and drops its index
SELECT stream_seq.resize_group('rev', 'g', 1);
SELECT slots, resize_to FROM stream_seq.consumers WHERE consumer = 'g';
SELECT stream_seq.resize_group('rev', 'g', 4);
SELECT slots, resize_to FROM stream_seq.consumers WHERE consumer = 'g';
SELECT count(*) AS indexes FROM pg_indexes WHERE tablename = 'rev' AND indexdef LIKE '%slot_of%';
SELECT slot, position, token, read_upto FROM stream_seq.consumer_slots ORDER BY slot;
SELECT slot, token FROM stream_seq.claim('rev', 'g', 'w1', '1 minute') ORDER BY slot;

-- ROLLBACK and ROLLBACK TO SAVEPOINT undo a resize, index and all
BEGIN;
SELECT stream_seq.resize_group('rev', 'g', 8);
SELECT slots, resize_to FROM stream_seq.consumers WHERE consumer = 'g';
ROLLBACK;
BEGIN;
SAVEPOINT s;
SELECT stream_seq.resize_group('rev', 'g', 8);
ROLLBACK TO SAVEPOINT s;
SELECT slots, resize_to FROM stream_seq.consumers WHERE consumer = 'g';
COMMIT;
SELECT count(*) AS indexes FROM pg_indexes WHERE tablename = 'rev' AND indexdef LIKE '%slot_of%';

-- a group with nothing left to read switches at once: to the most slots,
-- then to one, the second in a prepared transaction
SELECT count(stream_seq.advance_slot('rev', 'g', slot, token, stream_seq.horizon('rev') - 1))
  FROM stream_seq.consumer_slots WHERE consumer = 'g';
SELECT stream_seq.resize_group('rev', 'g', 1024);
SELECT slots, resize_to, resized_from FROM stream_seq.consumers WHERE consumer = 'g';
SELECT count(*), min(position) = max(position) AS same_position
  FROM stream_seq.consumer_slots WHERE consumer = 'g';
BEGIN;
SELECT stream_seq.resize_group('rev', 'g', 1);
PREPARE TRANSACTION 'resize';
SELECT slots FROM stream_seq.consumers WHERE consumer = 'g';
COMMIT PREPARED 'resize';
SELECT slots, resize_to, resized_from FROM stream_seq.consumers WHERE consumer = 'g';
SELECT slot, position, worker FROM stream_seq.consumer_slots WHERE consumer = 'g';
SELECT count(*) AS indexes FROM pg_indexes WHERE tablename = 'rev' AND indexdef LIKE '%slot_of%';

-- dropping a group with a pending resize drops every index it made
INSERT INTO rev (k) VALUES (1);
SELECT stream_seq.resize_group('rev', 'g', 3);
SELECT count(*) AS indexes FROM pg_indexes WHERE tablename = 'rev' AND indexdef LIKE '%slot_of%';
SELECT stream_seq.drop_consumer('rev', 'g');
SELECT count(*) AS indexes FROM pg_indexes WHERE tablename = 'rev' AND indexdef LIKE '%slot_of%';
SELECT stream_seq.disable('rev');
DROP TABLE rev;

-- a partitioned stream: the new index is a partitioned index, and the
-- old slots are read from the partitions up to the fence
CREATE TABLE pev (day int NOT NULL, k int, payload text) PARTITION BY RANGE (day);
CREATE TABLE pev_1 PARTITION OF pev FOR VALUES FROM (1) TO (2);
CREATE TABLE pev_2 PARTITION OF pev FOR VALUES FROM (2) TO (3);
SELECT stream_seq.enable('pev');
INSERT INTO pev (day, k) SELECT 1 + g % 2, g % 5 FROM generate_series(1, 10) g;
SELECT stream_seq.create_group('pev', 'pg', 'k', 2);
SELECT stream_seq.resize_group('pev', 'pg', 3);
INSERT INTO pev (day, k) SELECT 1 + g % 2, g % 5 FROM generate_series(11, 16) g;
SELECT count(*) AS old_slots_rows, max(seq) <= 10 AS up_to_fence
  FROM stream_seq.claim('pev', 'pg', 'p1', '1 minute') c,
       LATERAL stream_seq.read_slot('pev', 'pg', c.slot, c.token, 100);
SELECT count(stream_seq.advance_slot('pev', 'pg', s.slot, s.token, 10))
  FROM stream_seq.consumer_slots s WHERE s.consumer = 'pg';
SELECT count(*) AS new_slots FROM stream_seq.claim('pev', 'pg', 'p1', '1 minute');
SELECT count(*) AS new_slots_rows, min(seq) > 10 AS above_fence,
       bool_and(stream_seq.slot_of("row"->>'k', 3) = c.slot) AS right_slot
  FROM stream_seq.claim('pev', 'pg', 'p1', '1 minute') c,
       LATERAL stream_seq.read_slot('pev', 'pg', c.slot, c.token, 100);
SELECT count(*) AS indexes FROM pg_indexes WHERE tablename = 'pev' AND indexdef LIKE '%slot_of%';
SELECT stream_seq.disable('pev');
SELECT count(*) AS indexes_left FROM pg_indexes WHERE tablename = 'pev' AND indexdef LIKE '%slot_of%';
DROP TABLE pev;

-- the group's indexes are dropped only if they are still the stream
-- table's: after the table moved to another schema, an index of another
-- table that took the recorded name is left alone
CREATE SCHEMA moved;
CREATE TABLE mev (k int);
SELECT stream_seq.enable('mev');
INSERT INTO mev SELECT g FROM generate_series(1, 10) g;
SELECT stream_seq.create_group('mev', 'mg', 'k', 2);
SELECT count(stream_seq.advance_slot('mev', 'mg', c.slot, c.token, 10))
  FROM stream_seq.claim('mev', 'mg', 'm1', '1 minute') c;
SELECT stream_seq.resize_group('mev', 'mg', 3) AS switched;
SELECT (SELECT retired_index FROM stream_seq.consumer WHERE consumer = 'mg') AS retired \gset
ALTER TABLE mev SET SCHEMA moved;
CREATE TABLE other (email text);
CREATE UNIQUE INDEX mev_mg_slot_idx ON other (email);
SELECT :'retired' = 'public.mev_mg_slot_idx' AS same_name;
SELECT stream_seq.resize_group('moved.mev', 'mg', 4) AS switched;
SELECT stream_seq.drop_consumer('moved.mev', 'mg');
SELECT indexrelid::regclass AS still_there FROM pg_index WHERE indrelid = 'other'::regclass;
INSERT INTO other VALUES ('a'), ('a');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.disable('moved.mev');
DROP TABLE moved.mev, other;
DROP SCHEMA moved;

-- retention never passes the fence of a pending resize: the new slots
-- start there, whatever the old ones did meanwhile
CREATE TABLE fev (k int);
SELECT stream_seq.enable('fev');
INSERT INTO fev SELECT g FROM generate_series(1, 40) g;
SELECT stream_seq.create_group('fev', 'fg', 'k', 2);
SELECT count(*) FROM stream_seq.claim('fev', 'fg', 'f1', '1 minute');
SELECT stream_seq.resize_group('fev', 'fg', 3) AS switched;
SELECT resize_fence FROM stream_seq.consumers WHERE consumer = 'fg';
INSERT INTO fev SELECT g FROM generate_series(41, 60) g;
SELECT stream_seq.reset('fev', 'fg', 55::bigint);
SELECT stream_seq.set_retention('fev', keep_rows => 0);
SELECT removed_rows, removed_before, held_by, held_at FROM stream_seq.apply_retention('fev');
SELECT stream_seq.first('fev') AS first_kept;
SELECT stream_seq.trim('fev', 50);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.disable('fev');
DROP TABLE fev;

-- while a resize is pending, no slot advances past its fence (read_slot()
-- hands out no row above it): a worker advancing to horizon - 1 after a
-- short page would otherwise lose the slot's rows above the fence when
-- the resize is cancelled
CREATE TABLE cev (k int);
SELECT stream_seq.enable('cev');
INSERT INTO cev SELECT g FROM generate_series(1, 8) g;
SELECT stream_seq.create_group('cev', 'cg', 'k', 2);
SELECT count(*) FROM stream_seq.claim('cev', 'cg', 'c1', '1 minute');
SELECT stream_seq.resize_group('cev', 'cg', 3) AS switched;
SELECT resize_fence FROM stream_seq.consumers WHERE consumer = 'cg';
INSERT INTO cev SELECT g FROM generate_series(9, 16) g;
SELECT token AS t0 FROM stream_seq.consumer_slots WHERE consumer = 'cg' AND slot = 0 \gset
SELECT array_agg(seq ORDER BY seq) AS page FROM stream_seq.read_slot('cev', 'cg', 0, :t0, 100);
SELECT stream_seq.advance_slot('cev', 'cg', 0, :t0, stream_seq.horizon('cev') - 1);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.advance_slot('cev', 'cg', 0, :t0, 9);
\echo :LAST_ERROR_SQLSTATE
SELECT slot, position FROM stream_seq.consumer_slots WHERE consumer = 'cg' ORDER BY slot;
-- up to the fence is allowed
SELECT stream_seq.advance_slot('cev', 'cg', 0, :t0, 8);
-- cancelled: slot 0 reads on from the fence, every row of it delivered
SELECT stream_seq.resize_group('cev', 'cg', 2) AS cancelled;
SELECT (SELECT array_agg(seq ORDER BY seq) FROM stream_seq.read_slot('cev', 'cg', 0, :t0, 100))
       = (SELECT array_agg(seq ORDER BY seq) FROM cev
           WHERE seq > 8 AND stream_seq.slot_of(k::text, 2) = 0) AS all_of_slot_0;
SELECT stream_seq.advance_slot('cev', 'cg', 0, :t0, stream_seq.horizon('cev') - 1);
-- switched: a new resize's fence holds until the switch, then the new
-- slots advance past it
SELECT stream_seq.resize_group('cev', 'cg', 3) AS switched;
SELECT resize_fence AS f FROM stream_seq.consumers WHERE consumer = 'cg' \gset
INSERT INTO cev SELECT g FROM generate_series(17, 20) g;
SELECT token AS t1 FROM stream_seq.consumer_slots WHERE consumer = 'cg' AND slot = 1 \gset
SELECT stream_seq.advance_slot('cev', 'cg', 1, :t1, :f + 1);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.advance_slot('cev', 'cg', 1, :t1, :f);
SELECT count(*) AS claimed FROM stream_seq.claim('cev', 'cg', 'c1', '1 minute');
SELECT slots, resize_to FROM stream_seq.consumers WHERE consumer = 'cg';
SELECT count(*) AS above_fence FROM stream_seq.claim('cev', 'cg', 'c1', '1 minute') c,
       stream_seq.read_slot('cev', 'cg', c.slot, c.token, 100) r;
SELECT count(stream_seq.advance_slot('cev', 'cg', c.slot, c.token, stream_seq.horizon('cev') - 1)) AS advanced
  FROM stream_seq.claim('cev', 'cg', 'c1', '1 minute') c;
SELECT slot, position FROM stream_seq.consumer_slots WHERE consumer = 'cg' ORDER BY slot;
SELECT stream_seq.disable('cev');
DROP TABLE cev;

-- names made from multibyte table and consumer names are cut at
-- character boundaries (a name cut inside a character made a dump that
-- restored with no consumers)
\set regress_db :DBNAME
CREATE DATABASE stream_seq_utf8 ENCODING 'UTF8' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0;
\c stream_seq_utf8
SET client_min_messages = warning;
CREATE EXTENSION stream_seq;
CREATE TABLE "€€€€€€€€€€€€€€" (k int);
SELECT stream_seq.enable('"€€€€€€€€€€€€€€"');
SELECT stream_seq.create_group('"€€€€€€€€€€€€€€"', '€€€€€€€', 'k', 2);
SELECT stream_seq.resize_group('"€€€€€€€€€€€€€€"', '€€€€€€€', 3) AS switched;
SELECT count(*) AS names,
       bool_and(pg_catalog.convert_from(pg_catalog.textsend(relname::text), 'UTF8') = relname::text) AS all_valid
  FROM pg_class WHERE relname::text LIKE '€%' OR relname::text LIKE '%€%';
SELECT bool_and(pg_catalog.convert_from(pg_catalog.textsend(slot_index), 'UTF8') = slot_index) AS recorded_valid
  FROM stream_seq.consumer;
\c :regress_db
DROP DATABASE stream_seq_utf8;

-- an index built beforehand: resize_index() prints the statement, the
-- table's owner runs it with \gexec (CONCURRENTLY, at top level), and
-- resize_group() adopts that index instead of building one
CREATE TABLE pev (id bigserial, k int);
SELECT stream_seq.enable('pev');
SELECT stream_seq.create_group('pev', 'pg', 'k', 2);
SELECT stream_seq.create_group('pev', 'ph', 'k', 2);
SELECT stream_seq.create_consumer('pev', 'plain');
SELECT stream_seq.resize_index('pev', 'pg', 4);
SELECT stream_seq.resize_index('pev', 'pg', 4) \gexec
-- built: nothing more to build, for this group or another of that count
SELECT stream_seq.resize_index('pev', 'pg', 4) IS NULL AS none_needed,
       stream_seq.resize_index('pev', 'ph', 4) IS NULL AS none_for_ph;
-- to the current count: none either
SELECT stream_seq.resize_index('pev', 'pg', 2) IS NULL AS same_count;
SELECT array_agg(indexrelid::regclass::text ORDER BY indexrelid::regclass::text) AS before
  FROM pg_index WHERE indrelid = 'pev'::regclass;
SELECT stream_seq.resize_group('pev', 'pg', 4) AS switched;
SELECT slot_index, resize_index FROM stream_seq.consumer WHERE consumer = 'pg';
-- no index was built (the old one is retired, not yet dropped)
SELECT array_agg(indexrelid::regclass::text ORDER BY indexrelid::regclass::text) AS after
  FROM pg_index WHERE indrelid = 'pev'::regclass;
-- the adopted index is pg's: ph gets a statement for an index of its own
SELECT stream_seq.resize_index('pev', 'ph', 4);
-- an invalid index, as a failed CREATE INDEX CONCURRENTLY leaves, is not
-- adopted: resize_group() builds another
SELECT stream_seq.resize_index('pev', 'ph', 4) \gexec
UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'pev_ph_s4_idx'::regclass;
SELECT stream_seq.resize_index('pev', 'ph', 4);
SELECT stream_seq.resize_group('pev', 'ph', 4) AS switched;
SELECT slot_index FROM stream_seq.consumer WHERE consumer = 'ph';
DROP INDEX pev_ph_s4_idx;
-- errors, as resize_group()'s
SELECT stream_seq.resize_index(NULL, 'pg', 8);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_index('pev', NULL, 8);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_index('pev', 'pg', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_index('pev', 'pg', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_index('pev', 'pg', 1025);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_index('pev', 'pg', -2147483648);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_index('pev', 'pg', 2147483647);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_index('pev', 'nobody', 8);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_index('pev', 'plain', 8);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_index('pg_class', 'pg', 8);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_index(0, 'pg', 8);
\echo :LAST_ERROR_SQLSTATE
CREATE ROLE resize_other;
GRANT USAGE ON SCHEMA stream_seq TO resize_other;
GRANT SELECT ON pev TO resize_other;
SET ROLE resize_other;
SELECT stream_seq.resize_index('pev', 'pg', 8);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
REVOKE ALL ON pev FROM resize_other;
REVOKE ALL ON SCHEMA stream_seq FROM resize_other;
DROP ROLE resize_other;
-- a partitioned stream, owned by an ordinary role: resize_index() returns
-- CREATE INDEX ON ONLY the table (an invalid partitioned index, catalog
-- only), then per partition CREATE INDEX CONCURRENTLY and ALTER INDEX ...
-- ATTACH PARTITION (the catalog steps in a DO block with a lock_timeout
-- of their own; a sub-partitioned partition gets ON ONLY, its partitions'
-- statements, then its ATTACH), one a row; the last ATTACH makes the
-- partitioned index valid and resize_group() adopts it: no build
CREATE ROLE resize_owner;
CREATE SCHEMA rz AUTHORIZATION resize_owner;
GRANT USAGE ON SCHEMA stream_seq TO resize_owner;
SET ROLE resize_owner;
CREATE TABLE rz.ppev (k int NOT NULL, seq bigint) PARTITION BY LIST (k);
CREATE TABLE rz.ppev_1 PARTITION OF rz.ppev FOR VALUES IN (1);
CREATE TABLE rz.ppev_2 PARTITION OF rz.ppev FOR VALUES IN (2, 3) PARTITION BY LIST (k);
CREATE TABLE rz.ppev_2a PARTITION OF rz.ppev_2 FOR VALUES IN (2);
CREATE TABLE rz.ppev_2b PARTITION OF rz.ppev_2 FOR VALUES IN (3);
SELECT stream_seq.enable('rz.ppev');
INSERT INTO rz.ppev (k) SELECT 1 + g % 3 FROM generate_series(1, 30) g;
SELECT stream_seq.create_group('rz.ppev', 'pg', 'k', 2);
SELECT stream_seq.create_group('rz.ppev', 'ph', 'k', 2);
SELECT stream_seq.create_group('rz.ppev', 'pi', 'k', 2);
CREATE TEMP TABLE steps AS
  SELECT s, n FROM stream_seq.resize_index('rz.ppev', 'pg', 4) WITH ORDINALITY r(s, n);
SELECT s AS statement FROM steps ORDER BY n;
-- a partition created after resize_index() and before its statements ran
-- is not in them: the partitioned index stays invalid, not adopted
CREATE TABLE rz.ppev_4 PARTITION OF rz.ppev FOR VALUES IN (4);
SELECT s FROM steps ORDER BY n \gexec
-- a partition created once the partitioned index is there gets its index
-- with it, as PostgreSQL gives every new partition the table's indexes
CREATE TABLE rz.ppev_5 PARTITION OF rz.ppev FOR VALUES IN (5);
SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE c.relname LIKE 'ppev%pg_s4%' ORDER BY c.relname;
-- resize_index() again: only what the index still lacks
SELECT stream_seq.resize_index('rz.ppev', 'pg', 4);
SELECT stream_seq.resize_index('rz.ppev', 'pg', 4) \gexec
SELECT stream_seq.resize_index('rz.ppev', 'pg', 4) IS NULL AS none_needed;
SELECT c.relname, i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
 WHERE c.relname LIKE 'ppev%pg_s4%' ORDER BY c.relname;
SELECT count(*) AS indexes_before FROM pg_class WHERE relname LIKE 'ppev%' AND relkind IN ('i', 'I');
SELECT stream_seq.resize_group('rz.ppev', 'pg', 4) AS switched;
RESET ROLE;
SELECT resize_index FROM stream_seq.consumer WHERE stream = 'rz.ppev'::regclass AND consumer = 'pg';
SET ROLE resize_owner;
-- adopted, not built: no index more
SELECT count(*) AS indexes_after FROM pg_class WHERE relname LIKE 'ppev%' AND relkind IN ('i', 'I');
-- pending: nothing more to build for that count, 55000 for another
SELECT stream_seq.resize_index('rz.ppev', 'pg', 4) IS NULL AS pending_count;
SELECT stream_seq.resize_index('rz.ppev', 'pg', 3);
\echo :LAST_ERROR_SQLSTATE
-- an incomplete index (one ATTACH not run) is not adopted: resize_group()
-- builds its own, with a NOTICE
SELECT s FROM stream_seq.resize_index('rz.ppev', 'ph', 4) WITH ORDINALITY r(s, n)
 WHERE n < (SELECT count(*) FROM stream_seq.resize_index('rz.ppev', 'ph', 4)) \gexec
SELECT count(*) AS statements_left FROM stream_seq.resize_index('rz.ppev', 'ph', 4);
SELECT stream_seq.resize_group('rz.ppev', 'ph', 4) AS switched;
RESET ROLE;
SELECT resize_index <> 'rz.ppev_ph_s4_idx' AS built_another,
       pg_catalog.to_regclass(resize_index) IS NOT NULL AS there
  FROM stream_seq.consumer WHERE stream = 'rz.ppev'::regclass AND consumer = 'ph';
SELECT indisvalid FROM pg_index i JOIN stream_seq.consumer k
    ON i.indexrelid = pg_catalog.to_regclass(k.resize_index)
 WHERE k.stream = 'rz.ppev'::regclass AND k.consumer = 'ph';
SET ROLE resize_owner;
DROP INDEX rz.ppev_ph_s4_idx;
-- an invalid index of a partition, which a failed CREATE INDEX
-- CONCURRENTLY leaves, is never attached: resize_index() gives that
-- partition a new one, and resize_group()'s own build (which PostgreSQL
-- would make invalid by attaching it) fails with 55000, changing nothing
SELECT s FROM stream_seq.resize_index('rz.ppev', 'pi', 4) s
 WHERE s LIKE 'CREATE INDEX CONCURRENTLY ppev_1_%' \gexec
RESET ROLE;
UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'rz.ppev_1_pi_s4_idx'::regclass;
SET ROLE resize_owner;
SELECT s FROM stream_seq.resize_index('rz.ppev', 'pi', 4) s WHERE s LIKE '%ppev_1_%';
SELECT stream_seq.resize_group('rz.ppev', 'pi', 4) AS switched;
\echo :LAST_ERROR_SQLSTATE
SELECT resize_to FROM stream_seq.consumers WHERE stream = 'rz.ppev'::regclass AND consumer = 'pi';
DROP INDEX rz.ppev_1_pi_s4_idx;
SELECT stream_seq.resize_group('rz.ppev', 'pi', 4) AS switched;
-- errors, as for an ordinary stream
SELECT stream_seq.resize_index('rz.ppev', NULL, 8);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_index('rz.ppev', 'pi', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_index('rz.ppev', 'pi', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_index('rz.ppev', 'pi', 2147483647);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_index('rz.ppev', 'nobody', 8);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.resize_index('rz.ppev_1', 'pi', 8);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
-- a role that may read the table but does not own it
CREATE ROLE resize_other;
GRANT USAGE ON SCHEMA rz, stream_seq TO resize_other;
GRANT SELECT ON rz.ppev TO resize_other;
SET ROLE resize_other;
SELECT stream_seq.resize_index('rz.ppev', 'pi', 8);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
DROP OWNED BY resize_other;
REVOKE ALL ON SCHEMA stream_seq FROM resize_other;
DROP ROLE resize_other;
DROP TABLE steps;
SELECT stream_seq.disable('rz.ppev');
SELECT count(*) AS slot_indexes_left FROM pg_class WHERE relname LIKE 'ppev%' AND relkind IN ('i', 'I')
   AND relname NOT LIKE '%seq%';
DROP TABLE rz.ppev;
DROP SCHEMA rz;
REVOKE ALL ON SCHEMA stream_seq FROM resize_owner;
DROP ROLE resize_owner;
-- disable() drops every index the groups made or adopted
SELECT stream_seq.disable('pev');
SELECT array_agg(indexrelid::regclass::text) AS left_over FROM pg_index WHERE indrelid = 'pev'::regclass;
DROP TABLE pev;
