-- stream_seq 0.7.0 -> 0.8.0.

\echo Use "ALTER EXTENSION stream_seq UPDATE TO '0.8.0'" to load this file. \quit
