-- reader cost: horizon() alone
SELECT stream_seq.horizon('ev_stream');
