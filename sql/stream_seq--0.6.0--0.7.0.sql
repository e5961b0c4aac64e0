-- stream_seq 0.6.0 -> 0.7.0: one write path without row triggers on
-- INSERT.  Rows are captured as they are stored by an index of access
-- method stream_seq_capture (it stores nothing), inserted with
-- placeholders in the stream and time columns (their defaults), and
-- numbered at commit in place.

\echo Use "ALTER EXTENSION stream_seq UPDATE TO '0.7.0'" to load this file. \quit

-- The capture access method: an index of it on a stream table records
-- the TID of every row the executor stores, for the commit-time write.
CREATE FUNCTION stream_seq.capture_handler(internal) RETURNS index_am_handler
  AS 'MODULE_PATHNAME', 'stream_seq_capture_handler'
  LANGUAGE C;
COMMENT ON FUNCTION stream_seq.capture_handler(internal) IS
  'internal: the handler of index access method stream_seq_capture';
CREATE ACCESS METHOD stream_seq_capture TYPE INDEX HANDLER stream_seq.capture_handler;
COMMENT ON ACCESS METHOD stream_seq_capture IS
  'captures the rows stored into a stream table for the commit-time write; stores nothing, cannot be scanned';
CREATE OPERATOR CLASS stream_seq.capture_int8_ops
  DEFAULT FOR TYPE int8 USING stream_seq_capture AS STORAGE int8;
CREATE OPERATOR CLASS stream_seq.capture_timestamptz_ops
  DEFAULT FOR TYPE timestamptz USING stream_seq_capture AS STORAGE timestamptz;

-- Moving a stream enabled by an earlier version to the write path of
-- this one (src/upgrade.c): its capture index, "seq > 0" for the
-- predicates that said "seq IS NOT NULL", the placeholder defaults, the
-- guard and replica triggers for UPDATE only, the old insert triggers
-- disabled (dropped when the table is free for a moment; run it again to
-- drop them later).  Under a ShareRowExclusiveLock of the table: writers
-- wait, readers go on.  The table's owner only.
CREATE FUNCTION stream_seq.upgrade_write_path(stream regclass) RETURNS text
  AS 'MODULE_PATHNAME', 'stream_seq_upgrade_write_path'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.upgrade_write_path(regclass) IS
  'moves a stream enabled before 0.7.0 to the write path without INSERT triggers (ALTER EXTENSION UPDATE does it for every stream); says what it did, or what is left';

-- The update to 0.8.0 that follows this one in the same transaction
-- changes the consumers' tables and views, which needs ACCESS EXCLUSIVE
-- on them; taken there, after the stream tables' locks taken here, it
-- would wait for a consumer's open transaction while holding what that
-- transaction's writes wait for (a deadlock).  So they are taken here, in
-- the same go and first, as stream_seq--0.5.0--0.6.0.sql takes them:
-- ACCESS EXCLUSIVE on every table and view of the extension but
-- stream_seq.stream, stream_seq.partition_range and the views over them
-- (which writers and horizon() read).  Consumers wait for the update's
-- few milliseconds; writers are not stopped by these.
--
-- Moving the streams needs SHARE ROW EXCLUSIVE on each stream table (and,
-- through a partitioned table, its partitions), which stops their writers
-- for the rest of the update: a few milliseconds, as the capture index
-- stores nothing (its build reads no row) and the rest are catalog
-- changes; and EXCLUSIVE on stream_seq.stream, which writers and readers
-- do not conflict with (they take ACCESS SHARE) but enable(), disable(),
-- trim() and seals do, so that the streams moved below are those locked.
-- They are taken as stream_seq--0.5.0--0.6.0.sql takes its own (see
-- there why): all in one go, the first waited for at most 1 s (half of
-- deadlock_timeout if less), the others within what is left of 200 ms
-- (0.3 deadlock_timeout if less) after it; if one is not granted in time,
-- everything taken is given back and the update waits, polling, until
-- the transactions that held it have ended, and tries again.  It polls
-- only while it holds nothing an application may wait for: in a
-- transaction that already does (one that wrote or locked tables before
-- the update), it gives up at once instead, with 55P03 and a message
-- that names the processes in the way, and nothing is changed.  The
-- session's lock_timeout bounds the whole wait (55P03, nothing changed).
-- Updates from 0.5.1 and earlier hold these locks already (their steps
-- took them): they are granted at once.
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

-- every stream, in the order of their OIDs, under the locks taken above
DO $$
DECLARE
    s record;
    said text;
BEGIN
    FOR s IN SELECT relid FROM stream_seq.stream ORDER BY relid::pg_catalog.oid LOOP
        said := stream_seq.upgrade_write_path(s.relid);
        IF said <> 'moved' THEN
            RAISE NOTICE 'stream table %: %', s.relid, said;
        END IF;
    END LOOP;
END;
$$;
