-- schema_pgq.sql: (re)create the PgQ queue of contender (d) for bench.sh.
-- queue_ticker_max_lag = 0: every pgq.ticker() call that finds new events
-- makes a tick, so the tick period is the ticker loop's period (reader.py
-- ticker, 50 ms by default; pgqd's default ticker_period is 1 s).
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS pgq;
SELECT pgq.drop_queue(queue_name, true) FROM pgq.queue WHERE queue_name = 'ev_pgq';
SELECT pgq.create_queue('ev_pgq');
SELECT pgq.set_queue_config('ev_pgq', 'ticker_max_lag', '0');
SELECT pgq.register_consumer('ev_pgq', 'bench');
