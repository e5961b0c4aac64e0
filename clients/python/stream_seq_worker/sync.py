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

from ._common import (Hooks, PermanentError, Rows, Settings, Statements,
                      check_handlers, classify, describe, handler_fault, log,
                      reason_of, refused_for_good, server_of, slot_list)

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
        self._claimed = False           # a claim ran in this run(): release
        self._connected = False         # a connection ever succeeded
        self._held = None               # the slot numbers of the last claim
        self._holders_note = None       # the last lease wait logged
        self._behind = {}               # slot -> numbers behind, last page
        self._progress_at = 0.0
        self._progress_base = (0, 0)
        self._parked_now = []           # (seq, reason) parked, not yet committed

    def _what(self):
        kind = "group" if self.group else "consumer"
        return f'{kind} "{self.consumer}" of {self.stream}'

    # -- the public surface -------------------------------------------------

    def run(self, until_idle=False):
        """Work until stop() (or SIGTERM/SIGINT, when run from the main
        thread with handle_signals), or, with until_idle, until a round
        finds nothing to do.  The page in progress is finished first; the
        slots are released on the way out.  Transient errors (a lost
        connection, an administrator's shutdown, SS001, class 40 and 53)
        are logged and tried again with backoff; errors that trying again
        cannot cure raise PermanentError."""
        self._begin_run()
        restore = self._install_signals()
        delay = 0.05
        attempts = 0
        try:
            while not self._stopping:
                self._progress()
                try:
                    if self._conn is None:
                        attempts += 1
                        self._connect()
                    if self._round():
                        delay = 0.05
                        continue
                    if until_idle:
                        break
                    self._wait()
                    delay = 0.05
                except psycopg.Error as e:
                    what = self._transient(e, attempts)
                    self._retry_log(what, e, delay)
                    if what == "connection" and self._conn is not None:
                        self._lost(e)
                    if not self._stopping:
                        time.sleep(delay)
                    delay = min(delay * 2, self.settings.reconnect_max_delay)
        except PermanentError as e:
            log.error("%s: stopping: %s", self.name, e)
            raise
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

    # -- what the loop says, and decides about an error (no I/O) -----------

    def _begin_run(self):
        self._stopping = False
        self._claimed = False
        self._held = None
        self._holders_note = None
        self._behind = {}
        self._progress_at = time.monotonic() + self.settings.progress_every
        self._progress_base = (self.stats["rows"] + self.stats["due"], self.stats["parked"])

    def _transient(self, e, attempts):
        """Raise PermanentError for an error that trying again cannot cure;
        for one the loop tries again (after a backoff), return what it is:
        "connection", "lease lost" or "serialization"."""
        if self._conn is None:              # connect() failed
            if isinstance(e, psycopg.OperationalError) and not refused_for_good(e):
                limit = self.settings.connect_attempts
                if self._connected or limit is None or attempts < limit:
                    return "connection"
                raise PermanentError(
                    f"could not connect{self._server()} in {attempts} attempts: {describe(e)}",
                    e.sqlstate) from e
            raise PermanentError(f"could not connect{self._server()}: {describe(e)}",
                                 e.sqlstate) from e
        what = classify(e, self._conn.broken)
        if what is None:
            raise PermanentError(f"{self._what()}: {describe(e)}", e.sqlstate) from e
        if what == "lease lost":
            self.slots = []                 # claim again
        return what

    def _retry_log(self, what, e, delay):
        if self._conn is None:
            what = "could not connect" + self._server()
        elif what == "connection":
            what = "connection lost"
        log.warning("%s: %s, trying again in %.2g s: %s", self.name, what, delay, describe(e))

    def _server(self):
        """" to host ..., port ..., database ..." for a connection that
        failed, so that a wrong host or port shows in the message."""
        where = server_of(self.conninfo,
                          {k: v for k, v in self.connect_kwargs.items()
                           if k in ("host", "hostaddr", "port", "dbname")})
        return f" to {where}" if where else ""

    def _note_started(self):
        if not self.group:
            log.info("%s: started: %s", self.name, self._what())

    def _note_claim(self, slots, holders):
        """After a claim: the start line, a change of the slots held, and
        the slots it waits for (held by other workers whose lease has not
        ended: a worker that is gone keeps them until then)."""
        total = holders[0][3] if holders else len(slots)
        held = f"slots {slot_list(slots)} of {total or 0}" if slots else f"none of the {total or 0} slots"
        if self._held is None:
            log.info("%s: started: %s, holds %s (lease %g s)", self.name,
                     self._what(), held, self.settings.lease.total_seconds())
        elif slots != self._held:
            log.info("%s: now holds %s", self.name, held)
        self._held = slots
        others = [(w, n, until) for w, n, until, _ in holders if w != self.name]
        share = (total or 0) // (len(others) + 1)
        note = None
        if len(slots) < share and others:
            note = tuple(others)
            if note != self._holders_note:
                log.info("%s: holds %d of %d slots, its share is %d: waiting for %s",
                         self.name, len(slots), total, share,
                         "; ".join(f'{n} held by "{w}" until its lease ends at {until:%Y-%m-%d %H:%M:%S %Z}'
                                   for w, n, until in others))
        elif self._holders_note is not None:
            log.info("%s: no longer waits for slots of other workers", self.name)
        self._holders_note = note

    def _progress(self):
        every = self.settings.progress_every
        now = time.monotonic()
        if every <= 0 or now < self._progress_at or self._conn is None:
            return
        rows = self.stats["rows"] + self.stats["due"]
        parked = self.stats["parked"]
        r0, p0 = self._progress_base
        self._progress_base = (rows, parked)
        behind = max(self._behind.values(), default=0)
        took = now - self._progress_at + every
        log.info("%s: %d rows handled, %d parked in the last %s s (%d, %d since start); %s",
                 self.name, rows - r0, parked - p0,
                 f"{took:.0f}" if took >= 1 else f"{took:.2g}", rows, parked,
                 "holds no slot" if self.group and not self.slots
                 else f"behind by {behind} numbers" if behind > 0 else "caught up")
        self._progress_at = now + every

    def _log_parked(self):
        """The rows the page's transaction parked, once it committed (a
        page rolled back and run again parks them again)."""
        for seq, reason in self._parked_now:
            log.warning("%s: row %s parked: %s", self.name, seq, reason)
        self._parked_now = []

    def _backoff(self, tries):
        """The pause before a page's transaction runs again after a
        serialization failure (or a plain consumer's SS001): 10 ms, doubling,
        at most reconnect_max_delay."""
        return min(0.01 * 2 ** (tries - 1), self.settings.reconnect_max_delay)

    def _note_page(self, slot, n, last):
        """Numbers behind the horizon seen at the start of the round, for
        the progress line: 0 if the page was not full (the slot is read to
        the end), else from its last row."""
        self._behind[slot] = self._seen - last if n >= self.settings.page_size else 0

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
            busy = self._drain_due() > 0 or busy
        return busy

    def _drain_due(self):
        """Take due() again at once after a call that handed rows back and
        committed: under per-key order a held key comes back one row per
        call, its next row due as soon as the previous one committed, so
        waiting due_every between calls would drain it at one row per
        due_every.  At most a page's worth of rows before the slots get
        their turn; if the last call still had rows, the next round takes
        due() again without waiting due_every.  Returns the rows handed
        back."""
        total = n = 0
        while not self._stopping:
            n = self._due()
            total += n
            if n == 0 or total >= self.settings.page_size:
                break
        self._due_at = time.monotonic() + (0 if n else self.settings.due_every)
        return total

    def _claim(self):
        """Claim (or renew) this worker's share of the group's slots."""
        self.slots = [tuple(r) for r in self._conn.execute(
            Statements.CLAIM, (self.stream, self.consumer, self.name,
                               self.settings.lease)).fetchall()]
        self._claimed = True
        self._renew_at = time.monotonic() + self.settings.renew_every
        self.stats["claims"] += 1
        held = [s for s, _ in self.slots]
        if held != self._held or self._holders_note is not None:
            self._note_claim(held, self._conn.execute(Statements.HOLDERS, (
                self.stream, self.consumer, self.stream, self.consumer)).fetchall())
        self._behind = {s: b for s, b in self._behind.items() if s in held}
        self._hook("claimed", held)

    def _page(self, slot, token):
        """Read one page of the slot (or of the plain consumer), hand it to
        the handler and advance past it, in one transaction; run again on a
        serialization failure.  Returns the rows handled, or _LEASE_LOST."""
        conn = self._conn
        tries = 0
        while True:
            t0 = time.monotonic()
            self._parked_now = []
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
                        self._behind[slot] = 0
                        return 0
                    seq = self._sql.seq_column
                    parked = self._apply([(r[seq], r) for r in page])
                    last = page[-1][seq]
                    self._note_page(slot, len(page), last)
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
                log.warning("%s: page of slot %s rolled back (%s), %s: %s", self.name, slot,
                            what, "claims again" if what == "lease lost" and self.group
                            else "reads it again", describe(e))
                if what == "lease lost" and self.group:
                    return _LEASE_LOST
                tries += 1
                time.sleep(self._backoff(tries))
                continue                # a plain consumer moved: read again
            self._log_parked()
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
        tries = 0
        while True:
            t0 = time.monotonic()
            self._parked_now = []
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
                tries += 1
                time.sleep(self._backoff(tries))
                continue
            self._log_parked()
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
                self._stop_on_fault(e)
        parked = 0
        for one in rows:
            try:
                with conn.transaction(), conn.cursor() as cur:
                    self._handle(cur, [one])
            except Exception as e:
                self._reraise_transient(e)
                self._stop_on_fault(e, one[0])
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

    def _stop_on_fault(self, e, seq=None):
        """The handler's own code failed (class 42, or it raised
        PermanentError): every row would fail the same way, so nothing is
        parked; the page's transaction rolls back and the worker stops."""
        if not handler_fault(e):
            return
        at = f" at row {seq}" if seq is not None else ""
        if isinstance(e, PermanentError):
            raise e
        raise PermanentError(f"the handler's SQL failed{at} (an error of the handler, "
                             f"not of the row: nothing parked): {describe(e)}",
                             getattr(e, "sqlstate", None)) from e

    def _park(self, seq, reason):
        """Set a row aside in the page's transaction: the consumer's retry
        policy decides when due() hands it back, and when it is dead."""
        self._conn.execute(Statements.PARK, (self.stream, self.consumer, seq, reason))
        self.stats["parked"] += 1
        self._parked_now.append((seq, reason))

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
        if not self._connected:
            self._connected = True
            self._note_started()
        if self._sql is None:
            r = self._conn.execute(Statements.INFO.format(sql.Literal(self.stream))).fetchone()
            if r is None:
                raise PermanentError(f'"{self.stream}" is not a stream table this role may read')
            self._sql = Statements(*r)

    def _lost(self, e):
        """The connection is gone: drop it; the next round reconnects and
        claims again (the lease, if still running, is renewed; a page whose
        COMMIT got no answer either committed, and its slot has moved, or
        did not, and is read again)."""
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
        if self.group and self._claimed:
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
                    log.warning("%s: could not release its slots: %s", self.name, describe(e))
                    break
        self.slots = []
        log.info("%s: stopped%s (%d rows handled, %d parked)", self.name,
                 ", slots released" if released else "", self.stats["rows"] + self.stats["due"],
                 self.stats["parked"])
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
    reconnect_max_delay 2, connect_attempts 10 (before the first
    connection; None: no limit), progress_every 30 (0: no progress lines).

    It logs to logger "stream_seq_worker" (start, slots, lease waits,
    progress, parked rows, retries, stop); run() raises PermanentError on
    an error that trying again cannot cure."""

    group = True


class ConsumerWorker(_Worker):
    """A worker of plain consumer "consumer" of "stream": the same as
    GroupWorker without slots (one page at a time, advance() instead of
    advance_slot()).  Run one per consumer: two would take turns, each
    page of one fencing the other's (SS001, read again)."""

    group = False
