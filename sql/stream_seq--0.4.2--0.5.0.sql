-- stream_seq 0.4.2 -> 0.5.0: consumer features (typed reads, commit times
-- and seeking by them, retries with backoff and dead letters, resizing
-- groups, retention policies applied by the extension's worker).
\echo Use "ALTER EXTENSION stream_seq UPDATE TO '0.5.0'" to load this file. \quit

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
 WHERE pg_catalog.has_table_privilege(c.stream, 'SELECT');
