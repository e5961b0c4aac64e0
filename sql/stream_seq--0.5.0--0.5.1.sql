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

-- due() and replay() check their arguments before any statement of theirs
-- runs, so that a bad one gets an error without the internal SQL as its
-- context.  due() is otherwise as in 0.5.0.
CREATE OR REPLACE FUNCTION stream_seq.due(stream regclass, consumer text,
                                          max_rows integer DEFAULT 100)
  RETURNS TABLE (seq bigint, "row" jsonb, reason text, attempts integer)
  LANGUAGE plpgsql VOLATILE
  SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    col name;
    seqs bigint[];
    reasons text[];
    tries integer[];
BEGIN
    IF stream IS NULL OR consumer IS NULL OR max_rows IS NULL THEN
        RAISE EXCEPTION 'stream table, consumer name and max_rows must not be null'
          USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF max_rows < 1 THEN
        RAISE EXCEPTION 'max_rows must be at least 1'
          USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- taken first, by a statement whose plan is kept: a worker calls this
    -- every loop, and usually nothing is due
    SELECT pg_catalog.array_agg(p.seq ORDER BY p.seq),
           pg_catalog.array_agg(p.reason ORDER BY p.seq),
           pg_catalog.array_agg(p.attempts ORDER BY p.seq)
      INTO seqs, reasons, tries
      FROM stream_seq._take_parked(stream, consumer, max_rows, true) p;
    IF seqs IS NULL THEN
        RETURN;
    END IF;
    SELECT s.seq_column INTO col FROM stream_seq.stream s WHERE s.relid = stream;
    RETURN QUERY EXECUTE format(
        'SELECT p.seq, (SELECT pg_catalog.to_jsonb(t) FROM %1$s %2$s t WHERE t.%3$I = p.seq), '
        '       p.reason, p.attempts '
        '  FROM ROWS FROM (pg_catalog.unnest($1), pg_catalog.unnest($2), pg_catalog.unnest($3)) '
        '       AS p(seq, reason, attempts) '
        ' ORDER BY p.seq',
        CASE WHEN (SELECT c.relkind FROM pg_catalog.pg_class c
                    WHERE c.oid = stream) = 'p' THEN '' ELSE 'ONLY' END,
        stream, col)
      USING seqs, reasons, tries;
END;
$$;

CREATE OR REPLACE FUNCTION stream_seq.replay(stream regclass, consumer text,
                                             max_rows integer DEFAULT 100)
  RETURNS TABLE (seq bigint, "row" jsonb, reason text, attempts integer)
  LANGUAGE plpgsql VOLATILE
  SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    col name;
BEGIN
    IF stream IS NULL OR consumer IS NULL OR max_rows IS NULL THEN
        RAISE EXCEPTION 'stream table, consumer name and max_rows must not be null'
          USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF max_rows < 1 THEN
        RAISE EXCEPTION 'max_rows must be at least 1'
          USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT s.seq_column INTO col FROM stream_seq.stream s WHERE s.relid = stream;
    IF col IS NULL THEN
        -- _take_parked() says what is wrong: not a stream table
        PERFORM stream_seq._take_parked(stream, consumer, max_rows);
    END IF;
    RETURN QUERY EXECUTE format(
        'SELECT p.seq, (SELECT pg_catalog.to_jsonb(t) FROM %1$s %2$s t WHERE t.%3$I = p.seq), '
        '       p.reason, p.attempts '
        '  FROM stream_seq._take_parked($1, $2, $3) p '
        ' ORDER BY p.seq',
        CASE WHEN (SELECT c.relkind FROM pg_catalog.pg_class c
                    WHERE c.oid = stream) = 'p' THEN '' ELSE 'ONLY' END,
        stream, col)
      USING stream, consumer, max_rows;
END;
$$;

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
