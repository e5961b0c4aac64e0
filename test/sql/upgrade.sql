-- The upgrade path: streams made under 0.1.0 keep working after
-- ALTER EXTENSION stream_seq UPDATE, and gain what 0.2.0 adds.
SET client_min_messages = warning;
DROP EXTENSION IF EXISTS stream_seq CASCADE;
CREATE EXTENSION stream_seq VERSION '0.1.0';
\set SHOW_CONTEXT never

CREATE TABLE up (payload text);
SELECT stream_seq.enable('up');
INSERT INTO up VALUES ('under 0.1.0'), ('also 0.1.0');
SELECT stream_seq.create_consumer('up', 'c');
SELECT stream_seq.advance('up', 'c', 1);

ALTER EXTENSION stream_seq UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'stream_seq';

-- the stream, its numbers and its consumer survive
INSERT INTO up VALUES ('under 0.2.0');
SELECT seq, payload FROM up ORDER BY seq;
SELECT stream_seq.horizon('up'), stream_seq.position('up', 'c');
SELECT seq, "row"->>'payload' AS payload FROM stream_seq.read('up', 'c');
-- the TRUNCATE trigger was added to it
SELECT tgname FROM pg_trigger WHERE tgrelid = 'up'::regclass ORDER BY tgname;
-- and the DDL guards apply to it
ALTER TABLE up ALTER COLUMN seq SET NOT NULL;
\echo :LAST_ERROR_SQLSTATE
-- a stream made under 0.2.0 gets all three triggers from enable()
CREATE TABLE up2 (payload text);
SELECT stream_seq.enable('up2');
SELECT tgname FROM pg_trigger WHERE tgrelid = 'up2'::regclass ORDER BY tgname;
SELECT stream_seq.disable('up2');
SELECT tgname FROM pg_trigger WHERE tgrelid = 'up2'::regclass;

SELECT stream_seq.disable('up');
DROP TABLE up, up2;
