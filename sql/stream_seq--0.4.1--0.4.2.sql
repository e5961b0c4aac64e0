-- stream_seq 0.4.1 -> 0.4.2: rows that logical replication writes with
-- their numbers move the stream's counter, so that numbering continues
-- above them after a cut-over; rows inserted without a number in replica
-- mode outside a replication worker are refused.
\echo Use "ALTER EXTENSION stream_seq UPDATE TO '0.4.2'" to load this file. \quit

CREATE FUNCTION stream_seq.replica_trigger() RETURNS trigger
  AS 'MODULE_PATHNAME', 'stream_seq_replica_trigger'
  LANGUAGE C;
COMMENT ON FUNCTION stream_seq.replica_trigger() IS
  'internal: BEFORE INSERT OR UPDATE trigger of stream tables, fired in replica mode only; moves the counter above replicated numbers';

-- Every stream gets the trigger enable() now creates: for every UPDATE,
-- not UPDATE OF the column, since pglogical's apply does not say which
-- columns it updates, and a column-limited trigger would not fire there.
-- On a partitioned
-- stream PostgreSQL clones it onto the partitions, and ENABLE REPLICA
-- TRIGGER on the partitioned table reaches them too.
DO $$
DECLARE
    s record;
BEGIN
    FOR s IN SELECT relid FROM stream_seq.stream LOOP
        EXECUTE pg_catalog.format(
            'CREATE TRIGGER stream_seq_replica BEFORE INSERT OR UPDATE ON %s '
            'FOR EACH ROW EXECUTE FUNCTION stream_seq.replica_trigger()',
            s.relid);
        EXECUTE pg_catalog.format(
            'ALTER TABLE %s ENABLE REPLICA TRIGGER stream_seq_replica', s.relid);
    END LOOP;
END;
$$;

-- The stream table's owner (or the consumer's) gives a consumer to
-- another role; DROP ROLE, REASSIGN OWNED and DROP OWNED reach consumers
-- through the library.
CREATE FUNCTION stream_seq.alter_consumer_owner(stream regclass, consumer text,
                                                new_owner regrole)
  RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_alter_consumer_owner'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq.alter_consumer_owner(regclass, text, regrole) IS
  'give a consumer to another role (the stream table''s owner or the consumer''s owner may)';

-- pg_dump reads the extension's tables and every head sequence: the
-- database's owner may read them, so that it can dump its own database
-- ("pg_dump -U owner").  New head sequences, and a new owner after ALTER
-- DATABASE ... OWNER TO, get the same from the library.
CREATE FUNCTION stream_seq._grant_dump_access() RETURNS void
  AS 'MODULE_PATHNAME', 'stream_seq_grant_dump_access'
  LANGUAGE C VOLATILE;
COMMENT ON FUNCTION stream_seq._grant_dump_access() IS
  'internal: give the database''s owner SELECT on what pg_dump reads';
REVOKE ALL ON FUNCTION stream_seq._grant_dump_access() FROM PUBLIC;
SELECT stream_seq._grant_dump_access();

-- CREATE EXTENSION (and ALTER EXTENSION UPDATE) where the library is not
-- preloaded succeeded silently, and the first enable() failed: say so now.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_shmem_allocations
                    WHERE name = 'stream_seq') THEN
        RAISE WARNING 'stream_seq is not loaded via "shared_preload_libraries"'
          USING DETAIL = 'Stream tables cannot be enabled, written or read until it is.',
                HINT = 'Add stream_seq to the "shared_preload_libraries" setting and restart the server.';
    END IF;
END;
$$;
