-- Typed reads: read_rows(), read_slot_rows() and page_rows() return the
-- pages of read(), read_slot() and page() as the stream table's own row
-- type.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
\set SHOW_CONTEXT never

CREATE TABLE orders (id int, amount numeric(10,2), note text, dropped_later int,
                     tags text[], placed date);
ALTER TABLE orders DROP COLUMN dropped_later;
SELECT stream_seq.enable('orders');
INSERT INTO orders VALUES (1, 10.50, 'first', '{a,b}', '2026-01-01'),
                          (2, 0.01, NULL, '{}', '2026-01-02'),
                          (3, 99999999.99, 'big', NULL, NULL);
SELECT stream_seq.create_consumer('orders', 'billing');

-- every column, with its own type, in the table's order
SELECT * FROM stream_seq.read_rows(NULL::orders, 'billing', 2);
SELECT pg_typeof(r), pg_typeof(r.amount), pg_typeof(r.tags), r.tags[1]
  FROM stream_seq.read_rows(NULL::orders, 'billing', 1) r;
-- the same rows as read() returns as jsonb, in the same order
SELECT (SELECT array_agg(seq ORDER BY seq) FROM stream_seq.read_rows(NULL::orders, 'billing'))
     = (SELECT array_agg(seq ORDER BY seq) FROM stream_seq.read('orders', 'billing')) AS same_page,
       (SELECT array_agg(to_jsonb(r) ORDER BY seq) FROM stream_seq.read_rows(NULL::orders, 'billing') r)
     = (SELECT array_agg("row" ORDER BY seq) FROM stream_seq.read('orders', 'billing')) AS same_rows;
-- the consumer pattern: read typed, apply, advance in one transaction
CREATE TABLE billed (id int, amount numeric);
BEGIN;
INSERT INTO billed SELECT id, amount FROM stream_seq.read_rows(NULL::orders, 'billing', 2);
SELECT stream_seq.advance('orders', 'billing',
       (SELECT max(seq) FROM stream_seq.read_rows(NULL::orders, 'billing', 2)));
COMMIT;
SELECT * FROM billed ORDER BY id;
SELECT id FROM stream_seq.read_rows(NULL::orders, 'billing');
SELECT id FROM stream_seq.page_rows(NULL::orders, 0, 2);
SELECT id FROM stream_seq.page_rows(NULL::orders, 2);

-- a schema-qualified table, and a name needing quotes
CREATE SCHEMA "Other Schema";
CREATE TABLE "Other Schema"."Mixed Case" ("Id" int);
SELECT stream_seq.enable('"Other Schema"."Mixed Case"');
INSERT INTO "Other Schema"."Mixed Case" VALUES (7);
SELECT * FROM stream_seq.page_rows(NULL::"Other Schema"."Mixed Case", 0);

-- groups: a slot's rows
SELECT stream_seq.create_group('orders', 'by_id', 'id', 2);
SELECT count(*) FROM stream_seq.claim('orders', 'by_id', 'w');
SELECT slot, array_agg(r.id ORDER BY r.seq) AS ids
  FROM generate_series(0, 1) slot,
       LATERAL stream_seq.read_slot_rows(NULL::orders, 'by_id', slot, 1) r
 GROUP BY slot ORDER BY slot;
SELECT (SELECT array_agg(seq) FROM stream_seq.read_slot_rows(NULL::orders, 'by_id', 0, 1))
     IS NOT DISTINCT FROM (SELECT array_agg(seq) FROM stream_seq.read_slot('orders', 'by_id', 0, 1)) AS same_slot_page;
SELECT * FROM stream_seq.read_slot_rows(NULL::orders, 'by_id', 0, 99);
\echo :LAST_ERROR_SQLSTATE
-- while a resize is pending, the old slots are read up to its fence only,
-- typed or not
SELECT stream_seq.resize_group('orders', 'by_id', 3) AS switched;
INSERT INTO orders VALUES (4, 1, 'after the fence', NULL, NULL), (5, 2, 'after the fence', NULL, NULL);
SELECT slot, token FROM stream_seq.claim('orders', 'by_id', 'w') ORDER BY slot;
SELECT s.slot, s.read_upto = 3 AS fence_at_3,
       (SELECT array_agg(r.seq ORDER BY r.seq) FROM stream_seq.read_slot_rows(NULL::orders, 'by_id', s.slot, s.token) r)
         IS NOT DISTINCT FROM
       (SELECT array_agg(r.seq ORDER BY r.seq) FROM stream_seq.read_slot('orders', 'by_id', s.slot, s.token) r) AS same_page,
       (SELECT coalesce(max(r.seq), 0) FROM stream_seq.read_slot_rows(NULL::orders, 'by_id', s.slot, s.token) r) <= 3 AS within_fence
  FROM stream_seq.consumer_slots s WHERE s.consumer = 'by_id' ORDER BY s.slot;

-- a partitioned stream whose partitions order their columns differently
CREATE TABLE pevents (id int, k int, body text, seq bigint) PARTITION BY LIST (k);
CREATE TABLE pevents_1 (body text, seq bigint, k int, id int);
ALTER TABLE pevents ATTACH PARTITION pevents_1 FOR VALUES IN (1);
CREATE TABLE pevents_2 PARTITION OF pevents FOR VALUES IN (2);
SELECT stream_seq.enable('pevents');
INSERT INTO pevents VALUES (1, 1, 'one'), (2, 2, 'two'), (3, 1, 'three');
SELECT * FROM stream_seq.page_rows(NULL::pevents, 0);
SELECT stream_seq.create_consumer('pevents', 'c');
SELECT * FROM stream_seq.read_rows(NULL::pevents, 'c', 2);
-- a partition's row type is not a stream's
SELECT * FROM stream_seq.page_rows(NULL::pevents_1, 0);
\echo :LAST_ERROR_SQLSTATE

-- bad input: each error as read()/page() give it
SELECT * FROM stream_seq.read_rows(NULL::int, 'billing');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.read_rows(NULL::pg_class, 'billing');
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE not_a_stream (id int);
SELECT * FROM stream_seq.read_rows(NULL::not_a_stream, 'billing');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.read_rows(NULL::orders, 'nobody');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.read_rows(NULL::orders, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.read_rows(NULL::orders, 'billing', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.read_rows(NULL::orders, 'billing', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM stream_seq.read_rows(NULL::orders, 'billing', 2147483647);
SELECT * FROM stream_seq.page_rows(NULL::orders, NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM stream_seq.page_rows(NULL::orders, -9223372036854775808);
SELECT count(*) FROM stream_seq.page_rows(NULL::orders, 9223372036854775807);
-- trimmed rows: the same error and hint as read()
SELECT stream_seq.drop_consumer('orders', 'by_id');
SELECT stream_seq.trim('orders', 3);
SELECT stream_seq.reset('orders', 'billing', 0);
SELECT * FROM stream_seq.read_rows(NULL::orders, 'billing');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.page_rows(NULL::orders, 0);
\echo :LAST_ERROR_SQLSTATE

-- an ordinary role: reads what it may read, and nothing else
CREATE ROLE typed_reader;
CREATE ROLE typed_nobody;
GRANT USAGE ON SCHEMA stream_seq TO typed_reader, typed_nobody;
GRANT SELECT ON orders TO typed_reader;
SELECT stream_seq.create_consumer('orders', 'reader');
SELECT stream_seq.alter_consumer_owner('orders', 'reader', 'typed_reader');
SET ROLE typed_reader;
SELECT id FROM stream_seq.read_rows(NULL::orders, 'reader');
SET ROLE typed_nobody;
SELECT id FROM stream_seq.read_rows(NULL::orders, 'reader');
\echo :LAST_ERROR_SQLSTATE
SELECT id FROM stream_seq.page_rows(NULL::orders, 0);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;

SELECT stream_seq.disable(relid) FROM stream_seq.stream ORDER BY relid::text;
DROP TABLE orders, billed, pevents, not_a_stream;
DROP SCHEMA "Other Schema" CASCADE;
REVOKE ALL ON SCHEMA stream_seq FROM typed_reader, typed_nobody;
DROP ROLE typed_reader, typed_nobody;
