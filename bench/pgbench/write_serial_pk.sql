-- writer for contender "serial_pk" (the same-index shape: primary key plus
-- the unique index on seq): one transaction of :rows rows; with -D hold=1
-- the transaction stays open 0-3 ms after its insert
BEGIN;
INSERT INTO ev_serial_pk (payload) SELECT 0 FROM generate_series(1, :rows);
\if :hold
SELECT pg_sleep(random() * 0.003);
\endif
COMMIT;
