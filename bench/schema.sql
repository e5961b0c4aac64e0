-- schema.sql: the contenders' tables for bench.sh (PgQ: schema_pgq.sql).
-- Every table has a bigint "payload": 0 for load rows, the probe number
-- for the rows reader.py times.

CREATE EXTENSION stream_seq;
-- figure 7 counts the heap pages that hold rows with get_raw_page()
CREATE EXTENSION pageinspect;

-- (a) bigserial, plain INSERT, reader "id > cursor": the unsafe baseline
CREATE TABLE ev_serial (
    id bigserial PRIMARY KEY,
    payload bigint NOT NULL DEFAULT 0
);

-- (b) the pg_snapshot_xmin recipe: each row records its transaction id;
-- the reader reads only below pg_snapshot_xmin(pg_current_snapshot()) with
-- a two-part cursor (xid, id)
CREATE TABLE ev_xid8 (
    id bigserial PRIMARY KEY,
    xid xid8 NOT NULL DEFAULT pg_current_xact_id(),
    payload bigint NOT NULL DEFAULT 0
);
CREATE INDEX ON ev_xid8 (xid, id);

-- (c) writers serialized by pg_advisory_xact_lock(4242) before nextval
CREATE TABLE ev_lock (
    id bigserial PRIMARY KEY,
    payload bigint NOT NULL DEFAULT 0
);

-- (e) stream_seq
CREATE TABLE ev_stream (
    seq bigint,
    payload bigint NOT NULL DEFAULT 0
);
SELECT stream_seq.enable('ev_stream');

-- The same-index shape of issue 11: a primary key plus the sequence
-- column's unique index on both sides, as an application table that gains
-- a sequence number has.  (a) and (e) above have one index each.
-- (a) with the same indexes: "seq" from a second bigserial
CREATE TABLE ev_serial_pk (
    id bigserial PRIMARY KEY,
    seq bigserial UNIQUE,
    payload bigint NOT NULL DEFAULT 0
);
-- (e) with the same indexes: enable() adds the partial unique index on seq
CREATE TABLE ev_stream_pk (
    id bigserial PRIMARY KEY,
    seq bigint,
    payload bigint NOT NULL DEFAULT 0
);
SELECT stream_seq.enable('ev_stream_pk');

-- the unrelated table of the stall scenario
CREATE TABLE unrelated (payload bigint);

