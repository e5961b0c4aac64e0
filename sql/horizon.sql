-- horizon(): values, use in queries, privileges
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
\set SHOW_CONTEXT never

CREATE TABLE h (payload text);
SELECT stream_seq.enable('h');

-- an empty stream
SELECT stream_seq.head('h'), stream_seq.horizon('h');
INSERT INTO h SELECT 'row ' || g FROM generate_series(1, 1000) g;
SELECT stream_seq.head('h'), stream_seq.horizon('h');

-- the caller's own uncommitted rows do not hold the horizon back
BEGIN;
INSERT INTO h VALUES ('uncommitted');
SELECT stream_seq.horizon('h');
ROLLBACK;

-- the reader's query uses the unique index on the column
ANALYZE h;
EXPLAIN (COSTS OFF)
SELECT * FROM h WHERE seq > 500 AND seq < stream_seq.horizon('h')
 ORDER BY seq LIMIT 100;
SELECT min(seq), max(seq), count(*) FROM (
  SELECT seq FROM h WHERE seq > 500 AND seq < stream_seq.horizon('h')
   ORDER BY seq LIMIT 100) page;

-- the value is fixed for the statement, also when evaluated per row
SET enable_indexscan = off;
SET enable_bitmapscan = off;
SELECT count(DISTINCT stream_seq.horizon('h')) FROM h;
RESET enable_indexscan;
RESET enable_bitmapscan;

-- not usable in parallel workers
SELECT proparallel, provolatile FROM pg_proc
 WHERE oid = 'stream_seq.horizon(regclass)'::regprocedure;

-- not a stream, no such table, NULL
CREATE TABLE not_a_stream (x int);
SELECT stream_seq.horizon('not_a_stream');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.head('not_a_stream');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.horizon(NULL);
SELECT stream_seq.horizon(0);
\echo :LAST_ERROR_SQLSTATE

-- privileges: horizon needs SELECT on the table; writing needs only INSERT
CREATE ROLE stream_reader;
CREATE ROLE stream_writer;
GRANT USAGE ON SCHEMA stream_seq TO stream_reader, stream_writer;
GRANT INSERT ON h TO stream_writer;
SET ROLE stream_reader;
SELECT stream_seq.horizon('h');
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
GRANT SELECT ON h TO stream_reader;
SET ROLE stream_reader;
SELECT stream_seq.horizon('h') = stream_seq.head('h') + 1 AS idle;
RESET ROLE;
SET ROLE stream_writer;
INSERT INTO h VALUES ('by a writer without SELECT');
RESET ROLE;
SELECT payload, seq = stream_seq.head('h') AS newest FROM h
 WHERE payload LIKE 'by a writer%';

SELECT stream_seq.disable('h');
DROP TABLE h, not_a_stream;
REVOKE ALL ON SCHEMA stream_seq FROM stream_reader, stream_writer;
DROP ROLE stream_reader, stream_writer;
