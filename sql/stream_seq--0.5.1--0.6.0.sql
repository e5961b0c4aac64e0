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

-- resize_index() returns the statements of the index a resize would build,
-- one a row, for the table's owner to run first (psql: \gexec), and a
-- partitioned stream gets them too: CREATE INDEX ON ONLY the table, then
-- per partition CREATE INDEX CONCURRENTLY and ALTER INDEX ... ATTACH
-- PARTITION (the catalog steps in a DO block with a lock_timeout of their
-- own); resize_group() adopts the valid partitioned index (src/resize.c).
-- The result type changes from text to setof text (one NULL row when
-- nothing is to be built, as the NULL before), so the function is made
-- anew: dropping and creating a function takes no lock a writer or a
-- reader of a stream waits for, and nothing depends on it.
DROP FUNCTION stream_seq.resize_index(regclass, text, integer);
CREATE FUNCTION stream_seq.resize_index(stream regclass, consumer text, slots integer)
  RETURNS SETOF text
  AS 'MODULE_PATHNAME', 'stream_seq_resize_index'
  LANGUAGE C VOLATILE ROWS 3;
COMMENT ON FUNCTION stream_seq.resize_index(regclass, text, integer) IS
  'the statements (CREATE INDEX CONCURRENTLY; on a partitioned stream also CREATE INDEX ON ONLY and ATTACH PARTITION) of the index resize_group() to this count would build, one a row; run them first and resize_group() adopts the index; one NULL row if none is needed';

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
