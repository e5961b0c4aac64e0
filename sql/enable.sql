-- enable() and disable(): the SQL surface and every bad input
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
\set SHOW_CONTEXT never

-- an ordinary table gets the column and a unique index
CREATE TABLE ev (id int PRIMARY KEY, payload text);
SELECT stream_seq.enable('ev');
\d ev
SELECT stream, seq_column FROM stream_seq.streams;
SELECT relid, seq_column, head_seq FROM stream_seq.stream;

-- enabling twice
SELECT stream_seq.enable('ev');
\echo :LAST_ERROR_SQLSTATE

-- a column of another type, a NOT NULL column, a column with a default
CREATE TABLE ev_int (seq int);
SELECT stream_seq.enable('ev_int');
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE ev_notnull (seq bigint NOT NULL);
SELECT stream_seq.enable('ev_notnull');
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE ev_serial (seq bigserial);
SELECT stream_seq.enable('ev_serial');
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE ev_ident (seq bigint GENERATED ALWAYS AS IDENTITY);
SELECT stream_seq.enable('ev_ident');
\echo :LAST_ERROR_SQLSTATE
-- none of them was changed
SELECT count(*) FROM stream_seq.stream WHERE relid::text LIKE 'ev\_%';
SELECT tgname FROM pg_trigger WHERE tgrelid::regclass::text LIKE 'ev\_%';

-- views, foreign tables, materialized views, sequences, indexes
CREATE VIEW ev_view AS SELECT 1 AS seq;
SELECT stream_seq.enable('ev_view');
\echo :LAST_ERROR_SQLSTATE
CREATE MATERIALIZED VIEW ev_mat AS SELECT 1::bigint AS seq;
SELECT stream_seq.enable('ev_mat');
\echo :LAST_ERROR_SQLSTATE
CREATE SEQUENCE ev_sequence;
SELECT stream_seq.enable('ev_sequence');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.enable('ev_pkey');
\echo :LAST_ERROR_SQLSTATE
CREATE FOREIGN DATA WRAPPER ev_fdw;
CREATE SERVER ev_server FOREIGN DATA WRAPPER ev_fdw;
CREATE FOREIGN TABLE ev_foreign (seq bigint) SERVER ev_server;
SELECT stream_seq.enable('ev_foreign');
\echo :LAST_ERROR_SQLSTATE

-- temporary, unlogged and partitioned tables, catalogs
CREATE TEMPORARY TABLE ev_temp (payload text);
SELECT stream_seq.enable('ev_temp');
\echo :LAST_ERROR_SQLSTATE
CREATE UNLOGGED TABLE ev_unlogged (payload text);
SELECT stream_seq.enable('ev_unlogged');
\echo :LAST_ERROR_SQLSTATE
-- a partition on its own (partitioned streams: sql/partitions.sql)
CREATE TABLE ev_parted (payload text, k int) PARTITION BY RANGE (k);
CREATE TABLE ev_parted_1 PARTITION OF ev_parted FOR VALUES FROM (0) TO (10);
SELECT stream_seq.enable('ev_parted_1');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.enable('pg_class');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.enable('stream_seq.stream');
\echo :LAST_ERROR_SQLSTATE

-- a table that does not exist
SELECT stream_seq.enable('no_such_table');
\echo :LAST_ERROR_SQLSTATE

-- migrating a bigserial table: existing numbers are kept, new rows get
-- numbers above them, in physical order
CREATE TABLE legacy (seq bigserial, payload text);
INSERT INTO legacy (payload) VALUES ('a'), ('b'), ('c');
DELETE FROM legacy WHERE payload = 'b';
ALTER TABLE legacy ALTER COLUMN seq DROP DEFAULT, ALTER COLUMN seq DROP NOT NULL;
ALTER TABLE legacy ADD COLUMN extra int;
INSERT INTO legacy (payload) VALUES ('d'), ('e');
SELECT stream_seq.enable('legacy');
SELECT seq, payload FROM legacy ORDER BY seq;
INSERT INTO legacy (payload) VALUES ('f');
SELECT seq, payload FROM legacy ORDER BY seq;
SELECT stream_seq.head('legacy'), stream_seq.horizon('legacy');

-- numbers below 1 are refused (the stream's index leaves them out, and 0
-- is the placeholder of an unnumbered row), and the refusal changes
-- nothing; set to NULL, they are numbered
CREATE TABLE nonpositive (id int, seq bigint);
INSERT INTO nonpositive VALUES (1, 0), (2, NULL), (3, -5), (4, 7);
SELECT stream_seq.enable('nonpositive');
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) AS indexes FROM pg_index WHERE indrelid = 'nonpositive'::regclass;
SELECT pg_get_expr(adbin, adrelid) FROM pg_attrdef WHERE adrelid = 'nonpositive'::regclass;
UPDATE nonpositive SET seq = NULL WHERE seq <= 0;
SELECT stream_seq.enable('nonpositive');
SELECT id, seq FROM nonpositive ORDER BY seq;
SELECT stream_seq.disable('nonpositive');
DROP TABLE nonpositive;

-- an existing unique index on the column is reused
CREATE TABLE ev_idx (seq bigint UNIQUE, payload text);
SELECT stream_seq.enable('ev_idx');
SELECT count(*) FROM pg_index WHERE indrelid = 'ev_idx'::regclass;

-- a column with another name, a mixed-case table in another schema
CREATE SCHEMA "Other";
CREATE TABLE "Other"."Mixed Case" (payload text);
SELECT stream_seq.enable('"Other"."Mixed Case"', 'Position');
INSERT INTO "Other"."Mixed Case" VALUES ('x'), ('y');
SELECT "Position", payload FROM "Other"."Mixed Case" ORDER BY 1;
SELECT stream_seq.horizon('"Other"."Mixed Case"');

-- privileges: only the owner enables or disables
CREATE ROLE stream_other LOGIN;
GRANT USAGE ON SCHEMA stream_seq TO stream_other;
CREATE TABLE owned_by_admin (payload text);
SET ROLE stream_other;
SELECT stream_seq.enable('owned_by_admin');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.disable('ev');
\echo :LAST_ERROR_SQLSTATE
-- and nobody writes the catalog by hand
INSERT INTO stream_seq.stream VALUES ('owned_by_admin', 'seq', 'ev_sequence');
\echo :LAST_ERROR_SQLSTATE
DELETE FROM stream_seq.stream;
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.retired;
\echo :LAST_ERROR_SQLSTATE
-- nor calls the event trigger functions or names a head sequence by hand
SELECT stream_seq._on_sql_drop();
\echo :LAST_ERROR_SQLSTATE
SELECT setval('stream_seq.ev_seq_head', 1);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT count(*) FROM stream_seq.stream WHERE relid = 'owned_by_admin'::regclass;

-- a non-superuser owner can enable its own table
GRANT CREATE ON SCHEMA public TO stream_other;
SET ROLE stream_other;
CREATE TABLE owned_by_other (payload text);
SELECT stream_seq.enable('owned_by_other');
INSERT INTO owned_by_other VALUES ('mine');
SELECT seq, payload FROM owned_by_other;
SELECT stream_seq.disable('owned_by_other');
DROP TABLE owned_by_other;
RESET ROLE;

-- NULL arguments are an error, never a silent no-op
SELECT stream_seq.enable(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.enable('ev', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.disable(NULL);
\echo :LAST_ERROR_SQLSTATE

-- inside REPEATABLE READ or SERIALIZABLE the rows committed after the
-- snapshot would stay unnumbered: refused, and nothing changes
CREATE TABLE ev_rr (payload text);
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT stream_seq.enable('ev_rr');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
BEGIN ISOLATION LEVEL SERIALIZABLE;
SELECT stream_seq.enable('ev_rr');
\echo :LAST_ERROR_SQLSTATE
ROLLBACK;
SELECT count(*) FROM stream_seq.stream WHERE relid = 'ev_rr'::regclass;

-- inheritance: a parent with children, and children of a stream, are refused
CREATE TABLE ev_parent (payload text);
CREATE TABLE ev_child () INHERITS (ev_parent);
SELECT stream_seq.enable('ev_parent');
\echo :LAST_ERROR_SQLSTATE
DROP TABLE ev_child;
SELECT stream_seq.enable('ev_parent');
CREATE TABLE ev_child () INHERITS (ev_parent);
\echo :LAST_ERROR_SQLSTATE
CREATE TABLE ev_child (payload text, seq bigint);
ALTER TABLE ev_child INHERIT ev_parent;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM pg_inherits WHERE inhparent = 'ev_parent'::regclass;

-- a deferrable unique constraint cannot be checked for rows numbered at
-- commit: refused by enable() and when added later
CREATE TABLE ev_deferrable (payload text UNIQUE DEFERRABLE);
SELECT stream_seq.enable('ev_deferrable');
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE ev_parent ADD CONSTRAINT ev_parent_payload_key UNIQUE (payload) DEFERRABLE;
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE ev_parent ADD CONSTRAINT ev_parent_payload_key UNIQUE (payload);
INSERT INTO ev_parent VALUES ('still works');
SELECT payload, seq FROM ev_parent;

-- migrating a bigserial column: numbering starts above the old sequence,
-- not only above the rows (row 5 was deleted, 5 is never handed out again)
CREATE TABLE ev_migrated (seq bigserial PRIMARY KEY, payload text);
INSERT INTO ev_migrated (payload) SELECT 'old ' || g FROM generate_series(1, 5) g;
DELETE FROM ev_migrated WHERE seq = 5;
SELECT stream_seq.enable('ev_migrated', 'seq');
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE ev_migrated DROP CONSTRAINT ev_migrated_pkey,
  ALTER COLUMN seq DROP DEFAULT, ALTER COLUMN seq DROP NOT NULL;
SELECT stream_seq.enable('ev_migrated', 'seq');
INSERT INTO ev_migrated (payload) VALUES ('new');
SELECT seq, payload FROM ev_migrated ORDER BY seq;

-- disable keeps the column and data and removes the rest
INSERT INTO ev VALUES (1, 'one');
SELECT stream_seq.disable('ev');
SELECT id, payload, seq FROM ev;
SELECT tgname FROM pg_trigger WHERE tgrelid = 'ev'::regclass;
INSERT INTO ev VALUES (2, 'two', 99);
SELECT id, payload, seq FROM ev ORDER BY id;
SELECT stream_seq.disable('ev');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.horizon('ev');
\echo :LAST_ERROR_SQLSTATE
-- enable again: existing numbers kept, NULL ones numbered above every
-- number the stream ever handed out (its recorded head), not only above
-- the rows
INSERT INTO ev VALUES (3, 'three');
SELECT stream_seq.enable('ev');
SELECT id, payload, seq FROM ev ORDER BY id;
-- disable and enable in one transaction continue above too
BEGIN;
SELECT stream_seq.disable('ev');
SELECT stream_seq.enable('ev');
COMMIT;
INSERT INTO ev VALUES (4, 'four');
SELECT id, payload, seq > 1001 AS above_old_head FROM ev WHERE id = 4;

SELECT stream_seq.disable('legacy');
SELECT stream_seq.disable('ev_idx');
SELECT stream_seq.disable('ev');
SELECT stream_seq.disable('"Other"."Mixed Case"');
SELECT stream_seq.disable('ev_parent');
SELECT stream_seq.disable('ev_migrated');
DROP TABLE ev, ev_int, ev_notnull, ev_serial, ev_ident, legacy, ev_idx,
  owned_by_admin, ev_unlogged, ev_parted, ev_rr, ev_parent, ev_child,
  ev_deferrable, ev_migrated;
DROP VIEW ev_view;
DROP MATERIALIZED VIEW ev_mat;
DROP SEQUENCE ev_sequence;
DROP FOREIGN TABLE ev_foreign;
DROP SERVER ev_server;
DROP FOREIGN DATA WRAPPER ev_fdw;
DROP SCHEMA "Other" CASCADE;
REVOKE CREATE ON SCHEMA public FROM stream_other;
REVOKE USAGE ON SCHEMA stream_seq FROM stream_other;
DROP ROLE stream_other;
SELECT count(*) FROM stream_seq.stream;
-- an empty column name is refused (22023), not a syntax error of the
-- ALTER TABLE that would add the column
CREATE TABLE empty_name (id int);
SELECT stream_seq.enable('empty_name', '');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.enable('empty_name', 'seq', '');
\echo :LAST_ERROR_SQLSTATE
DROP TABLE empty_name;
