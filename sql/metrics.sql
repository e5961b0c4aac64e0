-- metrics(): gauges and counters of every stream, consumer and slot, for
-- a monitoring role (pg_monitor) that may not read the stream tables
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
\set SHOW_CONTEXT never

CREATE TABLE mev (k int, payload text);
SELECT stream_seq.enable('mev');
INSERT INTO mev SELECT g % 5, 'secret ' || g FROM generate_series(1, 40) g;
SELECT stream_seq.create_consumer('mev', 'done');
SELECT stream_seq.advance('mev', 'done', 40);
SELECT stream_seq.create_consumer('mev', 'behind');
SELECT stream_seq.advance('mev', 'behind', 25);
SELECT stream_seq.create_consumer('mev', 'new', 0);
SELECT stream_seq.create_group('mev', 'grp', 'k', 3);
SELECT count(*) AS claimed FROM stream_seq.claim('mev', 'grp', 'w1', '1 hour');
-- rows set aside: one for replay() by hand, one dead letter, one due
SELECT stream_seq.park('mev', 'behind', 3, 'by hand');
SELECT stream_seq.set_retry_policy('mev', 'new', 1);
SELECT stream_seq.park('mev', 'new', 5, 'dead');
SELECT stream_seq.park('mev', 'new', 6, 'dead too');
SELECT stream_seq.park('mev', 'behind', 30, 'due', '0 seconds');
CREATE TABLE mev_empty (payload text);
SELECT stream_seq.enable('mev_empty');

-- streams
SELECT stream, stream_name, head, horizon, first, waiting, durable_lag, committing,
       oldest_commit_seconds, tracked > 0 AS tracked, evicted, assigned_xacts
  FROM stream_seq.metrics('stream') ORDER BY stream_name;
-- consumers: lag in numbers, backlog in rows (exact below the cap)
SELECT stream_name, consumer, slots, position, lag, backlog_rows, backlog_capped,
       since_advance_seconds >= 0 AS advanced, parked, dead_letters, retries_due,
       oldest_parked_seconds > 0 AS parked_age, oldest_due_seconds > 0 AS due_age,
       resize_pending
  FROM stream_seq.metrics('consumer') ORDER BY stream_name, consumer;
-- slots: the backlogs add up to the group's
SELECT consumer, slot, position, lag, backlog_rows, backlog_capped, leased
  FROM stream_seq.metrics('slot') ORDER BY consumer, slot;
SELECT sum(backlog_rows) AS slots_backlog FROM stream_seq.metrics('slot');
-- every row of one call, by kind; columns that do not apply are NULL
SELECT kind, count(*), count(head) AS with_head, count(position) AS with_position,
       count(slot) AS with_slot, count(leased) AS with_leased
  FROM stream_seq.metrics() GROUP BY kind ORDER BY kind;

-- the cap: the newest 4 rows below the horizon are read, once per
-- stream for all its consumers; past them a backlog is the cap, flagged,
-- and the lag in numbers is the upper bound
SELECT kind, consumer, slot, lag, backlog_rows, backlog_capped
  FROM stream_seq.metrics(backlog_cap => 4)
 WHERE kind <> 'stream' ORDER BY kind, consumer, slot;
-- 0: not counted
SELECT kind, count(*), count(backlog_rows) AS counted, count(lag) AS with_lag
  FROM stream_seq.metrics(NULL, 0) GROUP BY kind ORDER BY kind;
-- a consumer that caught up: 0, whatever the cap
SELECT backlog_rows, backlog_capped FROM stream_seq.metrics('consumer', 1)
 WHERE consumer = 'done';

-- bad arguments change nothing and say what is wrong
SELECT * FROM stream_seq.metrics('streams');
SELECT * FROM stream_seq.metrics('');
SELECT * FROM stream_seq.metrics(NULL, NULL);
SELECT * FROM stream_seq.metrics(NULL, -1);
SELECT * FROM stream_seq.metrics(NULL, 100001);
SELECT count(*) FROM stream_seq.metrics('consumer', 100000);

-- rows not committed yet have no number: nothing moves
BEGIN;
INSERT INTO mev VALUES (1, 'uncommitted');
SELECT head, horizon, waiting FROM stream_seq.metrics('stream') WHERE stream = 'mev'::regclass;
ROLLBACK;

-- who may call it: pg_monitor, and roles granted EXECUTE; an ordinary
-- role may not, even one that may read the stream
CREATE ROLE metrics_nobody;
CREATE ROLE metrics_reader;
CREATE ROLE metrics_monitor IN ROLE pg_monitor;
CREATE ROLE metrics_granted;
GRANT USAGE ON SCHEMA stream_seq TO metrics_nobody, metrics_reader, metrics_granted;
GRANT SELECT ON mev TO metrics_reader;
GRANT EXECUTE ON FUNCTION stream_seq.metrics(text, integer) TO metrics_granted;
SET ROLE metrics_nobody;
SELECT count(*) FROM stream_seq.metrics();
RESET ROLE;
SET ROLE metrics_reader;
SELECT count(*) FROM stream_seq.metrics();
-- (the views remain its way to see the streams it may read)
SELECT stream, consumer, lag FROM stream_seq.consumers WHERE consumer = 'behind';
RESET ROLE;
-- pg_monitor: everything, without SELECT on the tables or the catalog
SET ROLE metrics_monitor;
SELECT kind, stream_name, consumer, slot, lag, backlog_rows
  FROM stream_seq.metrics() ORDER BY kind, stream_name, consumer, slot;
SELECT count(*) FROM mev;
SELECT count(*) FROM stream_seq.consumer;
SELECT count(*) FROM stream_seq.streams;
-- the names of the rows it counted come from the catalog, never from
-- a row: no column of metrics() holds a row's contents
SELECT count(*) AS leaks FROM stream_seq.metrics() m
 WHERE m::text LIKE '%secret%';
RESET ROLE;
SET ROLE metrics_granted;
SELECT kind, count(*) FROM stream_seq.metrics() GROUP BY kind ORDER BY kind;
RESET ROLE;

-- its internal queries run with search_path pinned: an operator a
-- monitoring role puts first in its search_path does not run in them
CREATE SCHEMA metrics_shadow AUTHORIZATION metrics_monitor;
SET ROLE metrics_monitor;
CREATE FUNCTION metrics_shadow.gt(bigint, bigint) RETURNS boolean
  LANGUAGE plpgsql AS $$
BEGIN
  RAISE NOTICE 'shadowing > ran as %', current_user;
  RETURN $1 OPERATOR(pg_catalog.>) $2;
END $$;
CREATE OPERATOR metrics_shadow.> (FUNCTION = metrics_shadow.gt,
                                  LEFTARG = bigint, RIGHTARG = bigint);
SET search_path = metrics_shadow, public, pg_catalog;
SET client_min_messages = notice;
SELECT count(*) FROM stream_seq.metrics();
RESET client_min_messages;
RESET search_path;
RESET ROLE;

-- a stream whose owner may not run its group's slot expression (no USAGE
-- on schema stream_seq, where slot_of() is) has its backlogs unknown; the
-- other streams' series stay
CREATE ROLE metrics_owner;
CREATE TABLE mev_owned (k int);
SELECT stream_seq.enable('mev_owned');
INSERT INTO mev_owned SELECT g FROM generate_series(1, 4) g;
SELECT stream_seq.create_group('mev_owned', 'ogrp', 'k', 2);
ALTER TABLE mev_owned OWNER TO metrics_owner;
SET ROLE metrics_monitor;
SELECT kind, stream_name, consumer, slot, lag, backlog_rows
  FROM stream_seq.metrics()
 WHERE kind <> 'stream' AND (stream_name = 'public.mev_owned' OR consumer = 'behind')
 ORDER BY stream_name, consumer, slot NULLS FIRST;
RESET ROLE;
DROP TABLE mev_owned;
DROP ROLE metrics_owner;

-- a dropped stream and its consumers leave the list
DROP TABLE mev_empty;
SELECT kind, count(*) FROM stream_seq.metrics() GROUP BY kind ORDER BY kind;

-- a call cancelled in the middle of a stream's count (a scraper's
-- timeout, here statement_timeout while a group's slow slot expression
-- runs) leaves its session as it was: the next statement runs, ROLLBACK
-- and an empty transaction work, nothing leaks (no WARNING at commit)
CREATE TABLE mev_slow (k int);
SELECT stream_seq.enable('mev_slow');
INSERT INTO mev_slow SELECT g FROM generate_series(1, 50) g;
CREATE FUNCTION metrics_slowkey(int) RETURNS text LANGUAGE sql IMMUTABLE
  AS $$SELECT pg_catalog.pg_sleep(0.05)::text || $1$$;
SELECT stream_seq.create_group('mev_slow', 'slow', 'public.metrics_slowkey(k)', 2, 0::bigint);
SET statement_timeout = '300ms';
SELECT count(*) FROM stream_seq.metrics();
RESET statement_timeout;
SELECT 1 AS after_cancel;
ROLLBACK;
BEGIN;
COMMIT;
-- caught in PL/pgSQL, and in a transaction that goes on and commits
SET statement_timeout = '300ms';
DO $$
BEGIN
  PERFORM count(*) FROM stream_seq.metrics();
EXCEPTION WHEN query_canceled THEN
  RAISE NOTICE 'metrics() cancelled';
END $$;
RESET statement_timeout;
BEGIN;
SET LOCAL statement_timeout = '300ms';
SAVEPOINT s;
SELECT count(*) FROM stream_seq.metrics();
ROLLBACK TO SAVEPOINT s;
SELECT count(*) AS streams FROM stream_seq.metrics('stream');
COMMIT;
SELECT stream_seq.drop_consumer('mev_slow', 'slow');
DROP TABLE mev_slow;
DROP FUNCTION metrics_slowkey(int);

DROP SCHEMA metrics_shadow CASCADE;
DROP ROLE metrics_monitor;
REVOKE ALL ON mev FROM metrics_reader;
REVOKE EXECUTE ON FUNCTION stream_seq.metrics(text, integer) FROM metrics_granted;
REVOKE USAGE ON SCHEMA stream_seq FROM metrics_nobody, metrics_reader, metrics_granted;
DROP ROLE metrics_granted;
DROP ROLE metrics_nobody;
DROP ROLE metrics_reader;
DROP TABLE mev;
