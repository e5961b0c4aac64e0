/* stream_seq--0.2.0--0.3.0.sql: reliability: C event triggers, head sequences of the extension's own, checks enforced in C */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION stream_seq UPDATE TO '0.3.0'" to load this file. \quit

-- The event triggers become C functions that need no privilege on this
-- schema and cost nothing for tables that are not streams.  Replaced
-- first: the old ones call functions dropped below.
DROP EVENT TRIGGER stream_seq_sql_drop;
DROP EVENT TRIGGER stream_seq_ddl_end;
DROP FUNCTION stream_seq._on_sql_drop();
DROP FUNCTION stream_seq._on_ddl_end();

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

-- Where disabled streams' numbering ended.
CREATE TABLE stream_seq.retired (
    relid regclass PRIMARY KEY,
    next bigint NOT NULL,
    disabled_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE stream_seq.retired IS
  'tables whose stream was disabled, and the number a new stream on them starts at or above';
REVOKE ALL ON stream_seq.retired FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('stream_seq.retired', '');

-- enable(), disable() and trim() are C functions that check every rule
-- themselves; the internal functions they used to call go.
DROP FUNCTION stream_seq.enable(regclass, name);
CREATE FUNCTION stream_seq.enable(stream regclass, seq_column name DEFAULT 'seq')
  RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_enable'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.enable(regclass, name) IS
  'make a table a stream table: its column is numbered at commit';

DROP FUNCTION stream_seq.disable(regclass);
CREATE FUNCTION stream_seq.disable(stream regclass) RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_disable'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.disable(regclass) IS
  'stop numbering a stream table; its column and data stay, and numbering continues above them if enabled again';

DROP FUNCTION stream_seq.trim(regclass, bigint, boolean);
CREATE FUNCTION stream_seq.trim(stream regclass, before bigint,
                                force boolean DEFAULT false)
  RETURNS bigint
  AS 'MODULE_PATHNAME', 'stream_seq_trim'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.trim(regclass, bigint, boolean) IS
  'delete the rows numbered below "before"; returns how many';

CREATE OR REPLACE FUNCTION stream_seq.first(stream regclass) RETURNS bigint
  AS 'MODULE_PATHNAME', 'stream_seq_first'
  LANGUAGE C STRICT STABLE;

DROP FUNCTION stream_seq._register(regclass, name, regclass, bigint);
DROP FUNCTION stream_seq._register_stream(regclass, name, regclass, bigint);
DROP FUNCTION stream_seq._unregister(regclass);
DROP FUNCTION stream_seq._record_trim(regclass, bigint);
DROP FUNCTION stream_seq._forget_dropped(oid);
DROP FUNCTION stream_seq._rename_column(regclass, name);
DROP FUNCTION stream_seq._check_preloaded();

-- Functions that create or change something refuse NULL instead of
-- silently doing nothing.
ALTER FUNCTION stream_seq.create_consumer(regclass, text, bigint) CALLED ON NULL INPUT;
ALTER FUNCTION stream_seq.drop_consumer(regclass, text) CALLED ON NULL INPUT;
ALTER FUNCTION stream_seq.advance(regclass, text, bigint) CALLED ON NULL INPUT;
ALTER FUNCTION stream_seq.wait(regclass, bigint, interval) CALLED ON NULL INPUT;
COMMENT ON FUNCTION stream_seq.drop_consumer(regclass, text) IS
  'drop a consumer';

-- read() reads the stream table only, never inheriting tables.
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
        'SELECT t.%1$I, pg_catalog.to_jsonb(t) FROM ONLY %2$s t '
        ' WHERE t.%1$I > $1 AND t.%1$I < stream_seq.horizon($3) '
        ' ORDER BY t.%1$I LIMIT $2', col, stream)
      USING after, max_rows, stream;
END;
$$;

-- The views show only streams the caller may read, and evaluate nothing
-- of the caller's before that filter.
CREATE OR REPLACE VIEW stream_seq.streams WITH (security_barrier) AS
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

CREATE OR REPLACE VIEW stream_seq.holders WITH (security_barrier) AS
SELECT h.stream, h.pid, h.xid, h.first_number, h.numbers, h.state,
       pg_catalog.now() - h.since AS age
  FROM stream_seq._holders() h
 ORDER BY h.since;
COMMENT ON VIEW stream_seq.holders IS
  'transactions holding the horizons of streams the caller may read back, longest first: committing, or committed and not yet flushed';

CREATE OR REPLACE VIEW stream_seq.consumers WITH (security_barrier) AS
SELECT c.stream,
       c.consumer,
       c.position,
       greatest(stream_seq.horizon(c.stream) - 1 - c.position, 0) AS lag,
       pg_catalog.now() - c.advanced_at AS since_advance,
       c.owner
  FROM stream_seq.consumer c
 WHERE pg_catalog.has_table_privilege(c.stream, 'SELECT');

COMMENT ON FUNCTION stream_seq._status(regclass) IS
  'internal: the state of one stream, for the streams view; NULL for a table the caller may not read';
COMMENT ON FUNCTION stream_seq._holders() IS
  'internal: transactions holding horizons back, for the holders view; only streams the caller may read';
COMMENT ON FUNCTION stream_seq.guard_trigger() IS
  'internal: BEFORE INSERT OR UPDATE trigger of stream tables; refuses numbers written by hand';
COMMENT ON FUNCTION stream_seq.assign_trigger() IS
  'internal: deferred AFTER INSERT trigger of stream tables; writes the number at commit';
COMMENT ON FUNCTION stream_seq.truncate_trigger() IS
  'internal: BEFORE TRUNCATE trigger of stream tables; records that the truncated numbers are gone';

-- Existing streams get a head sequence of their own in this schema, which
-- TRUNCATE ... RESTART IDENTITY and the table's owner cannot set back, and
-- their unique index is protected by a dependency.
CREATE FUNCTION stream_seq._upgrade_stream(stream regclass) RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_upgrade_stream'
  LANGUAGE C STRICT VOLATILE;
SELECT stream_seq._upgrade_stream(relid) FROM stream_seq.stream ORDER BY relid::oid;
DROP FUNCTION stream_seq._upgrade_stream(regclass);
