-- Partitioned streams: enable() on a partitioned table, numbers across
-- partitions, partitions created and attached later, what is refused,
-- sealing, retention by partition, pages that skip sealed partitions,
-- and all of it as an ordinary role that owns the table
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
\set SHOW_CONTEXT never
CREATE ROLE part_owner LOGIN;
CREATE ROLE part_reader LOGIN;
GRANT USAGE, CREATE ON SCHEMA public TO part_owner;
GRANT USAGE ON SCHEMA stream_seq TO part_owner, part_reader;
SET ROLE part_owner;

-- existing rows are numbered (above the numbers they already have), and
-- every partition gets the triggers, the index and the TRUNCATE trigger
CREATE TABLE pe (id int, day int NOT NULL, payload text, seq bigint)
  PARTITION BY RANGE (day);
CREATE TABLE pe_1 PARTITION OF pe FOR VALUES FROM (1) TO (2);
CREATE TABLE pe_2 PARTITION OF pe FOR VALUES FROM (2) TO (3);
INSERT INTO pe VALUES (1, 1, 'old', 7), (2, 2, 'older', NULL);
SELECT stream_seq.enable('pe');
SELECT tableoid::regclass, id, seq FROM pe ORDER BY seq;
SELECT tgrelid::regclass, tgname FROM pg_trigger
 WHERE tgname LIKE 'stream\_seq\_%' ORDER BY tgrelid::regclass::text, tgname;
SELECT indrelid::regclass, indisunique, pg_get_expr(indpred, indrelid) AS pred
  FROM pg_index WHERE indrelid IN ('pe'::regclass, 'pe_1'::regclass, 'pe_2'::regclass)
 ORDER BY indrelid::regclass::text;

-- one counter for the stream, whichever partition a row goes to; a row
-- inserted early into one partition and committed last gets the highest
BEGIN;
INSERT INTO pe (id, day, payload) VALUES (3, 1, 'first in, last out');
SAVEPOINT s;
INSERT INTO pe (id, day, payload) VALUES (4, 2, 'rolled back');
ROLLBACK TO SAVEPOINT s;
SELECT stream_seq.horizon('pe');
COMMIT;
INSERT INTO pe (id, day, payload) VALUES (5, 2, 'b'), (6, 1, 'c');
SELECT tableoid::regclass, id, seq FROM pe ORDER BY seq;
SELECT stream_seq.horizon('pe');

-- a partition created later is followed; its column may not get a
-- default or NOT NULL of its own, and it may not be unlogged
CREATE TABLE pe_3 PARTITION OF pe FOR VALUES FROM (3) TO (4);
INSERT INTO pe (id, day, payload) VALUES (7, 3, 'new partition');
SELECT tableoid::regclass, id, seq FROM pe WHERE id = 7;
ALTER TABLE pe_3 ALTER COLUMN seq SET DEFAULT 1;
\echo :LAST_ERROR_SQLSTATE
CREATE UNLOGGED TABLE pe_u PARTITION OF pe FOR VALUES FROM (90) TO (91);
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE pe_d PARTITION OF pe (seq DEFAULT 5) FOR VALUES FROM (91) TO (92);
\echo :LAST_ERROR_SQLSTATE

-- a partition's triggers stay: not disabled, not dropped
ALTER TABLE pe_3 DISABLE TRIGGER stream_seq_guard;
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE pe_3 DISABLE TRIGGER ALL;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER stream_seq_truncate ON pe_3;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER stream_seq_guard_update ON pe_3;
\echo :LAST_ERROR_SQLSTATE

-- a number written by hand is refused, in any partition
INSERT INTO pe (id, day, payload, seq) VALUES (8, 3, 'by hand', 100);
\echo :LAST_ERROR_SQLSTATE
INSERT INTO pe_3 (id, day, payload, seq) VALUES (8, 3, 'by hand', 100);
\echo :LAST_ERROR_SQLSTATE

-- attaching: an empty table is followed; one with rows is refused, with
-- or without numbers; so is a stream table
CREATE TABLE pe_4 (LIKE pe);
INSERT INTO pe_4 VALUES (9, 4, 'carries a number', 3);
ALTER TABLE pe ATTACH PARTITION pe_4 FOR VALUES FROM (4) TO (5);
\echo :LAST_ERROR_SQLSTATE
UPDATE pe_4 SET seq = NULL;
ALTER TABLE pe ATTACH PARTITION pe_4 FOR VALUES FROM (4) TO (5);
\echo :LAST_ERROR_SQLSTATE
TRUNCATE pe_4;
ALTER TABLE pe ATTACH PARTITION pe_4 FOR VALUES FROM (4) TO (5);
SELECT tgname FROM pg_trigger WHERE tgrelid = 'pe_4'::regclass ORDER BY 1;
CREATE TABLE pe_5 (LIKE pe);
SELECT stream_seq.enable('pe_5');
ALTER TABLE pe ATTACH PARTITION pe_5 FOR VALUES FROM (5) TO (6);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.disable('pe_5');
DROP TABLE pe_5;
INSERT INTO pe (id, day, payload) VALUES (10, 4, 'attached');
SELECT tableoid::regclass, id, seq FROM pe WHERE id = 10;

-- a partition cannot be a stream on its own; a stream with duplicate
-- numbers across partitions is refused
SELECT stream_seq.enable('pe_1');
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE pdup (day int NOT NULL, seq bigint) PARTITION BY LIST (day);
CREATE TABLE pdup_1 PARTITION OF pdup FOR VALUES IN (1);
CREATE TABLE pdup_2 PARTITION OF pdup FOR VALUES IN (2);
INSERT INTO pdup VALUES (1, 5), (2, 5);
SELECT stream_seq.enable('pdup');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM stream_seq.streams WHERE stream = 'pdup'::regclass;

-- sealing: partitions before the newest one with rows; a sealed partition
-- takes no more rows, and its range is recorded
SELECT stream_seq.seal_partitions('pe');
SELECT partition, lowest, highest FROM stream_seq.partitions ORDER BY lowest;
INSERT INTO pe (id, day, payload) VALUES (11, 1, 'late');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.seal_partitions('pe');
-- list and hash partitions have no order to seal or drop by
UPDATE pdup SET seq = NULL WHERE day = 2;
SELECT stream_seq.enable('pdup');
SELECT stream_seq.seal_partitions('pdup');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.drop_partitions('pdup');
\echo :LAST_ERROR_SQLSTATE
DROP TABLE pdup;

-- a sub-partitioned partition keeps the stream's checks: a table with rows
-- attached to it is refused; an empty one gets the TRUNCATE trigger; a
-- leaf detached from it takes its numbers out of the stream (first()
-- moves past them)
CREATE TABLE ps (region int NOT NULL, day int NOT NULL, seq bigint)
  PARTITION BY RANGE (day);
CREATE TABLE ps_1 PARTITION OF ps FOR VALUES FROM (1) TO (2)
  PARTITION BY LIST (region);
CREATE TABLE ps_1_a PARTITION OF ps_1 FOR VALUES IN (1);
SELECT stream_seq.enable('ps');
INSERT INTO ps VALUES (1, 1), (1, 1);
CREATE TABLE ps_1_b (LIKE ps);
INSERT INTO ps_1_b VALUES (2, 1, 1), (2, 1, 1), (2, 1, NULL);
ALTER TABLE ps_1 ATTACH PARTITION ps_1_b FOR VALUES IN (2);
\echo :LAST_ERROR_SQLSTATE
TRUNCATE ps_1_b;
ALTER TABLE ps_1 ATTACH PARTITION ps_1_b FOR VALUES IN (2);
SELECT tgname FROM pg_trigger WHERE tgrelid = 'ps_1_b'::regclass ORDER BY 1;
INSERT INTO ps VALUES (2, 1);
SELECT tableoid::regclass, seq FROM ps ORDER BY seq;
SELECT stream_seq.first('ps');
ALTER TABLE ps_1 DETACH PARTITION ps_1_a;
SELECT stream_seq.first('ps');
SELECT tgname FROM pg_trigger WHERE tgrelid = 'ps_1_a'::regclass ORDER BY 1;
DROP TABLE ps, ps_1_a;

-- an UPDATE that moves a numbered row to another partition is refused,
-- saying what happened
UPDATE pe SET day = 2 WHERE id = 7;
-- and an UPDATE of the number through the parent is refused naming the
-- stream, which a partition's rows belong to, not the partition
UPDATE pe SET seq = seq + 1 WHERE id = 7;

-- a stream partitioned by time: only partitions whose upper bound lies
-- stream_seq.seal_grace (1 hour) in the past are sealed, whatever rows
-- later partitions hold; a row dated in the future does not seal the
-- partition now() routes to, and retention does not drop it
CREATE TABLE pt (created timestamptz NOT NULL DEFAULT now(), n int, seq bigint)
  PARTITION BY RANGE (created);
SELECT stream_seq.enable('pt');
DO $$
BEGIN
    EXECUTE format('CREATE TABLE pt_old PARTITION OF pt FOR VALUES FROM (%L) TO (%L)',
                   now() - interval '5 hours', now() - interval '3 hours');
    EXECUTE format('CREATE TABLE pt_recent PARTITION OF pt FOR VALUES FROM (%L) TO (%L)',
                   now() - interval '3 hours', now() - interval '30 minutes');
    EXECUTE format('CREATE TABLE pt_now PARTITION OF pt FOR VALUES FROM (%L) TO (%L)',
                   now() - interval '30 minutes', now() + interval '1 hour');
    EXECUTE format('CREATE TABLE pt_future PARTITION OF pt FOR VALUES FROM (%L) TO (%L)',
                   now() + interval '1 hour', now() + interval '3 hours');
END $$;
INSERT INTO pt (created, n) VALUES (now() - interval '4 hours', 1);
INSERT INTO pt (created, n) VALUES (now() - interval '1 hour', 2);
INSERT INTO pt (n) VALUES (3);
INSERT INTO pt (created, n) VALUES (now() + interval '2 hours', 4);
SELECT stream_seq.seal_partitions('pt');
SELECT partition FROM stream_seq.partitions WHERE stream = 'pt'::regclass;
INSERT INTO pt (n) VALUES (5);
SET stream_seq.seal_grace = 0;
SELECT stream_seq.seal_partitions('pt');
SELECT partition FROM stream_seq.partitions
 WHERE stream = 'pt'::regclass ORDER BY partition::text;
-- a sealed partition takes rows again once unsealed; unsealing one that is
-- not sealed changes nothing; a table outside a stream, NULL and a role
-- without DELETE on the stream are refused
INSERT INTO pt (created, n) VALUES (now() - interval '1 hour', 6);
SELECT stream_seq.unseal_partition('pt_recent');
INSERT INTO pt (created, n) VALUES (now() - interval '1 hour', 6);
SELECT stream_seq.unseal_partition('pt_recent');
SELECT stream_seq.unseal_partition('pt');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.unseal_partition(NULL);
\echo :LAST_ERROR_SQLSTATE
SET ROLE part_reader;
SELECT stream_seq.unseal_partition('pt_old');
\echo :LAST_ERROR_SQLSTATE
SET ROLE part_owner;
SELECT stream_seq.drop_partitions('pt', keep_tables => true);
SELECT relname FROM pg_class WHERE relispartition AND relname LIKE 'pt\_%'
   AND 'pt'::regclass IN (SELECT inhparent FROM pg_inherits WHERE inhrelid = pg_class.oid)
 ORDER BY relname;
INSERT INTO pt (n) VALUES (7);
SELECT n, tableoid::regclass FROM pt ORDER BY seq;
RESET stream_seq.seal_grace;
DROP TABLE pt, pt_old, pt_recent;

-- pages: the same rows from page() and read() as from the plain query,
-- without the sealed partitions the cursor has passed
SELECT stream_seq._page_source('pe', 0) LIKE '%pe_1%' AS reads_pe_1;
SELECT stream_seq._page_source('pe', 8) LIKE '%pe_1%' AS reads_pe_1,
       stream_seq._page_source('pe', 8) LIKE '%pe_2%' AS reads_pe_2;
SELECT seq, "row"->>'id' AS id FROM stream_seq.page('pe', 0);
SELECT seq, "row"->>'id' AS id FROM stream_seq.page('pe', 9, 2);
SELECT seq FROM pe WHERE seq > 9 AND seq < stream_seq.horizon('pe') ORDER BY seq LIMIT 2;
SELECT stream_seq.page('pe', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.page('pe', 0, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM stream_seq.page('pe', -9223372036854775808);
SELECT count(*) FROM stream_seq.page('pe', 9223372036854775807);
SELECT stream_seq.page('pe_1', 0);
\echo :LAST_ERROR_SQLSTATE

-- a reader with SELECT on the stream only reads through the parent (no
-- privilege on the partitions): the same rows
GRANT SELECT ON pe TO part_reader;
SET ROLE part_reader;
SELECT stream_seq._page_source('pe', 8) = 'public.pe' AS through_parent;
SELECT seq FROM stream_seq.page('pe', 9);
SET ROLE part_reader;
SELECT stream_seq.drop_partitions('pe');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.seal_partitions('pe');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SET ROLE part_owner;

-- retention: never past a consumer unless forced, never the partitions
-- from the newest one with rows on; first() moves past what was dropped
SELECT stream_seq.create_consumer('pe', 'slow');
SELECT stream_seq.drop_partitions('pe');
SELECT stream_seq.first('pe');
SELECT stream_seq.advance('pe', 'slow', 8);
SELECT stream_seq.drop_partitions('pe');
SELECT stream_seq.first('pe'), to_regclass('pe_1') AS pe_1, to_regclass('pe_2') AS pe_2;
SELECT partition, lowest, highest FROM stream_seq.partitions ORDER BY lowest;
SELECT stream_seq.drop_partitions('pe', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.drop_partitions('pe_3');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.drop_partitions('pe', retain => -1);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.drop_partitions('pe', force => true, retain => 3);
SELECT stream_seq.drop_partitions('pe', force => true, keep_tables => true, retain => 1);
SELECT stream_seq.first('pe'), to_regclass('pe_1') IS NOT NULL AS pe_1_kept;
SELECT stream_seq.drop_partitions('pe', force => true, keep_tables => true);
SELECT stream_seq.first('pe'), to_regclass('pe_2') IS NOT NULL AS pe_2_kept,
       (SELECT count(*) FROM pg_inherits WHERE inhrelid = 'pe_2'::regclass) AS attached;
SELECT seq, "row"->>'id' AS id FROM stream_seq.read('pe', 'slow');
\echo :LAST_ERROR_SQLSTATE
-- a detached table is an ordinary table again
SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pe_2'::regclass;
TRUNCATE pe_2;
DROP TABLE pe_1, pe_2, pe_3;

-- DETACH, DROP TABLE and TRUNCATE of a partition move first() past its
-- highest number
CREATE TABLE pe_6 PARTITION OF pe FOR VALUES FROM (6) TO (7);
CREATE TABLE pe_7 PARTITION OF pe FOR VALUES FROM (7) TO (8);
CREATE TABLE pe_8 PARTITION OF pe FOR VALUES FROM (8) TO (9);
INSERT INTO pe (id, day, payload) VALUES (12, 6, 'x'), (13, 7, 'y'), (14, 8, 'z');
SELECT tableoid::regclass, id, seq FROM pe WHERE id >= 12 ORDER BY seq;
ALTER TABLE pe DETACH PARTITION pe_6;
SELECT stream_seq.first('pe');
SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pe_6'::regclass;
DROP TABLE pe_7;
SELECT stream_seq.first('pe');
TRUNCATE pe_8;
SELECT stream_seq.first('pe');
-- so does DETACH ... CONCURRENTLY
CREATE TABLE pe_c PARTITION OF pe FOR VALUES FROM (10) TO (11);
INSERT INTO pe (id, day, payload) VALUES (20, 10, 'c');
SELECT seq AS detached_seq FROM pe WHERE id = 20 \gset
ALTER TABLE pe DETACH PARTITION pe_c CONCURRENTLY;
SELECT stream_seq.first('pe') = :detached_seq + 1 AS moved_past_it;
DROP TABLE pe_c;
-- an empty partition leaving moves nothing
CREATE TABLE pe_9 PARTITION OF pe FOR VALUES FROM (9) TO (10);
DROP TABLE pe_9;
SELECT stream_seq.first('pe');
DROP TABLE pe_6;

-- the highest number survives partitions leaving: numbering continues
INSERT INTO pe (id, day, payload) VALUES (15, 8, 'after');
SELECT seq > 14 AS above FROM pe WHERE id = 15;

-- disable() takes every trigger off every partition; enable() again
-- continues above every number handed out
SELECT stream_seq.disable('pe');
SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'stream\_seq\_%';
SELECT stream_seq.enable('pe');
INSERT INTO pe (id, day, payload) VALUES (16, 8, 'again');
SELECT seq > 15 AS above FROM pe WHERE id = 16;
SELECT count(*) FROM pg_trigger WHERE tgname LIKE 'stream\_seq\_%';

-- DROP TABLE of the stream takes its partitions and its ranges with it
DROP TABLE pe;

-- the table's owner needs no privilege on schema stream_seq for the DDL
-- of its partitions (the stream enabled by someone else)
RESET ROLE;
CREATE ROLE part_mig LOGIN;
GRANT CREATE ON SCHEMA public TO part_mig;
SET ROLE part_mig;
CREATE TABLE pm (day int NOT NULL, seq bigint) PARTITION BY RANGE (day);
RESET ROLE;
SELECT stream_seq.enable('pm');
SET ROLE part_mig;
CREATE TABLE pm_1 PARTITION OF pm FOR VALUES FROM (1) TO (2);
CREATE TABLE pm_2 (LIKE pm);
ALTER TABLE pm ATTACH PARTITION pm_2 FOR VALUES FROM (2) TO (3);
INSERT INTO pm VALUES (1), (2);
SELECT tableoid::regclass, seq FROM pm ORDER BY seq;
SELECT tgrelid::regclass, tgname FROM pg_trigger
 WHERE tgrelid IN ('pm_1'::regclass, 'pm_2'::regclass) ORDER BY tgrelid::regclass::text, tgname;
TRUNCATE pm_1;
ALTER TABLE pm DETACH PARTITION pm_2;
DROP TABLE pm_2;
RESET ROLE;
SELECT stream_seq.first('pm');
SELECT stream_seq.disable('pm');
DROP TABLE pm;
REVOKE ALL ON SCHEMA public FROM part_mig;
DROP ROLE part_mig;
SET ROLE part_owner;

-- page() reads the same rows as the reading query on the parent, for
-- every cursor and page size: sealed partitions holding consecutive days,
-- rows of day 2 and day 4 committed while later days were written (their
-- ranges overlap the next ones), rows deleted, an unsealed partition
CREATE TABLE pq (day int NOT NULL, n int, seq bigint) PARTITION BY RANGE (day);
SELECT stream_seq.enable('pq');
SELECT format('CREATE TABLE pq_%s PARTITION OF pq FOR VALUES FROM (%s) TO (%s)', d, d, d + 1)
  FROM generate_series(1, 6) d \gexec
DO $$
BEGIN
    FOR i IN 1 .. 90 LOOP
        INSERT INTO pq (day, n) VALUES ((i - 1) / 18 + 1, i);
        IF i IN (40, 45, 80) THEN
            INSERT INTO pq (day, n) VALUES (CASE WHEN i < 80 THEN 2 ELSE 4 END, -i);
        END IF;
        COMMIT;
    END LOOP;
END $$;
DELETE FROM pq WHERE n % 7 = 0;
INSERT INTO pq (day, n) VALUES (6, 0);
SELECT stream_seq.seal_partitions('pq');
INSERT INTO pq (day, n) VALUES (6, 100);
SELECT partition, lowest, highest FROM stream_seq.partitions
 WHERE stream = 'pq'::regclass ORDER BY lowest;
CREATE TEMP TABLE page_checks (after bigint, size int, by_page text, by_query text);
DO $$
DECLARE
    page_size int;
BEGIN
    FOR cursor_at IN 0 .. 97 LOOP
        FOREACH page_size IN ARRAY ARRAY[1, 2, 3, 7, 40] LOOP
            INSERT INTO page_checks
            SELECT cursor_at, page_size,
                   (SELECT string_agg(seq::text, ',' ORDER BY seq)
                      FROM stream_seq.page('pq', cursor_at, page_size)),
                   (SELECT string_agg(seq::text, ',' ORDER BY seq)
                      FROM (SELECT seq FROM pq
                             WHERE seq > cursor_at AND seq < stream_seq.horizon('pq')
                             ORDER BY seq LIMIT page_size) q);
        END LOOP;
    END LOOP;
END $$;
SELECT count(*) AS pages,
       count(*) FILTER (WHERE by_page IS DISTINCT FROM by_query) AS different
  FROM page_checks;
-- a small page reads the partition holding the next numbers, the sealed
-- ones whose range reaches into the page, and the unsealed one
SELECT after, size, regexp_replace(stream_seq._page_source('pq', after, size),
                                   '.*?FROM ONLY public\.(pq_\d)', ' \1', 'g') AS reads
  FROM (VALUES (0, 3), (20, 3), (36, 5), (60, 40), (60, NULL)) v(after, size);
DROP TABLE pq, page_checks;

-- sealed ranges that overlap: ev_1 holds 1 and 7, ev_2 holds 2, ev_3
-- holds 3..6; a page of three after 0 is 1, 2, 3, never 1, 2, 7
CREATE TABLE po (day int NOT NULL, seq bigint) PARTITION BY RANGE (day);
SELECT stream_seq.enable('po');
SELECT format('CREATE TABLE po_%s PARTITION OF po FOR VALUES FROM (%s) TO (%s)', d, d, d + 1)
  FROM generate_series(1, 4) d \gexec
INSERT INTO po VALUES (1);
INSERT INTO po VALUES (2);
INSERT INTO po SELECT 3 FROM generate_series(1, 4);
INSERT INTO po VALUES (1);
INSERT INTO po VALUES (4);
SELECT stream_seq.seal_partitions('po');
SELECT partition, lowest, highest FROM stream_seq.partitions
 WHERE stream = 'po'::regclass ORDER BY partition::text;
SELECT string_agg(seq::text, ',' ORDER BY seq) FROM stream_seq.page('po', 0, 3);
SELECT string_agg(seq::text, ',' ORDER BY seq) FROM stream_seq.page('po', 2, 2);
-- a parked row of a partitioned stream comes back from replay() with its
-- content, from whichever partition holds it
SELECT stream_seq.create_consumer('po', 'pk');
BEGIN;
SELECT stream_seq.park('po', 'pk', 3, 'handler failed');
SELECT stream_seq.advance('po', 'pk', 3);
COMMIT;
SELECT seq, "row"->>'day' AS day, "row"->>'seq' AS row_seq, reason
  FROM stream_seq.replay('po', 'pk');
SELECT count(*) AS still_parked FROM stream_seq.parked_rows WHERE stream = 'po'::regclass;
SELECT stream_seq.drop_consumer('po', 'pk');
DROP TABLE po;

-- the same check, randomized (fixed seed): 40 days, each transaction
-- writes one to three rows mostly into the current day, often into an
-- older one (a late row widens a sealed range over the next ones), some
-- rows deleted; every cursor and page size read by page() and by the
-- reading query
CREATE TABLE pr (day int NOT NULL, seq bigint) PARTITION BY RANGE (day);
SELECT stream_seq.enable('pr');
DO $$
BEGIN
    FOR d IN 1 .. 40 LOOP
        EXECUTE format('CREATE TABLE pr_%s PARTITION OF pr FOR VALUES FROM (%s) TO (%s)',
                       d, d, d + 1);
    END LOOP;
END $$;
SELECT setseed(0.19);
DO $$
DECLARE
    today int;
BEGIN
    FOR i IN 1 .. 400 LOOP
        today := (i - 1) / 10 + 1;
        FOR j IN 1 .. 1 + floor(random() * 3)::int LOOP
            INSERT INTO pr VALUES (CASE WHEN random() < 0.3
                                        THEN 1 + floor(random() * today)::int
                                        ELSE today END);
        END LOOP;
        COMMIT;
    END LOOP;
END $$;
DELETE FROM pr WHERE random() < 0.1;
SELECT stream_seq.seal_partitions('pr');
SELECT count(*) AS sealed,
       count(*) FILTER (WHERE EXISTS (SELECT FROM stream_seq.partitions o
                                       WHERE o.stream = r.stream
                                         AND o.partition <> r.partition
                                         AND o.lowest BETWEEN r.lowest AND r.highest))
         AS overlapping
  FROM stream_seq.partitions r WHERE stream = 'pr'::regclass;
CREATE TEMP TABLE page_checks (after bigint, size int, by_page text, by_query text);
DO $$
DECLARE
    page_size int;
    last_seq bigint := (SELECT max(seq) FROM pr);
BEGIN
    FOR cursor_at IN 0 .. last_seq LOOP
        FOREACH page_size IN ARRAY ARRAY[1, 2, 3, 5, 8, 13, 50] LOOP
            INSERT INTO page_checks
            SELECT cursor_at, page_size,
                   (SELECT string_agg(seq::text, ',' ORDER BY seq)
                      FROM stream_seq.page('pr', cursor_at, page_size)),
                   (SELECT string_agg(seq::text, ',' ORDER BY seq)
                      FROM (SELECT seq FROM pr
                             WHERE seq > cursor_at AND seq < stream_seq.horizon('pr')
                             ORDER BY seq LIMIT page_size) q);
        END LOOP;
    END LOOP;
END $$;
SELECT count(*) > 5000 AS many_pages,
       count(*) FILTER (WHERE by_page IS DISTINCT FROM by_query) AS different
  FROM page_checks;
DROP TABLE pr, page_checks;

-- number ranges come from an index only when it holds every numbered row:
-- not from a partial one; a descending one is read from its other end
CREATE TABLE pi (day int NOT NULL, payload int, seq bigint) PARTITION BY RANGE (day);
CREATE INDEX ON pi (seq) WHERE payload < 3;
CREATE INDEX ON pi (seq DESC);
SELECT stream_seq.enable('pi');
CREATE TABLE pi_1 PARTITION OF pi FOR VALUES FROM (1) TO (2);
CREATE TABLE pi_2 PARTITION OF pi FOR VALUES FROM (2) TO (3);
CREATE TABLE pi_3 PARTITION OF pi FOR VALUES FROM (3) TO (4);
INSERT INTO pi SELECT 1, g FROM generate_series(1, 5) g;
INSERT INTO pi SELECT 2, g FROM generate_series(6, 8) g;
INSERT INTO pi SELECT 3, g FROM generate_series(9, 10) g;
SELECT stream_seq.create_consumer('pi', 'c', 2);
SELECT stream_seq.seal_partitions('pi');
SELECT partition, lowest, highest FROM stream_seq.partitions ORDER BY lowest;
SELECT string_agg(seq::text, ',' ORDER BY seq) FROM stream_seq.page('pi', 2);
SELECT stream_seq.drop_partitions('pi');
DROP TABLE pi_1;
SELECT stream_seq.first('pi');
SELECT count(*) FROM stream_seq.read('pi', 'c');
\echo :LAST_ERROR_SQLSTATE
DROP TABLE pi;

-- a partitioned stream whose only index on the number is BRIN: from
-- PostgreSQL 16 on, a column indexed by BRIN alone does not stop a HOT
-- update, so the commit-time version is heap-only and must get an entry
-- in the BRIN index only.  Every row is in the primary key's index once:
-- an index-only scan, once VACUUM has made the page all-visible, returns
-- each row once (twice if the heap-only version had an entry too).
CREATE TABLE pb (id int, day int NOT NULL, seq bigint, PRIMARY KEY (id, day))
    PARTITION BY RANGE (day);
CREATE TABLE pb_1 PARTITION OF pb FOR VALUES FROM (1) TO (2);
CREATE INDEX pb_brin ON pb USING brin (seq);
SELECT stream_seq.enable('pb');
SELECT indexdef FROM pg_indexes WHERE tablename = 'pb_1' ORDER BY indexname;
INSERT INTO pb SELECT g, 1 FROM generate_series(1, 20) g;
VACUUM pb_1;
SET enable_seqscan = off;
SET enable_bitmapscan = off;
EXPLAIN (COSTS OFF) SELECT id FROM pb WHERE id BETWEEN 1 AND 20 AND day = 1;
SELECT count(*), count(DISTINCT id) FROM pb WHERE id BETWEEN 1 AND 20 AND day = 1;
SELECT count(seq) FROM pb;
RESET enable_seqscan;
RESET enable_bitmapscan;
DROP TABLE pb;
-- an index on one partition's stream column that would take the
-- placeholder: a unique one is refused as on the stream table (any two
-- unnumbered rows would conflict), another one is warned of
CREATE TABLE pu (id int, day int NOT NULL) PARTITION BY LIST (day);
CREATE TABLE pu_1 PARTITION OF pu FOR VALUES IN (1);
SELECT stream_seq.enable('pu');
CREATE UNIQUE INDEX pu_1_seq_all ON pu_1 (seq);
\echo :LAST_ERROR_SQLSTATE
CREATE UNIQUE INDEX pu_1_seq_numbered ON pu_1 (seq) WHERE seq > 0;
CREATE INDEX pu_1_seq_plain ON pu_1 (seq);
INSERT INTO pu VALUES (1, 1), (2, 1);
SELECT id, seq FROM pu ORDER BY id;
DROP TABLE pu;
RESET ROLE;
SELECT count(*) FROM stream_seq.stream;
SELECT count(*) FROM stream_seq.partition_range;
REVOKE ALL ON SCHEMA public FROM part_owner;
REVOKE ALL ON SCHEMA stream_seq FROM part_owner, part_reader;
DROP ROLE part_owner;
DROP ROLE part_reader;
