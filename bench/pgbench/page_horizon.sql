-- reader cost: the same 100-row page, bounded by the horizon
\set c random(1, :maxc)
SELECT seq, payload FROM ev_stream WHERE seq > :c AND seq < stream_seq.horizon('ev_stream') ORDER BY seq LIMIT 100;
