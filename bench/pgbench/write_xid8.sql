-- writer for contender "xid8": one transaction of :rows rows; with -D hold=1
-- the transaction stays open 0-3 ms after its insert (the demo workload)
BEGIN;
INSERT INTO ev_xid8 (payload) SELECT 0 FROM generate_series(1, :rows);
\if :hold
SELECT pg_sleep(random() * 0.003);
\endif
COMMIT;
