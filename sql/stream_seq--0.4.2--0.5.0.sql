-- stream_seq 0.4.2 -> 0.5.0: consumer features (typed reads, commit times
-- and seeking by them, retries with backoff and dead letters, resizing
-- groups, retention policies applied by the extension's worker).
\echo Use "ALTER EXTENSION stream_seq UPDATE TO '0.5.0'" to load this file. \quit

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
