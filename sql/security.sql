-- Internal queries run with search_path pinned: a role that shadows
-- operators in its own schema cannot get them run by stream_seq (some of
-- its internal queries run as the extension's owner)
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
SET client_min_messages = notice;
\set SHOW_CONTEXT never

CREATE TABLE sec (payload text);
SELECT stream_seq.enable('sec');
INSERT INTO sec VALUES ('a');
SELECT stream_seq.create_consumer('sec', 'c');

CREATE ROLE sec_user;
CREATE SCHEMA sec_user_schema AUTHORIZATION sec_user;
GRANT USAGE ON SCHEMA stream_seq TO sec_user;
GRANT SELECT, INSERT ON sec TO sec_user;
SET ROLE sec_user;
CREATE FUNCTION sec_user_schema.spy(regclass, regclass) RETURNS boolean
  LANGUAGE plpgsql AS $$
BEGIN
  RAISE NOTICE 'shadowing operator ran as %', current_user;
  RETURN $1::oid = $2::oid;
END $$;
CREATE OPERATOR sec_user_schema.= (FUNCTION = sec_user_schema.spy,
                                   LEFTARG = regclass, RIGHTARG = regclass);
CREATE FUNCTION sec_user_schema.spy8(bigint, bigint) RETURNS bigint
  LANGUAGE plpgsql AS $$
BEGIN
  RAISE NOTICE 'shadowing + ran as %', current_user;
  RETURN $1 OPERATOR(pg_catalog.+) $2;
END $$;
CREATE OPERATOR sec_user_schema.+ (FUNCTION = sec_user_schema.spy8,
                                   LEFTARG = bigint, RIGHTARG = bigint);
SET search_path = sec_user_schema, public, pg_catalog;
-- the operator is live for the role's own queries
SELECT 'sec'::regclass = 'sec'::regclass AS own_query;
-- but not for stream_seq's: no notice below
SELECT stream_seq.position('sec', 'c');
SELECT stream_seq.create_consumer('sec', 'mine');
SELECT stream_seq.advance('sec', 'mine', 1);
INSERT INTO sec VALUES ('b');
SELECT seq, "row"->>'payload' AS payload FROM stream_seq.read('sec', 'mine');
RESET search_path;
RESET ROLE;


-- What a role may not read, it does not see: a second stream, readable
-- only by its owner, with a consumer
CREATE TABLE sec_private (payload text);
SELECT stream_seq.enable('sec_private');
INSERT INTO sec_private VALUES ('secret');
SELECT stream_seq.create_consumer('sec_private', 'private_consumer');
GRANT DELETE ON sec_private TO sec_user;
SET ROLE sec_user;
SELECT stream FROM stream_seq.streams ORDER BY stream::text;
SELECT stream, consumer FROM stream_seq.consumers ORDER BY stream::text, consumer;
SELECT count(*) AS holders FROM stream_seq.holders;
SELECT * FROM stream_seq._status('sec_private');
-- a cheap function that prints what it sees runs after the view's own
-- filter (security_barrier): it never sees the private consumer
CREATE FUNCTION sec_user_schema.leak(text) RETURNS boolean
  LANGUAGE plpgsql COST 0.0000001 AS $$
BEGIN
  RAISE NOTICE 'leak saw %', $1;
  RETURN true;
END $$;
SELECT stream, consumer FROM stream_seq.consumers WHERE sec_user_schema.leak(consumer);
-- DELETE on the table is not enough to move where the stream starts: the
-- internal function that recorded it is gone, and trim() checks every rule
SELECT stream_seq._record_trim('sec_private', 1000);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.trim('sec_private', 2);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.trim('sec_private', 1000, force => true);
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT stream_seq.first('sec_private'), stream_seq.position('sec_private', 'private_consumer');
-- the head sequence belongs to the extension: the table's owner cannot set
-- it back, nor alter it
ALTER TABLE sec_private OWNER TO sec_user;
SET ROLE sec_user;
SELECT setval('stream_seq.sec_private_seq_head', 1);
\echo :LAST_ERROR_SQLSTATE
ALTER SEQUENCE stream_seq.sec_private_seq_head RESTART;
\echo :LAST_ERROR_SQLSTATE
RESET ROLE;
SELECT stream_seq.disable('sec_private');
DROP TABLE sec_private;

-- The internal functions PUBLIC may execute check what they are given,
-- for any role: an OID that names no relation (0, a dropped table's, a
-- huge one) is 42P01, a relation that is not a stream (an index, a
-- sequence, a view, a table) 42809, before any name of it is used (these
-- crashed the server); a stream the caller may not read 42501.
CREATE TABLE sec_dropped (id int, seq bigint);
SELECT 'sec_dropped'::regclass::oid AS dropped_oid \gset
DROP TABLE sec_dropped;
CREATE TABLE sec_hidden (id int, seq bigint);
SELECT stream_seq.enable('sec_hidden');
CREATE INDEX sec_hidden_id ON sec_hidden (id);
CREATE SEQUENCE sec_a_seq;
CREATE VIEW sec_a_view AS SELECT 1 AS x;
CREATE TABLE sec_partitioned (id int, seq bigint) PARTITION BY RANGE (id);
CREATE TABLE sec_partitioned_1 PARTITION OF sec_partitioned FOR VALUES FROM (0) TO (10);
SELECT stream_seq.enable('sec_partitioned');
SELECT stream_seq.set_retention('sec_hidden', keep_rows => 10);
SET ROLE sec_user;
SELECT stream_seq._page_source(0, 0);
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY sqlstate
SELECT stream_seq._page_source(:dropped_oid, 0);
\set VERBOSITY default
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq._page_source(4294967295::oid, 0, 10);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq._page_source('sec_hidden_id', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq._page_source('sec_a_seq', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq._page_source('sec_a_view', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq._page_source('sec_partitioned_1', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq._page_source('sec_hidden', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq._page_source('sec', 0);
\set VERBOSITY sqlstate
SELECT stream_seq._stream_info(:dropped_oid);
\set VERBOSITY default
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq._stream_info('sec_hidden');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq._stream_info('sec');
-- the readers in PL/pgSQL give the C functions' SQLSTATEs: 42P01 for an
-- OID that names no relation (they said 42809 with the OID as its name)
SELECT * FROM stream_seq.page(123456789::oid, 0);
\echo :LAST_ERROR_SQLSTATE
\set VERBOSITY sqlstate
SELECT stream_seq.position_at(:dropped_oid, now());
\set VERBOSITY default
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.create_consumer(123456789::oid, 'c', now());
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.reset(123456789::oid, 'c', now());
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.unseal_partition(123456789::oid);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.page('sec_hidden', 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.page_rows(NULL::sec_hidden, 0);
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM stream_seq.page_rows(NULL::sec_a_view, 0);
\echo :LAST_ERROR_SQLSTATE
-- A role learns of a stream it may not read nothing from the extension:
-- the catalog tables are not readable by PUBLIC; the views show the
-- streams, sealed partitions and retention policies of the streams the
-- role may read (sec_user reads "sec" only)
SELECT count(*) FROM stream_seq.stream;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM stream_seq.partition_range;
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM stream_seq.retention_policy;
\echo :LAST_ERROR_SQLSTATE
SELECT stream FROM stream_seq.streams ORDER BY 1;
SELECT count(*) FROM stream_seq.partitions;
SELECT count(*) FROM stream_seq.retention_policies;
RESET ROLE;
SELECT stream, keep_rows FROM stream_seq.retention_policies;
GRANT SELECT ON sec_hidden TO sec_user;
SET ROLE sec_user;
SELECT stream, keep_rows FROM stream_seq.retention_policies;
SELECT seq_column, time_column, first FROM stream_seq._stream_info('sec_hidden');
SELECT * FROM stream_seq.page('sec_hidden', 0);
RESET ROLE;
SELECT stream_seq.disable('sec_hidden');
SELECT stream_seq.disable('sec_partitioned');
DROP TABLE sec_hidden, sec_partitioned;
DROP SEQUENCE sec_a_seq;
DROP VIEW sec_a_view;

SELECT stream_seq.disable('sec');
DROP TABLE sec;
DROP SCHEMA sec_user_schema CASCADE;
REVOKE ALL ON SCHEMA stream_seq FROM sec_user;
DROP ROLE sec_user;
