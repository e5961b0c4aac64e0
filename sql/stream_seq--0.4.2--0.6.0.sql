-- stream_seq 0.4.2 -> 0.6.0 in one step: what the updates 0.4.2 -> 0.5.0,
-- 0.5.0 -> 0.5.1 and 0.5.1 -> 0.6.0 do, with every lock they need taken
-- first, so that an update under traffic never waits where the deadlock
-- detector cannot see it (issue 45; see the prologue).  A fresh install
-- runs this script too (0.4.0's script, 0.4.1, 0.4.2, then this).
\echo Use "ALTER EXTENSION stream_seq UPDATE TO '0.6.0'" to load this file. \quit

-- ---------------------------------------------------------------------
-- Prologue: every lock of the whole update, taken first, without deadlock
-- and without waiting for ever
-- ---------------------------------------------------------------------
--
-- Why this script exists (issue 45).  ALTER EXTENSION stream_seq UPDATE
-- from 0.4.2 ran the steps 0.4.2 -> 0.5.0 -> 0.5.1 -> 0.6.0 in one
-- transaction, and the steps that wait for the holders of a lock by
-- polling (pg_sleep: the prologue of 0.5.0 -> 0.5.1, the lock section of
-- 0.5.1 -> 0.6.0) then polled while holding the locks of the steps before
-- them.  A writer or a reader that waited for one of those waited for the
-- update, the update polled for it, and the deadlock detector never saw
-- the cycle: both waited for ever.  PostgreSQL takes the shortest path,
-- so an update from 0.4.2 now runs this script alone: the statements of
-- those steps, unchanged, below, after a prologue that takes every lock
-- they need, in one go, the way the 0.5.0 -> 0.5.1 prologue does (see
-- there what applications lock, and in which order):
--   - ACCESS EXCLUSIVE on every table and view of the extension but
--     stream_seq.stream, stream_seq.partition_range and the views over
--     them (no statement below changes those views, and LOCK TABLE on a
--     view locks what it reads);
--   - ACCESS EXCLUSIVE on stream_seq.stream, which 0.4.2 -> 0.5.0
--     alters (a writer whose backend looks a stream up waits for it for
--     the milliseconds the rest of the update takes);
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
                SELECT 'stream_seq.stream'::pg_catalog.regclass, 3, 'ACCESS EXCLUSIVE'
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
-- The statements of stream_seq--0.4.2--0.5.0.sql, unchanged but
-- for its own locking, which the prologue above does for the whole
-- update
-- =====================================================================

-- Commit times: an optional time column, named at enable(), that the
-- commit-time write fills together with the number (one write); seeking
-- by time from it.
ALTER TABLE stream_seq.stream ADD COLUMN time_column name;
COMMENT ON COLUMN stream_seq.stream.time_column IS
  'the column the commit-time write records the time of each number in, if any (0.5.0)';

DROP FUNCTION stream_seq.enable(regclass, name);
CREATE FUNCTION stream_seq.enable(stream regclass, seq_column name DEFAULT 'seq',
                                  time_column name DEFAULT NULL)
  RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_enable'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.enable(regclass, name, name) IS
  'make a table a stream table: numbers assigned at commit into seq_column (and their time into time_column, if named)';

/*
 * position_at(stream, at): the position to read from to get every row
 * numbered at or after "at": the number before the first such row below
 * the horizon, or horizon() - 1 if there is none yet.  The times the
 * commit-time write records never go down as the numbers go up (see
 * src/shmem.c, stream_reserve), so a binary search over the stream
 * column's index finds it; rows with no time (numbered before the stream
 * had a time column) count as before any time.  Runs as the caller, who
 * needs SELECT on the table.
 */
CREATE FUNCTION stream_seq.position_at(stream regclass, at timestamptz)
  RETURNS bigint
  LANGUAGE plpgsql STABLE
  SET search_path = pg_catalog, pg_temp
AS $$
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
    SELECT s.seq_column, s.time_column INTO col, tcol
      FROM stream_seq.stream s WHERE s.relid = stream;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'table "%" is not a stream table', stream
          USING ERRCODE = 'wrong_object_type',
                HINT = 'Use stream_seq.enable() to make it one.';
    END IF;
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
$$;
COMMENT ON FUNCTION stream_seq.position_at(regclass, timestamptz) IS
  'the position after which every row numbered at or after a time follows (needs a time column)';

CREATE FUNCTION stream_seq.create_consumer(stream regclass, consumer text,
                                           start_at timestamptz)
  RETURNS void
  LANGUAGE sql VOLATILE
  RETURN stream_seq.create_consumer(stream, consumer,
                                    stream_seq.position_at(stream, start_at));
COMMENT ON FUNCTION stream_seq.create_consumer(regclass, text, timestamptz) IS
  'create a consumer positioned before the first row numbered at or after start_at';

CREATE FUNCTION stream_seq.create_group(stream regclass, consumer text, key text,
                                        slots integer, start_at timestamptz)
  RETURNS void
  LANGUAGE sql VOLATILE
  RETURN stream_seq.create_group(stream, consumer, key, slots,
                                 stream_seq.position_at(stream, start_at));
COMMENT ON FUNCTION stream_seq.create_group(regclass, text, text, integer, timestamptz) IS
  'create a consumer group positioned before the first row numbered at or after start_at';

CREATE FUNCTION stream_seq.reset(stream regclass, consumer text, to_time timestamptz,
                                 slot integer DEFAULT NULL)
  RETURNS void
  LANGUAGE sql VOLATILE
  RETURN stream_seq.reset(stream, consumer, stream_seq.position_at(stream, to_time), slot);
COMMENT ON FUNCTION stream_seq.reset(regclass, text, timestamptz, integer) IS
  'move a consumer, a slot, or all slots of a group to before the first row numbered at or after to_time';

-- Typed reads: the same pages as read(), read_slot() and page(), each row
-- as the stream table's own row type instead of jsonb.  The stream is
-- named by a value of its row type, usually NULL::table.
CREATE FUNCTION stream_seq._stream_of_row_type(row_type regtype) RETURNS regclass
  LANGUAGE plpgsql STABLE
  SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel regclass;
BEGIN
    SELECT t.typrelid INTO rel FROM pg_catalog.pg_type t
     WHERE t.oid = row_type AND t.typrelid <> 0;
    IF rel IS NULL OR NOT EXISTS (SELECT FROM stream_seq.stream s WHERE s.relid = rel) THEN
        RAISE EXCEPTION 'type % is not the row type of a stream table', row_type
          USING ERRCODE = 'wrong_object_type',
                HINT = 'Name the stream by a value of its row type, such as NULL::events.';
    END IF;
    RETURN rel;
END;
$$;
COMMENT ON FUNCTION stream_seq._stream_of_row_type(regtype) IS
  'internal: the stream table whose row type this is, for the typed reads';

/*
 * read_rows(NULL::table, consumer, max_rows): read() with each row as the
 * table's row type.  Runs as the caller, who needs SELECT on the table.
 */
CREATE FUNCTION stream_seq.read_rows(stream anyelement, consumer text,
                                     max_rows integer DEFAULT 100)
  RETURNS SETOF anyelement
  LANGUAGE plpgsql STABLE
  SET search_path = pg_catalog, pg_temp
AS $$
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
    SELECT s.seq_column, s.trimmed_before INTO col, first_kept
      FROM stream_seq.stream s WHERE s.relid = rel;
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
$$;
COMMENT ON FUNCTION stream_seq.read_rows(anyelement, text, integer) IS
  'read() with rows of the stream table''s own type: name the stream as NULL::table';

CREATE FUNCTION stream_seq.read_slot_rows(stream anyelement, consumer text, slot integer,
                                          token bigint, max_rows integer DEFAULT 100)
  RETURNS SETOF anyelement
  LANGUAGE plpgsql STABLE
  SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel regclass := stream_seq._stream_of_row_type(pg_catalog.pg_typeof(stream));
    st record;
    first_kept bigint := stream_seq.first(rel);
BEGIN
    IF max_rows IS NULL OR max_rows < 1 THEN
        RAISE EXCEPTION 'max_rows must be at least 1'
          USING ERRCODE = 'invalid_parameter_value';
    END IF;
    st := stream_seq._slot_state(rel, consumer, slot, token);
    IF st.position < first_kept - 1 THEN
        RAISE EXCEPTION 'rows after position % of slot % of group "%" were trimmed from stream table "%"',
              st.position, slot, consumer, rel
          USING ERRCODE = 'object_not_in_prerequisite_state',
                DETAIL = format('The stream now starts at %s.', first_kept),
                HINT = 'The owner of the group can move the slot with stream_seq.reset().';
    END IF;
    RETURN QUERY EXECUTE format(
        'SELECT t.* FROM %2$s t '
        ' WHERE %3$s = $1 AND t.%1$I > $2 AND t.%1$I < stream_seq.horizon($3) '
        '   AND ($5 IS NULL OR t.%1$I <= $5) '
        ' ORDER BY t.%1$I LIMIT $4', st.seq_column,
        stream_seq._page_source(rel, st.position), st.slot_expr)
      USING slot, st.position, rel, max_rows, st.read_upto;
END;
$$;
COMMENT ON FUNCTION stream_seq.read_slot_rows(anyelement, text, integer, bigint, integer) IS
  'read_slot() with rows of the stream table''s own type: name the stream as NULL::table';

CREATE FUNCTION stream_seq.page_rows(stream anyelement, after bigint,
                                     max_rows integer DEFAULT 100)
  RETURNS SETOF anyelement
  LANGUAGE plpgsql STABLE
  SET search_path = pg_catalog, pg_temp
AS $$
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
    SELECT s.seq_column, s.trimmed_before INTO col, first_kept
      FROM stream_seq.stream s WHERE s.relid = rel;
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
$$;
COMMENT ON FUNCTION stream_seq.page_rows(anyelement, bigint, integer) IS
  'page() with rows of the stream table''s own type: name the stream as NULL::table';

-- Retries and dead letters (src/parking.c): a retry policy per consumer;
-- park() schedules a row for another try, or makes it a dead letter past
-- the policy's maximum; due() hands back the rows whose retry is due.
ALTER TABLE stream_seq.consumer
  ADD COLUMN max_attempts integer CHECK (max_attempts >= 1),
  ADD COLUMN retry_delay interval,
  ADD COLUMN retry_backoff double precision CHECK (retry_backoff BETWEEN 1 AND 10),
  ADD COLUMN retry_max_delay interval;
ALTER TABLE stream_seq.parked
  ADD COLUMN due_at timestamptz,
  ADD COLUMN dead boolean NOT NULL DEFAULT false;
CREATE INDEX parked_due ON stream_seq.parked (stream, consumer, due_at)
  WHERE NOT resolved AND NOT dead AND due_at IS NOT NULL;
COMMENT ON COLUMN stream_seq.parked.due_at IS
  'when the row is due for another try through due() (NULL: only replay() hands it back)';
COMMENT ON COLUMN stream_seq.parked.dead IS
  'a dead letter: failed the consumer''s maximum of attempts; replay() or revive() hand it back';

DROP FUNCTION stream_seq.park(regclass, text, bigint, text);
CREATE FUNCTION stream_seq.park(stream regclass, consumer text, seq bigint,
                                reason text DEFAULT NULL,
                                retry_after interval DEFAULT NULL)
  RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_park'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.park(regclass, text, bigint, text, interval) IS
  'set a row aside in the caller''s transaction, which then advances past it; retried when due by the consumer''s policy or retry_after';

DROP FUNCTION stream_seq.replay(regclass, text, integer);
DROP FUNCTION stream_seq._take_parked(regclass, text, integer);
CREATE FUNCTION stream_seq._take_parked(stream regclass, consumer text, max_rows integer,
                                        only_due boolean DEFAULT false)
  RETURNS TABLE (seq bigint, reason text, attempts integer)
  AS 'MODULE_PATHNAME', 'stream_seq_take_parked'
  LANGUAGE C VOLATILE ROWS 10;
COMMENT ON FUNCTION stream_seq._take_parked(regclass, text, integer, boolean) IS
  'internal: mark parked rows resolved in the caller''s transaction, for replay() and due()';

-- replay() joined the parked rows to the stream table, estimated at 1,000
-- rows, by a scan of the whole table: each row is now looked up by number.
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
    IF col IS NULL THEN
        -- _take_parked() says what is wrong: NULL, or not a stream table
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
COMMENT ON FUNCTION stream_seq.replay(regclass, text, integer) IS
  'parked rows of a consumer, dead letters included, lowest first, marked resolved when the caller commits';

/*
 * due(stream, consumer, max_rows): the consumer's parked rows whose retry
 * is due (not dead letters), lowest first, each with the row as jsonb and
 * how often it failed; marked resolved when the caller commits (parking
 * one again counts another attempt).  Runs as the caller.
 */
CREATE FUNCTION stream_seq.due(stream regclass, consumer text,
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
COMMENT ON FUNCTION stream_seq.due(regclass, text, integer) IS
  'parked rows of a consumer whose retry is due, lowest first, marked resolved when the caller commits';

CREATE FUNCTION stream_seq.set_retry_policy(stream regclass, consumer text,
                                            max_attempts integer,
                                            delay interval DEFAULT '10 seconds',
                                            backoff double precision DEFAULT 2,
                                            max_delay interval DEFAULT '1 hour')
  RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_set_retry_policy'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.set_retry_policy(regclass, text, integer, interval, double precision, interval) IS
  'retry parked rows of a consumer: at most max_attempts failures, waiting delay * backoff^(n-1), at most max_delay (max_attempts NULL: no retries)';

CREATE FUNCTION stream_seq.revive(stream regclass, consumer text, seq bigint DEFAULT NULL)
  RETURNS bigint
  AS 'MODULE_PATHNAME', 'stream_seq_revive'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.revive(regclass, text, bigint) IS
  'make a consumer''s dead letters (or one of them) due again now; returns how many';

CREATE OR REPLACE VIEW stream_seq.parked_rows WITH (security_barrier) AS
SELECT p.stream, p.consumer, p.seq, p.reason, p.attempts, p.first_failed, p.last_failed,
       p.due_at, p.dead
  FROM stream_seq.parked p
 WHERE NOT p.resolved AND pg_catalog.has_table_privilege(p.stream, 'SELECT');
COMMENT ON VIEW stream_seq.parked_rows IS
  'rows set aside by consumers of streams the caller may read, not yet handed back: when each is due for a retry, or that it is a dead letter';

CREATE OR REPLACE VIEW stream_seq.consumers WITH (security_barrier) AS
SELECT c.stream,
       c.consumer,
       p.position,
       greatest(stream_seq.horizon(c.stream) - 1 - p.position, 0) AS lag,
       pg_catalog.now() - p.advanced_at AS since_advance,
       c.owner,
       c.slots,
       c.reset_at,
       c.reset_by,
       c.reset_from,
       c.max_attempts,
       c.retry_delay,
       c.retry_backoff,
       c.retry_max_delay,
       k.parked,
       k.dead_letters
  FROM stream_seq.consumer c
  CROSS JOIN LATERAL (
       SELECT CASE WHEN c.slots IS NULL THEN c.position
                   ELSE (SELECT pg_catalog.min(s.position) FROM stream_seq.consumer_slot s
                          WHERE s.stream = c.stream AND s.consumer = c.consumer) END AS position,
              CASE WHEN c.slots IS NULL THEN c.advanced_at
                   ELSE (SELECT pg_catalog.max(s.advanced_at) FROM stream_seq.consumer_slot s
                          WHERE s.stream = c.stream AND s.consumer = c.consumer) END AS advanced_at) p
  CROSS JOIN LATERAL (
       SELECT pg_catalog.count(*) FILTER (WHERE NOT x.dead) AS parked,
              pg_catalog.count(*) FILTER (WHERE x.dead) AS dead_letters
         FROM stream_seq.parked x
        WHERE x.stream = c.stream AND x.consumer = c.consumer AND NOT x.resolved) k
 WHERE pg_catalog.has_table_privilege(c.stream, 'SELECT');
COMMENT ON VIEW stream_seq.consumers IS
  'consumers of the streams the caller may read, with their lag in numbers (a group: its slowest slot), retry policy, parked rows and dead letters';
-- Resizing a group (see src/resize.c): resize_group() records a pending
-- resize (the new count, its slot expression and index, and a fence);
-- the old slots are read up to the fence only, and the first claim()
-- that finds every old slot finished up to it switches to the new slots.
ALTER TABLE stream_seq.consumer
  ADD COLUMN resize_to integer CHECK (resize_to BETWEEN 1 AND 1024),
  ADD COLUMN resize_fence bigint,
  ADD COLUMN resize_index text,
  ADD COLUMN resize_expr text,
  ADD COLUMN resize_at timestamptz,
  ADD COLUMN resized_from integer,
  ADD COLUMN resized_at timestamptz,
  ADD COLUMN retired_index text;

CREATE FUNCTION stream_seq.resize_group(stream regclass, consumer text, slots integer)
  RETURNS boolean
  AS 'MODULE_PATHNAME', 'stream_seq_resize_group'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.resize_group(regclass, text, integer) IS
  'change the slot count of a group while its workers run; true once it has the new count, false while the resize is pending';

-- read_slot() reads an old slot no further than the fence of a pending
-- resize: _slot_state() says where (read_upto; NULL: no limit).
DROP FUNCTION stream_seq._slot_state(regclass, text, integer, bigint);
CREATE FUNCTION stream_seq._slot_state(stream regclass, consumer text, slot integer,
    token bigint, OUT "position" bigint, OUT slot_expr text, OUT seq_column name,
    OUT read_upto bigint)
  AS 'MODULE_PATHNAME', 'stream_seq_slot_state'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq._slot_state(regclass, text, integer, bigint) IS
  'internal: a slot''s position, and the fence of a pending resize, for read_slot(); fails with SS001 if the token is not the slot''s';

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
        '   AND ($5 IS NULL OR t.%1$I <= $5) '
        ' ORDER BY t.%1$I LIMIT $4', st.seq_column,
        stream_seq._page_source(stream, st.position), st.slot_expr)
      USING slot, st.position, stream, max_rows, st.read_upto;
END;
$$;
COMMENT ON FUNCTION stream_seq.read_slot(regclass, text, integer, bigint, integer) IS
  'next page of a slot of a group: its rows after its position and below the horizon (and, while a resize is pending, up to its fence)';

-- The views show a pending resize: its new count and fence.
CREATE OR REPLACE VIEW stream_seq.consumer_slots WITH (security_barrier) AS
SELECT s.stream, s.consumer, s.slot, s.position,
       greatest(stream_seq.horizon(s.stream) - 1 - s.position, 0) AS lag,
       stream_seq._slot_backlog(s.stream, s.consumer, s.slot, s.position) AS backlog,
       s.worker,
       CASE WHEN s.lease_until > pg_catalog.clock_timestamp() THEN s.lease_until END AS lease_until,
       s.token,
       pg_catalog.now() - s.advanced_at AS since_advance,
       s.reset_at, s.reset_by, s.reset_from,
       (SELECT c.resize_fence FROM stream_seq.consumer c
         WHERE c.stream = s.stream AND c.consumer = s.consumer) AS read_upto
  FROM stream_seq.consumer_slot s
 WHERE pg_catalog.has_table_privilege(s.stream, 'SELECT');

CREATE OR REPLACE VIEW stream_seq.consumers WITH (security_barrier) AS
SELECT c.stream,
       c.consumer,
       p.position,
       greatest(stream_seq.horizon(c.stream) - 1 - p.position, 0) AS lag,
       pg_catalog.now() - p.advanced_at AS since_advance,
       c.owner,
       c.slots,
       c.reset_at,
       c.reset_by,
       c.reset_from,
       c.max_attempts,
       c.retry_delay,
       c.retry_backoff,
       c.retry_max_delay,
       k.parked,
       k.dead_letters,
       c.resize_to,
       c.resize_fence,
       c.resize_at,
       c.resized_from,
       c.resized_at
  FROM stream_seq.consumer c
  CROSS JOIN LATERAL (
       SELECT CASE WHEN c.slots IS NULL THEN c.position
                   ELSE (SELECT pg_catalog.min(s.position) FROM stream_seq.consumer_slot s
                          WHERE s.stream = c.stream AND s.consumer = c.consumer) END AS position,
              CASE WHEN c.slots IS NULL THEN c.advanced_at
                   ELSE (SELECT pg_catalog.max(s.advanced_at) FROM stream_seq.consumer_slot s
                          WHERE s.stream = c.stream AND s.consumer = c.consumer) END AS advanced_at) p
  CROSS JOIN LATERAL (
       SELECT pg_catalog.count(*) FILTER (WHERE NOT x.dead) AS parked,
              pg_catalog.count(*) FILTER (WHERE x.dead) AS dead_letters
         FROM stream_seq.parked x
        WHERE x.stream = c.stream AND x.consumer = c.consumer AND NOT x.resolved) k
 WHERE pg_catalog.has_table_privilege(c.stream, 'SELECT');
COMMENT ON VIEW stream_seq.consumers IS
  'consumers of the streams the caller may read, with their lag in numbers (a group: its slowest slot), retry policy, parked rows and dead letters, and a pending resize';

-- Retention policies (see src/retention_policy.c): one per stream, applied
-- every stream_seq.retention_interval by the extension's workers, as the
-- stream table's owner.  No foreign key to stream_seq.stream (pg_restore
-- -j loads rows in any order); the rows go with the stream
-- (stream_catalog_delete).
CREATE TABLE stream_seq.retention_policy (
    stream regclass PRIMARY KEY,
    keep_for interval CHECK (keep_for > '0'),
    keep_rows bigint CHECK (keep_rows >= 0),
    respect_consumers boolean NOT NULL DEFAULT true,
    set_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    CHECK (keep_for IS NOT NULL OR keep_rows IS NOT NULL)
);
COMMENT ON TABLE stream_seq.retention_policy IS
  'retention policies of stream tables: keep rows for keep_for, keep the newest keep_rows rows, respect consumers or not';
REVOKE ALL ON stream_seq.retention_policy FROM PUBLIC;
GRANT SELECT ON stream_seq.retention_policy TO PUBLIC;
SELECT pg_catalog.pg_extension_config_dump('stream_seq.retention_policy', '');

-- The last runs of each stream's policy (not dumped: a history).
CREATE TABLE stream_seq.retention_run (
    stream regclass NOT NULL,
    ran_at timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp(),
    by_worker boolean NOT NULL,
    removed_rows bigint,
    removed_partitions integer,
    removed_before bigint,
    held_by text,
    held_at bigint,
    sqlstate text,
    error text
);
CREATE INDEX retention_run_stream_ran_at ON stream_seq.retention_run (stream, ran_at);
COMMENT ON TABLE stream_seq.retention_run IS
  'the last 100 runs of each stream''s retention policy: what they removed, the consumer that held them back, or their error';
REVOKE ALL ON stream_seq.retention_run FROM PUBLIC;

CREATE VIEW stream_seq.retention_runs WITH (security_barrier) AS
SELECT r.stream, r.ran_at, r.by_worker, r.removed_rows, r.removed_partitions,
       r.removed_before, r.held_by, r.held_at, r.sqlstate, r.error
  FROM stream_seq.retention_run r
 WHERE pg_catalog.has_table_privilege(r.stream, 'SELECT');
COMMENT ON VIEW stream_seq.retention_runs IS
  'the last runs of the retention policies of streams the caller may read';
GRANT SELECT ON stream_seq.retention_runs TO PUBLIC;

CREATE FUNCTION stream_seq.set_retention(stream regclass,
                                         keep_for interval DEFAULT NULL,
                                         keep_rows bigint DEFAULT NULL,
                                         respect_consumers boolean DEFAULT true)
  RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_set_retention'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.set_retention(regclass, interval, bigint, boolean) IS
  'create or replace the stream''s retention policy (the table''s owner may)';

CREATE FUNCTION stream_seq.drop_retention(stream regclass) RETURNS boolean
  AS 'MODULE_PATHNAME', 'stream_seq_drop_retention'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.drop_retention(regclass) IS
  'remove the stream''s retention policy; returns whether it had one';

CREATE FUNCTION stream_seq.apply_retention(stream regclass)
  RETURNS stream_seq.retention_run
  AS 'MODULE_PATHNAME', 'stream_seq_apply_retention'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.apply_retention(regclass) IS
  'run the stream''s retention policy now, as the worker does, and return the recorded run';

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
