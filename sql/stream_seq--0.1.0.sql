/* stream_seq--0.1.0.sql: gap-safe stream tables */

-- complain if script is sourced in psql, rather than via CREATE EXTENSION
\echo Use "CREATE EXTENSION stream_seq" to load this file. \quit

-- One row per stream table.  Written only by enable() and disable().
CREATE TABLE stream_seq.stream (
    relid regclass PRIMARY KEY,
    seq_column name NOT NULL,
    head_seq regclass NOT NULL,
    trimmed_before bigint NOT NULL DEFAULT 1,
    enabled_at timestamptz NOT NULL DEFAULT pg_catalog.now()
);
COMMENT ON TABLE stream_seq.stream IS
  'stream tables: the numbered column, the sequence recording the head, and where trimming left the start';
REVOKE ALL ON stream_seq.stream FROM PUBLIC;
GRANT SELECT ON stream_seq.stream TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('stream_seq.stream', '');

CREATE FUNCTION stream_seq._check_preloaded() RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_check_preloaded'
  LANGUAGE C VOLATILE;

CREATE FUNCTION stream_seq._register(stream regclass, seq_column name,
                                     head_seq regclass, lowest bigint)
  RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_register'
  LANGUAGE C STRICT VOLATILE;

CREATE FUNCTION stream_seq._unregister(stream regclass) RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_unregister'
  LANGUAGE C STRICT VOLATILE;

CREATE FUNCTION stream_seq.guard_trigger() RETURNS trigger
  AS 'MODULE_PATHNAME', 'stream_seq_guard_trigger'
  LANGUAGE C;

CREATE FUNCTION stream_seq.assign_trigger() RETURNS trigger
  AS 'MODULE_PATHNAME', 'stream_seq_assign_trigger'
  LANGUAGE C;

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

CREATE FUNCTION stream_seq._status(stream regclass,
    OUT head bigint, OUT horizon bigint, OUT committing integer,
    OUT oldest_pid integer, OUT oldest_xid xid, OUT oldest_since timestamptz,
    OUT tracked integer, OUT evicted bigint, OUT assigned_xacts bigint)
  AS 'MODULE_PATHNAME', 'stream_seq_status'
  LANGUAGE C STRICT VOLATILE;

/*
 * enable(stream, seq_column): make an ordinary table a stream table.
 * Runs as the caller, who must own the table; the catalog row is written
 * by _register(), which checks ownership again.
 */
CREATE FUNCTION stream_seq.enable(stream regclass, seq_column name DEFAULT 'seq')
  RETURNS void
  LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel record;
    col record;
    next_number bigint;
    lowest bigint;
    interval_setting bigint;
    seq_name text;
    suffix int := 0;
    head_seq regclass;
BEGIN
    PERFORM stream_seq._check_preloaded();

    SELECT c.relname, c.relkind, c.relpersistence, c.relowner, n.nspname
      INTO rel
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.oid = stream;

    IF rel.nspname IN ('pg_catalog', 'information_schema', 'pg_toast', 'stream_seq') THEN
        RAISE EXCEPTION 'table "%" is a system table', stream
          USING ERRCODE = 'wrong_object_type',
                DETAIL = 'Only ordinary user tables can be stream tables.';
    END IF;
    IF rel.relkind = 'p' THEN
        RAISE EXCEPTION 'partitioned table "%" cannot be a stream table', stream
          USING ERRCODE = 'feature_not_supported',
                HINT = 'Enable a stream on an ordinary table.';
    ELSIF rel.relkind <> 'r' THEN
        RAISE EXCEPTION '"%" is not an ordinary table', stream
          USING ERRCODE = 'wrong_object_type',
                DETAIL = 'Views, materialized views, foreign tables, sequences and indexes cannot be stream tables.';
    END IF;
    IF rel.relpersistence = 't' THEN
        RAISE EXCEPTION 'temporary table "%" cannot be a stream table', stream
          USING ERRCODE = 'feature_not_supported';
    ELSIF rel.relpersistence = 'u' THEN
        RAISE EXCEPTION 'unlogged table "%" cannot be a stream table', stream
          USING ERRCODE = 'feature_not_supported',
                DETAIL = 'A crash empties an unlogged table, and numbers must survive crashes.';
    END IF;
    IF NOT pg_has_role(current_user, rel.relowner, 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of table %', rel.relname
          USING ERRCODE = 'insufficient_privilege';
    END IF;
    IF EXISTS (SELECT FROM stream_seq.stream s WHERE s.relid = stream) THEN
        RAISE EXCEPTION 'table "%" is already a stream table', stream
          USING ERRCODE = 'duplicate_object';
    END IF;

    -- keep writers out while existing rows are numbered
    EXECUTE format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', stream);

    SELECT a.attnum, a.atttypid, a.attnotnull, a.atthasdef, a.attidentity,
           a.attgenerated
      INTO col
      FROM pg_attribute a
     WHERE a.attrelid = stream AND a.attname = seq_column AND NOT a.attisdropped;
    IF NOT FOUND THEN
        EXECUTE format('ALTER TABLE %s ADD COLUMN %I bigint', stream, seq_column);
    ELSIF col.atttypid <> 'bigint'::regtype THEN
        RAISE EXCEPTION 'column "%" of table "%" is of type %, not bigint',
              seq_column, stream, col.atttypid::regtype
          USING ERRCODE = 'datatype_mismatch';
    ELSIF col.attidentity <> '' OR col.attgenerated <> '' THEN
        RAISE EXCEPTION 'column "%" of table "%" is an identity or generated column',
              seq_column, stream
          USING ERRCODE = 'invalid_table_definition',
                HINT = 'Drop the identity or generation expression first.';
    ELSIF col.atthasdef THEN
        RAISE EXCEPTION 'column "%" of table "%" has a default', seq_column, stream
          USING ERRCODE = 'invalid_table_definition',
                DETAIL = 'Stream numbers are assigned at commit; rows hold NULL until then.',
                HINT = format('Run ALTER TABLE %s ALTER COLUMN %I DROP DEFAULT first.',
                              stream, seq_column);
    ELSIF col.attnotnull THEN
        RAISE EXCEPTION 'column "%" of table "%" does not allow nulls', seq_column, stream
          USING ERRCODE = 'invalid_table_definition',
                DETAIL = 'Stream numbers are assigned at commit; rows hold NULL until then.',
                HINT = format('Run ALTER TABLE %s ALTER COLUMN %I DROP NOT NULL first (a primary key on it must be dropped too).',
                              stream, seq_column);
    END IF;

    -- a unique index on the column, partial so unnumbered rows stay out
    IF NOT EXISTS (
        SELECT FROM pg_index i
         WHERE i.indrelid = stream AND i.indisunique AND i.indisvalid
           AND i.indnkeyatts = 1 AND i.indexprs IS NULL
           AND i.indkey[0] = (SELECT attnum FROM pg_attribute
                               WHERE attrelid = stream AND attname = seq_column)
           AND (i.indpred IS NULL OR
                pg_get_expr(i.indpred, i.indrelid) = format('(%I IS NOT NULL)', seq_column)))
    THEN
        EXECUTE format('CREATE UNIQUE INDEX ON %s (%I) WHERE %I IS NOT NULL',
                       stream, seq_column, seq_column);
    END IF;

    -- number the rows already there, above the numbers already there
    EXECUTE format('SELECT coalesce(max(%I), 0) FROM %s', seq_column, stream)
      INTO next_number;
    EXECUTE format(
        'UPDATE %1$s t SET %2$I = s.n FROM '
        '(SELECT ctid, %3$s + row_number() OVER (ORDER BY ctid) AS n '
        '   FROM %1$s WHERE %2$I IS NULL) s WHERE t.ctid = s.ctid',
        stream, seq_column, next_number);
    EXECUTE format('SELECT coalesce(max(%I), 0) + 1, min(%I) FROM %s',
                   seq_column, seq_column, stream)
      INTO next_number, lowest;

    -- the sequence that records the head durably, one block at a time
    interval_setting := current_setting('stream_seq.head_interval')::bigint;
    LOOP
        seq_name := left(rel.relname, 30) || '_' || left(seq_column, 20) || '_stream_head'
                    || CASE WHEN suffix > 0 THEN suffix::text ELSE '' END;
        EXIT WHEN to_regclass(format('%I.%I', rel.nspname, seq_name)) IS NULL;
        suffix := suffix + 1;
    END LOOP;
    EXECUTE format('CREATE SEQUENCE %I.%I INCREMENT BY %s MINVALUE %s START WITH %s NO CYCLE',
                   rel.nspname, seq_name, interval_setting,
                   least(next_number, 1), next_number);
    head_seq := format('%I.%I', rel.nspname, seq_name)::regclass;
    EXECUTE format('ALTER SEQUENCE %s OWNER TO %I', head_seq,
                   pg_get_userbyid(rel.relowner));
    EXECUTE format('ALTER SEQUENCE %s OWNED BY %s.%I', head_seq, stream, seq_column);
    EXECUTE format('COMMENT ON SEQUENCE %s IS %L', head_seq,
                   'records the head of stream table ' || stream::text || ' (stream_seq)');

    EXECUTE format('CREATE TRIGGER stream_seq_guard BEFORE INSERT OR UPDATE OF %I ON %s '
                   'FOR EACH ROW EXECUTE FUNCTION stream_seq.guard_trigger()',
                   seq_column, stream);
    EXECUTE format('CREATE CONSTRAINT TRIGGER stream_seq_assign AFTER INSERT ON %s '
                   'DEFERRABLE INITIALLY DEFERRED '
                   'FOR EACH ROW EXECUTE FUNCTION stream_seq.assign_trigger()',
                   stream);

    PERFORM stream_seq._register(stream, seq_column, head_seq,
                                 coalesce(lowest, next_number));
END;
$$;
COMMENT ON FUNCTION stream_seq.enable(regclass, name) IS
  'make a table a stream table: its column is numbered at commit';

/*
 * disable(stream): remove the triggers, the head sequence and the catalog
 * row; the column, its index and the data stay.
 */
CREATE FUNCTION stream_seq.disable(stream regclass) RETURNS void
  LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    entry record;
BEGIN
    SELECT s.seq_column, s.head_seq, c.relowner, c.relname INTO entry
      FROM stream_seq.stream s JOIN pg_class c ON c.oid = s.relid
     WHERE s.relid = stream;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table "%" is not a stream table', stream
          USING ERRCODE = 'wrong_object_type';
    END IF;
    IF NOT pg_has_role(current_user, entry.relowner, 'USAGE') THEN
        RAISE EXCEPTION 'must be owner of table %', entry.relname
          USING ERRCODE = 'insufficient_privilege';
    END IF;

    -- wait for transactions that are writing to the stream
    EXECUTE format('LOCK TABLE %s IN EXCLUSIVE MODE', stream);
    EXECUTE format('DROP TRIGGER IF EXISTS stream_seq_guard ON %s', stream);
    EXECUTE format('DROP TRIGGER IF EXISTS stream_seq_assign ON %s', stream);
    PERFORM stream_seq._unregister(stream);
    EXECUTE format('DROP SEQUENCE IF EXISTS %s', entry.head_seq);
END;
$$;
COMMENT ON FUNCTION stream_seq.disable(regclass) IS
  'stop numbering a stream table; its column and data stay';

CREATE VIEW stream_seq.streams AS
SELECT s.relid AS stream,
       s.seq_column,
       s.trimmed_before AS first,
       st.head,
       st.horizon,
       st.committing,
       st.oldest_pid,
       st.oldest_xid,
       st.oldest_since,
       st.tracked,
       st.evicted,
       st.assigned_xacts
  FROM stream_seq.stream s
  CROSS JOIN LATERAL stream_seq._status(s.relid) st;
COMMENT ON VIEW stream_seq.streams IS
  'one row per stream: head, horizon, and the transactions holding numbers';
GRANT SELECT ON stream_seq.streams TO PUBLIC;

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

CREATE FUNCTION stream_seq.create_consumer(stream regclass, consumer text,
                                           start_after bigint DEFAULT 0)
  RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_create_consumer'
  LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION stream_seq.create_consumer(regclass, text, bigint) IS
  'create a consumer positioned after start_after (0: the beginning)';

CREATE FUNCTION stream_seq.drop_consumer(stream regclass, consumer text)
  RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_drop_consumer'
  LANGUAGE C STRICT VOLATILE;

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
  LANGUAGE C STRICT VOLATILE;
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
        'SELECT t.%1$I, pg_catalog.to_jsonb(t) FROM %2$s t '
        ' WHERE t.%1$I > $1 AND t.%1$I < stream_seq.horizon($3) '
        ' ORDER BY t.%1$I LIMIT $2', col, stream)
      USING after, max_rows, stream;
END;
$$;
COMMENT ON FUNCTION stream_seq.read(regclass, text, integer) IS
  'next page for a consumer: rows after its position and below the horizon';

CREATE FUNCTION stream_seq.wait(stream regclass, after bigint,
                                timeout interval DEFAULT '30 seconds')
  RETURNS bigint
  AS 'MODULE_PATHNAME', 'stream_seq_wait'
  LANGUAGE C STRICT VOLATILE;
COMMENT ON FUNCTION stream_seq.wait(regclass, bigint, interval) IS
  'block until rows after "after" are readable or the timeout ends; returns the horizon';

CREATE VIEW stream_seq.consumers AS
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

CREATE FUNCTION stream_seq._record_trim(stream regclass, before bigint)
  RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_record_trim'
  LANGUAGE C STRICT VOLATILE;

CREATE FUNCTION stream_seq.first(stream regclass) RETURNS bigint
  LANGUAGE plpgsql STABLE
  SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    result bigint;
BEGIN
    SELECT s.trimmed_before INTO result FROM stream_seq.stream s WHERE s.relid = stream;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table "%" is not a stream table', stream
          USING ERRCODE = 'wrong_object_type',
                HINT = 'Use stream_seq.enable() to make it one.';
    END IF;
    RETURN result;
END;
$$;
COMMENT ON FUNCTION stream_seq.first(regclass) IS
  'where the retained stream starts: rows below it were trimmed';

/*
 * trim(stream, before, force): delete the rows numbered below "before".
 * Never at or above the horizon; never past the slowest consumer unless
 * forced.  Runs as the caller, who needs DELETE on the table.
 */
CREATE FUNCTION stream_seq.trim(stream regclass, before bigint,
                                force boolean DEFAULT false)
  RETURNS bigint
  LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    col name;
    current_horizon bigint;
    slowest record;
    deleted bigint;
BEGIN
    SELECT s.seq_column INTO col FROM stream_seq.stream s WHERE s.relid = stream;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table "%" is not a stream table', stream
          USING ERRCODE = 'wrong_object_type',
                HINT = 'Use stream_seq.enable() to make it one.';
    END IF;
    current_horizon := stream_seq.horizon(stream);
    IF before > current_horizon THEN
        RAISE EXCEPTION 'cannot trim stream table "%" up to %', stream, before
          USING ERRCODE = 'invalid_parameter_value',
                DETAIL = format('The horizon is %s; rows at or above it may not have been read yet.',
                                current_horizon);
    END IF;
    IF NOT force THEN
        SELECT c.consumer, c.position INTO slowest
          FROM stream_seq.consumers c
         WHERE c.stream = trim.stream
         ORDER BY c.position LIMIT 1;
        IF FOUND AND before > slowest.position + 1 THEN
            RAISE EXCEPTION 'cannot trim stream table "%" past consumer "%"',
                  stream, slowest.consumer
              USING ERRCODE = 'object_not_in_prerequisite_state',
                    DETAIL = format('The consumer has finished up to %s.', slowest.position),
                    HINT = 'Advance or drop the consumer, or pass force => true.';
        END IF;
    END IF;
    PERFORM stream_seq._record_trim(stream, before);
    EXECUTE format('DELETE FROM %s WHERE %I < $1', stream, col) USING before;
    GET DIAGNOSTICS deleted = ROW_COUNT;
    RETURN deleted;
END;
$$;
COMMENT ON FUNCTION stream_seq.trim(regclass, bigint, boolean) IS
  'delete the rows numbered below "before"; returns how many';
