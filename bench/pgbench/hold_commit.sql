-- one stream transaction that stays in its commit (between taking its
-- numbers and becoming visible) until bench.sh releases advisory lock 777:
-- ev_stream_hold has a deferred trigger, fired after stream_seq_assign,
-- that waits for that lock
BEGIN;
INSERT INTO ev_stream (payload) VALUES (0);
INSERT INTO ev_stream_hold VALUES (0);
COMMIT;
