-- stream_seq 0.7.0 -> 0.8.0.

\echo Use "ALTER EXTENSION stream_seq UPDATE TO '0.8.0'" to load this file. \quit

-- This update changes the consumers' tables (stream_seq.consumer,
-- stream_seq.parked) and views, which needs ACCESS EXCLUSIVE on them;
-- waited for statement by statement, those locks would queue every
-- consumer behind a consumer's open transaction.  So every table and view
-- of the extension but stream_seq.stream, stream_seq.partition_range and
-- the views over them (what writers and horizon() read: writers are not
-- stopped) is locked first, in one go, by the protocol of
-- stream_seq--0.6.0--0.7.0.sql (see there): each lock waited for briefly,
-- everything given back and the transactions in the way waited for,
-- polling, when one is not granted in time.  An update from 0.6.0 or
-- earlier holds these locks already (its steps took them).
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
                ) t;

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

-- Consumer start positions by name: create_consumer() and create_group()
-- with start => 'earliest' (before every retained row, as start_after 0),
-- 'latest' (after every row readable now: the horizon of the call's
-- statement, less one) or a time written as text (as start_at).  A text
-- third (fifth) argument: a positional call with an untyped literal there
-- was ambiguous between start_after and start_at, and now takes this one;
-- every typed and named call resolves as before.
CREATE FUNCTION stream_seq._start_position(start text, OUT named text,
                                           OUT at timestamptz)
  LANGUAGE plpgsql STABLE
  SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF start IS NULL THEN
        RAISE EXCEPTION 'start position must not be null'
          USING ERRCODE = 'null_value_not_allowed',
                HINT = 'Use ''earliest'', ''latest'' or a time.';
    END IF;
    IF lower(btrim(start)) IN ('earliest', 'latest') THEN
        named := lower(btrim(start));
        RETURN;
    END IF;
    BEGIN
        at := start::timestamptz;
    EXCEPTION WHEN data_exception THEN
        RAISE EXCEPTION 'invalid start position "%"', start
          USING ERRCODE = 'invalid_parameter_value',
                HINT = 'Use ''earliest'', ''latest'' or a time such as ''2026-01-01 00:00+00''; a position is given as start_after.';
    END;
END;
$$;
COMMENT ON FUNCTION stream_seq._start_position(text) IS
  'internal: what a start position names (earliest, latest) or the time it gives';

CREATE FUNCTION stream_seq.create_consumer(stream regclass, consumer text,
                                           start text)
  RETURNS void
  LANGUAGE plpgsql VOLATILE
  SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p record;
BEGIN
    p := stream_seq._start_position(start);
    IF p.named = 'earliest' THEN
        PERFORM stream_seq.create_consumer(stream, consumer, 0::bigint);
    ELSIF p.named = 'latest' THEN
        PERFORM stream_seq.create_consumer(stream, consumer,
                                           stream_seq.horizon(stream) - 1);
    ELSE
        PERFORM stream_seq.create_consumer(stream, consumer, p.at);
    END IF;
END;
$$;
COMMENT ON FUNCTION stream_seq.create_consumer(regclass, text, text) IS
  'create a consumer positioned at ''earliest'', ''latest'' or a time (text)';

CREATE FUNCTION stream_seq.create_group(stream regclass, consumer text, key text,
                                        slots integer, start text)
  RETURNS void
  LANGUAGE plpgsql VOLATILE
  SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    p record;
BEGIN
    p := stream_seq._start_position(start);
    IF p.named = 'earliest' THEN
        PERFORM stream_seq.create_group(stream, consumer, key, slots, 0::bigint);
    ELSIF p.named = 'latest' THEN
        PERFORM stream_seq.create_group(stream, consumer, key, slots,
                                        stream_seq.horizon(stream) - 1);
    ELSE
        PERFORM stream_seq.create_group(stream, consumer, key, slots, p.at);
    END IF;
END;
$$;
COMMENT ON FUNCTION stream_seq.create_group(regclass, text, text, integer, text) IS
  'create a consumer group positioned at ''earliest'', ''latest'' or a time (text)';

-- Per-key order through retries (src/parking.c, src/group.c).  A group
-- may hold a key whose row was parked: its later rows are parked as held
-- rows by read_slot() (which moves the slot past them, so the slot's other
-- keys go on) and handed back by due(), one at a time and in order, once
-- every row of the key before them was applied.  key_order: NULL (off),
-- 'until_applied' (a dead letter lets its key go on) or 'until_released'
-- (a dead letter holds its key until release_key()).
ALTER TABLE stream_seq.consumer ADD COLUMN key_order text
  CONSTRAINT consumer_key_order_check CHECK (key_order IN ('until_applied', 'until_released'));
-- key: the group key of a row parked under per-key order (NULL: not held
-- by key); held: parked because a row of its key before it was, not a
-- failure; released_at, release_reason: release_key() let its key go on.
ALTER TABLE stream_seq.parked ADD COLUMN key text,
  ADD COLUMN held boolean NOT NULL DEFAULT false,
  ADD COLUMN released_at timestamptz,
  ADD COLUMN release_reason text;
-- The index holds a hash of the key, not the key: a key may be longer than
-- a btree entry can be (about 2700 bytes), and a row of such a key must
-- still park.  Lookups compare the hashes, then the keys.
CREATE INDEX parked_key_idx ON stream_seq.parked
  (stream, consumer, pg_catalog.hashtextextended(key, 0), seq)
  WHERE key IS NOT NULL AND NOT resolved;

CREATE FUNCTION stream_seq.set_key_order(stream regclass, consumer text, hold text)
  RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_set_key_order'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.set_key_order(regclass, text, text) IS
  'per-key order through retries for a group: hold the later rows of a key while a row of it is parked (''until_applied'', ''until_released'' or ''off'')';

CREATE FUNCTION stream_seq.release_key(stream regclass, consumer text, key text, reason text)
  RETURNS bigint
  AS 'MODULE_PATHNAME', 'stream_seq_release_key'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.release_key(regclass, text, text, text) IS
  'let a held key of a group go on past its parked rows (they stay parked, dead letters stay dead); returns how many rows it released';

CREATE FUNCTION stream_seq._key_order_page(stream regclass, consumer text, slot integer,
    token bigint, "position" bigint, read_upto bigint, max_rows integer,
    OUT "position" bigint, OUT read_upto bigint)
  AS 'MODULE_PATHNAME', 'stream_seq_key_order_page'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq._key_order_page(regclass, text, integer, bigint, bigint, bigint, integer) IS
  'internal: for read_slot() under per-key order, parks the rows of held keys at the start of the slot and moves the slot past them; says which rows the page may hold';

-- _slot_state() with a fifth column, under a name of its own: the old
-- one stays as it is for the read_slot() of a session that was running
-- while the update committed (a function dropped under a running caller
-- fails it with XX000, "cache lookup failed")
CREATE FUNCTION stream_seq._slot_read_state(stream regclass, consumer text, slot integer,
    token bigint, OUT "position" bigint, OUT slot_expr text, OUT seq_column name,
    OUT read_upto bigint, OUT key_order boolean)
  AS 'MODULE_PATHNAME', 'stream_seq_slot_state'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq._slot_read_state(regclass, text, integer, bigint) IS
  'internal: a slot''s position, the fence of a pending resize, and whether the group keeps per-key order, for read_slot(); fails with SS001 if the token is not the slot''s';

CREATE OR REPLACE FUNCTION stream_seq.read_slot(stream regclass, consumer text, slot integer,
                                                token bigint, max_rows integer DEFAULT 100)
  RETURNS TABLE (seq bigint, "row" jsonb)
  LANGUAGE plpgsql STABLE
  SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    st record;
    pg record;
    first_kept bigint := stream_seq.first(stream);
BEGIN
    IF max_rows IS NULL OR max_rows < 1 THEN
        RAISE EXCEPTION 'max_rows must be at least 1'
          USING ERRCODE = 'invalid_parameter_value';
    END IF;
    st := stream_seq._slot_read_state(stream, consumer, slot, token);
    IF st.position < first_kept - 1 THEN
        RAISE EXCEPTION 'rows after position % of slot % of group "%" were trimmed from stream table "%"',
              st.position, slot, consumer, stream
          USING ERRCODE = 'object_not_in_prerequisite_state',
                DETAIL = format('The stream now starts at %s.', first_kept),
                HINT = 'The owner of the group can move the slot with stream_seq.reset().';
    END IF;
    IF st.key_order THEN
        pg := stream_seq._key_order_page(stream, consumer, slot, token, st.position,
                                         st.read_upto, max_rows);
        st.position := pg.position;
        st.read_upto := pg.read_upto;
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
  'next page of a slot of a group: its rows after its position and below the horizon (and, while a resize is pending, up to its fence; under per-key order, one row per key and none of a held key)';

CREATE OR REPLACE FUNCTION stream_seq.read_slot_rows(stream anyelement, consumer text, slot integer,
                                                     token bigint, max_rows integer DEFAULT 100)
  RETURNS SETOF anyelement
  LANGUAGE plpgsql STABLE
  SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    rel regclass := stream_seq._stream_of_row_type(pg_catalog.pg_typeof(stream));
    st record;
    pg record;
    first_kept bigint := stream_seq.first(rel);
BEGIN
    IF max_rows IS NULL OR max_rows < 1 THEN
        RAISE EXCEPTION 'max_rows must be at least 1'
          USING ERRCODE = 'invalid_parameter_value';
    END IF;
    st := stream_seq._slot_read_state(rel, consumer, slot, token);
    IF st.position < first_kept - 1 THEN
        RAISE EXCEPTION 'rows after position % of slot % of group "%" were trimmed from stream table "%"',
              st.position, slot, consumer, rel
          USING ERRCODE = 'object_not_in_prerequisite_state',
                DETAIL = format('The stream now starts at %s.', first_kept),
                HINT = 'The owner of the group can move the slot with stream_seq.reset().';
    END IF;
    IF st.key_order THEN
        pg := stream_seq._key_order_page(rel, consumer, slot, token, st.position,
                                         st.read_upto, max_rows);
        st.position := pg.position;
        st.read_upto := pg.read_upto;
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

-- A parked row blocks its key (holds the key's later rows) while it is not
-- resolved, not released, and not a dead letter of a group that lets dead
-- letters go on.
CREATE OR REPLACE VIEW stream_seq.parked_rows WITH (security_barrier) AS
SELECT p.stream, p.consumer, p.seq, p.reason, p.attempts, p.first_failed, p.last_failed,
       p.due_at, p.dead, p.key, p.held,
       (SELECT pg_catalog.min(q.seq) FROM stream_seq.parked q
         WHERE q.stream = p.stream AND q.consumer = p.consumer
           AND pg_catalog.hashtextextended(q.key, 0) = pg_catalog.hashtextextended(p.key, 0)
           AND q.key = p.key
           AND q.seq < p.seq AND NOT q.resolved AND q.released_at IS NULL
           AND (NOT q.dead OR c.key_order = 'until_released')) AS waits_behind,
       p.released_at, p.release_reason
  FROM stream_seq.parked p
  JOIN stream_seq.consumer c ON c.stream = p.stream AND c.consumer = p.consumer
 WHERE NOT p.resolved AND pg_catalog.has_table_privilege(p.stream, 'SELECT');
COMMENT ON VIEW stream_seq.parked_rows IS
  'rows set aside by consumers of streams the caller may read, not yet handed back: when each is due for a retry, or that it is a dead letter; under per-key order, held rows and the first row of their key they wait behind';

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
       c.resized_at,
       k.held,
       c.key_order
  FROM stream_seq.consumer c
  CROSS JOIN LATERAL (
       SELECT CASE WHEN c.slots IS NULL THEN c.position
                   ELSE (SELECT pg_catalog.min(s.position) FROM stream_seq.consumer_slot s
                          WHERE s.stream = c.stream AND s.consumer = c.consumer) END AS position,
              CASE WHEN c.slots IS NULL THEN c.advanced_at
                   ELSE (SELECT pg_catalog.max(s.advanced_at) FROM stream_seq.consumer_slot s
                          WHERE s.stream = c.stream AND s.consumer = c.consumer) END AS advanced_at) p
  CROSS JOIN LATERAL (
       SELECT pg_catalog.count(*) FILTER (WHERE NOT x.dead AND NOT x.held) AS parked,
              pg_catalog.count(*) FILTER (WHERE x.dead) AS dead_letters,
              pg_catalog.count(*) FILTER (WHERE x.held) AS held
         FROM stream_seq.parked x
        WHERE x.stream = c.stream AND x.consumer = c.consumer AND NOT x.resolved) k
 WHERE pg_catalog.has_table_privilege(c.stream, 'SELECT');
COMMENT ON VIEW stream_seq.consumers IS
  'consumers of the streams the caller may read, with their lag in numbers (a group: its slowest slot), retry policy, parked rows and dead letters, a pending resize, and per-key order with its held rows';

-- metrics() counts held rows (held, its last column); parked counts
-- neither held rows nor dead letters.
DROP FUNCTION stream_seq.metrics(text, integer);
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
                 resize_pending integer, leased integer, held bigint)
  AS 'MODULE_PATHNAME', 'stream_seq_metrics'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.metrics(text, integer) IS
  'gauges and counters of every stream, consumer and slot, for monitoring (pg_monitor): numbers, counts, seconds, backlogs in rows counted up to backlog_cap';
REVOKE ALL ON FUNCTION stream_seq.metrics(text, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION stream_seq.metrics(text, integer) TO pg_monitor;
-- end of per-key order through retries
