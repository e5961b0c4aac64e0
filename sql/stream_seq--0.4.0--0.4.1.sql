-- stream_seq 0.4.0 -> 0.4.1: corrections found by using 0.4.0 from the
-- outside.
\echo Use "ALTER EXTENSION stream_seq UPDATE TO '0.4.1'" to load this file. \quit

-- replay() read the parked row from ONLY the stream table: for a
-- partitioned stream that is the empty parent, so the row came back NULL
-- while it was marked resolved.  Read a partitioned stream as a whole.
CREATE OR REPLACE FUNCTION stream_seq.replay(stream regclass, consumer text,
                                             max_rows integer DEFAULT 100)
  RETURNS TABLE (seq bigint, "row" jsonb, reason text, attempts integer)
  LANGUAGE plpgsql VOLATILE
  SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    col name;
BEGIN
    SELECT s.seq_column INTO col FROM stream_seq.stream s WHERE s.relid = stream;
    RETURN QUERY EXECUTE format(
        'SELECT p.seq, pg_catalog.to_jsonb(t), p.reason, p.attempts '
        '  FROM stream_seq._take_parked($1, $2, $3) p '
        '  LEFT JOIN %1$s %2$s t ON t.%3$I = p.seq ORDER BY p.seq',
        CASE WHEN (SELECT c.relkind FROM pg_catalog.pg_class c
                    WHERE c.oid = stream) = 'p' THEN '' ELSE 'ONLY' END,
        stream, col)
      USING stream, consumer, max_rows;
END;
$$;

-- page() after retention named no way forward; read() does.
CREATE OR REPLACE FUNCTION stream_seq.page(stream regclass, after bigint,
                                           max_rows integer DEFAULT 100)
  RETURNS TABLE (seq bigint, "row" jsonb)
  LANGUAGE plpgsql STABLE
  SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    col name;
    first_kept bigint;
BEGIN
    IF stream IS NULL OR after IS NULL THEN
        RAISE EXCEPTION 'stream table and position must not be null'
          USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF max_rows IS NULL OR max_rows < 1 THEN
        RAISE EXCEPTION 'max_rows must be at least 1'
          USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT s.seq_column, s.trimmed_before INTO col, first_kept
      FROM stream_seq.stream s WHERE s.relid = stream;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table "%" is not a stream table', stream
          USING ERRCODE = 'wrong_object_type',
                HINT = 'Use stream_seq.enable() to make it one.';
    END IF;
    IF after < first_kept - 1 AND first_kept > 1 THEN
        RAISE EXCEPTION 'rows after position % were trimmed from stream table "%"',
              after, stream
          USING ERRCODE = 'object_not_in_prerequisite_state',
                DETAIL = format('The stream now starts at %s.', first_kept),
                HINT = format('To read what is kept, page from position %s.',
                              first_kept - 1);
    END IF;
    RETURN QUERY EXECUTE format(
        'SELECT t.%1$I, pg_catalog.to_jsonb(t) FROM %2$s t '
        ' WHERE t.%1$I > $1 AND t.%1$I < stream_seq.horizon($3) '
        ' ORDER BY t.%1$I LIMIT $2', col, stream_seq._page_source(stream, after, max_rows))
      USING after, max_rows, stream;
END;
$$;

-- slot_of() with no slots divided by zero (22012), and with a negative
-- count returned a slot that does not exist.  The result for every valid
-- count is unchanged, so the index of every group stays valid.
CREATE FUNCTION stream_seq._invalid_slot_count(slots integer) RETURNS integer
  LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
  SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RAISE EXCEPTION 'slot count must be at least 1, not %', slots
      USING ERRCODE = 'invalid_parameter_value';
END;
$$;
COMMENT ON FUNCTION stream_seq._invalid_slot_count(integer) IS
  'internal: the error of slot_of() for a slot count below 1';

CREATE OR REPLACE FUNCTION stream_seq.slot_of(key text, slots integer) RETURNS integer
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN CASE WHEN slots < 1 THEN stream_seq._invalid_slot_count(slots)
              ELSE ((pg_catalog.hashtextextended(coalesce(key, ''), 0) % slots) + slots) % slots
         END;

-- A partition sealed too early (0.4.0 sealed the partition of the present
-- when a row dated in the future arrived) can take rows again.
CREATE FUNCTION stream_seq.unseal_partition(partition regclass) RETURNS boolean
  AS 'MODULE_PATHNAME', 'stream_seq_unseal_partition'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.unseal_partition(regclass) IS
  'let a sealed partition of a stream take rows again; returns whether it was sealed';

-- DETACH PARTITION ... CONCURRENTLY hides the partition from new
-- snapshots when its first transaction commits; first() must have moved
-- past its numbers by then, not only when the command finishes.
CREATE FUNCTION stream_seq._on_ddl_start() RETURNS event_trigger
  AS 'MODULE_PATHNAME', 'stream_seq_on_ddl_start'
  LANGUAGE C;
COMMENT ON FUNCTION stream_seq._on_ddl_start() IS
  'internal: ddl_command_start event trigger; moves first() past a partition before DETACH ... CONCURRENTLY hides it';
REVOKE EXECUTE ON FUNCTION stream_seq._on_ddl_start() FROM PUBLIC;
CREATE EVENT TRIGGER stream_seq_ddl_start ON ddl_command_start
  WHEN TAG IN ('ALTER TABLE')
  EXECUTE FUNCTION stream_seq._on_ddl_start();
COMMENT ON EVENT TRIGGER stream_seq_ddl_start IS
  'stream_seq: moves first() past a partition before DETACH ... CONCURRENTLY hides it';

-- A group's index was kept as a regclass in stream_seq.consumer, an
-- extension configuration table: pg_restore loads its rows before it
-- creates indexes, the name did not resolve, and the whole COPY failed,
-- losing every consumer.  Keep the index's schema-qualified name instead
-- (regclass printed with only pg_catalog on the search path).
SET LOCAL search_path TO pg_catalog;
ALTER TABLE stream_seq.consumer ALTER COLUMN slot_index TYPE text
  USING slot_index::text;

-- pg_restore -j loads the rows of these tables in any order: a foreign key
-- from one to another made the rows that came first fail (consumers and
-- sealed ranges lost).  The extension keeps them consistent itself (see
-- src/catalog.c, stream_catalog_delete and stream_catalog_hold).
DO $$
DECLARE
    fk record;
BEGIN
    FOR fk IN SELECT c.conrelid::pg_catalog.regclass AS tbl, c.conname
                FROM pg_catalog.pg_constraint c
               WHERE c.contype = 'f'
                 AND c.connamespace = 'stream_seq'::pg_catalog.regnamespace
               ORDER BY 1, 2
    LOOP
        EXECUTE pg_catalog.format('ALTER TABLE %s DROP CONSTRAINT %I', fk.tbl, fk.conname);
    END LOOP;
END $$;
