-- stream_seq 0.5.0 -> 0.5.1: fixes from outside testing (issue 31):
-- internal functions no longer callable by every role, catalog tables
-- that tell a role only about the streams it may read, and the SQL
-- changes of the defect fixes below.
\echo Use "ALTER EXTENSION stream_seq UPDATE TO '0.5.1'" to load this file. \quit

-- ---------------------------------------------------------------------
-- Prologue: the locks of the whole update, taken first, without deadlock
-- ---------------------------------------------------------------------
--
-- An update runs while applications write and read streams.  What they
-- lock, in the order they lock it:
--   - INSERT into a stream: ROW EXCLUSIVE on the stream table; when its
--     backend has not looked the stream up since the table's relcache
--     entry was built (a new connection, an ANALYZE), ACCESS SHARE on
--     stream_seq.stream (and partition_range, for a partition), released
--     at once.  horizon() only the latter.  The commit-time write locks no
--     catalog table.
--   - read(): stream_seq.consumer (position()), then stream_seq.stream,
--     then the stream table; advance(): consumer (FOR UPDATE, UPDATE).
--   - read_slot(): stream_seq.stream (first()), then consumer,
--     consumer_slot and consumer_worker (_slot_state()), then the stream
--     table; claim() and advance_slot(): consumer, consumer_slot,
--     consumer_worker.
--   - the consumers view: consumer, consumer_slot, parked.
-- read() and read_slot() take stream and consumer in opposite orders, and
-- a transaction may hold any of them (or a stream table it wrote) when it
-- calls the next function, so no fixed order of the update's locks avoids
-- every cycle: an update that waits for one lock while it holds another
-- deadlocks the first consumer that needs the one it holds (40P01 for
-- that consumer, or for the update).  And a lock the update waits for
-- queues every later request that conflicts with it: ACCESS EXCLUSIVE on
-- stream_seq.stream, waited for while a consumer's transaction is open,
-- stops the writers of every stream and horizon() for as long.
--
-- So the update takes, here, every lock a later statement of this script
-- needs on an object applications use, all in one go, and never waits
-- long while it holds any of them:
--   - the first lock is waited for at most 1 s (it holds nothing else, so
--     no cycle can pass through it; what it costs is that consumers queue
--     behind it for that long);
--   - every further one only as long as what is left of 200 ms (at most
--     half of deadlock_timeout) after the first was granted, so that the
--     update gives its locks back before any session it blocks can find
--     itself in a deadlock;
--   - if one is not granted in time, everything taken is released (the
--     block's subtransaction rolls back), the update waits without any
--     lock, and without queueing, until the transactions that held that
--     lock have ended, and tries again.
-- The session's lock_timeout bounds the whole wait (0: no bound); past
-- it the update fails with 55P03 and changes nothing.
--
-- What is locked, ACCESS EXCLUSIVE: every table and view of the extension
-- except stream_seq.stream, stream_seq.partition_range and the views over
-- them, which the write path reads (a later statement may ALTER, REPLACE,
-- REVOKE or update any of these without waiting); SHARE ROW EXCLUSIVE:
-- every stream table and its partitions (CREATE TRIGGER, ALTER TABLE ...
-- ENABLE TRIGGER, COMMENT ON need no more); that one stops the writers of
-- the streams for the rest of the update, which is a few milliseconds.
--
-- A later section therefore must not:
--   - take a lock stronger than SHARE UPDATE EXCLUSIVE on stream_seq.stream,
--     stream_seq.partition_range or a view over them (no ALTER TABLE,
--     CREATE INDEX, CREATE POLICY or ENABLE ROW LEVEL SECURITY on them, no
--     CREATE OR REPLACE VIEW stream_seq.streams): the update would wait
--     for it holding everything else, and every writer whose backend looks
--     a stream up would queue behind it.  GRANT, REVOKE, COMMENT ON,
--     SELECT and new views over them take no lock that waits.  If one is
--     ever needed, add the object to "wanted" below rather than lock it
--     later;
--   - take a stronger lock than SHARE ROW EXCLUSIVE on a stream table
--     (ALTER TABLE ... ADD COLUMN, ... ADD CONSTRAINT, rewriting it): that
--     stops its writers and readers, and belongs in "wanted" too;
--   - update rows of stream_seq.stream or partition_range (a row lock of a
--     concurrent enable(), trim() or seal would be waited for while
--     holding everything); or
--   - wait for anything else, such as LOCK TABLE ... without NOWAIT on an
--     object of an application.
-- New tables and functions, CREATE OR REPLACE FUNCTION and DROP FUNCTION
-- (their lock is on the function, which callers do not take) are fine.
DO $prologue$
DECLARE
    -- the first lock: waited for at most this long, holding nothing else
    first_wait constant interval := interval '1 s';
    -- the others: all granted within this long after the first, or given
    -- back (well below deadlock_timeout: see above)
    hold_budget constant interval :=
        least(interval '200 ms',
              pg_catalog.current_setting('deadlock_timeout')::interval / 2);
    saved_lock_timeout constant text := pg_catalog.current_setting('lock_timeout');
    deadline timestamptz;
    targets regclass[];         -- what to lock, in this order
    modes text[];               -- and in which mode
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
                   -- what it reads (views come after the tables they read,
                   -- which are then held already)
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
                -- last: the locks that stop writers are held the shortest
                SELECT s.relid, 3, 'SHARE ROW EXCLUSIVE'
                  FROM stream_seq.stream s) t;

        trying := NULL;
        timed_out := false;
        BEGIN
            FOR i IN 1 .. coalesce(pg_catalog.array_length(targets, 1), 0) LOOP
                trying := i;
                IF i = 1 THEN
                    wait_ms := extract(epoch FROM first_wait) * 1000;
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
        -- of it) in a mode that conflicts: wait for them to end, polling,
        -- so that nobody queues behind the update meanwhile.
        holders := NULL;
        holder_pids := NULL;
        IF timed_out THEN
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
               AND (modes[trying] = 'ACCESS EXCLUSIVE'
                    OR l.mode NOT IN ('AccessShareLock', 'RowShareLock'));
            IF holders IS NOT NULL THEN
                RAISE LOG 'stream_seq update: waiting for the transactions of processes % to end (they lock %)',
                    pg_catalog.array_to_string(holder_pids, ', '), targets[trying];
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
        LOOP
            IF deadline IS NOT NULL AND pg_catalog.clock_timestamp() >= deadline THEN
                RAISE EXCEPTION 'could not lock the objects extension "stream_seq" updates within lock_timeout'
                  USING ERRCODE = 'lock_not_available',
                        DETAIL = pg_catalog.format('Processes %s hold locks on %s.',
                                                   coalesce(pg_catalog.array_to_string(holder_pids, ', '),
                                                                       '(none now)'),
                                                   targets[trying]),
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
