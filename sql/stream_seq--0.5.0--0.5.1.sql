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

-- What a role may learn of a stream it may not read (no SELECT on the
-- table): nothing from the extension.  The views (streams, consumers,
-- consumer_slots, parked_rows, retention_runs) showed such a role no row
-- of it, but the catalog tables stream, partition_range and
-- retention_policy were readable by PUBLIC and listed every stream, its
-- columns, sealed partitions and policy.  They are now readable only by
-- their owner and the database's owner (who pg_dump runs as; granted by
-- _grant_dump_access(), which names them, as every configuration table);
-- the views partitions and retention_policies show what the tables did,
-- for the streams the caller may read.  The library reads the tables as
-- their owner (it checks the caller's privileges first); the readers
-- written in PL/pgSQL, which run as their caller, ask _stream_info().
REVOKE SELECT ON stream_seq.stream FROM PUBLIC;
REVOKE SELECT ON stream_seq.partition_range FROM PUBLIC;
REVOKE SELECT ON stream_seq.retention_policy FROM PUBLIC;
SELECT stream_seq._grant_dump_access();

CREATE VIEW stream_seq.partitions WITH (security_barrier) AS
  SELECT r.partition, r.stream, r.lowest, r.highest, r.sealed_at
    FROM stream_seq.partition_range r
   WHERE pg_catalog.has_table_privilege(r.stream::pg_catalog.oid, 'SELECT');
COMMENT ON VIEW stream_seq.partitions IS
  'sealed partitions of the partitioned streams the caller may read';
GRANT SELECT ON stream_seq.partitions TO PUBLIC;

CREATE VIEW stream_seq.retention_policies WITH (security_barrier) AS
  SELECT p.stream, p.keep_for, p.keep_rows, p.respect_consumers, p.set_at
    FROM stream_seq.retention_policy p
   WHERE pg_catalog.has_table_privilege(p.stream::pg_catalog.oid, 'SELECT');
COMMENT ON VIEW stream_seq.retention_policies IS
  'retention policies of the streams the caller may read';
GRANT SELECT ON stream_seq.retention_policies TO PUBLIC;

-- Internal functions.  Those the readers and views call (_page_source,
-- _slot_state, _take_parked, _slot_backlog, _status, _holders,
-- _stream_of_row_type, _stream_info, _invalid_slot_count) stay executable
-- by PUBLIC: the readers run as their caller (SECURITY DEFINER would read
-- the stream table as the extension's owner, past the caller's privileges
-- and row-level security), and PostgreSQL checks EXECUTE against the role
-- that calls them.  Each is safe for any role instead: an OID that names
-- no relation is 42P01, a relation that is not a stream 42809 (checked
-- under the table's lock), a stream the caller may not read 42501 (or,
-- behind the views, no row).  The trigger functions stay executable too:
-- CREATE TRIGGER (enable(), a restore) checks EXECUTE for the table's
-- owner, and PostgreSQL refuses a direct call (0A000).  Not executable by
-- PUBLIC, as before: _grant_dump_access() and the event trigger functions.
CREATE FUNCTION stream_seq._stream_info(stream regclass,
    OUT seq_column name, OUT time_column name, OUT first bigint)
  AS 'MODULE_PATHNAME', 'stream_seq_stream_info'
  LANGUAGE C STABLE;
COMMENT ON FUNCTION stream_seq._stream_info(regclass) IS
  'internal: the catalog row of a stream the caller may read, for the readers';

CREATE OR REPLACE FUNCTION stream_seq._stream_of_row_type(row_type regtype) RETURNS regclass
  AS 'MODULE_PATHNAME', 'stream_seq_stream_of_row_type'
  LANGUAGE C STABLE;

-- The readers: the catalog row from _stream_info() (42P01 for an OID that
-- names no relation, where they said 42809 with the OID as its name).
CREATE OR REPLACE FUNCTION stream_seq.page(stream regclass, after bigint, max_rows integer DEFAULT 100)
 RETURNS TABLE(seq bigint, "row" jsonb)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
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
    SELECT i.seq_column, i.first INTO col, first_kept
      FROM stream_seq._stream_info(stream) i;
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
$function$;

CREATE OR REPLACE FUNCTION stream_seq.page_rows(stream anyelement, after bigint, max_rows integer DEFAULT 100)
 RETURNS SETOF anyelement
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    rel regclass := stream_seq._stream_of_row_type(pg_catalog.pg_typeof(stream));
    col name;
    first_kept bigint;
BEGIN
    IF after IS NULL THEN
        RAISE EXCEPTION 'stream table and position must not be null'
          USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF max_rows IS NULL OR max_rows < 1 THEN
        RAISE EXCEPTION 'max_rows must be at least 1'
          USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT i.seq_column, i.first INTO col, first_kept
      FROM stream_seq._stream_info(rel) i;
    IF after < first_kept - 1 AND first_kept > 1 THEN
        RAISE EXCEPTION 'rows after position % were trimmed from stream table "%"',
              after, rel
          USING ERRCODE = 'object_not_in_prerequisite_state',
                DETAIL = format('The stream now starts at %s.', first_kept),
                HINT = format('To read what is kept, page from position %s.',
                              first_kept - 1);
    END IF;
    RETURN QUERY EXECUTE format(
        'SELECT t.* FROM %2$s t '
        ' WHERE t.%1$I > $1 AND t.%1$I < stream_seq.horizon($3) '
        ' ORDER BY t.%1$I LIMIT $2', col, stream_seq._page_source(rel, after, max_rows))
      USING after, max_rows, rel;
END;
$function$;

CREATE OR REPLACE FUNCTION stream_seq.position_at(stream regclass, at timestamp with time zone)
 RETURNS bigint
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    col name;
    tcol name;
    lo bigint;
    hi bigint;
    mid bigint;
    found_seq bigint;
    found_time timestamptz;
BEGIN
    IF stream IS NULL OR at IS NULL THEN
        RAISE EXCEPTION 'stream table and time must not be null'
          USING ERRCODE = 'null_value_not_allowed';
    END IF;
    SELECT i.seq_column, i.time_column INTO col, tcol
      FROM stream_seq._stream_info(stream) i;
    IF tcol IS NULL THEN
        RAISE EXCEPTION 'stream table "%" has no time column', stream
          USING ERRCODE = 'object_not_in_prerequisite_state',
                DETAIL = 'Only a stream enabled with a time column records when its rows were numbered.',
                HINT = 'Enable the stream with stream_seq.enable(stream, seq_column, time_column).';
    END IF;
    -- Invariant: no row numbered at or below lo has a time at or after
    -- "at"; the first row that has one is numbered hi, or there is none
    -- below hi = the horizon.
    hi := stream_seq.horizon(stream);
    lo := least(stream_seq.first(stream), hi) - 1;
    WHILE hi - lo > 1 LOOP
        mid := lo + (hi - lo) / 2;
        EXECUTE format('SELECT t.%1$I, t.%2$I FROM %3$s t '
                       ' WHERE t.%1$I > $1 AND t.%1$I <= $2 '
                       ' ORDER BY t.%1$I DESC LIMIT 1',
                       col, tcol, stream_seq._page_source(stream, lo))
          INTO found_seq, found_time USING lo, mid;
        IF found_seq IS NULL OR found_time IS NULL OR found_time < at THEN
            lo := mid;
        ELSE
            hi := found_seq;
        END IF;
    END LOOP;
    RETURN lo;
END;
$function$;

CREATE OR REPLACE FUNCTION stream_seq.read(stream regclass, consumer text, max_rows integer DEFAULT 100)
 RETURNS TABLE(seq bigint, "row" jsonb)
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    after bigint := stream_seq.position(stream, consumer);
    col name;
    first_kept bigint;
BEGIN
    IF max_rows IS NULL OR max_rows < 1 THEN
        RAISE EXCEPTION 'max_rows must be at least 1'
          USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT i.seq_column, i.first INTO col, first_kept
      FROM stream_seq._stream_info(stream) i;
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
$function$;

CREATE OR REPLACE FUNCTION stream_seq.read_rows(stream anyelement, consumer text, max_rows integer DEFAULT 100)
 RETURNS SETOF anyelement
 LANGUAGE plpgsql
 STABLE
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    rel regclass := stream_seq._stream_of_row_type(pg_catalog.pg_typeof(stream));
    after bigint := stream_seq.position(rel, consumer);
    col name;
    first_kept bigint;
BEGIN
    IF max_rows IS NULL OR max_rows < 1 THEN
        RAISE EXCEPTION 'max_rows must be at least 1'
          USING ERRCODE = 'invalid_parameter_value';
    END IF;
    SELECT i.seq_column, i.first INTO col, first_kept
      FROM stream_seq._stream_info(rel) i;
    IF after < first_kept - 1 THEN
        RAISE EXCEPTION 'rows after position % of consumer "%" were trimmed from stream table "%"',
              after, consumer, rel
          USING ERRCODE = 'object_not_in_prerequisite_state',
                DETAIL = format('The stream now starts at %s.', first_kept),
                HINT = format('To skip the trimmed rows, run SELECT stream_seq.advance(%L, %L, %s).',
                              rel::text, consumer, first_kept - 1);
    END IF;
    RETURN QUERY EXECUTE format(
        'SELECT t.* FROM %2$s t '
        ' WHERE t.%1$I > $1 AND t.%1$I < stream_seq.horizon($3) '
        ' ORDER BY t.%1$I LIMIT $2', col, stream_seq._page_source(rel, after, max_rows))
      USING after, max_rows, rel;
END;
$function$;

CREATE OR REPLACE FUNCTION stream_seq.due(stream regclass, consumer text, max_rows integer DEFAULT 100)
 RETURNS TABLE(seq bigint, "row" jsonb, reason text, attempts integer)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    col name;
    seqs bigint[];
    reasons text[];
    tries integer[];
BEGIN
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
    SELECT i.seq_column INTO col FROM stream_seq._stream_info(stream) i;
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
$function$;

CREATE OR REPLACE FUNCTION stream_seq.replay(stream regclass, consumer text, max_rows integer DEFAULT 100)
 RETURNS TABLE(seq bigint, "row" jsonb, reason text, attempts integer)
 LANGUAGE plpgsql
 SET search_path TO 'pg_catalog', 'pg_temp'
AS $function$
DECLARE
    col name;
BEGIN
    IF stream IS NULL OR consumer IS NULL THEN
        -- _take_parked() says what is wrong
        PERFORM stream_seq._take_parked(stream, consumer, max_rows);
    END IF;
    SELECT i.seq_column INTO col FROM stream_seq._stream_info(stream) i;
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
$function$;

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
