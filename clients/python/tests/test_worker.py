"""Unit-level checks of stream_seq_worker against a live server, sync and
asyncio (test/t/043_python_library.pl runs them, through pgbouncer in
transaction mode, as an ordinary role).

    STREAM_SEQ_TEST_DSN=...  [STREAM_SEQ_TEST_DIRECT_DSN=...] python3 -m unittest -v tests/test_worker.py

STREAM_SEQ_TEST_DSN: where the workers connect (the pooler);
STREAM_SEQ_TEST_DIRECT_DSN: a direct connection, for last_numbers() and
for watching pg_stat_activity (default: the same).  Each test works on a
stream table of its own, which the role creates."""

import asyncio
import dataclasses
import decimal
import itertools
import os
import re
import threading
import time
import unittest

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from stream_seq_worker import (AsyncConsumerWorker, AsyncGroupWorker,
                               ConsumerWorker, GroupWorker, Hooks,
                               PermanentError, last_numbers, wait_visible)
from stream_seq_worker.lag import describe_lag

DSN = os.environ["STREAM_SEQ_TEST_DSN"]
DIRECT = os.environ.get("STREAM_SEQ_TEST_DIRECT_DSN", DSN)
_names = itertools.count(1)
_made = []                      # tables of the running test, dropped after it


def sql(query, params=None, dsn=DIRECT):
    """Runs one statement in autocommit on a connection of its own; its rows."""
    with psycopg.connect(dsn, autocommit=True) as c:
        cur = c.execute(query, params)
        return cur.fetchall() if cur.description else None


def stream(rows, group_slots=None, extra=""):
    """A new stream table t_N (id, k int, amount numeric, at timestamptz,
    doc jsonb, big bigint) with "rows" rows (k = i % 5, k -1 for poison
    rows i in rows' "poison" list), a consumer "c" (a group of
    group_slots slots keyed by k, or a plain one), and its applied table
    t_N_applied (seq primary key, k CHECK k >= 0).  Returns the name."""
    name = f"t_{os.getpid()}_{next(_names)}"
    _made.append(name)
    n, poison = rows if isinstance(rows, tuple) else (rows, ())
    sql(f"""
CREATE TABLE {name} (id bigserial PRIMARY KEY, k int, amount numeric,
                     at timestamptz DEFAULT now(), doc jsonb, big bigint {extra});
SELECT stream_seq.enable('{name}');
CREATE TABLE {name}_applied (seq bigint PRIMARY KEY, k int CHECK (k >= 0),
                             ord bigserial, worker text);
""")
    if group_slots:
        sql(f"SELECT stream_seq.create_group('{name}', 'c', 'k', {group_slots})")
    else:
        sql(f"SELECT stream_seq.create_consumer('{name}', 'c')")
    insert(name, range(1, n + 1), poison)
    return name


def insert(name, ids, poison=()):
    sql(f"INSERT INTO {name} (k, amount, doc, big) "
        f"SELECT CASE WHEN i = ANY(%s) THEN -1 ELSE i %% 5 END, 1.25, "
        f"'{{\"n\": 1}}', 9007199254740993 FROM unnest(%s::int[]) i",
        (list(poison), list(ids)))


def applier(name, worker="w"):
    """A row handler that records the row in the applied table."""
    def handle(cur, row):
        cur.execute(f"INSERT INTO {name}_applied (seq, k, worker) VALUES (%s, %s, %s)",
                    (row["seq"], row["k"], worker))
    return handle


def oracle(test, name, poison=0, retried=()):
    """Every row applied once or parked, never both; per-key order (but for
    the rows "retried": a retry runs after later rows of its key)."""
    bad, parked, applied, total, back = sql(f"""
SELECT (SELECT count(*) FROM {name} e
         WHERE (SELECT count(*) FROM {name}_applied a WHERE a.seq = e.seq)
             + (SELECT count(*) FROM stream_seq.parked_rows p
                 WHERE p.stream = '{name}'::regclass AND p.seq = e.seq) <> 1),
       (SELECT count(*) FROM stream_seq.parked_rows WHERE stream = '{name}'::regclass),
       (SELECT count(*) FROM {name}_applied), (SELECT count(*) FROM {name}),
       (SELECT count(*) FROM (SELECT seq < lag(seq) OVER (PARTITION BY k ORDER BY ord) b
                                FROM {name}_applied WHERE seq <> ALL(%s)) o WHERE b)""",
                                  (list(retried),))[0]
    test.assertEqual(bad, 0, "every row applied once or parked")
    test.assertEqual(parked, poison, "the poison rows were parked")
    test.assertEqual(applied, total - poison)
    test.assertEqual(back, 0, "per-key order")


def parked_count(name):
    return sql("SELECT count(*) FROM stream_seq.parked_rows WHERE stream = %s::regclass",
               (name,))[0][0]


def held(name):
    return sql("SELECT count(*) FROM stream_seq.consumer_slots "
               "WHERE stream = %s::regclass AND worker IS NOT NULL", (name,))[0][0]


def held_key(n):
    """A group "c" under per-key order whose key 1 has rows 2..n+1 held
    behind row 1, which a worker's first attempt refused and which is now
    due for its second attempt; then 10 rows of key 2 (n+2..n+11) that no
    one has read.  Returns the name."""
    name = stream(0, group_slots=2)
    sql("SELECT stream_seq.set_retry_policy(%s, 'c', 3, '1 s', 1, '1 s')", (name,))
    sql("SELECT stream_seq.set_key_order(%s, 'c', 'until_applied')", (name,))
    sql(f"INSERT INTO {name} (k) SELECT 1 FROM generate_series(1, %s)", (n + 1,))
    apply = applier(name)

    def refuse_row_1(cur, row):
        if row["seq"] == 1:
            raise RuntimeError("not yet")
        apply(cur, row)
    # row 1 is parked; the next read parks the others as held, in one page
    GroupWorker(DSN, name, "c", "w", handle_row=refuse_row_1,
                due_every=3600).run(until_idle=True)
    assert sql("SELECT count(*) FILTER (WHERE held), count(*) FILTER (WHERE seq = 1 AND attempts = 1) "
               "FROM stream_seq.parked_rows WHERE stream = %s::regclass", (name,))[0] == (n, 1)
    for _ in range(100):
        if sql("SELECT due_at <= now() FROM stream_seq.parked_rows "
               "WHERE stream = %s::regclass AND seq = 1", (name,))[0][0]:
            break
        time.sleep(0.1)
    sql(f"INSERT INTO {name} (k) SELECT 2 FROM generate_series(1, 10)")
    return name


class DueTrail(Hooks):
    """Records the slot of each page committed ("due" for due() calls)."""

    def __init__(self):
        self.trail = []

    def page(self, worker, slot, rows, parked, seconds):
        self.trail.append(slot)


def check_drained(test, name, n, w, trail, page_size):
    """Key 1 drained in one run() whose due_every is an hour: in order,
    one row per due() call, at most a page's worth of due() rows between
    two pages of key 2's slot while key 2 still had rows."""
    test.assertEqual(sql(f"SELECT array_agg(seq ORDER BY ord) FROM {name}_applied WHERE k = 1")[0][0],
                     list(range(1, n + 2)), "key 1 in commit order")
    test.assertEqual(sql(f"SELECT count(*) FROM {name}_applied WHERE k = 2")[0][0], 10)
    test.assertEqual(parked_count(name), 0)
    test.assertEqual(w.stats["due"], n + 1)
    test.assertEqual(trail.count("due"), n + 1, "one row of the key per due() call")
    last_slot_page = max(i for i, s in enumerate(trail) if s != "due")
    runs = "".join("d" if s == "due" else "s" for s in trail[:last_slot_page]).split("s")
    test.assertLessEqual(max(len(r) for r in runs), page_size, "the slots are not starved")
    test.assertGreater(max(len(r) for r in runs), 1, "due() again at once")


class Case(unittest.TestCase):

    def tearDown(self):
        # a stream takes one of the server's stream_seq.max_streams
        while _made:
            name = _made.pop()
            sql(f"DROP TABLE IF EXISTS {name}, {name}_applied")


class Sync(Case):

    def test_typed_rows_as_dicts(self):
        name = stream(3, group_slots=2)
        got = []
        GroupWorker(DSN, name, "c", "w", handle_row=lambda cur, r: got.append(r)).run(until_idle=True)
        self.assertEqual(sorted(r["seq"] for r in got), [1, 2, 3])
        r = got[0]
        self.assertEqual(set(r), {"id", "k", "amount", "at", "doc", "big", "seq"})
        self.assertIs(type(r["seq"]), int)
        self.assertEqual(r["big"], 9007199254740993)        # exact, above 2^53
        self.assertEqual(r["amount"], decimal.Decimal("1.25"))
        self.assertEqual(r["doc"], {"n": 1})
        self.assertEqual(held(name), 0, "released when run() returns")

    def test_dataclass_rows(self):
        @dataclasses.dataclass
        class Ev:
            seq: int
            k: int
            big: int = 0
        name = stream(4)
        got = []
        ConsumerWorker(DSN, name, "c", row_type=Ev,
                       handle_row=lambda cur, r: got.append(r)).run(until_idle=True)
        self.assertEqual([r.seq for r in got], [1, 2, 3, 4])
        self.assertEqual(got[1], Ev(seq=2, k=2, big=9007199254740993))
        self.assertEqual(sql("SELECT stream_seq.position(%s, 'c')", (name,))[0][0], 4)

    def test_page_handler_parks_poison(self):
        name = stream((250, (7, 8, 130)), group_slots=3)
        pages = []

        def handle_page(cur, rows):
            pages.append(len(rows))
            cur.executemany(f"INSERT INTO {name}_applied (seq, k) VALUES (%s, %s)",
                            [(r["seq"], r["k"]) for r in rows])
        w = GroupWorker(DSN, name, "c", "w", handle_page=handle_page, page_size=50)
        w.run(until_idle=True)
        oracle(self, name, poison=3)
        self.assertGreater(max(pages), 1, "whole pages first")
        self.assertIn(1, pages, "then row by row after a failure")
        self.assertEqual(w.stats["parked"], 3)
        reasons = sql("SELECT reason FROM stream_seq.parked_rows WHERE stream = %s::regclass", (name,))
        self.assertTrue(all(r[0].startswith("23514: ") for r in reasons), reasons)

    def test_retry_policy_and_due(self):
        # a flaky row fails with its page, alone, and at its first retry,
        # and succeeds at the second retry (due() hands it back); a poison
        # row becomes a dead letter after the policy's 3 attempts
        name = stream((20, (11,)), group_slots=2)
        sql("SELECT stream_seq.set_retry_policy(%s, 'c', 3, '0 s', 1, '0 s')", (name,))
        tries = {}
        apply = applier(name)

        def handle(cur, row):
            tries[row["seq"]] = tries.get(row["seq"], 0) + 1
            if row["seq"] == 5 and tries[5] < 4:
                raise RuntimeError("flaky")
            apply(cur, row)
        w = GroupWorker(DSN, name, "c", "w", handle_row=handle, due_every=0)
        w.run(until_idle=True)
        self.assertEqual(sql(f"SELECT count(*) FROM {name}_applied WHERE seq = 5")[0][0], 1)
        self.assertEqual(sql("SELECT seq, attempts, dead FROM stream_seq.parked_rows "
                             "WHERE stream = %s::regclass", (name,)), [(11, 3, True)])
        self.assertGreaterEqual(w.stats["due"], 3, "row 5 again, row 11 twice")
        oracle(self, name, poison=1, retried=[5])

    def test_held_key_drains_at_once(self):
        # under per-key order due() hands a held key back one row per call:
        # the worker calls it again at once while it hands rows back, not
        # once per due_every (an hour here: the run would end after row 1)
        name = held_key(300)
        trail = DueTrail()
        w = GroupWorker(DSN, name, "c", "w", handle_row=applier(name), hooks=trail,
                        due_every=3600, page_size=50)
        w.run(until_idle=True)
        check_drained(self, name, 300, w, trail.trail, 50)

    def test_due_row_gone(self):
        # a parked row deleted before its retry (retention with
        # respect_consumers off can remove it too) is never handed to the
        # handler: each due() parks it again with the reason, until it is a
        # dead letter; the rows after it are applied
        name = stream(3)
        sql("SELECT stream_seq.set_retry_policy(%s, 'c', 3, '0 s', 1, '0 s')", (name,))
        sql("SELECT stream_seq.park(%s, 'c', 2, 'refused')", (name,))
        sql(f"DELETE FROM {name} WHERE seq = 2")
        got = []
        w = ConsumerWorker(DSN, name, "c", handle_row=lambda cur, r: got.append(r["seq"]),
                           due_every=0)
        w.run(until_idle=True)
        self.assertEqual(sorted(got), [1, 3])
        self.assertEqual(sql("SELECT seq, attempts, dead, reason FROM stream_seq.parked_rows "
                             "WHERE stream = %s::regclass", (name,)),
                         [(2, 3, True, "row removed by retention")])

    def test_reconnect_after_lost_connection(self):
        # the handler's first call kills its own server connection: the
        # page is read again on a new one and applied once
        name = stream(30, group_slots=2)
        apply = applier(name)
        killed = []

        def handle(cur, row):
            if not killed:
                killed.append(row["seq"])
                cur.execute("SELECT pg_terminate_backend(pg_backend_pid())")
            apply(cur, row)
        w = GroupWorker(DSN, name, "c", "w", handle_row=handle)
        with self.assertLogs("stream_seq_worker", "WARNING") as logs:
            w.run(until_idle=True)
        self.assertEqual(w.stats["reconnects"], 1)
        self.assertRegex("\n".join(logs.output),
                         r"WARNING:stream_seq_worker:w: connection lost, trying again in 0\.05 s: ")
        oracle(self, name)

    def test_lost_lease_is_claimed_again(self):
        # reset() during a page fences it (SS001): it rolls back, the
        # worker claims again and reads from the reset position
        name = stream(10, group_slots=1)
        apply = applier(name)
        state = {"reset": False}

        class H(Hooks):
            def claimed(self, worker, slots):
                if not state["reset"] and worker.stats["claims"] == 1:
                    state["reset"] = True
                    sql("SELECT stream_seq.reset(%s, 'c', 0)", (name,))
        w = GroupWorker(DSN, name, "c", "w", handle_row=apply, hooks=H())
        w.run(until_idle=True)
        self.assertGreaterEqual(w.stats["retries"], 1)
        self.assertGreaterEqual(w.stats["claims"], 2)
        oracle(self, name)

    def test_stop_cancels_wait_and_releases(self):
        name = stream(5, group_slots=4)
        waiting = threading.Event()

        class H(Hooks):
            def claimed(self, worker, slots):
                pass
        w = GroupWorker(DSN, name, "c", "w", handle_row=applier(name),
                        lease=60, wait_timeout=20)
        t = threading.Thread(target=w.run)
        t.start()
        # the worker caught up and sleeps in wait()
        deadline = time.time() + 30
        while time.time() < deadline:
            if sql(f"SELECT count(*) FROM {name}_applied")[0][0] == 5 and sql(
                    "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                    "AND query LIKE 'SELECT stream_seq.wait(%%'")[0][0] > 0:
                waiting.set()
                break
            time.sleep(0.02)
        self.assertTrue(waiting.is_set(), "the worker waits")
        self.assertEqual(held(name), 4)
        t0 = time.time()
        w.stop()
        t.join(15)
        self.assertFalse(t.is_alive())
        self.assertLess(time.time() - t0, 10, "the wait was cancelled, not waited out")
        self.assertEqual(held(name), 0)

    def test_logs_what_it_does(self):
        # start (the slots it holds), each parked row with its reason,
        # progress lines, and the stop with its slots released
        name = stream((30, (4,)), group_slots=2)
        with self.assertLogs("stream_seq_worker", "INFO") as logs:
            w = GroupWorker(DSN, name, "c", "w1", handle_row=applier(name),
                            page_size=10, progress_every=0.001)
            w.run(until_idle=True)
        text = "\n".join(logs.output)
        self.assertRegex(text, rf'INFO:stream_seq_worker:w1: started: group "c" of {name}, '
                         r'holds slots 0-1 of 2 \(lease 30 s\)')
        self.assertRegex(text, r"WARNING:stream_seq_worker:w1: row 4 parked: 23514: ")
        self.assertRegex(text, r"INFO:stream_seq_worker:w1: \d+ rows handled, \d+ parked in the "
                         r"last [\d.e-]+ s \(\d+, \d+ since start\); (caught up|behind by \d+ numbers)")
        self.assertRegex(text, r"INFO:stream_seq_worker:w1: stopped, slots released "
                         r"\(30 rows handled, 1 parked\)$")
        self.assertEqual(held(name), 0)
        # progress_every=0: no progress line
        insert(name, range(31, 41))
        with self.assertLogs("stream_seq_worker", "INFO") as logs:
            GroupWorker(DSN, name, "c", "w1", handle_row=applier(name),
                        progress_every=0).run(until_idle=True)
        self.assertNotIn("parked in the last", "\n".join(logs.output))

    def test_lease_wait_is_named(self):
        # a worker that is gone (it claimed, with a lease of a minute, and
        # never released) holds every slot: a new worker names it and when
        # its lease ends, and takes nothing meanwhile
        name = stream(5, group_slots=4)
        sql("SELECT stream_seq.claim(%s, 'c', 'gone', '60 s')", (name,))
        until = sql("SELECT max(lease_until) FROM stream_seq.consumer_slots "
                    "WHERE stream = %s::regclass AND consumer = 'c'", (name,))[0][0]
        with self.assertLogs("stream_seq_worker", "INFO") as logs:
            w = GroupWorker(DSN, name, "c", "new", handle_row=applier(name))
            w.run(until_idle=True)
        text = "\n".join(logs.output)
        self.assertIn('new: started: group "c" of %s, holds none of the 4 slots' % name, text)
        self.assertIn('new: holds 0 of 4 slots, its share is 2: waiting for 4 held by "gone" '
                      'until its lease ends at %s' % until.strftime("%Y-%m-%d %H:%M:%S"), text)
        self.assertEqual(w.stats["rows"], 0)
        self.assertEqual(held(name), 4, "the gone worker's slots stay its own")
        # its lease released: the next run takes them and says so
        sql("SELECT stream_seq.release(%s, 'c', 'gone')", (name,))
        with self.assertLogs("stream_seq_worker", "INFO") as logs:
            w.run(until_idle=True)
        self.assertIn("new: started: group", "\n".join(logs.output))
        self.assertEqual(w.stats["rows"], 5)

    def test_handler_sql_fault_stops_the_worker(self):
        # the handler's SQL names a column that does not exist: every row
        # would fail, so nothing is parked; run() raises, the slots are
        # released and the positions have not moved
        name = stream(5, group_slots=2)

        def bad(cur, row):
            cur.execute(f"INSERT INTO {name}_applied (seq, nope) VALUES (%s, 1)", (row["seq"],))
        with self.assertLogs("stream_seq_worker", "INFO") as logs, \
                self.assertRaises(PermanentError) as cm:
            GroupWorker(DSN, name, "c", "w", handle_row=bad).run()
        self.assertEqual(cm.exception.sqlstate, "42703")
        self.assertIn('column "nope"', str(cm.exception))
        self.assertIn("nothing parked", str(cm.exception))
        self.assertRegex("\n".join(logs.output), r"ERROR:stream_seq_worker:w: stopping: ")
        self.assertEqual(parked_count(name), 0)
        self.assertEqual(held(name), 0)
        self.assertEqual(sql("SELECT max(position) FROM stream_seq.consumer_slots "
                             "WHERE stream = %s::regclass", (name,))[0][0], 0)
        # a handler may stop the worker itself
        def stop_here(cur, row):
            raise PermanentError("no more")
        with self.assertRaises(PermanentError):
            GroupWorker(DSN, name, "c", "w", handle_row=stop_here).run()
        self.assertEqual(parked_count(name), 0)

    def test_permanent_errors_stop_run(self):
        name = stream(3, group_slots=2)
        sql(f"SELECT stream_seq.create_consumer('{name}', 'plain')")
        for worker, state in ((GroupWorker(DSN, name, "nope", "w", handle_row=print), "42704"),
                              (ConsumerWorker(DSN, name, "c", handle_row=print), "55000"),
                              (GroupWorker(DSN, name, "plain", "w", handle_row=print), "55000")):
            with self.assertRaises(PermanentError) as cm:
                worker.run()
            self.assertEqual(cm.exception.sqlstate, state, str(cm.exception))
        # a login the server refuses: at once, without retrying
        nodb = make_conninfo(DIRECT, dbname="stream_seq_no_such_db")
        t0 = time.monotonic()
        with self.assertRaises(PermanentError) as cm:
            GroupWorker(nodb, name, "c", "w", handle_row=print).run()
        self.assertIn('database "stream_seq_no_such_db" does not exist', str(cm.exception))
        self.assertIsNone(cm.exception.sqlstate)
        self.assertLess(time.monotonic() - t0, 5, "not retried")
        # no server there: connect_attempts tries, then it gives up
        d = conninfo_to_dict(DIRECT)
        noserver = make_conninfo(DIRECT, port=str(int(d.get("port") or 5432) + 7))
        with self.assertLogs("stream_seq_worker", "WARNING") as logs, \
                self.assertRaises(PermanentError) as cm:
            GroupWorker(noserver, name, "c", "w", handle_row=print, connect_attempts=3).run()
        port = conninfo_to_dict(noserver)["port"]
        self.assertRegex(str(cm.exception), f"could not connect to .*, port {port}, .* in 3 attempts")
        self.assertEqual(len(re.findall(f"could not connect to .*, port {port}, .*, trying again",
                                        "\n".join(logs.output))), 2)

    def test_producer_helpers(self):
        name = stream(0)
        with psycopg.connect(DIRECT, autocommit=True) as c:
            self.assertIsNone(last_numbers(c, name))
            c.execute(f"INSERT INTO {name} (k) VALUES (1), (2)")
            first, last = last_numbers(c, name)
            self.assertEqual((first, last), (1, 2))
            self.assertTrue(wait_visible(c, name, last, timeout=5))


class Lag(Case):

    def test_describe_lag(self):
        # a known backlog: 7 rows not read by the group, 2 of them in a
        # transaction rolled back (numbers taken, no rows)
        name = stream(10, group_slots=2)
        GroupWorker(DSN, name, "c", "w", handle_row=applier(name)).run(until_idle=True)
        insert(name, range(11, 16))
        try:
            with psycopg.connect(DIRECT) as c:
                c.execute(f"INSERT INTO {name} (k) VALUES (1), (2)")
                c.rollback()
        except psycopg.Error:
            pass
        insert(name, range(16, 18))
        sql(f"SELECT stream_seq.create_consumer('{name}', 'plain')")
        sql(f"SELECT stream_seq.park('{name}', 'plain', 3, 'refused')")
        with psycopg.connect(DIRECT, autocommit=True) as c:
            rows = describe_lag(c, stream=name)
        group = [r for r in rows if r["consumer"] == "c"]
        plain = [r for r in rows if r["consumer"] == "plain"]
        self.assertEqual(len(group), 3, "the group and its 2 slots")
        self.assertIsNone(group[0]["slot"])
        self.assertEqual(group[0]["position"], min(r["position"] for r in group[1:]))
        self.assertEqual(group[0]["backlog"], 7)
        self.assertEqual(sum(r["backlog"] for r in group[1:]), 7)
        self.assertEqual(group[0]["worker"], "0 workers")
        self.assertEqual(plain[0]["position"], 0)
        self.assertEqual(plain[0]["backlog"], 17)
        self.assertEqual(plain[0]["parked"], 1)
        self.assertEqual(plain[0]["lag"], plain[0]["horizon"] - 1)
        self.assertEqual(plain[0]["horizon"], sql("SELECT stream_seq.horizon(%s)", (name,))[0][0])
        with psycopg.connect(DIRECT, autocommit=True) as c:
            self.assertEqual(describe_lag(c, stream=name, consumer="nope"), [])
            self.assertEqual(len(describe_lag(c, stream=name, slots=False)), 2)


class Async(Case):

    def test_async_group_with_poison(self):
        name = stream((120, (3, 60)), group_slots=3)

        async def handle(cur, row):
            await cur.execute(f"INSERT INTO {name}_applied (seq, k) VALUES (%s, %s)",
                              (row["seq"], row["k"]))

        async def main():
            ws = [AsyncGroupWorker(DSN, name, "c", f"a{i}", handle_row=handle, page_size=20)
                  for i in range(2)]
            await asyncio.gather(*(w.run(until_idle=True) for w in ws))
            # one may have stopped while the other still held slots
            await ws[0].run(until_idle=True)
            return ws
        ws = asyncio.run(main())
        oracle(self, name, poison=2)
        self.assertEqual(sum(w.stats["parked"] for w in ws), 2)
        self.assertEqual(held(name), 0)

    def test_async_held_key_drains_at_once(self):
        name = held_key(300)
        trail = DueTrail()

        async def handle(cur, row):
            await cur.execute(f"INSERT INTO {name}_applied (seq, k) VALUES (%s, %s)",
                              (row["seq"], row["k"]))
        w = AsyncGroupWorker(DSN, name, "c", "w", handle_row=handle, hooks=trail,
                             due_every=3600, page_size=50)
        asyncio.run(w.run(until_idle=True))
        check_drained(self, name, 300, w, trail.trail, 50)

    def test_async_plain_consumer_page_handler_and_stop(self):
        name = stream(40)

        async def handle_page(cur, rows):
            for r in rows:
                await cur.execute(f"INSERT INTO {name}_applied (seq, k) VALUES (%s, %s)",
                                  (r["seq"], r["k"]))

        class H(Hooks):
            def waited(self, worker, after, seconds):
                worker.stop()

        async def main():
            w = AsyncConsumerWorker(DSN, name, "c", handle_page=handle_page,
                                    hooks=H(), wait_timeout=0.1, page_size=15)
            await w.run()
            return w
        w = asyncio.run(main())
        self.assertEqual(w.stats["pages"], 3)
        self.assertEqual(sql("SELECT stream_seq.position(%s, 'c')", (name,))[0][0], 40)
        oracle(self, name)

    def test_bad_arguments(self):
        with self.assertRaises(TypeError):
            GroupWorker(DSN, "x", "c", "w")
        with self.assertRaises(TypeError):
            GroupWorker(DSN, "x", "c", handle_row=print)
        with self.assertRaises(TypeError):
            ConsumerWorker(DSN, "x", "c", handle_row=print, row_type=list)
        with self.assertRaises(ValueError):
            ConsumerWorker(DSN, "x", "c", handle_row=print, lease=0)
        with self.assertRaises(ValueError):
            ConsumerWorker(DSN, "x", "c", handle_row=print, connect_attempts=0)
        with self.assertRaises(ValueError):
            ConsumerWorker(DSN, "x", "c", handle_row=print, progress_every=-1)
        with self.assertRaises(PermanentError) as cm:
            ConsumerWorker(DSN, "no_such_table", "c", handle_row=print).run()
        self.assertEqual(cm.exception.sqlstate, "42P01")

    def test_async_permanent_errors(self):
        # the asyncio loop decides as the synchronous one: a missing
        # consumer and a handler's own SQL error stop it, nothing parked
        name = stream(6, group_slots=2)

        async def bad(cur, row):
            await cur.execute(f"INSERT INTO {name}_applied (seq, nope) VALUES (%s, 1)",
                              (row["seq"],))

        async def main():
            for consumer, handler, state in (("nope", bad, "42704"), ("c", bad, "42703")):
                with self.assertRaises(PermanentError) as cm:
                    await AsyncGroupWorker(DSN, name, consumer, "w", handle_row=handler).run()
                self.assertEqual(cm.exception.sqlstate, state)
        asyncio.run(main())
        self.assertEqual(parked_count(name), 0)
        self.assertEqual(held(name), 0)


if __name__ == "__main__":
    unittest.main()
