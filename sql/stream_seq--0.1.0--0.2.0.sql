/* stream_seq--0.1.0--0.2.0.sql: keep streams consistent through DDL, and show who holds horizons */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION stream_seq UPDATE TO '0.2.0'" to load this file. \quit

COMMENT ON TABLE stream_seq.stream IS
  'stream tables: the numbered column, the sequence recording the head, and where trimming or TRUNCATE left the start';

-- TRUNCATE records that every number handed out so far is gone, so that
-- numbering continues above them after a restart.
CREATE FUNCTION stream_seq.truncate_trigger() RETURNS trigger
  AS 'MODULE_PATHNAME', 'stream_seq_truncate_trigger'
  LANGUAGE C;

-- The last step of enable() now also adds the TRUNCATE trigger.
ALTER FUNCTION stream_seq._register(regclass, name, regclass, bigint)
  RENAME TO _register_stream;
CREATE FUNCTION stream_seq._register(stream regclass, seq_column name,
                                     head_seq regclass, lowest bigint)
  RETURNS void
  LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    EXECUTE format('CREATE TRIGGER stream_seq_truncate BEFORE TRUNCATE ON %s '
                   'FOR EACH STATEMENT EXECUTE FUNCTION stream_seq.truncate_trigger()',
                   stream);
    PERFORM stream_seq._register_stream(stream, seq_column, head_seq, lowest);
END;
$$;

-- disable() removes the catalog row before the triggers, so that the
-- event triggers below let it drop them.
CREATE OR REPLACE FUNCTION stream_seq.disable(stream regclass) RETURNS void
  LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    entry record;
BEGIN
    SELECT s.head_seq, c.relowner, c.relname INTO entry
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
    PERFORM stream_seq._unregister(stream);
    EXECUTE format('DROP TRIGGER IF EXISTS stream_seq_guard ON %s', stream);
    EXECUTE format('DROP TRIGGER IF EXISTS stream_seq_assign ON %s', stream);
    EXECUTE format('DROP TRIGGER IF EXISTS stream_seq_truncate ON %s', stream);
    EXECUTE format('DROP SEQUENCE IF EXISTS %s', entry.head_seq);
END;
$$;

-- streams enabled under 0.1.0 get the TRUNCATE trigger now
DO $$
DECLARE
    s regclass;
BEGIN
    FOR s IN SELECT relid FROM stream_seq.stream LOOP
        EXECUTE format('CREATE TRIGGER stream_seq_truncate BEFORE TRUNCATE ON %s '
                       'FOR EACH STATEMENT EXECUTE FUNCTION stream_seq.truncate_trigger()', s);
    END LOOP;
END;
$$;

CREATE FUNCTION stream_seq._forget_dropped(relid oid) RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_forget_dropped'
  LANGUAGE C STRICT VOLATILE;

CREATE FUNCTION stream_seq._rename_column(stream regclass, new_name name)
  RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_rename_column'
  LANGUAGE C STRICT VOLATILE;

/*
 * sql_drop: a dropped stream table leaves the catalog (with its consumers);
 * dropping what a live stream needs (its column, head sequence, unique
 * index or triggers) is refused.
 */
CREATE FUNCTION stream_seq._on_sql_drop() RETURNS event_trigger
  LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s record;
BEGIN
    FOR s IN SELECT st.relid::oid AS relid, st.head_seq::oid AS head_seq,
                    st.seq_column
               FROM stream_seq.stream st
    LOOP
        IF EXISTS (SELECT FROM pg_event_trigger_dropped_objects() d
                    WHERE d.object_type = 'table' AND d.objid = s.relid) THEN
            PERFORM stream_seq._forget_dropped(s.relid);
        ELSIF EXISTS (SELECT FROM pg_event_trigger_dropped_objects() d
                       WHERE d.object_type = 'sequence' AND d.objid = s.head_seq) THEN
            RAISE EXCEPTION 'cannot drop column "%" or the head sequence of stream table "%"',
                  s.seq_column, s.relid::regclass
              USING ERRCODE = 'dependent_objects_still_exist',
                    HINT = 'Run stream_seq.disable() first.';
        ELSIF NOT EXISTS (
            SELECT FROM pg_index i JOIN pg_attribute a
                ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
             WHERE i.indrelid = s.relid AND i.indisunique AND i.indnkeyatts = 1
               AND i.indexprs IS NULL AND a.attname = s.seq_column) THEN
            RAISE EXCEPTION 'cannot drop the unique index on column "%" of stream table "%"',
                  s.seq_column, s.relid::regclass
              USING ERRCODE = 'dependent_objects_still_exist',
                    DETAIL = 'Readers and the restart of the stream''s counter use it.';
        ELSIF (SELECT count(*) FROM pg_trigger t
                WHERE t.tgrelid = s.relid
                  AND t.tgname IN ('stream_seq_guard', 'stream_seq_assign',
                                   'stream_seq_truncate')) < 3 THEN
            RAISE EXCEPTION 'cannot drop the triggers of stream table "%"', s.relid::regclass
              USING ERRCODE = 'dependent_objects_still_exist',
                    HINT = 'Run stream_seq.disable() to stop numbering the table.';
        END IF;
    END LOOP;
END;
$$;

/*
 * ddl_command_end for ALTER TABLE and ALTER SEQUENCE: follow a renamed
 * stream column; refuse changes that would break the stream: another type,
 * NOT NULL or a default on the column, an unlogged table, disabled
 * triggers, a head sequence no longer owned by the column.
 */
CREATE FUNCTION stream_seq._on_ddl_end() RETURNS event_trigger
  LANGUAGE plpgsql
  SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    s record;
    col record;
BEGIN
    FOR s IN SELECT st.relid, st.head_seq, st.seq_column
               FROM stream_seq.stream st
              WHERE st.relid::oid IN (SELECT c.objid FROM pg_event_trigger_ddl_commands() c)
                 OR st.head_seq::oid IN (SELECT c.objid FROM pg_event_trigger_ddl_commands() c)
    LOOP
        SELECT a.attname, a.atttypid, a.attnotnull, a.atthasdef INTO col
          FROM pg_depend d
          JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
         WHERE d.classid = 'pg_class'::regclass AND d.objid = s.head_seq
           AND d.refclassid = 'pg_class'::regclass AND d.refobjid = s.relid
           AND d.deptype = 'a';
        IF NOT FOUND THEN
            RAISE EXCEPTION 'head sequence of stream table "%" must stay owned by its column', s.relid
              USING ERRCODE = 'object_not_in_prerequisite_state';
        ELSIF col.atttypid <> 'bigint'::regtype THEN
            RAISE EXCEPTION 'cannot change the type of column "%" of stream table "%"',
                  col.attname, s.relid
              USING ERRCODE = 'feature_not_supported',
                    HINT = 'Run stream_seq.disable() first.';
        ELSIF col.attnotnull OR col.atthasdef THEN
            RAISE EXCEPTION 'column "%" of stream table "%" cannot have NOT NULL or a default',
                  col.attname, s.relid
              USING ERRCODE = 'invalid_table_definition',
                    DETAIL = 'Stream numbers are assigned at commit; rows hold NULL until then.';
        ELSIF (SELECT c.relpersistence FROM pg_class c WHERE c.oid = s.relid) <> 'p' THEN
            RAISE EXCEPTION 'stream table "%" must stay logged', s.relid
              USING ERRCODE = 'feature_not_supported',
                    DETAIL = 'A crash empties an unlogged table, and numbers must survive crashes.';
        ELSIF EXISTS (SELECT FROM pg_trigger t
                       WHERE t.tgrelid = s.relid AND t.tgenabled <> 'O'
                         AND t.tgname IN ('stream_seq_guard', 'stream_seq_assign',
                                          'stream_seq_truncate')) THEN
            RAISE EXCEPTION 'cannot disable the triggers of stream table "%"', s.relid
              USING ERRCODE = 'object_not_in_prerequisite_state',
                    DETAIL = 'Rows inserted without them would never get a number.',
                    HINT = 'Run stream_seq.disable() to stop numbering the table.';
        ELSIF col.attname <> s.seq_column THEN
            PERFORM stream_seq._rename_column(s.relid, col.attname);
        END IF;
    END LOOP;
END;
$$;

CREATE EVENT TRIGGER stream_seq_sql_drop ON sql_drop
  EXECUTE FUNCTION stream_seq._on_sql_drop();
CREATE EVENT TRIGGER stream_seq_ddl_end ON ddl_command_end
  WHEN TAG IN ('ALTER TABLE', 'ALTER SEQUENCE')
  EXECUTE FUNCTION stream_seq._on_ddl_end();

-- Observability: the durable lag, and who holds each horizon back.
DROP VIEW stream_seq.streams;
DROP FUNCTION stream_seq._status(regclass);
CREATE FUNCTION stream_seq._status(stream regclass,
    OUT head bigint, OUT horizon bigint, OUT committing integer,
    OUT oldest_pid integer, OUT oldest_xid xid, OUT oldest_since timestamptz,
    OUT tracked integer, OUT evicted bigint, OUT assigned_xacts bigint,
    OUT visible_horizon bigint)
  AS 'MODULE_PATHNAME', 'stream_seq_status'
  LANGUAGE C STRICT VOLATILE;

CREATE VIEW stream_seq.streams AS
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
  CROSS JOIN LATERAL stream_seq._status(s.relid) st;
COMMENT ON VIEW stream_seq.streams IS
  'one row per stream: head, horizon, numbers waiting behind it, and the oldest transaction holding it';
GRANT SELECT ON stream_seq.streams TO PUBLIC;

CREATE FUNCTION stream_seq._holders(
    OUT stream regclass, OUT pid integer, OUT xid xid,
    OUT first_number bigint, OUT numbers bigint, OUT state text,
    OUT since timestamptz)
  RETURNS SETOF record
  AS 'MODULE_PATHNAME', 'stream_seq_holders'
  LANGUAGE C STRICT VOLATILE;

CREATE VIEW stream_seq.holders AS
SELECT h.stream, h.pid, h.xid, h.first_number, h.numbers, h.state,
       pg_catalog.now() - h.since AS age
  FROM stream_seq._holders() h
 ORDER BY h.since;
COMMENT ON VIEW stream_seq.holders IS
  'transactions holding stream horizons back, longest first: committing, or committed and not yet flushed';
GRANT SELECT ON stream_seq.holders TO PUBLIC;
