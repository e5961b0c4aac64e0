-- What operations tools do to a stream table, as far as one server shows
-- it: rows that come with their numbers in replica mode, the roles that
-- own consumers, and pg_repack's log trigger.  Replication, dump and
-- restore and pg_repack itself are in TAP test 025_operations.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
SET client_min_messages = notice;
\set SHOW_CONTEXT never

CREATE ROLE ops_owner;
CREATE ROLE ops_reader;
CREATE ROLE ops_heir;
CREATE ROLE ops_stranger;
GRANT USAGE ON SCHEMA stream_seq TO ops_owner, ops_reader, ops_heir, ops_stranger;
GRANT CREATE ON SCHEMA public TO ops_owner;

-- the stream belongs to an ordinary role
SET ROLE ops_owner;
CREATE TABLE ops_events (id bigint PRIMARY KEY, payload text);
SELECT stream_seq.enable('ops_events');
SELECT tgname, tgenabled FROM pg_trigger
 WHERE tgrelid = 'ops_events'::regclass AND tgname LIKE 'stream_seq%' ORDER BY 1;
INSERT INTO ops_events VALUES (1, 'a'), (2, 'b');
GRANT SELECT ON ops_events TO ops_reader;
RESET ROLE;

-- 1. Replica mode (a subscription's apply worker, or a session that sets
-- it): a row that comes with a number moves the counter above it; one
-- without a number would never get one and is refused.
SET session_replication_role = replica;
INSERT INTO ops_events (id, payload, seq) VALUES (3, 'replicated', 5000);
INSERT INTO ops_events (id, payload) VALUES (4, 'no number');
UPDATE ops_events SET seq = 6000 WHERE id = 3;   -- the apply worker's UPDATE
RESET session_replication_role;
INSERT INTO ops_events VALUES (5, 'local');
SELECT id, payload, seq FROM ops_events ORDER BY seq;
-- the counter and the horizon are above every replicated number
SELECT stream_seq.head('ops_events') > 6000 AS head_above,
       stream_seq.horizon('ops_events') > 6000 AS horizon_above;
-- the last possible number leaves none to follow
SET session_replication_role = replica;
INSERT INTO ops_events (id, payload, seq) VALUES (6, 'last', 9223372036854775807);
RESET session_replication_role;
SELECT count(*) FROM ops_events WHERE id = 6;
-- a number in replica mode inside a rolled-back savepoint still moves the
-- counter (a gap, never a number handed out twice)
BEGIN;
SET LOCAL session_replication_role = replica;
SAVEPOINT s;
INSERT INTO ops_events (id, payload, seq) VALUES (7, 'rolled back', 7000);
ROLLBACK TO SAVEPOINT s;
SET LOCAL session_replication_role = origin;
INSERT INTO ops_events VALUES (8, 'after savepoint');
COMMIT;
SELECT id, seq > 7000 AS above FROM ops_events WHERE id IN (7, 8);
-- and in a prepared transaction: the counter moved at the INSERT, so
-- nothing is left for COMMIT PREPARED to do
BEGIN;
SET LOCAL session_replication_role = replica;
INSERT INTO ops_events (id, payload, seq) VALUES (9, 'prepared', 8000);
PREPARE TRANSACTION 'ops_replicated';
INSERT INTO ops_events VALUES (10, 'while prepared');
COMMIT PREPARED 'ops_replicated';
SELECT id, seq FROM ops_events WHERE id IN (9, 10) ORDER BY id;
-- a replicated update that leaves the number as it is, or changes
-- another column, leaves the counter alone; one that removes the number
-- is refused
SET session_replication_role = replica;
UPDATE ops_events SET payload = 'touched' WHERE id = 1;
UPDATE ops_events SET seq = NULL WHERE id = 1;
RESET session_replication_role;
SELECT id, payload, seq FROM ops_events WHERE id = 1;
-- the replica trigger cannot be disabled, set to fire on origin only
-- (ENABLE TRIGGER, also ENABLE TRIGGER ALL), or renamed
ALTER TABLE ops_events DISABLE TRIGGER stream_seq_replica;
ALTER TABLE ops_events ENABLE TRIGGER stream_seq_replica;
ALTER TABLE ops_events ENABLE TRIGGER ALL;
ALTER TABLE ops_events ENABLE ALWAYS TRIGGER stream_seq_replica;
ALTER TABLE ops_events ENABLE REPLICA TRIGGER stream_seq_replica;
ALTER TRIGGER stream_seq_replica ON ops_events RENAME TO other;
-- called directly
SELECT stream_seq.replica_trigger();

-- 2. Consumers and roles.  Creating one needs SELECT; the table's owner
-- sees, drops and gives away every consumer of the stream.
SET ROLE ops_stranger;
SELECT stream_seq.create_consumer('ops_events', 'stranger');   -- no SELECT
SET ROLE ops_reader;
SELECT stream_seq.create_consumer('ops_events', 'billing');
SELECT stream_seq.create_consumer('ops_events', 'audit');
RESET ROLE;
-- a group (its index is on the table, so the table's owner makes it),
-- given to ops_reader by the table's owner
GRANT ops_reader TO ops_owner;
SET ROLE ops_owner;
SELECT stream_seq.create_group('ops_events', 'workers', 'id', 2);
SELECT stream_seq.alter_consumer_owner('ops_events', 'workers', 'ops_reader');
RESET ROLE;
REVOKE ops_reader FROM ops_owner;
SELECT consumer, owner::regrole FROM stream_seq.consumer
 WHERE stream = 'ops_events'::regclass ORDER BY 1;
-- DROP ROLE of a role that owns consumers is refused, naming them; a
-- caller who may not drop roles learns nothing of them
DROP ROLE ops_reader;
SET ROLE ops_stranger;
DROP ROLE ops_reader;
RESET ROLE;
-- a role with CREATEROLE learns of them only where PostgreSQL would let it
-- drop the role: on 15 any role but a superuser; from 16 on, only a role
-- it holds with ADMIN OPTION (expected/operations_1.out)
CREATE ROLE ops_admin CREATEROLE;
SET ROLE ops_admin;
DROP ROLE ops_reader;
RESET ROLE;
DROP ROLE ops_admin;
-- the owner of the table gives one away; a stranger cannot
SET ROLE ops_stranger;
SELECT stream_seq.alter_consumer_owner('ops_events', 'audit', 'ops_stranger');
SET ROLE ops_owner;
SELECT stream_seq.alter_consumer_owner('ops_events', 'audit', 'ops_heir');  -- not a member of ops_heir
RESET ROLE;
GRANT ops_heir TO ops_owner;
SET ROLE ops_owner;
SELECT stream_seq.alter_consumer_owner('ops_events', 'audit', 'ops_heir');
SELECT stream_seq.alter_consumer_owner('ops_events', 'nobody', 'ops_heir');
SELECT stream_seq.alter_consumer_owner(NULL, 'audit', 'ops_heir');
SELECT stream_seq.alter_consumer_owner('ops_events', 'audit', NULL);
SELECT stream_seq.alter_consumer_owner('ops_events', 'audit', 0::oid::regrole);
RESET ROLE;
-- REASSIGN OWNED moves ops_reader's consumers (group included) to ops_heir
REASSIGN OWNED BY ops_reader TO ops_heir;
SELECT consumer, owner::regrole FROM stream_seq.consumer
 WHERE stream = 'ops_events'::regclass ORDER BY 1;
-- the group's slots went nowhere
SELECT count(*) FROM stream_seq.consumer_slot WHERE stream = 'ops_events'::regclass;
-- inside a transaction that rolls back, nothing moves
BEGIN;
REASSIGN OWNED BY ops_heir TO ops_reader;
ROLLBACK;
SELECT DISTINCT owner::regrole FROM stream_seq.consumer
 WHERE stream = 'ops_events'::regclass;
-- DROP OWNED drops ops_heir's consumers, and their slots, and then the
-- role goes; run by a member of ops_heir that cannot read the catalog
SET ROLE ops_owner;
DROP OWNED BY ops_heir;
RESET ROLE;
SELECT count(*) AS consumers FROM stream_seq.consumer WHERE stream = 'ops_events'::regclass;
SELECT count(*) AS slots FROM stream_seq.consumer_slot WHERE stream = 'ops_events'::regclass;
REVOKE ALL ON SCHEMA stream_seq FROM ops_heir;   -- granted by a superuser
DROP ROLE ops_heir;
REVOKE ALL ON ops_events FROM ops_reader;
REVOKE ALL ON SCHEMA stream_seq FROM ops_reader;
DROP ROLE ops_reader;
DROP ROLE IF EXISTS ops_nonexistent;
-- trim is no longer held back
SELECT stream_seq.trim('ops_events', 2);

-- 3. pg_repack's log trigger (here, a stand-in with the same name in a
-- schema "repack") is refused on a stream table and on its partitions,
-- and allowed elsewhere.
CREATE SCHEMA repack;
CREATE FUNCTION repack.repack_trigger() RETURNS trigger
  LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$;
CREATE TRIGGER repack_trigger AFTER INSERT OR DELETE OR UPDATE ON ops_events
  FOR EACH ROW EXECUTE FUNCTION repack.repack_trigger();
CREATE TABLE ops_parts (id bigint, day int) PARTITION BY RANGE (day);
CREATE TABLE ops_parts_1 PARTITION OF ops_parts FOR VALUES FROM (1) TO (2);
SELECT stream_seq.enable('ops_parts');
CREATE TRIGGER repack_trigger AFTER INSERT OR DELETE OR UPDATE ON ops_parts_1
  FOR EACH ROW EXECUTE FUNCTION repack.repack_trigger();
CREATE TABLE ops_plain (id bigint);
CREATE TRIGGER repack_trigger AFTER INSERT ON ops_plain
  FOR EACH ROW EXECUTE FUNCTION repack.repack_trigger();
SELECT count(*) FROM pg_trigger WHERE tgname = 'repack_trigger';

-- clean up
DROP TABLE ops_events, ops_parts, ops_plain;
DROP SCHEMA repack CASCADE;
REVOKE ALL ON SCHEMA public FROM ops_owner;
REVOKE ALL ON SCHEMA stream_seq FROM ops_owner, ops_stranger;
DROP ROLE ops_owner;
DROP ROLE ops_stranger;
