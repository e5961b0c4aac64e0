"""stream-seq-lag: each consumer's position, lag, backlog, parked rows and
dead letters, and each group slot's holder, for a person at a terminal
(what kafka-consumer-groups --describe shows for Kafka).

    stream-seq-lag [CONNINFO] [--stream TABLE] [--consumer NAME] [--no-slots]
    python3 -m stream_seq_worker lag [...]

CONNINFO is a libpq connection string or URI (default: $DATABASE_URL,
else libpq's PG* variables).  It reads the extension's views
(stream_seq.consumers, consumer_slots), which show the streams the role
may read; a plain consumer's backlog is counted on the stream table
itself.  Columns:

  POSITION  the last number the consumer (a group: its slowest slot)
            advanced past
  HORIZON   stream_seq.horizon(): every number below it is readable
  LAG       numbers between the position and the horizon (exact, cheap;
            numbers have gaps, so it may exceed the rows)
  BACKLOG   rows between the position and the horizon, counted up to
            100,000 (a group: per slot, summed)
  PARKED    rows set aside that will be retried; DEAD: dead letters
  WORKER    a slot's holder, LEASE_ENDS when its lease ends (a worker
            that is gone keeps its slots until then); "expired" if the
            lease ended and no worker claimed the slot since
"""

import argparse
import os
import sys

import psycopg
from psycopg import sql

from ._common import describe, server_of

BACKLOG_CAP = 100000            # as stream_seq.consumer_slots counts


def _consumers(conn, stream, consumer):
    where, params = [], []
    if stream is not None:
        where.append("c.stream = %s::regclass")
        params.append(stream)
    if consumer is not None:
        where.append("c.consumer = %s")
        params.append(consumer)
    q = ("SELECT c.stream::text, c.stream::oid, c.consumer, c.slots, c.position,"
         "       stream_seq.horizon(c.stream), c.lag, c.parked, c.dead_letters,"
         "       s.seq_column"
         "  FROM stream_seq.consumers c JOIN stream_seq.streams s ON s.stream = c.stream"
         + (" WHERE " + " AND ".join(where) if where else "")
         + " ORDER BY c.stream::text, c.consumer")
    return conn.execute(q, params).fetchall()


def _plain_backlog(conn, table, seq_column, position, horizon):
    q = sql.SQL("SELECT count(*) FROM (SELECT FROM {} WHERE {} > %s AND {} < %s LIMIT {}) x").format(
        sql.SQL(table), sql.Identifier(seq_column), sql.Identifier(seq_column),
        sql.Literal(BACKLOG_CAP))
    return conn.execute(q, (position, horizon)).fetchone()[0]


def _slots(conn, oid, consumer):
    return conn.execute(
        "SELECT slot, position, lag, backlog, worker, lease_until"
        "  FROM stream_seq.consumer_slots WHERE stream = %s::oid::regclass AND consumer = %s"
        " ORDER BY slot", (oid, consumer)).fetchall()


def describe_lag(conn, stream=None, consumer=None, slots=True):
    """The table's rows: a list of dicts, one per consumer and (with
    slots) one per group slot after its group's."""
    out = []
    for (table, oid, name, nslots, position, horizon, lag, parked, dead,
         seq_column) in _consumers(conn, stream, consumer):
        row = dict(stream=table, consumer=name, slot=None, position=position,
                   horizon=horizon, lag=lag, parked=parked, dead=dead,
                   worker=None, lease_ends=None)
        if nslots is None:
            row["backlog"] = _plain_backlog(conn, table, seq_column, position, horizon)
            out.append(row)
            continue
        srows = _slots(conn, oid, name)
        row["backlog"] = sum(r[3] or 0 for r in srows)
        holders = {r[4] for r in srows if r[4] is not None and r[5] is not None}
        row["worker"] = f"{len(holders)} worker{'s' if len(holders) != 1 else ''}"
        out.append(row)
        if slots:
            for slot, spos, slag, backlog, worker, until in srows:
                out.append(dict(stream=table, consumer=name, slot=slot, position=spos,
                                horizon=horizon, lag=slag, backlog=backlog, parked=None,
                                dead=None, worker=worker,
                                lease_ends=until if until is not None else
                                ("expired" if worker is not None else None)))
    return out


COLUMNS = ["STREAM", "CONSUMER", "SLOT", "POSITION", "HORIZON", "LAG", "BACKLOG",
           "PARKED", "DEAD", "WORKER", "LEASE_ENDS"]


def _cell(v):
    if v is None:
        return "-"
    if hasattr(v, "strftime"):
        return v.strftime("%Y-%m-%d %H:%M:%S%z")
    return str(v)


def format_table(rows):
    table = [COLUMNS] + [[_cell(r[c.lower()]) for c in COLUMNS] for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(COLUMNS))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip()
                     for r in table)


def main(argv=None, prog="stream-seq-lag"):
    p = argparse.ArgumentParser(
        prog=prog, description="Each stream_seq consumer's position, lag, backlog, "
        "parked rows and dead letters, and each group slot's worker.")
    p.add_argument("conninfo", nargs="?", default=os.environ.get("DATABASE_URL", ""),
                   help="libpq connection string or URI (default: $DATABASE_URL, "
                   "else the PG* variables)")
    p.add_argument("--stream", help="only this stream table")
    p.add_argument("--consumer", help="only this consumer")
    p.add_argument("--no-slots", action="store_true", help="one line per consumer, no slots")
    a = p.parse_args(argv)
    try:
        conn = psycopg.connect(a.conninfo, autocommit=True)
    except psycopg.Error as e:
        where = server_of(a.conninfo)
        print(f"{prog}: could not connect" + (f" to {where}" if where else "")
              + f": {describe(e)}", file=sys.stderr)
        return 1
    try:
        with conn:
            rows = describe_lag(conn, a.stream, a.consumer, not a.no_slots)
    except psycopg.Error as e:
        print(f"{prog}: {describe(e)}", file=sys.stderr)
        return 1
    if not rows:
        print(f"{prog}: no consumer of a stream table this role may read"
              + (" matches" if a.stream or a.consumer else ""), file=sys.stderr)
        return 1 if a.stream or a.consumer else 0
    print(format_table(rows))
    return 0


def console():
    """The console script's entry point."""
    sys.exit(main())
