/* stream_seq--0.4.0.sql: gap-safe stream tables */

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
    slots integer CHECK (slots BETWEEN 1 AND 1024),
    slot_index regclass,
    slot_expr text,
    reset_at timestamptz,
    reset_by regrole,
    reset_from bigint,
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
        'SELECT t.%1$I, pg_catalog.to_jsonb(t) FROM %2$s t '
        ' WHERE t.%1$I > $1 AND t.%1$I < stream_seq.horizon($3) '
        ' ORDER BY t.%1$I LIMIT $2', col, stream_seq._page_source(stream, after, max_rows))
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

-- Consumer groups (see src/group.c): slots of a consumer, leased to
-- workers; rows set aside; explicit resets.
CREATE TABLE stream_seq.consumer_slot (
    stream regclass NOT NULL,
    consumer text NOT NULL,
    slot integer NOT NULL,
    position bigint NOT NULL,
    worker text,
    token bigint NOT NULL DEFAULT 0,
    lease_until timestamptz,
    advanced_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    reset_at timestamptz,
    reset_by regrole,
    reset_from bigint,
    PRIMARY KEY (stream, consumer, slot),
    FOREIGN KEY (stream, consumer) REFERENCES stream_seq.consumer ON DELETE CASCADE
);
COMMENT ON TABLE stream_seq.consumer_slot IS
  'slots of consumer groups: position, the worker holding the lease, until when, and the fencing token';
REVOKE ALL ON stream_seq.consumer_slot FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('stream_seq.consumer_slot', '');

CREATE TABLE stream_seq.consumer_worker (
    stream regclass NOT NULL,
    consumer text NOT NULL,
    worker text NOT NULL,
    alive_until timestamptz NOT NULL,
    PRIMARY KEY (stream, consumer, worker),
    FOREIGN KEY (stream, consumer) REFERENCES stream_seq.consumer ON DELETE CASCADE
);
COMMENT ON TABLE stream_seq.consumer_worker IS
  'workers of consumer groups and until when their last claim() says they are alive';
REVOKE ALL ON stream_seq.consumer_worker FROM PUBLIC;

CREATE TABLE stream_seq.parked (
    stream regclass NOT NULL,
    consumer text NOT NULL,
    seq bigint NOT NULL,
    reason text,
    attempts integer NOT NULL DEFAULT 1,
    first_failed timestamptz NOT NULL DEFAULT pg_catalog.now(),
    last_failed timestamptz NOT NULL DEFAULT pg_catalog.now(),
    resolved boolean NOT NULL DEFAULT false,
    PRIMARY KEY (stream, consumer, seq),
    FOREIGN KEY (stream, consumer) REFERENCES stream_seq.consumer ON DELETE CASCADE
);
COMMENT ON TABLE stream_seq.parked IS
  'rows set aside by consumers, with the reason and how often they failed; resolved: handed back by a replay()';
REVOKE ALL ON stream_seq.parked FROM PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('stream_seq.parked', '');

CREATE FUNCTION stream_seq.slot_of(key text, slots integer) RETURNS integer
  LANGUAGE sql IMMUTABLE PARALLEL SAFE
  RETURN ((pg_catalog.hashtextextended(coalesce(key, ''), 0) % slots) + slots) % slots;
COMMENT ON FUNCTION stream_seq.slot_of(text, integer) IS
  'the slot of a group of "slots" slots that rows with this key belong to';

CREATE FUNCTION stream_seq.create_group(stream regclass, consumer text, key text,
                                        slots integer, start_after bigint DEFAULT 0)
  RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_create_group'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.create_group(regclass, text, text, integer, bigint) IS
  'create a consumer group whose rows are split into slots by a hash of "key"';

CREATE FUNCTION stream_seq.claim(stream regclass, consumer text, worker text,
                                 lease interval DEFAULT '30 seconds')
  RETURNS TABLE (slot integer, token bigint)
  AS 'MODULE_PATHNAME', 'stream_seq_claim'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.claim(regclass, text, text, interval) IS
  'lease the worker its share of the group''s slots (and renew what it holds)';

CREATE FUNCTION stream_seq.release(stream regclass, consumer text, worker text)
  RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_release'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.release(regclass, text, text) IS
  'give back every slot the worker holds';

CREATE FUNCTION stream_seq._slot_state(stream regclass, consumer text, slot integer,
    token bigint, OUT "position" bigint, OUT slot_expr text, OUT seq_column name)
  AS 'MODULE_PATHNAME', 'stream_seq_slot_state'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq._slot_state(regclass, text, integer, bigint) IS
  'internal: a slot''s position for read_slot(); fails with SS001 if the token is not the slot''s';

CREATE FUNCTION stream_seq.read_slot(stream regclass, consumer text, slot integer,
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
COMMENT ON FUNCTION stream_seq.read_slot(regclass, text, integer, bigint, integer) IS
  'next page of a slot of a group: its rows after its position and below the horizon';

CREATE FUNCTION stream_seq.advance_slot(stream regclass, consumer text, slot integer,
                                        token bigint, to_position bigint)
  RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_advance_slot'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.advance_slot(regclass, text, integer, bigint, bigint) IS
  'move a slot forward in the caller''s transaction; fails with SS001 if the worker lost the slot';

CREATE FUNCTION stream_seq.slot_position(stream regclass, consumer text, slot integer)
  RETURNS bigint
  AS 'MODULE_PATHNAME', 'stream_seq_slot_position'
  LANGUAGE C STRICT STABLE;
COMMENT ON FUNCTION stream_seq.slot_position(regclass, text, integer) IS
  'last number a slot of a group has finished';

CREATE FUNCTION stream_seq.park(stream regclass, consumer text, seq bigint,
                                reason text DEFAULT NULL)
  RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_park'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.park(regclass, text, bigint, text) IS
  'set a row aside in the caller''s transaction, which then advances past it';

CREATE FUNCTION stream_seq._take_parked(stream regclass, consumer text, max_rows integer)
  RETURNS TABLE (seq bigint, reason text, attempts integer)
  AS 'MODULE_PATHNAME', 'stream_seq_take_parked'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq._take_parked(regclass, text, integer) IS
  'internal: remove parked rows in the caller''s transaction, for replay()';

CREATE FUNCTION stream_seq.replay(stream regclass, consumer text,
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
        '  LEFT JOIN ONLY %1$s t ON t.%2$I = p.seq ORDER BY p.seq', stream, col)
      USING stream, consumer, max_rows;
END;
$$;
COMMENT ON FUNCTION stream_seq.replay(regclass, text, integer) IS
  'parked rows of a consumer, lowest first, marked resolved when the caller commits';

CREATE FUNCTION stream_seq.reset(stream regclass, consumer text, to_position bigint,
                                 slot integer DEFAULT NULL)
  RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_reset'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.reset(regclass, text, bigint, integer) IS
  'move a consumer, a slot, or all slots of a group, backwards or forwards, recording it';

CREATE FUNCTION stream_seq._slot_backlog(stream regclass, consumer text, slot integer,
                                         after bigint)
  RETURNS bigint
  AS 'MODULE_PATHNAME', 'stream_seq_slot_backlog'
  LANGUAGE C STRICT STABLE;
COMMENT ON FUNCTION stream_seq._slot_backlog(regclass, text, integer, bigint) IS
  'internal: rows of a slot after a position and below the horizon (at most 100,000), for the consumer_slots view';

CREATE VIEW stream_seq.consumer_slots WITH (security_barrier) AS
SELECT s.stream, s.consumer, s.slot, s.position,
       greatest(stream_seq.horizon(s.stream) - 1 - s.position, 0) AS lag,
       stream_seq._slot_backlog(s.stream, s.consumer, s.slot, s.position) AS backlog,
       s.worker,
       CASE WHEN s.lease_until > pg_catalog.clock_timestamp() THEN s.lease_until END AS lease_until,
       s.token,
       pg_catalog.now() - s.advanced_at AS since_advance,
       s.reset_at, s.reset_by, s.reset_from
  FROM stream_seq.consumer_slot s
 WHERE pg_catalog.has_table_privilege(s.stream, 'SELECT');
COMMENT ON VIEW stream_seq.consumer_slots IS
  'slots of the consumer groups of streams the caller may read: position, lag, backlog, lease holder';
GRANT SELECT ON stream_seq.consumer_slots TO PUBLIC;

CREATE VIEW stream_seq.parked_rows WITH (security_barrier) AS
SELECT p.stream, p.consumer, p.seq, p.reason, p.attempts, p.first_failed, p.last_failed
  FROM stream_seq.parked p
 WHERE NOT p.resolved AND pg_catalog.has_table_privilege(p.stream, 'SELECT');
COMMENT ON VIEW stream_seq.parked_rows IS
  'rows set aside by consumers of streams the caller may read, not yet resolved by a replay';
GRANT SELECT ON stream_seq.parked_rows TO PUBLIC;

CREATE VIEW stream_seq.consumers WITH (security_barrier) AS
SELECT c.stream,
       c.consumer,
       p.position,
       greatest(stream_seq.horizon(c.stream) - 1 - p.position, 0) AS lag,
       pg_catalog.now() - p.advanced_at AS since_advance,
       c.owner,
       c.slots,
       c.reset_at,
       c.reset_by,
       c.reset_from
  FROM stream_seq.consumer c
  CROSS JOIN LATERAL (
       SELECT CASE WHEN c.slots IS NULL THEN c.position
                   ELSE (SELECT pg_catalog.min(s.position) FROM stream_seq.consumer_slot s
                          WHERE s.stream = c.stream AND s.consumer = c.consumer) END AS position,
              CASE WHEN c.slots IS NULL THEN c.advanced_at
                   ELSE (SELECT pg_catalog.max(s.advanced_at) FROM stream_seq.consumer_slot s
                          WHERE s.stream = c.stream AND s.consumer = c.consumer) END AS advanced_at) p
 WHERE pg_catalog.has_table_privilege(c.stream, 'SELECT');
COMMENT ON VIEW stream_seq.consumers IS
  'consumers of the streams the caller may read, with their lag in numbers (a group: its slowest slot)';
GRANT SELECT ON stream_seq.consumers TO PUBLIC;

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
