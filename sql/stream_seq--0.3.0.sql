/* stream_seq--0.3.0.sql: gap-safe stream tables */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION stream_seq" to load this file. \quit

-- Catalog: one row per stream table.  Written only by the extension's
-- functions, as the extension's owner.
CREATE TABLE stream_seq.stream (
    relid regclass PRIMARY KEY,
    seq_column name NOT NULL,
    head_seq regclass NOT NULL,
    trimmed_before bigint NOT NULL DEFAULT 1,
    enabled_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE stream_seq.stream IS
  'stream tables: the numbered column, the sequence recording the head, and where trimming or TRUNCATE left the start';
REVOKE ALL ON stream_seq.stream FROM PUBLIC;
GRANT SELECT ON stream_seq.stream TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('stream_seq.stream', '');

-- Where the numbering of disabled streams ended, so that enabling the
-- same table again never hands a number out twice.
CREATE TABLE stream_seq.retired (
    relid regclass PRIMARY KEY,
    next bigint NOT NULL,
    disabled_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE stream_seq.retired IS
  'tables whose stream was disabled, and the number a new stream on them starts at or above';
REVOKE ALL ON stream_seq.retired FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('stream_seq.retired', '');

-- Consumers: named positions in a stream, advanced in the caller's
-- transaction.  Written only through the functions below.
CREATE TABLE stream_seq.consumer (
    stream regclass NOT NULL REFERENCES stream_seq.stream ON DELETE CASCADE,
    consumer text NOT NULL CHECK (consumer <> ''),
    position bigint NOT NULL,
    owner regrole NOT NULL,
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    advanced_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    PRIMARY KEY (stream, consumer)
);
COMMENT ON TABLE stream_seq.consumer IS
  'consumers of stream tables and the last number each has finished';
REVOKE ALL ON stream_seq.consumer FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('stream_seq.consumer', '');

-- Making a table a stream and back.
CREATE FUNCTION stream_seq.enable(stream regclass, seq_column name DEFAULT 'seq')
  RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_enable'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.enable(regclass, name) IS
  'make a table a stream table: its column is numbered at commit';

CREATE FUNCTION stream_seq.disable(stream regclass) RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_disable'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.disable(regclass) IS
  'stop numbering a stream table; its column and data stay, and numbering continues above them if enabled again';

-- The triggers enable() puts on a stream table.
CREATE FUNCTION stream_seq.guard_trigger() RETURNS trigger
  AS 'MODULE_PATHNAME', 'stream_seq_guard_trigger'
  LANGUAGE C;
COMMENT ON FUNCTION stream_seq.guard_trigger() IS
  'internal: BEFORE INSERT OR UPDATE trigger of stream tables; refuses numbers written by hand';

CREATE FUNCTION stream_seq.assign_trigger() RETURNS trigger
  AS 'MODULE_PATHNAME', 'stream_seq_assign_trigger'
  LANGUAGE C;
COMMENT ON FUNCTION stream_seq.assign_trigger() IS
  'internal: deferred AFTER INSERT trigger of stream tables; writes the number at commit';

CREATE FUNCTION stream_seq.truncate_trigger() RETURNS trigger
  AS 'MODULE_PATHNAME', 'stream_seq_truncate_trigger'
  LANGUAGE C;
COMMENT ON FUNCTION stream_seq.truncate_trigger() IS
  'internal: BEFORE TRUNCATE trigger of stream tables; records that the truncated numbers are gone';

-- Reading.
CREATE FUNCTION stream_seq.horizon(stream regclass) RETURNS bigint
  AS 'MODULE_PATHNAME', 'stream_seq_horizon'
  LANGUAGE C STRICT STABLE PARALLEL RESTRICTED;
COMMENT ON FUNCTION stream_seq.horizon(regclass) IS
  'lowest number a reader must not pass yet: rows below it that ever commit are visible now';

CREATE FUNCTION stream_seq.head(stream regclass) RETURNS bigint
  AS 'MODULE_PATHNAME', 'stream_seq_head'
  LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION stream_seq.head(regclass) IS
  'highest number handed out so far';

CREATE FUNCTION stream_seq.first(stream regclass) RETURNS bigint
  AS 'MODULE_PATHNAME', 'stream_seq_first'
  LANGUAGE C STRICT STABLE;
COMMENT ON FUNCTION stream_seq.first(regclass) IS
  'where the retained stream starts: rows below it were trimmed';

CREATE FUNCTION stream_seq.wait(stream regclass, after bigint,
                                timeout interval DEFAULT '30 seconds')
  RETURNS bigint
  AS 'MODULE_PATHNAME', 'stream_seq_wait'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.wait(regclass, bigint, interval) IS
  'block until rows after "after" are readable or the timeout ends; returns the horizon';

-- Retention.
CREATE FUNCTION stream_seq.trim(stream regclass, before bigint,
                                force boolean DEFAULT false)
  RETURNS bigint
  AS 'MODULE_PATHNAME', 'stream_seq_trim'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.trim(regclass, bigint, boolean) IS
  'delete the rows numbered below "before"; returns how many';

-- Consumers.
CREATE FUNCTION stream_seq.create_consumer(stream regclass, consumer text,
                                           start_after bigint DEFAULT 0)
  RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_create_consumer'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.create_consumer(regclass, text, bigint) IS
  'create a consumer positioned after start_after (0: the beginning)';

CREATE FUNCTION stream_seq.drop_consumer(stream regclass, consumer text)
  RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_drop_consumer'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.drop_consumer(regclass, text) IS
  'drop a consumer';

CREATE FUNCTION stream_seq.position(stream regclass, consumer text)
  RETURNS bigint
  AS 'MODULE_PATHNAME', 'stream_seq_position'
  LANGUAGE C STRICT STABLE;
COMMENT ON FUNCTION stream_seq.position(regclass, text) IS
  'last number the consumer has finished';

CREATE FUNCTION stream_seq.advance(stream regclass, consumer text,
                                   to_position bigint)
  RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_advance'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.advance(regclass, text, bigint) IS
  'move the consumer forward in the caller''s transaction';

/*
 * read(stream, consumer, max_rows): the next page after the consumer's
 * position, below the horizon, in one snapshot, in order; each row as
 * (seq, row jsonb).  Runs as the caller, who needs SELECT on the table.
 */
CREATE FUNCTION stream_seq.read(stream regclass, consumer text,
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
        'SELECT t.%1$I, pg_catalog.to_jsonb(t) FROM ONLY %2$s t '
        ' WHERE t.%1$I > $1 AND t.%1$I < stream_seq.horizon($3) '
        ' ORDER BY t.%1$I LIMIT $2', col, stream)
      USING after, max_rows, stream;
END;
$$;
COMMENT ON FUNCTION stream_seq.read(regclass, text, integer) IS
  'next page for a consumer: rows after its position and below the horizon';

-- Observability.
CREATE FUNCTION stream_seq._status(stream regclass,
    OUT head bigint, OUT horizon bigint, OUT committing integer,
    OUT oldest_pid integer, OUT oldest_xid xid, OUT oldest_since timestamptz,
    OUT tracked integer, OUT evicted bigint, OUT assigned_xacts bigint,
    OUT visible_horizon bigint)
  AS 'MODULE_PATHNAME', 'stream_seq_status'
  LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION stream_seq._status(regclass) IS
  'internal: the state of one stream, for the streams view; NULL for a table the caller may not read';

CREATE FUNCTION stream_seq._holders(
    OUT stream regclass, OUT pid integer, OUT xid xid,
    OUT first_number bigint, OUT numbers bigint, OUT state text,
    OUT since timestamptz)
  RETURNS SETOF record
  AS 'MODULE_PATHNAME', 'stream_seq_holders'
  LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION stream_seq._holders() IS
  'internal: transactions holding horizons back, for the holders view; only streams the caller may read';

CREATE VIEW stream_seq.streams WITH (security_barrier) AS
SELECT s.relid AS stream,
       s.seq_column,
       s.trimmed_before AS first,
       st.head,
       st.horizon,
       greatest(coalesce(st.head, 0) + 1 - st.horizon, 0) AS waiting,
       st.visible_horizon - st.horizon AS durable_lag,
       st.committing,
       st.oldest_pid,
       st.oldest_xid,
       pg_catalog.now() - st.oldest_since AS oldest_age,
       st.tracked,
       st.evicted,
       st.assigned_xacts
  FROM stream_seq.stream s
  CROSS JOIN LATERAL stream_seq._status(s.relid) st
 WHERE pg_catalog.has_table_privilege(s.relid, 'SELECT');
COMMENT ON VIEW stream_seq.streams IS
  'one row per stream the caller may read: head, horizon, numbers waiting behind it, and the oldest transaction holding it';
GRANT SELECT ON stream_seq.streams TO PUBLIC;

CREATE VIEW stream_seq.holders WITH (security_barrier) AS
SELECT h.stream, h.pid, h.xid, h.first_number, h.numbers, h.state,
       pg_catalog.now() - h.since AS age
  FROM stream_seq._holders() h
 ORDER BY h.since;
COMMENT ON VIEW stream_seq.holders IS
  'transactions holding the horizons of streams the caller may read back, longest first: committing, or committed and not yet flushed';
GRANT SELECT ON stream_seq.holders TO PUBLIC;

CREATE VIEW stream_seq.consumers WITH (security_barrier) AS
SELECT c.stream,
       c.consumer,
       c.position,
       greatest(stream_seq.horizon(c.stream) - 1 - c.position, 0) AS lag,
       pg_catalog.now() - c.advanced_at AS since_advance,
       c.owner
  FROM stream_seq.consumer c
 WHERE pg_catalog.has_table_privilege(c.stream, 'SELECT');
COMMENT ON VIEW stream_seq.consumers IS
  'consumers of the streams the caller may read, with their lag in numbers';
GRANT SELECT ON stream_seq.consumers TO PUBLIC;

-- DDL: event triggers that keep streams consistent (see src/ddl.c).
CREATE FUNCTION stream_seq._on_sql_drop() RETURNS event_trigger
  AS 'MODULE_PATHNAME', 'stream_seq_on_sql_drop'
  LANGUAGE C;
COMMENT ON FUNCTION stream_seq._on_sql_drop() IS
  'internal: sql_drop event trigger; forgets dropped stream tables, refuses dropping what a stream needs';
REVOKE EXECUTE ON FUNCTION stream_seq._on_sql_drop() FROM PUBLIC;

CREATE FUNCTION stream_seq._on_ddl_end() RETURNS event_trigger
  AS 'MODULE_PATHNAME', 'stream_seq_on_ddl_end'
  LANGUAGE C;
COMMENT ON FUNCTION stream_seq._on_ddl_end() IS
  'internal: ddl_command_end event trigger; follows renamed stream columns, refuses DDL that would break a stream';
REVOKE EXECUTE ON FUNCTION stream_seq._on_ddl_end() FROM PUBLIC;

CREATE EVENT TRIGGER stream_seq_sql_drop ON sql_drop
  EXECUTE FUNCTION stream_seq._on_sql_drop();
CREATE EVENT TRIGGER stream_seq_ddl_end ON ddl_command_end
  WHEN TAG IN ('ALTER TABLE', 'ALTER SEQUENCE', 'CREATE TABLE',
               'CREATE TRIGGER', 'ALTER TRIGGER')
  EXECUTE FUNCTION stream_seq._on_ddl_end();
COMMENT ON EVENT TRIGGER stream_seq_sql_drop IS
  'stream_seq: forgets dropped stream tables, refuses dropping what a stream needs';
COMMENT ON EVENT TRIGGER stream_seq_ddl_end IS
  'stream_seq: follows renamed stream columns, refuses DDL that would break a stream';
