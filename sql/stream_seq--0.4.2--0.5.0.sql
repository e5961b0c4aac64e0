-- stream_seq 0.4.2 -> 0.5.0: consumer features (typed reads, commit times
-- and seeking by them, retries with backoff and dead letters, resizing
-- groups, retention policies applied by the extension's worker).
\echo Use "ALTER EXTENSION stream_seq UPDATE TO '0.5.0'" to load this file. \quit
