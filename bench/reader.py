#!/usr/bin/python3
"""reader.py: the paging reader of demo.sh and bench.sh, with its probe
writer, stall injector and PgQ ticker.

    reader.py read CONTENDER --stop-file F [--probe-ms N] [--stall KIND]
                             [--stall-at S] [--stall-secs S] [--json OUT]
    reader.py ticker --stop-file F [--interval S]

Contenders (tables made by bench/schema.sql):
  serial  bigserial id, reader pages "id > cursor"              (unsafe)
  xid8    xid8 DEFAULT pg_current_xact_id() + bigserial, reader pages
          "(xid, id) > cursor AND xid < pg_snapshot_xmin(pg_current_snapshot())"
  lock    bigserial taken under pg_advisory_xact_lock, "id > cursor"
  pgq     PgQ queue ev_pgq, consumer batches (needs the ticker)
  stream  stream_seq table, "seq > cursor AND seq < stream_seq.horizon()"

"read" pages in a loop (100 rows a page, autocommit, 1 ms pause after a
short page) until the stop file exists and then one more second has passed
with an empty page (so that late flushes and ticks are drained).  It then
compares what it read with what is in the table and prints one JSON line:
rows committed, read, missed (committed and never returned), duplicates.

--probe-ms N: a second connection inserts one row every N ms with payload
= probe number, and notes the (monotonic) time its COMMIT returned; the
reader notes when it first returned that row: the visibility lag.

--stall other|stream: a third connection opens a transaction at --stall-at
seconds, inserts a row into an unrelated table ("other") or into the
contender's own table ("stream"), and keeps it open --stall-secs seconds.

"ticker" calls pgq.ticker() every --interval seconds (pgqd's job) until the
stop file exists; the queue is made with queue_ticker_max_lag = 0, so each
call that finds new events makes a tick.
"""

import argparse
import json
import os
import sys
import threading
import time

import psycopg2

PAGE = 100
QUEUE = "ev_pgq"

# statements that write one row with a given payload, per contender
WRITE = {
    "serial": ["INSERT INTO ev_serial (payload) VALUES (%(p)s)"],
    "xid8": ["INSERT INTO ev_xid8 (payload) VALUES (%(p)s)"],
    "lock": ["SELECT pg_advisory_xact_lock(4242)",
             "INSERT INTO ev_lock (payload) VALUES (%(p)s)"],
    "pgq": ["SELECT pgq.insert_event('ev_pgq', 'ev', %(p)s::text)"],
    "stream": ["INSERT INTO ev_stream (payload) VALUES (%(p)s)"],
}


def connect(autocommit=True, name="bench"):
    conn = psycopg2.connect(application_name=name)
    conn.autocommit = autocommit
    return conn


class CursorReader:
    """Pages a table by a single bigint key below an optional bound."""

    def __init__(self, cur, table, key, bound=""):
        self.cur = cur
        self.sql = ("SELECT %s, payload FROM %s WHERE %s > %%s %s ORDER BY %s LIMIT %d"
                    % (key, table, key, bound, key, PAGE))
        self.all_sql = "SELECT %s FROM %s" % (key, table)
        self.cursor = 0

    def page(self):
        self.cur.execute(self.sql, (self.cursor,))
        rows = self.cur.fetchall()
        if rows:
            self.cursor = rows[-1][0]
        return rows

    def all_keys(self):
        self.cur.execute(self.all_sql)
        return [r[0] for r in self.cur.fetchall()]


class Xid8Reader:
    """The pg_snapshot_xmin recipe: a two-part cursor (xid, id); only rows
    of transactions below the snapshot's xmin, all finished, are read."""

    def __init__(self, cur):
        self.cur = cur
        self.cursor = ("0", 0)

    def page(self):
        self.cur.execute(
            "SELECT id, payload, xid::text FROM ev_xid8"
            " WHERE (xid, id) > (%s::xid8, %s)"
            "   AND xid < pg_snapshot_xmin(pg_current_snapshot())"
            " ORDER BY xid, id LIMIT " + str(PAGE), self.cursor)
        rows = self.cur.fetchall()
        if rows:
            self.cursor = (rows[-1][2], rows[-1][0])
        return [(r[0], r[1]) for r in rows]

    def all_keys(self):
        self.cur.execute("SELECT id FROM ev_xid8")
        return [r[0] for r in self.cur.fetchall()]


class PgqReader:
    """A PgQ consumer: one batch per call, finished at once."""

    def __init__(self, cur):
        self.cur = cur
        cur.execute("SELECT pgq.register_consumer(%s, 'bench')", (QUEUE,))

    def page(self):
        self.cur.execute("SELECT pgq.next_batch(%s, 'bench')", (QUEUE,))
        batch = self.cur.fetchone()[0]
        if batch is None:
            return []
        self.cur.execute("SELECT ev_id, ev_data::bigint FROM pgq.get_batch_events(%s)",
                         (batch,))
        rows = self.cur.fetchall()
        self.cur.execute("SELECT pgq.finish_batch(%s)", (batch,))
        return rows

    def all_keys(self):
        self.cur.execute("SELECT queue_data_pfx FROM pgq.queue WHERE queue_name = %s",
                         (QUEUE,))
        table = self.cur.fetchone()[0]
        self.cur.execute("SELECT ev_id FROM " + table)
        return [r[0] for r in self.cur.fetchall()]


def make_reader(contender, cur):
    if contender == "serial":
        return CursorReader(cur, "ev_serial", "id")
    if contender == "lock":
        return CursorReader(cur, "ev_lock", "id")
    if contender == "stream":
        return CursorReader(cur, "ev_stream", "seq",
                            "AND seq < stream_seq.horizon('ev_stream')")
    if contender == "xid8":
        return Xid8Reader(cur)
    if contender == "pgq":
        return PgqReader(cur)
    raise SystemExit("unknown contender " + contender)


def percentile(values, q):
    if not values:
        return None
    values = sorted(values)
    i = min(len(values) - 1, max(0, int(round(q * (len(values) - 1)))))
    return values[i]


def probe_writer(contender, interval, stop, commits, errors):
    """Insert one row every interval seconds; note when COMMIT returned."""
    try:
        conn = connect(autocommit=False, name="bench probe")
        cur = conn.cursor()
        n = 0
        next_at = time.monotonic()
        while not stop.is_set():
            n += 1
            for sql in WRITE[contender]:
                cur.execute(sql, {"p": n})
            conn.commit()
            commits[n] = time.monotonic()
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            else:
                next_at = time.monotonic()
        conn.close()
    except Exception as e:  # reported in the JSON line
        errors.append("probe: %s" % e)


def staller(contender, kind, at, secs, start, stop, info, errors):
    """Keep one write transaction open for secs seconds, from start+at."""
    try:
        conn = connect(autocommit=False, name="bench stall")
        cur = conn.cursor()
        delay = start + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        info["began"] = time.monotonic() - start
        if kind == "other":
            cur.execute("INSERT INTO unrelated (payload) VALUES (1)")
        else:
            for sql in WRITE[contender]:
                cur.execute(sql, {"p": 0})
        time.sleep(secs)
        conn.commit()
        info["ended"] = time.monotonic() - start
        conn.close()
    except Exception as e:
        errors.append("stall: %s" % e)


def ticker_loop(interval, stop_file=None, stop=None):
    conn = connect(name="bench ticker")
    cur = conn.cursor()
    while not ((stop is not None and stop.is_set()) or
               (stop_file is not None and os.path.exists(stop_file))):
        cur.execute("SELECT pgq.ticker()")
        time.sleep(interval)
    conn.close()


def cmd_read(args):
    conn = connect(name="bench reader")
    cur = conn.cursor()
    reader = make_reader(args.contender, cur)
    stop = threading.Event()          # probe writer and staller
    stop_ticks = threading.Event()    # ticker: runs on through the drain
    commits, errors, stall_info, threads = {}, [], {}, []
    start = time.monotonic()

    if args.contender == "pgq":
        threads.append(threading.Thread(target=ticker_loop,
                                        args=(args.tick_interval, None, stop_ticks)))
    if args.probe_ms:
        threads.append(threading.Thread(
            target=probe_writer,
            args=(args.contender, args.probe_ms / 1000.0, stop, commits, errors)))
    if args.stall:
        threads.append(threading.Thread(
            target=staller,
            args=(args.contender, args.stall, args.stall_at, args.stall_secs,
                  start, stop, stall_info, errors)))
    for t in threads:
        t.daemon = True
        t.start()

    seen = set()
    duplicates = 0
    pages = 0
    probe_seen = {}
    stopped_at = None
    while True:
        rows = reader.page()
        now = time.monotonic()
        pages += 1
        for key, payload in rows:
            if key in seen:
                duplicates += 1
            seen.add(key)
            if payload and payload not in probe_seen:
                probe_seen[payload] = now
        if stopped_at is None:
            if os.path.exists(args.stop_file) and not stall_running(args, stall_info, errors):
                stopped_at = now
                stop.set()
        elif not rows and now - stopped_at >= args.drain:
            break
        if len(rows) < PAGE:
            time.sleep(0.001)
    stop_ticks.set()
    for t in threads:
        t.join(timeout=30)

    keys = reader.all_keys()
    nulls = sum(1 for k in keys if k is None)
    table = set(k for k in keys if k is not None)
    lags = [(probe_seen[n] - t) * 1000.0 for n, t in commits.items() if n in probe_seen]
    result = {
        "contender": args.contender,
        "stall": args.stall or "",
        "seconds": round(stopped_at - start, 2),
        "committed": len(keys),
        "read": len(seen & table),
        "missed": len(table - seen),
        "duplicates": duplicates,
        "unnumbered": nulls,
        "not_in_table": len(seen - table),
        "pages": pages,
        "probes": len(commits),
        "probes_missed": sum(1 for n in commits if n not in probe_seen),
        "lag_p50_ms": percentile(lags, 0.50),
        "lag_p99_ms": percentile(lags, 0.99),
        "lag_max_ms": max(lags) if lags else None,
        "stall_window": stall_info,
        "errors": errors,
    }
    line = json.dumps(result)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")
    print(line)
    return 0


def stall_running(args, info, errors):
    """The run ends only after the stall transaction has committed."""
    return bool(args.stall) and "ended" not in info and not errors


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("read")
    r.add_argument("contender", choices=sorted(WRITE))
    r.add_argument("--stop-file", required=True)
    r.add_argument("--probe-ms", type=float, default=0)
    r.add_argument("--stall", choices=["other", "stream"])
    r.add_argument("--stall-at", type=float, default=1.0)
    r.add_argument("--stall-secs", type=float, default=10.0)
    r.add_argument("--drain", type=float, default=1.0)
    r.add_argument("--tick-interval", type=float, default=0.05)
    r.add_argument("--json")
    t = sub.add_parser("ticker")
    t.add_argument("--stop-file", required=True)
    t.add_argument("--interval", type=float, default=0.05)
    args = ap.parse_args()
    if args.cmd == "read":
        return cmd_read(args)
    ticker_loop(args.interval, stop_file=args.stop_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
