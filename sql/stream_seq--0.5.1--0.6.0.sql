-- stream_seq 0.5.1 -> 0.6.0: application stacks (ORMs, drivers,
-- poolers), operators' tooling (metrics for Prometheus and pg_monitor),
-- and the resize of a partitioned stream without writers waiting.
\echo Use "ALTER EXTENSION stream_seq UPDATE TO '0.6.0'" to load this file. \quit

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

-- Adding the trigger to the existing streams needs SHARE ROW EXCLUSIVE
-- on each stream table (and, through the partitioned table, its
-- partitions), which stops their writers for the rest of the update.
-- Those locks are taken here, all in one go, in the way the prologue of
-- the 0.5.0 -> 0.5.1 update takes its own (see there why): the first
-- waited for at most 1 s, every further one only within what is left of
-- 200 ms (at most half of deadlock_timeout) after the first was granted;
-- if one is not granted in time, everything taken is given back, the
-- update waits, holding nothing and queueing behind nothing, until the
-- transactions that held it have ended, and tries again.  The session's
-- lock_timeout bounds the whole wait (55P03, nothing changed).  Nothing
-- of the extension's catalog is locked: CREATE TRIGGER reads it only.
DO $lock_streams$
DECLARE
    first_wait constant interval := interval '1 s';
    hold_budget constant interval :=
        least(interval '200 ms',
              pg_catalog.current_setting('deadlock_timeout')::interval / 2);
    saved_lock_timeout constant text := pg_catalog.current_setting('lock_timeout');
    deadline timestamptz;
    targets regclass[];
    granted_first timestamptz;
    wait_ms numeric;
    trying int;
    timed_out boolean;
    holders text[];
    holder_pids int[];
BEGIN
    IF saved_lock_timeout::interval > interval '0' THEN
        deadline := pg_catalog.clock_timestamp() + saved_lock_timeout::interval;
    END IF;
    LOOP
        -- read again at each try: streams come and go
        SELECT pg_catalog.array_agg(s.relid ORDER BY s.relid::pg_catalog.oid)
          INTO targets
          FROM stream_seq.stream s
         WHERE NOT EXISTS (SELECT FROM pg_catalog.pg_trigger g
                            WHERE g.tgrelid = s.relid::pg_catalog.oid
                              AND g.tgname = 'stream_seq_guard_insert');
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
                EXECUTE pg_catalog.format('LOCK TABLE %s IN SHARE ROW EXCLUSIVE MODE', targets[i]);
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

        -- wait, polling, for the transactions that held what could not be
        -- had (or a partition of it) in a conflicting mode to end
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
               AND l.mode NOT IN ('AccessShareLock', 'RowShareLock');
            IF holders IS NOT NULL THEN
                RAISE LOG 'stream_seq update: waiting for the transactions of processes % to end (they lock %)',
                    pg_catalog.array_to_string(holder_pids, ', '), targets[trying];
                PERFORM pg_catalog.pg_cancel_backend(a.pid)
                   FROM pg_catalog.pg_stat_activity a
                  WHERE a.pid = ANY (holder_pids)
                    AND a.backend_type = 'autovacuum worker'
                    AND a.query NOT LIKE '%(to prevent wraparound)%';
            END IF;
        END IF;
        LOOP
            IF deadline IS NOT NULL AND pg_catalog.clock_timestamp() >= deadline THEN
                RAISE EXCEPTION 'could not lock the stream tables extension "stream_seq" updates within lock_timeout'
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
$lock_streams$;

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
