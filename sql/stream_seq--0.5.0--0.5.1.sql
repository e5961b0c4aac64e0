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

-- ---------------------------------------------------------------------
-- Section C: retries, parking and resizing
-- ---------------------------------------------------------------------

-- ---------------------------------------------------------------------
-- Section D: partitions, times, upgrades
-- ---------------------------------------------------------------------
