-- stream_seq 0.5.0 -> 0.6.0 in one step: what the updates 0.5.0 -> 0.5.1
-- and 0.5.1 -> 0.6.0 do, with every lock they need taken first, so that
-- an update under traffic never waits where the deadlock detector cannot
-- see it (issue 45; see the prologue).
\echo Use "ALTER EXTENSION stream_seq UPDATE TO '0.6.0'" to load this file. \quit

-- ---------------------------------------------------------------------
-- Prologue: every lock of the whole update, taken first, without deadlock
-- and without waiting for ever
-- ---------------------------------------------------------------------
--
-- Why this script exists (issue 45).  ALTER EXTENSION stream_seq UPDATE
-- from 0.5.0 ran the steps 0.5.0 -> 0.5.1 -> 0.6.0 in one
-- transaction, and the steps that wait for the holders of a lock by
-- polling (pg_sleep: the prologue of 0.5.0 -> 0.5.1, the lock section of
-- 0.5.1 -> 0.6.0) then polled while holding the locks of the steps before
-- them.  A writer or a reader that waited for one of those waited for the
-- update, the update polled for it, and the deadlock detector never saw
-- the cycle: both waited for ever.  PostgreSQL takes the shortest path,
-- so an update from 0.5.0 now runs this script alone: the statements of
-- those steps, unchanged, below, after a prologue that takes every lock
-- they need, in one go, the way the 0.5.0 -> 0.5.1 prologue does (see
-- there what applications lock, and in which order):
--   - ACCESS EXCLUSIVE on every table and view of the extension but
--     stream_seq.stream, stream_seq.partition_range and the views over
--     them (no statement below changes those views, and LOCK TABLE on a
--     view locks what it reads);
--   - EXCLUSIVE on stream_seq.stream, which writers and readers do not
--     conflict with (they take ACCESS SHARE), but enable(), disable(),
--     trim() and seals do: the streams, whose tables get triggers below,
--     stay those that were locked;
--   - SHARE ROW EXCLUSIVE on every stream table and its partitions
--     (CREATE TRIGGER), last: the locks that stop writers are held the
--     shortest;
--   - the first lock is waited for at most 1 s (half of deadlock_timeout
--     if less), every further one only as long as what is left of 200 ms
--     (0.3 deadlock_timeout if less) after the first was granted: a
--     session that queued behind the update stops waiting before it
--     would look for a deadlock;
--   - if one is not granted in time, everything taken is released (the
--     block's subtransaction rolls back) and the update waits, polling,
--     until the transactions that held that lock have ended, then tries
--     again.  It polls only while it holds nothing an application may
--     wait for: if its transaction already holds such a lock (ALTER
--     EXTENSION in a transaction that wrote or locked tables before it,
--     or an update from before 0.4.2, whose earlier steps lock the stream
--     tables), it gives up at once instead, with 55P03 and a message that
--     names the processes in the way and what it holds, and nothing is
--     changed.
-- The session's lock_timeout bounds the whole wait (0: no bound); past
-- it the update fails with 55P03 and changes nothing.
DO $prologue$
DECLARE
    dl constant interval := pg_catalog.current_setting('deadlock_timeout')::interval;
    -- the first lock, holding nothing else: at most this long
    first_wait constant interval := least(interval '1 s', dl * 0.5);
    -- the others: all granted within this long after the first
    hold_budget constant interval := least(interval '200 ms', dl * 0.3);
    saved_lock_timeout constant text := pg_catalog.current_setting('lock_timeout');
    deadline timestamptz;
    targets regclass[];         -- what to lock, in this order
    modes text[];               -- and in which mode
    held text;                  -- what this transaction holds already
    target_name text;           -- targets[trying], qualified
    granted_first timestamptz;
    wait_ms numeric;
    trying int;                 -- the one being waited for
    timed_out boolean;
    holders text[];             -- virtual transactions that held it
    holder_pids int[];
BEGIN
    IF saved_lock_timeout::interval > interval '0' THEN
        deadline := pg_catalog.clock_timestamp() + saved_lock_timeout::interval;
    END IF;
    -- Locks this transaction holds that an application may wait for:
    -- any but ACCESS SHARE on a relation outside the system catalogs
    -- that is not temporary.
    SELECT pg_catalog.string_agg(DISTINCT pg_catalog.format('%I.%I (%s)',
               n.nspname, c.relname, l.mode), ', ')
      INTO held
      FROM pg_catalog.pg_locks l
      JOIN pg_catalog.pg_class c ON c.oid = l.relation
      JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
     WHERE l.pid = pg_catalog.pg_backend_pid()
       AND l.locktype = 'relation' AND l.granted
       AND l.mode <> 'AccessShareLock'
       AND c.relpersistence <> 't'
       AND c.relnamespace NOT IN ('pg_catalog'::pg_catalog.regnamespace,
                                  'pg_toast'::pg_catalog.regnamespace,
                                  'information_schema'::pg_catalog.regnamespace);
    LOOP
        -- read again at each try: streams come and go
        SELECT pg_catalog.array_agg(t.rel ORDER BY t.ord, t.rel::pg_catalog.oid),
               pg_catalog.array_agg(t.mode ORDER BY t.ord, t.rel::pg_catalog.oid)
          INTO targets, modes
          FROM (SELECT c.oid::pg_catalog.regclass AS rel,
                       CASE WHEN c.relkind = 'v' THEN 2 ELSE 1 END AS ord,
                       'ACCESS EXCLUSIVE' AS mode
                  FROM pg_catalog.pg_depend d
                  JOIN pg_catalog.pg_class c ON c.oid = d.objid
                 WHERE d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                   AND d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
                   AND d.refobjid = (SELECT e.oid FROM pg_catalog.pg_extension e
                                      WHERE e.extname = 'stream_seq')
                   AND d.deptype = 'e'
                   AND c.relkind IN ('r', 'p', 'v')
                   AND c.oid NOT IN ('stream_seq.stream'::pg_catalog.regclass,
                                     'stream_seq.partition_range'::pg_catalog.regclass)
                   -- nor a view over them: LOCK TABLE on a view also locks
                   -- what it reads
                   AND NOT EXISTS (
                       SELECT FROM pg_catalog.pg_rewrite r
                         JOIN pg_catalog.pg_depend v
                           ON v.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass
                          AND v.objid = r.oid
                          AND v.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
                        WHERE r.ev_class = c.oid
                          AND v.refobjid IN ('stream_seq.stream'::pg_catalog.regclass,
                                             'stream_seq.partition_range'::pg_catalog.regclass))
                UNION ALL
                SELECT 'stream_seq.stream'::pg_catalog.regclass, 3, 'EXCLUSIVE'
                UNION ALL
                -- last: the locks that stop writers are held the shortest
                SELECT s.relid, 4, 'SHARE ROW EXCLUSIVE'
                  FROM stream_seq.stream s) t;

        trying := NULL;
        timed_out := false;
        BEGIN
            FOR i IN 1 .. coalesce(pg_catalog.array_length(targets, 1), 0) LOOP
                trying := i;
                IF i = 1 AND held IS NULL THEN
                    wait_ms := extract(epoch FROM first_wait) * 1000;
                ELSIF i = 1 THEN
                    wait_ms := extract(epoch FROM hold_budget) * 1000;
                ELSE
                    wait_ms := extract(epoch FROM
                        hold_budget - (pg_catalog.clock_timestamp() - granted_first)) * 1000;
                END IF;
                IF deadline IS NOT NULL THEN
                    wait_ms := least(wait_ms, extract(epoch FROM
                        deadline - pg_catalog.clock_timestamp()) * 1000);
                END IF;
                IF wait_ms < 1 THEN
                    RAISE EXCEPTION USING ERRCODE = 'lock_not_available';
                END IF;
                PERFORM pg_catalog.set_config('lock_timeout',
                                              pg_catalog.ceil(wait_ms)::text || 'ms', true);
                EXECUTE pg_catalog.format('LOCK TABLE %s IN %s MODE', targets[i], modes[i]);
                IF i = 1 THEN
                    granted_first := pg_catalog.clock_timestamp();
                END IF;
            END LOOP;
            PERFORM pg_catalog.set_config('lock_timeout', saved_lock_timeout, true);
            EXIT;               -- all held, until the update commits
        EXCEPTION
            WHEN lock_not_available THEN
                timed_out := true;      -- and nothing of this try is held
            WHEN undefined_table THEN
                NULL;                   -- a stream dropped meanwhile
        END;
        PERFORM pg_catalog.set_config('lock_timeout', saved_lock_timeout, true);

        -- The transactions that hold what could not be had (or a partition
        -- of it) in a mode that conflicts.
        holders := NULL;
        holder_pids := NULL;
        IF timed_out THEN
            SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) INTO target_name
              FROM pg_catalog.pg_class c
              JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
             WHERE c.oid = targets[trying];
            SELECT pg_catalog.array_agg(DISTINCT l.virtualtransaction),
                   pg_catalog.array_agg(DISTINCT l.pid) FILTER (WHERE l.pid IS NOT NULL)
              INTO holders, holder_pids
              FROM pg_catalog.pg_locks l
             WHERE l.locktype = 'relation'
               AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d
                                  WHERE d.datname = pg_catalog.current_database())
               AND l.granted
               AND l.pid IS DISTINCT FROM pg_catalog.pg_backend_pid()
               AND (l.relation = targets[trying]
                    OR l.relation IN (SELECT p.relid
                                        FROM pg_catalog.pg_partition_tree(targets[trying]) p))
               AND CASE modes[trying]
                     WHEN 'ACCESS EXCLUSIVE' THEN true
                     WHEN 'EXCLUSIVE' THEN l.mode <> 'AccessShareLock'
                     ELSE l.mode NOT IN ('AccessShareLock', 'RowShareLock') END;
            -- Holding locks an application may wait for, the update must
            -- not wait where the deadlock detector cannot see it.
            IF held IS NOT NULL THEN
                RAISE EXCEPTION 'could not lock % for the update of extension "stream_seq" without risking a deadlock',
                    target_name
                  USING ERRCODE = 'lock_not_available',
                        DETAIL = pg_catalog.format('Processes %s hold locks on %s, and this transaction already holds %s, which they may be waiting for.',
                                                   coalesce(pg_catalog.array_to_string(holder_pids, ', '),
                                                            '(none now)'),
                                                   target_name, held),
                        HINT = 'Nothing was changed.  Run ALTER EXTENSION stream_seq UPDATE in a transaction of its own; from a version before 0.4.2, update to 0.4.2 first (ALTER EXTENSION stream_seq UPDATE TO ''0.4.2''), then to the latest version.';
            END IF;
            IF holders IS NOT NULL THEN
                RAISE LOG 'stream_seq update: waiting for the transactions of processes % to end (they lock %)',
                    pg_catalog.array_to_string(holder_pids, ', '), target_name;
                -- as the lock manager does for a waiting lock: an
                -- autovacuum in the way gives up (not one against
                -- wraparound)
                PERFORM pg_catalog.pg_cancel_backend(a.pid)
                   FROM pg_catalog.pg_stat_activity a
                  WHERE a.pid = ANY (holder_pids)
                    AND a.backend_type = 'autovacuum worker'
                    AND a.query NOT LIKE '%(to prevent wraparound)%';
            END IF;
        END IF;
        -- holding nothing an application waits for, and queued behind
        -- nothing: poll until those transactions have ended
        LOOP
            IF deadline IS NOT NULL AND pg_catalog.clock_timestamp() >= deadline THEN
                RAISE EXCEPTION 'could not lock the objects extension "stream_seq" updates within lock_timeout'
                  USING ERRCODE = 'lock_not_available',
                        DETAIL = pg_catalog.format('Processes %s hold locks on %s.',
                                                   coalesce(pg_catalog.array_to_string(holder_pids, ', '),
                                                            '(none now)'),
                                                   target_name),
                        HINT = 'Nothing was changed.  Run ALTER EXTENSION stream_seq UPDATE again, or end those transactions first.';
            END IF;
            PERFORM pg_catalog.pg_sleep(0.02);
            EXIT WHEN holders IS NULL OR NOT EXISTS (
                SELECT FROM pg_catalog.pg_locks l
                 WHERE l.virtualtransaction = ANY (holders));
        END LOOP;
    END LOOP;
END;
$prologue$;


-- =====================================================================
-- The statements of stream_seq--0.5.0--0.5.1.sql, unchanged but
-- for its own locking, which the prologue above does for the whole
-- update
-- =====================================================================

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

-- ---------------------------------------------------------------------
-- Section C: retries, parking and resizing
-- ---------------------------------------------------------------------

-- due() and replay() check their arguments before any statement of theirs
-- runs, so that a bad one gets an error without the internal SQL as its
-- context, and take the stream's catalog row from _stream_info() as the
-- other readers do (Section B).
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
    -- the catalog row of a stream the caller may read (42P01, 42809, 42501
    -- otherwise), as the other readers take it
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
$$;

-- resize_index() prints the CREATE INDEX CONCURRENTLY statement of the
-- index resize_group() would build, for the table's owner to run first
-- (CONCURRENTLY cannot run in a function); resize_group() then adopts that
-- index and writers never wait for a build (src/resize.c).
CREATE FUNCTION stream_seq.resize_index(stream regclass, consumer text, slots integer)
  RETURNS text
  AS 'MODULE_PATHNAME', 'stream_seq_resize_index'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.resize_index(regclass, text, integer) IS
  'the CREATE INDEX CONCURRENTLY statement of the index resize_group() to this count would build; run it first and resize_group() adopts the index; NULL if none is needed';

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

-- =====================================================================
-- The statements of stream_seq--0.5.1--0.6.0.sql, unchanged but
-- for its own locking, which the prologue above does for the whole
-- update
-- =====================================================================

-- A fresh install runs this script too (0.4.0's script, then the update
-- chain).  It runs while applications write and read streams: its
-- statements replace functions and create new objects, which takes no
-- lock a writer or a reader waits for, except Section B's: it adds a
-- trigger to every stream table, under SHARE ROW EXCLUSIVE taken the way
-- the 0.5.0 -> 0.5.1 update takes its locks (never queued in front of
-- writers; see that script's prologue), for a few milliseconds.

-- ---------------------------------------------------------------------
-- Section A: a partitioned stream's resize without writers waiting
-- ---------------------------------------------------------------------

-- resize_index() returns the statements of the index a resize would build,
-- one a row, for the table's owner to run first (psql: \gexec), and a
-- partitioned stream gets them too: CREATE INDEX ON ONLY the table, then
-- per partition CREATE INDEX CONCURRENTLY and ALTER INDEX ... ATTACH
-- PARTITION (the catalog steps in a DO block with a lock_timeout of their
-- own); resize_group() adopts the valid partitioned index (src/resize.c).
-- The result type changes from text to setof text (one NULL row when
-- nothing is to be built, as the NULL before), so the function is made
-- anew: dropping and creating a function takes no lock a writer or a
-- reader of a stream waits for, and nothing depends on it.
DROP FUNCTION stream_seq.resize_index(regclass, text, integer);
CREATE FUNCTION stream_seq.resize_index(stream regclass, consumer text, slots integer)
  RETURNS SETOF text
  AS 'MODULE_PATHNAME', 'stream_seq_resize_index'
  LANGUAGE C VOLATILE ROWS 3;
COMMENT ON FUNCTION stream_seq.resize_index(regclass, text, integer) IS
  'the statements (CREATE INDEX CONCURRENTLY; on a partitioned stream also CREATE INDEX ON ONLY and ATTACH PARTITION) of the index resize_group() to this count would build, one a row; run them first and resize_group() adopts the index; one NULL row if none is needed';

-- ---------------------------------------------------------------------
-- Section B: application stacks (ORMs, drivers, poolers)
-- ---------------------------------------------------------------------

-- An upsert of a loaded row (INSERT ... ON CONFLICT DO UPDATE with the
-- row's number in VALUES, as ORMs write it) must work, and a row must
-- still never be stored with a number written by hand.  The guard
-- trigger (BEFORE INSERT) fires before the conflict check, so it can no
-- longer refuse such a row; it lets it through when the table has this
-- AFTER INSERT trigger, which fires only for a row that was inserted
-- (not for the DO UPDATE of a conflict, which the update guards check)
-- and refuses it at the end of the statement.  Its WHEN queues an event
-- only for rows inserted with a number or a time: ordinary inserts cost
-- nothing.  Every stream gets it, as enable() creates it; on a
-- partitioned stream PostgreSQL clones it onto the partitions.
CREATE FUNCTION stream_seq.guard_insert_trigger() RETURNS trigger
  AS 'MODULE_PATHNAME', 'stream_seq_guard_insert_trigger'
  LANGUAGE C;
COMMENT ON FUNCTION stream_seq.guard_insert_trigger() IS
  'internal: AFTER INSERT trigger of stream tables; refuses a row inserted with a number or a time';

-- The numbers of the session's last commit on a stream, kept in the
-- backend's memory (so PARALLEL UNSAFE, as a worker has none of it).
CREATE FUNCTION stream_seq.last_numbers(stream regclass,
    OUT first bigint, OUT last bigint)
  AS 'MODULE_PATHNAME', 'stream_seq_last_numbers'
  LANGUAGE C VOLATILE STRICT PARALLEL UNSAFE;
COMMENT ON FUNCTION stream_seq.last_numbers(regclass) IS
  'first and last number of the last transaction of this session that committed rows to the stream; NULL, NULL if none';

-- (SHARE ROW EXCLUSIVE on every stream table: taken by the prologue
-- above.)

DO $$
DECLARE
    s record;
BEGIN
    -- a trigger of that name the extension did not make (0.5.1 did not
    -- reserve it) would pass for the guard: refuse to update past it
    SELECT g.tgrelid::pg_catalog.regclass AS rel INTO s
      FROM pg_catalog.pg_trigger g JOIN stream_seq.stream st ON g.tgrelid = st.relid
     WHERE g.tgname = 'stream_seq_guard_insert'
       AND g.tgfoid <> 'stream_seq.guard_insert_trigger()'::pg_catalog.regprocedure
     LIMIT 1;
    IF FOUND THEN
        RAISE EXCEPTION 'trigger "stream_seq_guard_insert" on table % was not created by stream_seq', s.rel
            USING ERRCODE = 'duplicate_object',
                  HINT = 'Rename or drop that trigger, then run ALTER EXTENSION stream_seq UPDATE again.';
    END IF;
    FOR s IN SELECT relid, seq_column, time_column FROM stream_seq.stream
              WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_trigger g
                                 WHERE g.tgrelid = relid::pg_catalog.oid
                                   AND g.tgname = 'stream_seq_guard_insert') LOOP
        EXECUTE pg_catalog.format(
            'CREATE TRIGGER stream_seq_guard_insert AFTER INSERT ON %s '
            'FOR EACH ROW WHEN (NEW.%I IS NOT NULL%s) '
            'EXECUTE FUNCTION stream_seq.guard_insert_trigger()',
            s.relid, s.seq_column,
            CASE WHEN s.time_column IS NULL THEN ''
                 ELSE pg_catalog.format(' OR NEW.%I IS NOT NULL', s.time_column) END);
    END LOOP;
END;
$$;

-- ---------------------------------------------------------------------
-- Section C: operators' tooling: metrics for Prometheus and pg_monitor
-- ---------------------------------------------------------------------

-- metrics() (see src/metrics.c): numbers, counts, seconds and 0/1 flags
-- of every stream, consumer and slot, for a scraper.  It needs no
-- privilege on the stream tables and shows nothing of their rows but how
-- many wait, so it is executable by pg_monitor only (and by whom the
-- database's administrator grants it to): the views stay the way for an
-- application's roles, which see the streams they may read.  pg_monitor
-- gets USAGE on the schema to call it; the other functions check their
-- caller's privileges on each stream, and the views show such a role
-- only the streams it may read.
CREATE FUNCTION stream_seq.metrics(only_kind text DEFAULT NULL,
                                   backlog_cap integer DEFAULT 1000)
  RETURNS TABLE (kind text, stream regclass, stream_name text,
                 consumer text, slot integer,
                 head bigint, horizon bigint, first bigint,
                 waiting bigint, durable_lag bigint,
                 committing integer, oldest_commit_seconds double precision,
                 tracked integer, evicted bigint, assigned_xacts bigint,
                 slots integer, "position" bigint, lag bigint,
                 since_advance_seconds double precision,
                 backlog_rows bigint, backlog_capped integer,
                 parked bigint, dead_letters bigint, retries_due bigint,
                 oldest_parked_seconds double precision,
                 oldest_due_seconds double precision,
                 resize_pending integer, leased integer)
  AS 'MODULE_PATHNAME', 'stream_seq_metrics'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.metrics(text, integer) IS
  'gauges and counters of every stream, consumer and slot, for monitoring (pg_monitor): numbers, counts, seconds, backlogs in rows counted up to backlog_cap';
REVOKE ALL ON FUNCTION stream_seq.metrics(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION stream_seq.metrics(text, integer) TO pg_monitor;
GRANT USAGE ON SCHEMA stream_seq TO pg_monitor;

-- ---------------------------------------------------------------------
-- Section D: operators' tooling: PostgreSQL's own views (wait events,
-- statistics), holders and retention_runs
-- ---------------------------------------------------------------------

-- holders: a transaction that numbered its rows early (constraints set
-- IMMEDIATE) and is not committing yet says so (state 'numbered early').
COMMENT ON VIEW stream_seq.holders IS
  'transactions holding the horizons of streams the caller may read back, longest first: committing, numbered early and not committing yet, or committed and not yet flushed';

-- retention_run: a run that removes nothing and says what the stream's
-- newest run says moves that run's ran_at instead of adding a row.
COMMENT ON TABLE stream_seq.retention_run IS
  'the last 100 runs of each stream''s retention policy: what they removed, the consumer that held them back, or their error; a run that removes nothing and repeats the newest moves its ran_at';

-- Cumulative statistics (PostgreSQL 18 and later; NULLs before): numbers
-- committed, transactions that committed numbers, evictions, retention
-- runs, kept across a clean restart.  Counts only, no row contents:
-- pg_monitor may read them.
CREATE FUNCTION stream_seq.stats(
    OUT numbers_assigned bigint,
    OUT xacts_committed bigint,
    OUT evictions bigint,
    OUT retention_runs bigint,
    OUT retention_failures bigint,
    OUT retention_removed_rows bigint,
    OUT stats_reset timestamptz)
  RETURNS record
  AS 'MODULE_PATHNAME', 'stream_seq_stats'
  LANGUAGE C VOLATILE PARALLEL RESTRICTED;
COMMENT ON FUNCTION stream_seq.stats() IS
  'cumulative counters of the server (PostgreSQL 18 and later, kept across a clean restart; NULLs before): numbers assigned in committed transactions, those transactions, entries evicted, retention runs, failed ones, rows they removed';
REVOKE ALL ON FUNCTION stream_seq.stats() FROM PUBLIC;
GRANT EXECUTE ON FUNCTION stream_seq.stats() TO pg_monitor;
