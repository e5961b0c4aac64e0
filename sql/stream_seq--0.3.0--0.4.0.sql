/* stream_seq--0.3.0--0.4.0.sql: partitioned streams */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION stream_seq UPDATE TO '0.4.0'" to load this file. \quit

-- Partitioned streams (see src/partition.c): sealed partitions and their
-- range of numbers.  A sealed partition takes no more rows, so pages whose
-- cursor is at or above its highest number leave it out.
CREATE TABLE stream_seq.partition_range (
    partition regclass PRIMARY KEY,
    stream regclass NOT NULL REFERENCES stream_seq.stream ON DELETE CASCADE,
    lowest bigint,
    highest bigint,
    sealed_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CHECK ((lowest IS NULL) = (highest IS NULL) AND lowest <= highest)
);
COMMENT ON TABLE stream_seq.partition_range IS
  'sealed partitions of partitioned stream tables and the numbers they hold (NULL: none)';
REVOKE ALL ON stream_seq.partition_range FROM PUBLIC;
GRANT SELECT ON stream_seq.partition_range TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('stream_seq.partition_range', '');

CREATE FUNCTION stream_seq.seal_partitions(stream regclass) RETURNS integer
  AS 'MODULE_PATHNAME', 'stream_seq_seal_partitions'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.seal_partitions(regclass) IS
  'seal the partitions older than the newest one holding rows: they take no more rows, and pages skip them';

CREATE FUNCTION stream_seq.drop_partitions(stream regclass,
                                           force boolean DEFAULT false,
                                           keep_tables boolean DEFAULT false,
                                           retain integer DEFAULT 0)
  RETURNS integer
  AS 'MODULE_PATHNAME', 'stream_seq_drop_partitions'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.drop_partitions(regclass, boolean, boolean, integer) IS
  'retention by partition: drop (or detach) the oldest partitions, but the newest "retain" of them, whose numbers are all below the horizon and the slowest consumer';

CREATE FUNCTION stream_seq._page_source(stream regclass, after bigint,
                                       max_rows integer DEFAULT NULL)
  RETURNS text
  AS 'MODULE_PATHNAME', 'stream_seq_page_source'
  LANGUAGE C STABLE;
COMMENT ON FUNCTION stream_seq._page_source(regclass, bigint, integer) IS
  'internal: what a page after a position is read from (a partitioned stream''s partitions that may hold its rows)';

/*
 * page(stream, after, max_rows): the rows after "after" and below the
 * horizon, in order, each as (seq, row jsonb): the reading query without a
 * consumer.  On a partitioned stream it reads only the partitions that may
 * hold numbers after "after".  Runs as the caller.
 */
CREATE FUNCTION stream_seq.page(stream regclass, after bigint,
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
                DETAIL = format('The stream now starts at %s.', first_kept);
    END IF;
    RETURN QUERY EXECUTE format(
        'SELECT t.%1$I, pg_catalog.to_jsonb(t) FROM %2$s t '
        ' WHERE t.%1$I > $1 AND t.%1$I < stream_seq.horizon($3) '
        ' ORDER BY t.%1$I LIMIT $2', col, stream_seq._page_source(stream, after, max_rows))
      USING after, max_rows, stream;
END;
$$;
COMMENT ON FUNCTION stream_seq.page(regclass, bigint, integer) IS
  'the page after a position, below the horizon; skips sealed partitions';

-- read() and read_slot() read a partitioned stream's partitions that may
-- hold later numbers.
CREATE OR REPLACE FUNCTION stream_seq.read(stream regclass, consumer text,
                                max_rows integer DEFAULT 100)
  RETURNS TABLE (seq bigint, "row" jsonb)
  LANGUAGE plpgsql STABLE
  SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    after bigint := stream_seq.position(stream, consumer);
    col name;
    first_kept bigint;
BEGIN
    IF max_rows IS NULL OR max_rows < 1 THEN
        RAISE EXCEPTION 'max_rows must be at least 1'
          USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT s.seq_column, s.trimmed_before INTO col, first_kept
      FROM stream_seq.stream s WHERE s.relid = stream;
    IF after < first_kept - 1 THEN
        RAISE EXCEPTION 'rows after position % of consumer "%" were trimmed from stream table "%"',
              after, consumer, stream
          USING ERRCODE = 'object_not_in_prerequisite_state',
                DETAIL = format('The stream now starts at %s.', first_kept),
                HINT = format('To skip the trimmed rows, run SELECT stream_seq.advance(%L, %L, %s).',
                              stream::text, consumer, first_kept - 1);
    END IF;
    RETURN QUERY EXECUTE format(
        'SELECT t.%1$I, pg_catalog.to_jsonb(t) FROM %2$s t '
        ' WHERE t.%1$I > $1 AND t.%1$I < stream_seq.horizon($3) '
        ' ORDER BY t.%1$I LIMIT $2', col, stream_seq._page_source(stream, after, max_rows))
      USING after, max_rows, stream;
END;
$$;

CREATE OR REPLACE FUNCTION stream_seq.read_slot(stream regclass, consumer text, slot integer,
                                     token bigint, max_rows integer DEFAULT 100)
  RETURNS TABLE (seq bigint, "row" jsonb)
  LANGUAGE plpgsql STABLE
  SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    st record;
    first_kept bigint := stream_seq.first(stream);
BEGIN
    IF max_rows IS NULL OR max_rows < 1 THEN
        RAISE EXCEPTION 'max_rows must be at least 1'
          USING ERRCODE = 'invalid_parameter_value';
    END IF;
    st := stream_seq._slot_state(stream, consumer, slot, token);
    IF st.position < first_kept - 1 THEN
        RAISE EXCEPTION 'rows after position % of slot % of group "%" were trimmed from stream table "%"',
              st.position, slot, consumer, stream
          USING ERRCODE = 'object_not_in_prerequisite_state',
                DETAIL = format('The stream now starts at %s.', first_kept),
                HINT = 'The owner of the group can move the slot with stream_seq.reset().';
    END IF;
    RETURN QUERY EXECUTE format(
        'SELECT t.%1$I, pg_catalog.to_jsonb(t) FROM %2$s t '
        ' WHERE %3$s = $1 AND t.%1$I > $2 AND t.%1$I < stream_seq.horizon($3) '
        ' ORDER BY t.%1$I LIMIT $4', st.seq_column,
        stream_seq._page_source(stream, st.position), st.slot_expr)
      USING slot, st.position, stream, max_rows;
END;
$$;
