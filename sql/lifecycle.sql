-- DDL on stream tables: followed where harmless, refused where it would
-- break the stream; TRUNCATE and DROP TABLE keep the catalog in step
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
\set SHOW_CONTEXT never

CREATE TABLE lc (id serial PRIMARY KEY, payload text);
SELECT stream_seq.enable('lc');
INSERT INTO lc (payload) VALUES ('a'), ('b');

-- renaming the table or the column is followed
ALTER TABLE lc RENAME TO lc_renamed;
ALTER TABLE lc_renamed RENAME COLUMN seq TO position;
SELECT relid, seq_column FROM stream_seq.stream;
INSERT INTO lc_renamed (payload) VALUES ('c');
SELECT id, payload, position FROM lc_renamed ORDER BY position;
SELECT stream_seq.horizon('lc_renamed');
ALTER TABLE lc_renamed RENAME TO lc;
ALTER TABLE lc RENAME COLUMN position TO seq;

-- changes that would break the stream are refused, and change nothing
ALTER TABLE lc ALTER COLUMN seq TYPE numeric;
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE lc ALTER COLUMN seq SET NOT NULL;
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE lc ALTER COLUMN seq SET DEFAULT 1;
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE lc DISABLE TRIGGER stream_seq_guard_update;
\echo :LAST_ERROR_SQLSTATE
-- the capture index stays
DROP INDEX lc_stream_seq_capture;
\echo :LAST_ERROR_SQLSTATE
-- the placeholder default is the stream's: dropped, it comes back
ALTER TABLE lc ALTER COLUMN seq DROP DEFAULT;
SELECT pg_get_expr(adbin, adrelid) AS seq_default FROM pg_attrdef
 WHERE adrelid = 'lc'::regclass AND adnum = (SELECT attnum FROM pg_attribute
                                              WHERE attrelid = 'lc'::regclass AND attname = 'seq');
ALTER TABLE lc DISABLE TRIGGER ALL;
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE lc SET UNLOGGED;
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE lc DROP COLUMN seq;
\echo :LAST_ERROR_SQLSTATE
ALTER TABLE lc DROP COLUMN seq CASCADE;
\echo :LAST_ERROR_SQLSTATE
DROP INDEX lc_seq_idx;
\echo :LAST_ERROR_SQLSTATE
DROP TRIGGER stream_seq_guard ON lc;
\echo :LAST_ERROR_SQLSTATE
-- the head sequence records every number handed out: it lives in the
-- extension's schema, no column owns it, and nothing may set it back
SELECT head_seq FROM stream_seq.stream WHERE relid = 'lc'::regclass;
DROP SEQUENCE stream_seq.lc_seq_head;
\echo :LAST_ERROR_SQLSTATE
ALTER SEQUENCE stream_seq.lc_seq_head OWNED BY lc.id;
\echo :LAST_ERROR_SQLSTATE
ALTER SEQUENCE stream_seq.lc_seq_head RESTART;
\echo :LAST_ERROR_SQLSTATE
-- the stream's triggers keep their names
ALTER TRIGGER stream_seq_guard ON lc RENAME TO renamed_guard;
\echo :LAST_ERROR_SQLSTATE
ALTER TRIGGER stream_seq_guard_update ON lc RENAME TO renamed_guard_update;
\echo :LAST_ERROR_SQLSTATE
SELECT tgname FROM pg_trigger WHERE tgrelid = 'lc'::regclass ORDER BY tgname;
SELECT relpersistence, (SELECT count(*) FROM pg_trigger WHERE tgrelid = 'lc'::regclass AND tgenabled = 'O') AS triggers
  FROM pg_class WHERE oid = 'lc'::regclass;
INSERT INTO lc (payload) VALUES ('still numbered');
SELECT payload, seq FROM lc ORDER BY seq;
-- other DDL on the table is fine
ALTER TABLE lc ADD COLUMN extra int;
CREATE INDEX ON lc (payload);

-- TRUNCATE: numbers continue above the truncated ones, first() says where
-- the stream starts, and consumers behind it are told
SELECT stream_seq.create_consumer('lc', 'slow');
SELECT stream_seq.head('lc');
SELECT last_value AS head_before FROM stream_seq.lc_seq_head \gset
TRUNCATE lc RESTART IDENTITY;
SELECT last_value = :head_before AS head_sequence_kept FROM stream_seq.lc_seq_head;
SELECT stream_seq.first('lc');
INSERT INTO lc (payload) VALUES ('after truncate');
SELECT payload, seq FROM lc;
SELECT * FROM stream_seq.read('lc', 'slow');
\echo :LAST_ERROR_SQLSTATE
-- page() says where to page from instead
SELECT * FROM stream_seq.page('lc', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.advance('lc', 'slow', stream_seq.first('lc') - 1);
SELECT seq, "row"->>'payload' AS payload FROM stream_seq.read('lc', 'slow');

-- trim(): bounds and the consumer guard
INSERT INTO lc (payload) SELECT 'bulk ' || g FROM generate_series(1, 5) g;
SELECT stream_seq.trim('lc', stream_seq.horizon('lc') + 1);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.trim('lc', stream_seq.first('lc') + 3);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.advance('lc', 'slow', stream_seq.first('lc') + 2);
SELECT stream_seq.trim('lc', stream_seq.first('lc') + 3) AS trimmed;
SELECT stream_seq.first('lc') = (SELECT min(seq) FROM lc) AS first_is_oldest_row;
SELECT stream_seq.trim('lc', stream_seq.horizon('lc'), force => true) AS trimmed;
SELECT count(*) FROM lc;
SELECT * FROM stream_seq.read('lc', 'slow');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.trim('no_such', 1);
SELECT stream_seq.trim('pg_class', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.trim('lc', NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.trim('lc', 1, NULL);
\echo :LAST_ERROR_SQLSTATE
CREATE ROLE lc_reader;
GRANT USAGE ON SCHEMA stream_seq TO lc_reader;
GRANT SELECT ON lc TO lc_reader;
SET ROLE lc_reader;
SELECT stream_seq.trim('lc', 1);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
REVOKE ALL ON lc FROM lc_reader;
REVOKE ALL ON SCHEMA stream_seq FROM lc_reader;
DROP ROLE lc_reader;

-- the views
SELECT stream, seq_column, waiting, durable_lag, committing FROM stream_seq.streams;
SELECT count(*) FROM stream_seq.holders;

-- DROP TABLE removes the stream and its consumers from the catalog
SELECT count(*) FROM stream_seq.consumer;
DROP TABLE lc;
SELECT count(*) AS streams FROM stream_seq.stream;
SELECT count(*) AS consumers FROM stream_seq.consumer;

-- the extension cannot be dropped from under a stream without CASCADE
CREATE TABLE keep (payload text);
SELECT stream_seq.enable('keep');
DROP EXTENSION stream_seq;
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.disable('keep');
DROP TABLE keep;
