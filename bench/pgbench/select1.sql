-- reader cost: the round trip alone, to put horizon() calls per second in
-- perspective
SELECT 1;
