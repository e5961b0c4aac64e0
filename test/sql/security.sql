-- Internal queries run with search_path pinned: a role that shadows
-- operators in its own schema cannot get them run by stream_seq (some of
-- its internal queries run as the extension's owner)
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS stream_seq;
SET client_min_messages = notice;
\set SHOW_CONTEXT never

CREATE TABLE sec (payload text);
SELECT stream_seq.enable('sec');
INSERT INTO sec VALUES ('a');
SELECT stream_seq.create_consumer('sec', 'c');

CREATE ROLE sec_user;
CREATE SCHEMA sec_user_schema AUTHORIZATION sec_user;
GRANT USAGE ON SCHEMA stream_seq TO sec_user;
GRANT SELECT, INSERT ON sec TO sec_user;
SET ROLE sec_user;
CREATE FUNCTION sec_user_schema.spy(regclass, regclass) RETURNS boolean
  LANGUAGE plpgsql AS $$
BEGIN
  RAISE NOTICE 'shadowing operator ran as %', current_user;
  RETURN $1::oid = $2::oid;
END $$;
CREATE OPERATOR sec_user_schema.= (FUNCTION = sec_user_schema.spy,
                                   LEFTARG = regclass, RIGHTARG = regclass);
CREATE FUNCTION sec_user_schema.spy8(bigint, bigint) RETURNS bigint
  LANGUAGE plpgsql AS $$
BEGIN
  RAISE NOTICE 'shadowing + ran as %', current_user;
  RETURN $1 OPERATOR(pg_catalog.+) $2;
END $$;
CREATE OPERATOR sec_user_schema.+ (FUNCTION = sec_user_schema.spy8,
                                   LEFTARG = bigint, RIGHTARG = bigint);
SET search_path = sec_user_schema, public, pg_catalog;
-- the operator is live for the role's own queries
SELECT 'sec'::regclass = 'sec'::regclass AS own_query;
-- but not for stream_seq's: no notice below
SELECT stream_seq.position('sec', 'c');
SELECT stream_seq.create_consumer('sec', 'mine');
SELECT stream_seq.advance('sec', 'mine', 1);
INSERT INTO sec VALUES ('b');
SELECT seq, "row"->>'payload' AS payload FROM stream_seq.read('sec', 'mine');
RESET search_path;
RESET ROLE;

SELECT stream_seq.disable('sec');
DROP TABLE sec;
DROP SCHEMA sec_user_schema CASCADE;
REVOKE ALL ON SCHEMA stream_seq FROM sec_user;
DROP ROLE sec_user;
