"""The asyncio workers: AsyncGroupWorker and AsyncConsumerWorker, the same
loop as the synchronous ones (sync.py, which says what each step is for)
on psycopg's AsyncConnection.  Handlers are coroutine functions:

    async def handle_row(cur, row): await cur.execute(...)
"""

import asyncio
import signal
import threading
import time
from datetime import timedelta

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from ._common import PermanentError, Statements, classify, describe, log, reason_of
from .sync import _LEASE_LOST, _Worker


class _AsyncWorker(_Worker):
    """The loop of sync._Worker with every round trip awaited."""

    async def run(self, until_idle=False):
        """As GroupWorker.run(); SIGTERM and SIGINT are taken through the
        running loop (add_signal_handler) when in the main thread."""
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
                        await self._connect()
                    if await self._round():
                        delay = 0.05
                        continue
                    if until_idle:
                        break
                    await self._wait()
                    delay = 0.05
                except psycopg.Error as e:
                    what = self._transient(e, attempts)
                    self._retry_log(what, e, delay)
                    if what == "connection" and self._conn is not None:
                        await self._lost(e)
                    if not self._stopping:
                        await asyncio.sleep(delay)
                    delay = min(delay * 2, self.settings.reconnect_max_delay)
        except PermanentError as e:
            log.error("%s: stopping: %s", self.name, e)
            raise
        finally:
            await self._finish()
            restore()

    async def _round(self):
        conn = self._conn
        cur = await conn.execute(Statements.HORIZON, (self.stream,))
        self._seen = (await cur.fetchone())[0]
        if self.group and (not self.slots or time.monotonic() >= self._renew_at):
            await self._claim()
        busy = False
        for slot, token in (self.slots if self.group else [(None, None)]):
            if self._stopping:
                return True
            n = await self._page(slot, token)
            if n is _LEASE_LOST:
                self.slots = []
                return True
            busy = busy or n > 0
        if time.monotonic() >= self._due_at and not self._stopping:
            busy = await self._drain_due() > 0 or busy
        return busy

    async def _drain_due(self):
        total = n = 0
        while not self._stopping:
            n = await self._due()
            total += n
            if n == 0 or total >= self.settings.page_size:
                break
        self._due_at = time.monotonic() + (0 if n else self.settings.due_every)
        return total

    async def _claim(self):
        cur = await self._conn.execute(Statements.CLAIM, (
            self.stream, self.consumer, self.name, self.settings.lease))
        self.slots = [tuple(r) for r in await cur.fetchall()]
        self._claimed = True
        self._renew_at = time.monotonic() + self.settings.renew_every
        self.stats["claims"] += 1
        held = [s for s, _ in self.slots]
        if held != self._held or self._holders_note is not None:
            cur = await self._conn.execute(Statements.HOLDERS, (
                self.stream, self.consumer, self.stream, self.consumer))
            self._note_claim(held, await cur.fetchall())
        self._behind = {s: b for s, b in self._behind.items() if s in held}
        self._hook("claimed", held)

    async def _page(self, slot, token):
        conn = self._conn
        tries = 0
        while True:
            t0 = time.monotonic()
            self._parked_now = []
            try:
                async with conn.transaction():
                    async with conn.cursor(row_factory=dict_row) as cur:
                        if self.group:
                            await cur.execute(self._sql.read_slot, (
                                self.consumer, slot, token, self.settings.page_size))
                        else:
                            await cur.execute(self._sql.read, (
                                self.consumer, self.settings.page_size))
                        page = await cur.fetchall()
                    if not page:
                        self._behind[slot] = 0
                        return 0
                    seq = self._sql.seq_column
                    parked = await self._apply([(r[seq], r) for r in page])
                    last = page[-1][seq]
                    self._note_page(slot, len(page), last)
                    if self.group:
                        await conn.execute(Statements.ADVANCE_SLOT, (
                            self.stream, self.consumer, slot, token, last))
                    else:
                        await conn.execute(Statements.ADVANCE, (self.stream, self.consumer, last))
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
                await asyncio.sleep(self._backoff(tries))
                continue
            self._log_parked()
            self.stats["pages"] += 1
            self.stats["rows"] += len(page)
            self._hook("page", slot, len(page), parked, time.monotonic() - t0)
            return len(page)

    async def _due(self):
        conn = self._conn
        tries = 0
        while True:
            t0 = time.monotonic()
            self._parked_now = []
            try:
                async with conn.transaction():
                    async with conn.cursor(row_factory=dict_row) as cur:
                        await cur.execute(self._sql.due, (self.stream, self.consumer,
                                                          self.settings.due_size))
                        got = await cur.fetchall()
                    if not got:
                        return 0
                    items = []
                    parked = 0
                    for r in got:
                        seq = r.pop("stream_seq.seq")
                        if r.pop("stream_seq.gone"):
                            await self._park(seq, "row removed by retention")
                            parked += 1
                        else:
                            items.append((seq, r))
                    parked += await self._apply(items)
            except psycopg.Error as e:
                if classify(e, conn.broken) != "serialization":
                    raise
                self.stats["retries"] += 1
                self._hook("retried", "serialization", e)
                tries += 1
                await asyncio.sleep(self._backoff(tries))
                continue
            self._log_parked()
            self.stats["due"] += len(got)
            self._hook("page", "due", len(got), parked, time.monotonic() - t0)
            return len(got)

    async def _apply(self, items):
        if not items:
            return 0
        rows = [(seq, self.rows.make(cols)) for seq, cols in items]
        conn = self._conn
        if len(rows) > 1:
            try:
                async with conn.transaction():
                    async with conn.cursor() as cur:
                        await self._handle(cur, rows)
                return 0
            except Exception as e:
                self._reraise_transient(e)
                self._stop_on_fault(e)
        parked = 0
        for one in rows:
            try:
                async with conn.transaction():
                    async with conn.cursor() as cur:
                        await self._handle(cur, [one])
            except Exception as e:
                self._reraise_transient(e)
                self._stop_on_fault(e, one[0])
                await self._park(one[0], reason_of(e))
                parked += 1
                self._hook("parked", one[0], e)
        return parked

    async def _handle(self, cur, rows):
        if self.handle_page is not None:
            await self.handle_page(cur, [r for _, r in rows])
        else:
            for _, r in rows:
                await self.handle_row(cur, r)

    async def _park(self, seq, reason):
        await self._conn.execute(Statements.PARK, (self.stream, self.consumer, seq, reason))
        self.stats["parked"] += 1
        self._parked_now.append((seq, reason))

    async def _wait(self):
        t0 = time.monotonic()
        self._waiting = True
        try:
            if self._stopping:
                return
            await self._conn.execute(Statements.WAIT, (
                self.stream, self._seen, timedelta(seconds=self.settings.wait_timeout)))
        except psycopg.errors.QueryCanceled:
            if self._conn.broken:
                raise
        finally:
            self._waiting = False
        self.stats["waits"] += 1
        self._hook("waited", self._seen, time.monotonic() - t0)

    async def _connect(self):
        self._conn = await psycopg.AsyncConnection.connect(
            self.conninfo, autocommit=True, prepare_threshold=None, **self.connect_kwargs)
        if not self._connected:
            self._connected = True
            self._note_started()
        if self._sql is None:
            cur = await self._conn.execute(Statements.INFO.format(sql.Literal(self.stream)))
            r = await cur.fetchone()
            if r is None:
                raise PermanentError(f'"{self.stream}" is not a stream table this role may read')
            self._sql = Statements(*r)

    async def _lost(self, e):
        self.stats["reconnects"] += 1
        self._hook("retried", "connection", e)
        await self._close()
        self.slots = []

    async def _close(self):
        if self._conn is not None:
            try:
                await self._conn.close()
            except Exception:
                pass
            self._conn = None

    async def _finish(self):
        released = False
        if self.group and self._claimed:
            for _ in range(3):
                try:
                    if self._conn is None or self._conn.broken:
                        await self._close()
                        await self._connect()
                    await self._conn.execute(Statements.RELEASE, (
                        self.stream, self.consumer, self.name))
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
        await self._close()

    def _install_signals(self):
        if not self.handle_signals or threading.current_thread() is not threading.main_thread():
            return lambda: None
        loop = asyncio.get_running_loop()
        sigs = (signal.SIGTERM, signal.SIGINT)
        for s in sigs:
            loop.add_signal_handler(s, self.stop)
        return lambda: [loop.remove_signal_handler(s) for s in sigs]


class AsyncGroupWorker(_AsyncWorker):
    """GroupWorker on asyncio: the same arguments, coroutine handlers,
    "await worker.run()"."""

    group = True


class AsyncConsumerWorker(_AsyncWorker):
    """ConsumerWorker on asyncio."""

    group = False
