-- stream_seq 0.4.2 -> 0.5.0: consumer features (typed reads, commit times
-- and seeking by them, retries with backoff and dead letters, resizing
-- groups, retention policies applied by the extension's worker).
\echo Use "ALTER EXTENSION stream_seq UPDATE TO '0.5.0'" to load this file. \quit

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
