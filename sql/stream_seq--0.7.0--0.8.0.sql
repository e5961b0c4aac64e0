-- stream_seq 0.7.0 -> 0.8.0.

\echo Use "ALTER EXTENSION stream_seq UPDATE TO '0.8.0'" to load this file. \quit

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
