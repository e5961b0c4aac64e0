-- Retention policies (0.5.0): set_retention(), drop_retention(),
-- apply_retention() and the runs they record.  The suite applies policies
-- itself (stream_seq.retention_interval is 0 in test/stream_seq.conf);
-- the worker is in TAP test 031_retention_policy.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
SET client_min_messages = notice;
\set SHOW_CONTEXT never
\set VERBOSITY terse

CREATE ROLE rp_owner;
CREATE ROLE rp_stranger;
GRANT USAGE ON SCHEMA stream_seq TO rp_owner, rp_stranger;
GRANT CREATE ON SCHEMA public TO rp_owner;

SET ROLE rp_owner;
CREATE TABLE rp_events (id int, payload text);
SELECT stream_seq.enable('rp_events');
INSERT INTO rp_events SELECT g, 'e' || g FROM generate_series(1, 10) g;
CREATE TABLE rp_plain (id int);
RESET ROLE;

-- 1. The SQL surface: NULL, bad and extreme values, SQLSTATEs.
SELECT stream_seq.set_retention(NULL, keep_rows => 5);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_retention('rp_events', keep_rows => 5, respect_consumers => NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_retention('rp_events');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_retention('rp_events', keep_rows => -1);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_retention('rp_events', keep_for => '0');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_retention('rp_events', keep_for => '-1 day');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_retention('rp_events', keep_for => '200000000 days');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_retention('rp_plain', keep_rows => 5);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.set_retention(0, keep_rows => 5);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.drop_retention(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.apply_retention(NULL);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.apply_retention('rp_events');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.drop_retention('rp_events');

-- an ordinary role that does not own the table may do nothing
SET ROLE rp_stranger;
SELECT stream_seq.set_retention('rp_events', keep_rows => 5);
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.drop_retention('rp_events');
\echo :LAST_ERROR_SQLSTATE
SELECT stream_seq.apply_retention('rp_events');
\echo :LAST_ERROR_SQLSTATE
INSERT INTO stream_seq.retention_policy (stream, keep_rows) VALUES ('rp_events', 1);
\echo :LAST_ERROR_SQLSTATE
SELECT count(*) FROM stream_seq.retention_run;
\echo :LAST_ERROR_SQLSTATE
-- the view shows only runs of streams the role may read
SELECT count(*) FROM stream_seq.retention_runs;
RESET ROLE;

-- the largest keep_rows keeps everything
SET ROLE rp_owner;
SELECT stream_seq.set_retention('rp_events', keep_rows => 9223372036854775807);
SELECT stream, keep_for, keep_rows, respect_consumers FROM stream_seq.retention_policies;
SELECT removed_rows, removed_partitions, removed_before, held_by, held_at, sqlstate, error, by_worker
  FROM stream_seq.apply_retention('rp_events');
SELECT count(*) FROM rp_events;

-- 2. keep_rows: the newest rows stay, the others go, first() follows
SELECT stream_seq.set_retention('rp_events', keep_rows => 4);
SELECT stream, keep_for, keep_rows, respect_consumers FROM stream_seq.retention_policies;
SELECT removed_rows, removed_partitions, removed_before, held_by, held_at, sqlstate
  FROM stream_seq.apply_retention('rp_events');
SELECT min(seq), max(seq), count(*) FROM rp_events;
SELECT stream_seq.first('rp_events');
-- again: nothing more to remove
SELECT removed_rows, removed_before, held_by FROM stream_seq.apply_retention('rp_events');

-- 3. a consumer holds the run back, and the run says so
SELECT stream_seq.create_consumer('rp_events', 'slow', 7);
INSERT INTO rp_events SELECT g, 'e' || g FROM generate_series(11, 20) g;
SELECT removed_rows, removed_before, held_by, held_at
  FROM stream_seq.apply_retention('rp_events');
SELECT min(seq), count(*) FROM rp_events;
-- not respecting consumers: the rows go all the same
SELECT stream_seq.set_retention('rp_events', keep_rows => 4, respect_consumers => false);
SELECT removed_rows, removed_before, held_by, held_at
  FROM stream_seq.apply_retention('rp_events');
SELECT min(seq), count(*) FROM rp_events;
SELECT stream_seq.drop_consumer('rp_events', 'slow');

-- keep_rows 0: everything below the horizon goes
SELECT stream_seq.set_retention('rp_events', keep_rows => 0);
SELECT removed_rows, removed_before FROM stream_seq.apply_retention('rp_events');
SELECT count(*) FROM rp_events;

-- 4. ROLLBACK TO SAVEPOINT undoes a run, its deletions and its record
INSERT INTO rp_events SELECT g, 'e' || g FROM generate_series(21, 25) g;
SELECT stream_seq.set_retention('rp_events', keep_rows => 2);
SELECT count(*) AS runs_before FROM stream_seq.retention_runs WHERE stream = 'rp_events'::regclass \gset
BEGIN;
SAVEPOINT s;
SELECT removed_rows FROM stream_seq.apply_retention('rp_events');
ROLLBACK TO SAVEPOINT s;
SELECT count(*) FROM rp_events;
SELECT count(*) - :runs_before AS new_runs FROM stream_seq.retention_runs WHERE stream = 'rp_events'::regclass;
COMMIT;

-- PREPARE TRANSACTION of a run: it wrote no stream rows, so it may
BEGIN;
SELECT removed_rows FROM stream_seq.apply_retention('rp_events');
PREPARE TRANSACTION 'rp_run';
RESET ROLE;
COMMIT PREPARED 'rp_run';
SET ROLE rp_owner;
SELECT count(*) FROM rp_events;

-- 5. keep_for on a stream without commit times: set_retention() refuses
-- it where the catalog records time columns (55000), else the run
-- records the error (it needs stream_seq.position_at()), not raising it
DO $$
DECLARE
  r stream_seq.retention_run;
BEGIN
  BEGIN
    PERFORM stream_seq.set_retention('rp_events', keep_for => '1 day');
  EXCEPTION WHEN object_not_in_prerequisite_state THEN
    RAISE NOTICE 'keep_for without commit times: refused or failed';
    RETURN;
  END;
  PERFORM pg_catalog.set_config('client_min_messages', 'error', true);
  r := stream_seq.apply_retention('rp_events');
  PERFORM pg_catalog.set_config('client_min_messages', 'notice', true);
  IF r.sqlstate IS NOT NULL AND r.removed_rows IS NULL THEN
    RAISE NOTICE 'keep_for without commit times: refused or failed';
  END IF;
END $$;
SELECT count(*) FROM rp_events;

-- 6. a partitioned stream, partitioned by time: whole partitions go
CREATE TABLE rp_parts (ts timestamptz NOT NULL, v int) PARTITION BY RANGE (ts);
CREATE TABLE rp_parts_1 PARTITION OF rp_parts FOR VALUES FROM ('2000-01-01') TO ('2000-02-01');
CREATE TABLE rp_parts_2 PARTITION OF rp_parts FOR VALUES FROM ('2000-02-01') TO ('2000-03-01');
CREATE TABLE rp_parts_3 PARTITION OF rp_parts FOR VALUES FROM ('2000-03-01') TO ('2000-04-01');
CREATE TABLE rp_parts_4 PARTITION OF rp_parts FOR VALUES FROM ('2000-04-01') TO ('3000-01-01');
SELECT stream_seq.enable('rp_parts');
INSERT INTO rp_parts VALUES ('2000-01-05', 1), ('2000-01-06', 2);
INSERT INTO rp_parts VALUES ('2000-02-05', 3), ('2000-02-06', 4);
INSERT INTO rp_parts VALUES ('2000-03-05', 5), ('2000-03-06', 6);
INSERT INTO rp_parts VALUES ('2000-04-05', 7), (now(), 8);
SELECT stream_seq.create_consumer('rp_parts', 'reader', 2);
SELECT stream_seq.set_retention('rp_parts', keep_for => '1 day');
-- the consumer has finished the first partition only
SELECT removed_rows, removed_partitions, removed_before, held_by, held_at, sqlstate
  FROM stream_seq.apply_retention('rp_parts');
SELECT relname FROM pg_class WHERE relname LIKE 'rp\_parts\_%' ORDER BY 1;
SELECT stream_seq.first('rp_parts');
SELECT stream_seq.advance('rp_parts', 'reader', 8);
SELECT removed_partitions, removed_before, held_by FROM stream_seq.apply_retention('rp_parts');
SELECT relname FROM pg_class WHERE relname LIKE 'rp\_parts\_%' ORDER BY 1;
-- keep_rows on it: only partitions wholly below the newest rows go
CREATE TABLE rp_parts_0 PARTITION OF rp_parts FOR VALUES FROM ('1999-01-01') TO ('2000-01-01');
SELECT stream_seq.set_retention('rp_parts', keep_rows => 3);
SELECT removed_partitions, removed_before, held_by FROM stream_seq.apply_retention('rp_parts');
SELECT relname FROM pg_class WHERE relname LIKE 'rp\_parts\_%' ORDER BY 1;

-- 7. the record: newest runs, bounded; a dropped stream takes its
-- policy and runs along
SELECT stream, by_worker, removed_rows, removed_partitions, removed_before, held_by, held_at
  FROM stream_seq.retention_runs WHERE sqlstate IS NULL ORDER BY ran_at;
SELECT stream_seq.set_retention('rp_events', keep_rows => 2);
RESET ROLE;
-- runs that remove nothing add no row when the newest says the same:
-- its ran_at moves (an idle stream keeps one row, its last check)
SELECT (stream_seq.apply_retention('rp_events')).ran_at IS NOT NULL AS first_run;
SELECT count(*) AS runs_before, max(ran_at) AS last_at
  FROM stream_seq.retention_runs WHERE stream = 'rp_events'::regclass \gset
DO $$
BEGIN
  FOR i IN 1..105 LOOP
    PERFORM stream_seq.apply_retention('rp_events');
  END LOOP;
END $$;
SELECT count(*) - :runs_before AS new_rows, max(ran_at) > :'last_at' AS moved,
       (array_agg(removed_rows ORDER BY ran_at DESC))[1] AS newest_removed
  FROM stream_seq.retention_runs WHERE stream = 'rp_events'::regclass;
-- a consumer holding the run back at a new position is a new row; the
-- same position again is not
SELECT stream_seq.create_consumer('rp_events', 'idle_reader', stream_seq.first('rp_events') - 1);
INSERT INTO rp_events SELECT g, 'e' || g FROM generate_series(26, 30) g;
SELECT removed_rows, held_by FROM stream_seq.apply_retention('rp_events');
SELECT removed_rows, held_by FROM stream_seq.apply_retention('rp_events');
SELECT count(*) - :runs_before AS new_rows
  FROM stream_seq.retention_runs WHERE stream = 'rp_events'::regclass;
SELECT stream_seq.drop_consumer('rp_events', 'idle_reader');
-- runs that remove rows are all recorded, the newest 100 kept
DO $$
BEGIN
  FOR i IN 1..105 LOOP
    INSERT INTO rp_events VALUES (100 + i, 'r' || i);
    COMMIT;
    PERFORM stream_seq.apply_retention('rp_events');
  END LOOP;
END $$;
SELECT count(*), min(removed_rows), max(removed_rows)
  FROM stream_seq.retention_runs WHERE stream = 'rp_events'::regclass;
DROP TABLE rp_events;
SELECT count(*) FROM stream_seq.retention_policy;
SELECT count(*) FROM stream_seq.retention_run;
SELECT stream_seq.disable('rp_parts');
SELECT count(*) FROM stream_seq.retention_policy;
SELECT count(*) FROM stream_seq.retention_run;

DROP TABLE rp_parts, rp_plain;
REVOKE ALL ON SCHEMA public FROM rp_owner;
REVOKE ALL ON SCHEMA stream_seq FROM rp_owner, rp_stranger;
DROP ROLE rp_owner, rp_stranger;
