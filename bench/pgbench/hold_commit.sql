-- one stream transaction that stays in its commit (between taking its
-- numbers and becoming visible) until bench.sh releases advisory lock 777
-- (stream_seq.hold_after_numbering: the commit waits for that lock once
-- its rows are numbered)
SET stream_seq.hold_after_numbering = 777;
BEGIN;
INSERT INTO ev_stream (payload) VALUES (0);
COMMIT;
