-- reader cost: the same 100-row page bounded by a constant, to separate the
-- cost of a second index bound from the cost of computing the horizon
\set c random(1, :maxc)
SELECT seq, payload FROM ev_stream WHERE seq > :c AND seq < 9000000000000000000 ORDER BY seq LIMIT 100;
