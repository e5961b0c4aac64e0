-- An application role that is not a superuser and has no privilege on
-- schema stream_seq runs its usual migrations in a database that has the
-- extension: none of them may fail because of it.  After the documented
-- GRANT, the same role makes and uses a stream of its own.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
\set SHOW_CONTEXT never

-- a stream of someone else's exists in the database
CREATE TABLE admin_events (payload text);
SELECT stream_seq.enable('admin_events');

CREATE ROLE app_owner LOGIN;
CREATE SCHEMA app AUTHORIZATION app_owner;
DO $$ BEGIN EXECUTE format('GRANT CREATE ON DATABASE %I TO app_owner', current_database()); END $$;
SET ROLE app_owner;
SET search_path = app;

-- tables, columns, constraints, indexes, renames
CREATE TABLE orders (id bigserial PRIMARY KEY, customer text NOT NULL, total numeric);
ALTER TABLE orders ADD COLUMN placed_at timestamptz DEFAULT now();
ALTER TABLE orders ALTER COLUMN total SET NOT NULL;
ALTER TABLE orders ALTER COLUMN total TYPE numeric(12, 2);
ALTER TABLE orders ADD CONSTRAINT orders_total_check CHECK (total >= 0);
ALTER TABLE orders ADD CONSTRAINT orders_customer_key UNIQUE (customer) DEFERRABLE;
CREATE INDEX orders_placed_at_idx ON orders (placed_at);
ALTER INDEX orders_placed_at_idx RENAME TO orders_placed_idx;
ALTER TABLE orders RENAME COLUMN customer TO customer_name;
ALTER TABLE orders RENAME TO purchase_orders;
ALTER TABLE purchase_orders SET (fillfactor = 90);
ALTER TABLE purchase_orders SET UNLOGGED;
ALTER TABLE purchase_orders SET LOGGED;
CREATE SEQUENCE invoice_no;
ALTER SEQUENCE invoice_no RESTART WITH 100;
ALTER SEQUENCE invoice_no OWNED BY purchase_orders.id;
INSERT INTO purchase_orders (customer_name, total) VALUES ('a', 10);
TRUNCATE purchase_orders RESTART IDENTITY;

-- views, functions, types, triggers, policies
CREATE VIEW big_orders AS SELECT * FROM purchase_orders WHERE total > 100;
CREATE OR REPLACE VIEW big_orders AS SELECT *, total * 2 AS doubled FROM purchase_orders WHERE total > 100;
CREATE MATERIALIZED VIEW order_totals AS SELECT count(*) AS n FROM purchase_orders;
REFRESH MATERIALIZED VIEW order_totals;
CREATE TYPE order_state AS ENUM ('new', 'paid');
ALTER TYPE order_state ADD VALUE 'shipped';
CREATE DOMAIN positive AS numeric CHECK (VALUE > 0);
CREATE FUNCTION touch() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN NEW.placed_at := now(); RETURN NEW; END $$;
CREATE TRIGGER purchase_orders_touch BEFORE UPDATE ON purchase_orders
  FOR EACH ROW EXECUTE FUNCTION touch();
ALTER TRIGGER purchase_orders_touch ON purchase_orders RENAME TO purchase_orders_touched;
ALTER TABLE purchase_orders DISABLE TRIGGER purchase_orders_touched;
ALTER TABLE purchase_orders ENABLE TRIGGER purchase_orders_touched;
DROP TRIGGER purchase_orders_touched ON purchase_orders;
ALTER TABLE purchase_orders ENABLE ROW LEVEL SECURITY;
CREATE POLICY own_orders ON purchase_orders USING (customer_name = current_user);
DROP POLICY own_orders ON purchase_orders;

-- inheritance and partitioning of its own tables
CREATE TABLE base_log (at timestamptz, msg text);
CREATE TABLE child_log () INHERITS (base_log);
CREATE TABLE other_log (at timestamptz, msg text);
ALTER TABLE other_log INHERIT base_log;
ALTER TABLE other_log NO INHERIT base_log;
CREATE TABLE measurements (at date NOT NULL, v int) PARTITION BY RANGE (at);
CREATE TABLE measurements_2026 PARTITION OF measurements
  FOR VALUES FROM ('2026-01-01') TO ('2027-01-01');
CREATE TABLE measurements_2027 (at date NOT NULL, v int);
ALTER TABLE measurements ATTACH PARTITION measurements_2027
  FOR VALUES FROM ('2027-01-01') TO ('2028-01-01');
ALTER TABLE measurements DETACH PARTITION measurements_2027;

-- and dropping all of it
DROP MATERIALIZED VIEW order_totals;
DROP VIEW big_orders;
DROP TABLE measurements, measurements_2027, child_log, base_log, other_log;
DROP TABLE purchase_orders CASCADE;
DROP TYPE order_state;
DROP DOMAIN positive;
DROP FUNCTION touch();
CREATE SCHEMA app_tmp;
CREATE TABLE app_tmp.t (x int);
DROP SCHEMA app_tmp CASCADE;
-- the other role's stream is untouched
RESET ROLE;
SELECT count(*) FROM stream_seq.stream WHERE relid = 'public.admin_events'::regclass;

-- before it, a call of the extension's functions or a read of its views
-- fails with a hint naming the GRANT (and the role, when it is the one
-- the session set); the same error of another schema gets no hint
SET ROLE app_owner;
SELECT stream_seq.enable('app.orders');
SELECT stream, consumer FROM stream_seq.consumers;
RESET ROLE;
CREATE SCHEMA closed_schema;
CREATE FUNCTION closed_schema.f() RETURNS int LANGUAGE sql RETURN 1;
SET ROLE app_owner;
SELECT closed_schema.f();
RESET ROLE;
-- inside a SECURITY DEFINER function the role is not named
CREATE FUNCTION app.definer_head() RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER
  AS $$ BEGIN RETURN stream_seq.head('public.admin_events'); END $$;
ALTER FUNCTION app.definer_head() OWNER TO app_owner;
SELECT app.definer_head();
DROP FUNCTION app.definer_head();
DROP SCHEMA closed_schema CASCADE;
-- a role that has USAGE refused CREATE in the schema gets no hint: the
-- GRANT would change nothing
GRANT USAGE ON SCHEMA stream_seq TO app_owner;
SET ROLE app_owner;
CREATE TABLE stream_seq.not_here (a int);
RESET ROLE;
REVOKE USAGE ON SCHEMA stream_seq FROM app_owner;

-- after the documented GRANT, the role makes and uses its own stream
GRANT USAGE ON SCHEMA stream_seq TO app_owner;
SET ROLE app_owner;
SET search_path = app;
CREATE TABLE events (id bigserial PRIMARY KEY, payload text);
SELECT stream_seq.enable('events');
INSERT INTO events (payload) VALUES ('one'), ('two');
SELECT seq, payload FROM events WHERE seq > 0 AND seq < stream_seq.horizon('events') ORDER BY seq;
SELECT stream_seq.create_consumer('events', 'worker');
SELECT seq, "row"->>'payload' AS payload FROM stream_seq.read('events', 'worker');
SELECT stream_seq.advance('events', 'worker', 2);
ALTER TABLE events RENAME COLUMN payload TO body;
ALTER TABLE events RENAME COLUMN seq TO position;
INSERT INTO events (body) VALUES ('three');
SELECT position, body FROM events ORDER BY position;
SELECT stream, seq_column, head FROM stream_seq.streams;
-- it sees its own stream in the views, not the other role's
SELECT stream, consumer, position FROM stream_seq.consumers;
TRUNCATE events RESTART IDENTITY;
INSERT INTO events (body) VALUES ('after truncate');
SELECT position > 3 AS above_truncated FROM events;
DROP TABLE events;
SELECT count(*) AS streams_left FROM stream_seq.streams;
RESET ROLE;
RESET search_path;

SELECT stream_seq.disable('admin_events');
DROP TABLE admin_events;
DROP SCHEMA app CASCADE;
REVOKE USAGE ON SCHEMA stream_seq FROM app_owner;
DO $$ BEGIN EXECUTE format('REVOKE CREATE ON DATABASE %I FROM app_owner', current_database()); END $$;
DROP ROLE app_owner;
