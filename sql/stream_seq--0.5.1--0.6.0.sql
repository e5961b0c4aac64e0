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

-- ---------------------------------------------------------------------
-- Section D: operators' tooling: PostgreSQL's own views (wait events,
-- statistics), holders and retention_runs
-- ---------------------------------------------------------------------

-- holders: a transaction that numbered its rows early (constraints set
-- IMMEDIATE) and is not committing yet says so (state 'numbered early').
COMMENT ON VIEW stream_seq.holders IS
  'transactions holding the horizons of streams the caller may read back, longest first: committing, numbered early and not committing yet, or committed and not yet flushed';

-- retention_run: a run that removes nothing and says what the stream's
-- newest run says moves that run's ran_at instead of adding a row.
COMMENT ON TABLE stream_seq.retention_run IS
  'the last 100 runs of each stream''s retention policy: what they removed, the consumer that held them back, or their error; a run that removes nothing and repeats the newest moves its ran_at';

-- Cumulative statistics (PostgreSQL 18 and later; NULLs before): numbers
-- committed, transactions that committed numbers, evictions, retention
-- runs, kept across a clean restart.  Counts only, no row contents:
-- pg_monitor may read them.
CREATE FUNCTION stream_seq.stats(
    OUT numbers_assigned bigint,
    OUT xacts_committed bigint,
    OUT evictions bigint,
    OUT retention_runs bigint,
    OUT retention_failures bigint,
    OUT retention_removed_rows bigint,
    OUT stats_reset timestamptz)
  RETURNS record
  AS 'MODULE_PATHNAME', 'stream_seq_stats'
  LANGUAGE C VOLATILE PARALLEL RESTRICTED;
COMMENT ON FUNCTION stream_seq.stats() IS
  'cumulative counters of the server (PostgreSQL 18 and later, kept across a clean restart; NULLs before): numbers assigned in committed transactions, those transactions, entries evicted, retention runs, failed ones, rows they removed';
REVOKE ALL ON FUNCTION stream_seq.stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION stream_seq.stats() TO pg_monitor;
