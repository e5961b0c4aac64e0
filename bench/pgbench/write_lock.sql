-- writer for contender "lock": writers serialized by a transaction-level
-- advisory lock taken before nextval, so ids are taken in commit order
BEGIN;
SELECT pg_advisory_xact_lock(4242);
INSERT INTO ev_lock (payload) SELECT 0 FROM generate_series(1, :rows);
\if :hold
SELECT pg_sleep(random() * 0.003);
\endif
COMMIT;
