-- writer for contender "pgq": :rows events through pgq.insert_event
BEGIN;
SELECT pgq.insert_event('ev_pgq', 'ev', '0') FROM generate_series(1, :rows);
\if :hold
SELECT pg_sleep(random() * 0.003);
\endif
COMMIT;
