-- reader cost: a 100-row page of the stream table without the horizon
\set c random(1, :maxc)
SELECT seq, payload FROM ev_stream WHERE seq > :c ORDER BY seq LIMIT 100;
