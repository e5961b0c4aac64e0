"""The synchronous workers: GroupWorker (a consumer group's worker) and
ConsumerWorker (a plain consumer's), on psycopg 3.

One loop, for both: read the horizon; (group) claim or renew the lease;
for each slot held, one transaction that reads a page, hands it to the
handler and advances past it; the consumer's due retries in a transaction
of their own; nothing done: wait() after the horizon read first.  The
rules it follows are those of doc/consumers.md; README.md says why each
matters."""

import signal
import threading
import time
from datetime import timedelta

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from ._common import (Hooks, Rows, Settings, Statements, check_handlers,
                      classify, log, reason_of)

_LEASE_LOST = object()          # a page's result: claim again


class _Worker:
    """The loop of both kinds of worker; "group" says which."""

    group = True

    def __init__(self, conninfo, stream, consumer, worker=None, *,
                 handle_row=None, handle_page=None, row_type=dict, hooks=None,
                 handle_signals=True, connect_kwargs=None, **settings):
        check_handlers(handle_row, handle_page)
        if self.group and not worker:
            raise TypeError("a group's worker needs a name of its own")
        self.conninfo = conninfo
        self.stream = stream
        self.consumer = consumer
        self.name = worker or consumer
        self.handle_row = handle_row
        self.handle_page = handle_page
        self.rows = Rows(row_type)
        self.hooks = hooks or Hooks()
        self.handle_signals = handle_signals
        self.connect_kwargs = dict(connect_kwargs or {})
        self.settings = Settings(**settings)
        self.stats = dict(rows=0, pages=0, parked=0, retries=0, reconnects=0,
                          claims=0, waits=0, due=0)
        self.slots = []                 # [(slot, token)] held
        self._conn = None
        self._sql = None
        self._stopping = False
        self._waiting = False
        self._renew_at = 0.0
        self._due_at = 0.0

    # -- the public surface -------------------------------------------------

    def run(self, until_idle=False):
        """Work until stop() (or SIGTERM/SIGINT, when run from the main
        thread with handle_signals), or, with until_idle, until a round
        finds nothing to do.  The page in progress is finished first; the
        slots are released on the way out.  Errors that retrying cannot
        cure (a missing consumer, a privilege) are raised."""
        self._stopping = False
        restore = self._install_signals()
        delay = 0.05
        try:
            while not self._stopping:
                try:
                    if self._conn is None:
                        self._connect()
                    if self._round():
                        delay = 0.05
                        continue
                    if until_idle:
                        break
                    self._wait()
                    delay = 0.05
                except psycopg.Error as e:
                    broken = self._conn is None or self._conn.broken
                    if classify(e, broken) != "connection" or (
                            self._conn is None and not isinstance(e, psycopg.OperationalError)):
                        raise
                    self._lost(e)
                    if not self._stopping:
                        time.sleep(delay)
                    delay = min(delay * 2, self.settings.reconnect_max_delay)
        finally:
            self._finish()
            restore()

    def stop(self):
        """Ask the loop to stop after the page in progress (callable from a
        signal handler, a hook, a handler or another thread).  A wait() in
        progress is cancelled, so the worker stops at once."""
        self._stopping = True
        conn = self._conn
        if self._waiting and conn is not None:
            try:
                conn.cancel()
            except Exception:           # the connection is going anyway
                pass

    # -- one round ----------------------------------------------------------

    def _round(self):
        """One pass over the slots held and the due retries; True if any
        row was handled (or a page must be tried again), False if idle."""
        conn = self._conn
        # the horizon before the claim and the reads: every row below it is
        # visible to them, so if they find nothing, wait() after it misses
        # nothing (after a slot's position it would return at once)
        self._seen = conn.execute(Statements.HORIZON, (self.stream,)).fetchone()[0]
        now = time.monotonic()
        if self.group and (not self.slots or now >= self._renew_at):
            self._claim()
        busy = False
        for slot, token in (self.slots if self.group else [(None, None)]):
            if self._stopping:
                return True
            n = self._page(slot, token)
            if n is _LEASE_LOST:
                self.slots = []         # claim again at once
                return True
            busy = busy or n > 0
        if time.monotonic() >= self._due_at and not self._stopping:
            busy = self._due() > 0 or busy
            self._due_at = time.monotonic() + self.settings.due_every
        return busy

    def _claim(self):
        """Claim (or renew) this worker's share of the group's slots."""
        self.slots = [tuple(r) for r in self._conn.execute(
            Statements.CLAIM, (self.stream, self.consumer, self.name,
                               self.settings.lease)).fetchall()]
        self._renew_at = time.monotonic() + self.settings.renew_every
        self.stats["claims"] += 1
        self._hook("claimed", [s for s, _ in self.slots])

    def _page(self, slot, token):
        """Read one page of the slot (or of the plain consumer), hand it to
        the handler and advance past it, in one transaction; run again on a
        serialization failure.  Returns the rows handled, or _LEASE_LOST."""
        conn = self._conn
        while True:
            t0 = time.monotonic()
            try:
                with conn.transaction():
                    with conn.cursor(row_factory=dict_row) as cur:
                        if self.group:
                            cur.execute(self._sql.read_slot, (
                                self.consumer, slot, token, self.settings.page_size))
                        else:
                            cur.execute(self._sql.read, (
                                self.consumer, self.settings.page_size))
                        page = cur.fetchall()
                    if not page:
                        return 0
                    seq = self._sql.seq_column
                    parked = self._apply([(r[seq], r) for r in page])
                    last = page[-1][seq]
                    if self.group:
                        conn.execute(Statements.ADVANCE_SLOT, (
                            self.stream, self.consumer, slot, token, last))
                    else:
                        conn.execute(Statements.ADVANCE, (self.stream, self.consumer, last))
            except psycopg.Error as e:
                what = classify(e, conn.broken)
                if what not in ("lease lost", "serialization"):
                    raise
                self.stats["retries"] += 1
                self._hook("retried", what, e)
                log.info("%s: page of slot %s again: %s", self.name, slot, e.sqlstate)
                if what == "lease lost" and self.group:
                    return _LEASE_LOST
                continue                # a plain consumer moved: read again
            self.stats["pages"] += 1
            self.stats["rows"] += len(page)
            self._hook("page", slot, len(page), parked, time.monotonic() - t0)
            return len(page)

    def _due(self):
        """The consumer's retries that are due, in a transaction of their
        own (in autocommit due() would resolve them at once, and a failure
        afterwards would lose the retry); a row that fails again is parked
        again, one more attempt.  Returns how many were handed back."""
        conn = self._conn
        while True:
            t0 = time.monotonic()
            try:
                with conn.transaction():
                    with conn.cursor(row_factory=dict_row) as cur:
                        cur.execute(self._sql.due, (self.stream, self.consumer,
                                                    self.settings.due_size))
                        got = cur.fetchall()
                    if not got:
                        return 0
                    items = []
                    parked = 0
                    for r in got:
                        seq = r.pop("stream_seq.seq")
                        if r.pop("stream_seq.gone"):
                            self._park(seq, "row removed by retention")
                            parked += 1
                        else:
                            items.append((seq, r))
                    parked += self._apply(items)
            except psycopg.Error as e:
                if classify(e, conn.broken) != "serialization":
                    raise
                self.stats["retries"] += 1
                self._hook("retried", "serialization", e)
                continue
            self.stats["due"] += len(got)
            self._hook("page", "due", len(got), parked, time.monotonic() - t0)
            return len(got)

    # -- applying a page ----------------------------------------------------

    def _apply(self, items):
        """Hand [(seq, columns)] to the handler inside the caller's
        transaction: the whole page under one savepoint (one subtransaction,
        however long the page), and if the handler fails, row by row under
        savepoints of their own, parking each row that fails.  An error
        that is not the row's fault (lost lease, serialization, connection)
        is raised: the page's transaction is rolled back and run again."""
        if not items:
            return 0
        rows = [(seq, self.rows.make(cols)) for seq, cols in items]
        conn = self._conn
        if len(rows) > 1:
            try:
                with conn.transaction(), conn.cursor() as cur:
                    self._handle(cur, rows)
                return 0
            except Exception as e:
                self._reraise_transient(e)
        parked = 0
        for one in rows:
            try:
                with conn.transaction(), conn.cursor() as cur:
                    self._handle(cur, [one])
            except Exception as e:
                self._reraise_transient(e)
                self._park(one[0], reason_of(e))
                parked += 1
                self._hook("parked", one[0], e)
        return parked

    def _handle(self, cur, rows):
        if self.handle_page is not None:
            self.handle_page(cur, [r for _, r in rows])
        else:
            for _, r in rows:
                self.handle_row(cur, r)

    def _reraise_transient(self, e):
        if isinstance(e, psycopg.Error) and classify(e, self._conn.broken):
            raise e

    def _park(self, seq, reason):
        """Set a row aside in the page's transaction: the consumer's retry
        policy decides when due() hands it back, and when it is dead."""
        self._conn.execute(Statements.PARK, (self.stream, self.consumer, seq, reason))
        self.stats["parked"] += 1
        log.warning("%s: row %s parked: %s", self.name, seq, reason)

    # -- waiting, connecting, stopping -------------------------------------

    def _wait(self):
        """Sleep in wait() until a commit passes the horizon seen at the start
        of the round, at most wait_timeout (below the renewal interval)."""
        t0 = time.monotonic()
        self._waiting = True
        try:
            if self._stopping:
                return
            self._conn.execute(Statements.WAIT, (
                self.stream, self._seen, timedelta(seconds=self.settings.wait_timeout)))
        except psycopg.errors.QueryCanceled:
            if self._conn.broken:
                raise
        finally:
            self._waiting = False
        self.stats["waits"] += 1
        self._hook("waited", self._seen, time.monotonic() - t0)

    def _connect(self):
        """A connection of its own, autocommit (every transaction explicit),
        without server-side prepared statements: fit for pgbouncer in
        transaction mode."""
        self._conn = psycopg.connect(self.conninfo, autocommit=True,
                                     prepare_threshold=None, **self.connect_kwargs)
        if self._sql is None:
            r = self._conn.execute(Statements.INFO.format(sql.Literal(self.stream))).fetchone()
            if r is None:
                raise ValueError(f'"{self.stream}" is not a stream table this role may read')
            self._sql = Statements(*r)

    def _lost(self, e):
        """The connection is gone: drop it; the next round reconnects and
        claims again (the lease, if still running, is renewed; a page whose
        COMMIT got no answer either committed, and its slot has moved, or
        did not, and is read again)."""
        log.warning("%s: connection lost: %s", self.name, str(e).strip())
        self.stats["reconnects"] += 1
        self._hook("retried", "connection", e)
        self._close()
        self.slots = []

    def _close(self):
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:
                pass
            self._conn = None

    def _finish(self):
        """On the way out: give back the slots held (a group), so that the
        other workers take them over at their next claim instead of after
        the lease; then close."""
        released = False
        if self.group:
            for _ in range(3):      # a stray cancel of stop() may hit it
                try:
                    if self._conn is None or self._conn.broken:
                        self._close()
                        self._connect()
                    self._conn.execute(Statements.RELEASE, (self.stream, self.consumer, self.name))
                    released = True
                    break
                except psycopg.errors.QueryCanceled:
                    continue
                except Exception as e:
                    log.warning("%s: could not release: %s", self.name, e)
                    break
        self.slots = []
        self._hook("stopped", released)
        self._close()

    def _install_signals(self):
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return lambda: None
        old = {s: signal.signal(s, lambda *_: self.stop())
               for s in (signal.SIGTERM, signal.SIGINT)}
        return lambda: [signal.signal(s, h) for s, h in old.items()]

    def _hook(self, name, *args):
        try:
            getattr(self.hooks, name)(self, *args)
        except Exception:
            log.exception("%s: hook %s failed", self.name, name)


class GroupWorker(_Worker):
    """A worker of consumer group "consumer" of "stream", named "worker"
    (unique among the group's workers).  Exactly one handler:

      handle_row(cur, row)     called for each row, in number order per slot
      handle_page(cur, rows)   called with the page's rows (a list)

    "cur" is a cursor of the page's transaction: whatever the handler
    writes commits with the slot's advance, or not at all.  A row is a dict
    of the table's columns (row_type=dict), or an instance of a dataclass
    (row_type=MyRow) built from the columns it declares.  Raising refuses
    the row: it is parked (set aside for due() by the consumer's retry
    policy, or for replay()), and the slot goes on.

    Settings (seconds): page_size 100, lease 30, renew_every lease/3,
    wait_timeout 5 (at most renew_every), due_every 1, due_size 100,
    reconnect_max_delay 2."""

    group = True


class ConsumerWorker(_Worker):
    """A worker of plain consumer "consumer" of "stream": the same as
    GroupWorker without slots (one page at a time, advance() instead of
    advance_slot()).  Run one per consumer: two would take turns, each
    page of one fencing the other's (SS001, read again)."""

    group = False
