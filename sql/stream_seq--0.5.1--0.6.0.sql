-- stream_seq 0.5.1 -> 0.6.0: application stacks (ORMs, drivers,
-- poolers), operators' tooling (metrics for Prometheus and pg_monitor),
-- and the resize of a partitioned stream without writers waiting.
\echo Use "ALTER EXTENSION stream_seq UPDATE TO '0.6.0'" to load this file. \quit

-- A fresh install runs this script too (0.4.0's script, then the update
-- chain).  It runs while applications write and read streams: its
-- statements replace functions and create new objects only, which takes
-- no lock a writer or a reader waits for.

-- ---------------------------------------------------------------------
-- Section A: a partitioned stream's resize without writers waiting
-- ---------------------------------------------------------------------

-- ---------------------------------------------------------------------
-- Section B: application stacks (ORMs, drivers, poolers)
-- ---------------------------------------------------------------------

-- ---------------------------------------------------------------------
-- Section C: operators' tooling: metrics for Prometheus and pg_monitor
-- ---------------------------------------------------------------------

-- metrics() (see src/metrics.c): numbers, counts, seconds and 0/1 flags
-- of every stream, consumer and slot, for a scraper.  It needs no
-- privilege on the stream tables and shows nothing of their rows but how
-- many wait, so it is executable by pg_monitor only (and by whom the
-- database's administrator grants it to): the views stay the way for an
-- application's roles, which see the streams they may read.  pg_monitor
-- gets USAGE on the schema to call it; the other functions check their
-- caller's privileges on each stream, and the views show such a role
-- only the streams it may read.
CREATE FUNCTION stream_seq.metrics(only_kind text DEFAULT NULL,
                                   backlog_cap integer DEFAULT 1000)
  RETURNS TABLE (kind text, stream regclass, stream_name text,
                 consumer text, slot integer,
                 head bigint, horizon bigint, first bigint,
                 waiting bigint, durable_lag bigint,
                 committing integer, oldest_commit_seconds double precision,
                 tracked integer, evicted bigint, assigned_xacts bigint,
                 slots integer, "position" bigint, lag bigint,
                 since_advance_seconds double precision,
                 backlog_rows bigint, backlog_capped integer,
                 parked bigint, dead_letters bigint, retries_due bigint,
                 oldest_parked_seconds double precision,
                 oldest_due_seconds double precision,
                 resize_pending integer, leased integer)
  AS 'MODULE_PATHNAME', 'stream_seq_metrics'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.metrics(text, integer) IS
  'gauges and counters of every stream, consumer and slot, for monitoring (pg_monitor): numbers, counts, seconds, backlogs in rows counted up to backlog_cap';
REVOKE ALL ON FUNCTION stream_seq.metrics(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION stream_seq.metrics(text, integer) TO pg_monitor;
GRANT USAGE ON SCHEMA stream_seq TO pg_monitor;

-- ---------------------------------------------------------------------
-- Section D: operators' tooling: PostgreSQL's own views (wait events,
-- statistics), holders and retention_runs
-- ---------------------------------------------------------------------
