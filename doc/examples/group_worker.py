#!/usr/bin/env python3
"""A worker of a stream_seq consumer group, in Python with psycopg 3.

Run one process per worker, each with a name of its own:

    python3 group_worker.py "dbname=app" events shipping shipping-1

It claims its share of the group's slots, and for each slot it holds reads
a page, applies it and advances the slot past it, in one transaction. A
row whose handler keeps failing is parked after MAX_ATTEMPTS tries, so
that one bad row does not stop its slot: with the group's retry policy
(set_retry_policy()) due() hands it back when it is due, without one it
waits for replay(). Each round it also takes the rows due() hands back,
in a transaction of its own, and calls due() again at once while it
hands rows back (a page's worth at most): under per-key order
(set_key_order()) the later rows of a parked row's key are held, and
due() hands them back in order, one row of the key per call, each once
the row before it is applied; nothing else in the worker changes. When
its slots are empty and nothing was due it sleeps in wait() until the
next commit on the stream.
On SIGTERM or SIGINT it releases its slots and exits (once a wait() in
progress returns: within WAIT).

It logs (Python's logging, to stderr) a line when it starts and whenever
the slots it holds change, each row it parks with the reason, and a line
when it stops.  An error that trying again cannot cure (a wrong database,
role or password, a stream or group that does not exist, a privilege, or
a handler's SQL error of class 42 such as a column that does not exist:
every row would fail) stops it with exit status 1 and the message; a
lost connection is tried again with backoff (a worker that never
connected gives up after CONNECT_ATTEMPTS tries).

It keeps no session state between transactions (no prepared statements,
no LISTEN, no temporary tables), so it works through pgbouncer in
transaction mode too.

Errors it expects:
  SS001  another worker took the slot over (this one's lease ran out, or a
         reset() fenced it): nothing of the transaction was committed;
         claim again.
  40001  a serialization failure: retry the transaction.
"""

import logging
import signal
import sys
import time

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

LEASE = "30 seconds"
WAIT = "10 seconds"           # well within the lease
PAGE = 100
MAX_ATTEMPTS = 3
LEASE_LOST = "SS001"
SERIALIZATION_FAILURE = "40001"
CONNECT_ATTEMPTS = 10

log = logging.getLogger("group_worker")
stopping = False
connected = False


def stop(signum, frame):
    global stopping
    stopping = True


def apply_row(cur, seq, row):
    """The application's work for one row: here, record it in
    shipping_applied.  Raise to refuse the row."""
    cur.execute(
        "INSERT INTO shipping_applied (seq, customer_id, payload) "
        "VALUES (%s, %s, %s)",
        (seq, row.get("customer_id"), Jsonb(row.get("payload"))))


def work_slot(conn, stream, consumer, slot, token, failures):
    """Read one page of the slot, apply it and advance past it, in one
    transaction.  Returns the number of rows handled.  A row that fails
    rolls the page back; "failures" counts its attempts across pages until
    the transaction that parks it or applies it commits (a park rolled back
    with a later row's failure must not start the count again)."""
    page = []
    parked = []
    with conn.transaction():
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(
                "SELECT seq, \"row\" FROM stream_seq.read_slot(%s, %s, %s, %s, %s)",
                (stream, consumer, slot, token, PAGE))
            page = cur.fetchall()
            if not page:
                return 0
            for r in page:
                try:
                    with conn.transaction():     # a savepoint per row
                        apply_row(cur, r["seq"], r["row"])
                except psycopg.errors.QueryCanceled:
                    raise
                except psycopg.Error as e:
                    if e.sqlstate in (LEASE_LOST, SERIALIZATION_FAILURE):
                        raise
                    if e.sqlstate and e.sqlstate.startswith("42"):
                        raise           # the handler's SQL, not the row: stop
                    failures[r["seq"]] = failures.get(r["seq"], 0) + 1
                    if failures[r["seq"]] < MAX_ATTEMPTS:
                        raise           # roll the page back, try it again
                    cur.execute("SELECT stream_seq.park(%s, %s, %s, %s)",
                                (stream, consumer, r["seq"], str(e)[:200]))
                    parked.append((r["seq"], " ".join(str(e).split())))
            cur.execute(
                "SELECT stream_seq.advance_slot(%s, %s, %s, %s, %s)",
                (stream, consumer, slot, token, page[-1]["seq"]))
    for r in page:                          # committed
        failures.pop(r["seq"], None)
    for seq, reason in parked:
        log.warning("row %s parked after %d attempts: %s", seq, MAX_ATTEMPTS, reason)
    return len(page)


def work_due(conn, stream, consumer):
    """Apply the rows due() hands back (retries, and held rows under
    per-key order), in a transaction of their own (in autocommit due()
    would resolve them at once, and a failure afterwards would lose the
    retry); a row that fails again, or that retention removed, is parked
    again (one more attempt).  Returns the number of rows handed back."""
    parked = []
    with conn.transaction():
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute("SELECT seq, \"row\", attempts FROM stream_seq.due(%s, %s, %s)",
                        (stream, consumer, PAGE))
            got = cur.fetchall()
            for r in got:
                try:
                    if r["row"] is None:
                        raise ValueError("row removed by retention")
                    with conn.transaction():     # a savepoint per row
                        apply_row(cur, r["seq"], r["row"])
                except psycopg.errors.QueryCanceled:
                    raise
                except (psycopg.Error, ValueError) as e:
                    state = getattr(e, "sqlstate", None)
                    if state and (state in (LEASE_LOST, SERIALIZATION_FAILURE)
                                  or state.startswith("42")):
                        raise
                    cur.execute("SELECT stream_seq.park(%s, %s, %s, %s)",
                                (stream, consumer, r["seq"], str(e)[:200]))
                    parked.append((r["seq"], r["attempts"] + 1, " ".join(str(e).split())))
    for seq, attempt, reason in parked:         # committed
        log.warning("row %s parked again (attempt %d): %s", seq, attempt, reason)
    return len(got)


def run(dsn, stream, consumer, worker, failures):
    global connected
    held = None
    with psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as conn:
        connected = True
        while not stopping:
            with conn.cursor() as cur:
                # the horizon before the claim: every row below it is
                # visible to the reads that follow, so if they find
                # nothing, waiting after it misses nothing
                cur.execute("SELECT stream_seq.horizon(%s) - 1", (stream,))
                seen = cur.fetchone()[0]
                cur.execute("SELECT slot, token FROM stream_seq.claim(%s, %s, %s, %s)",
                            (stream, consumer, worker, LEASE))
                slots = cur.fetchall()
            if [s for s, _ in slots] != held:
                held = [s for s, _ in slots]
                log.info("%s of group %s of %s holds slots %s", worker, consumer, stream,
                         held or "none (the others hold them, or a gone worker's lease runs)")
            handled = 0
            for slot, token in slots:
                try:
                    handled += work_slot(conn, stream, consumer, slot, token, failures)
                except psycopg.Error as e:
                    if conn.broken:
                        raise           # the connection is gone
                    if e.sqlstate and e.sqlstate.startswith("42"):
                        raise           # the handler's SQL: stop
                    if e.sqlstate == LEASE_LOST:
                        break           # claim again
                    handled += 1        # 40001 or a row that failed: again
            # the due rows; again at once while due() hands rows back (a
            # held key comes back one row per call), a page's worth at most
            due = 0
            while not stopping and due < PAGE:
                try:
                    n = work_due(conn, stream, consumer)
                except psycopg.Error as e:
                    if conn.broken or e.sqlstate != SERIALIZATION_FAILURE:
                        raise
                    n = 1               # 40001: again
                due += n
                if n == 0:
                    break
            handled += due
            if handled == 0 and not stopping:
                with conn.cursor() as cur:
                    cur.execute("SELECT stream_seq.wait(%s, %s, %s)",
                                (stream, seen, WAIT))
        with conn.cursor() as cur:
            cur.execute("SELECT stream_seq.release(%s, %s, %s)",
                        (stream, consumer, worker))


def transient(e, conn_ok):
    """A lost connection or an administrator's shutdown: connect again."""
    state = getattr(e, "sqlstate", None)
    if state is None:
        # no SQLSTATE: the server was not reached, or refused the login
        # (a wrong database, role or password: permanent)
        text = str(e)
        return isinstance(e, psycopg.OperationalError) and not (
            "does not exist" in text or "authentication failed" in text
            or "no pg_hba.conf entry" in text) and conn_ok
    return state.startswith("08") or state in ("57P01", "57P02", "57P03")


def main(dsn, stream, consumer, worker):
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    failures = {}
    attempts, delay = 0, 0.1
    log.info("%s of group %s of %s starting", worker, consumer, stream)
    while True:
        try:
            attempts += 1
            run(dsn, stream, consumer, worker, failures)
            log.info("%s stopped, slots released", worker)
            return 0
        except psycopg.Error as e:
            if not transient(e, connected or attempts < CONNECT_ATTEMPTS) or stopping:
                log.error("%s stopping: %s", worker, " ".join(str(e).split()))
                return 1
            log.warning("%s: connection lost, again in %.1f s: %s", worker, delay,
                        " ".join(str(e).split()))
            time.sleep(delay)
            delay = min(delay * 2, 5.0)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        sys.exit("usage: group_worker.py DSN STREAM CONSUMER WORKER")
    sys.exit(main(*sys.argv[1:]))
