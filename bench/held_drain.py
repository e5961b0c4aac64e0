"""held_drain.py: how long a worker of the Python library takes to drain a
key whose rows are held behind a parked row (per-key order through
retries, set_key_order()), with the library's default settings:

    PYTHONPATH=clients/python python3 bench/held_drain.py DSN [ROWS] [LIMIT]

A stream table of its own (dropped at the end), a group of one slot under
'until_applied' with a retry policy of no delay; ROWS rows of one key
(default 1000) are held behind the key's first row, parked as a worker's
page would park it (read_slot_rows(), park(), advance_slot(), then a read
that holds the rest).  One GroupWorker (defaults: due_every 1 s,
page_size 100) then applies them all; prints the seconds from its start
until nothing is parked, and the rows per second.  LIMIT (seconds, default
3600) stops it early: it then prints how many rows it applied."""

import os
import sys
import threading
import time

import psycopg

from stream_seq_worker import GroupWorker

dsn = sys.argv[1]
rows = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
limit = float(sys.argv[3]) if len(sys.argv) > 3 else 3600.0
name = f"held_drain_{os.getpid()}"

with psycopg.connect(dsn, autocommit=True) as c:
    c.execute(f"CREATE TABLE {name} (id bigserial PRIMARY KEY, k int)")
    c.execute(f"CREATE TABLE {name}_applied (seq bigint PRIMARY KEY)")
    c.execute("SELECT stream_seq.enable(%s)", (name,))
    c.execute("SELECT stream_seq.create_group(%s, 'g', 'k', 1)", (name,))
    c.execute("SELECT stream_seq.set_retry_policy(%s, 'g', 3, '0 s', 1, '0 s')", (name,))
    c.execute("SELECT stream_seq.set_key_order(%s, 'g', 'until_applied')", (name,))
    c.execute(f"INSERT INTO {name} (k) SELECT 1 FROM generate_series(1, %s)", (rows + 1,))
    token = c.execute("SELECT token FROM stream_seq.claim(%s, 'g', 'setup')", (name,)).fetchone()[0]
    with c.transaction():
        first = c.execute(f"SELECT seq FROM stream_seq.read_slot_rows(NULL::{name}, 'g', 0, %s)",
                          (token,)).fetchone()[0]
        c.execute("SELECT stream_seq.park(%s, 'g', %s, 'refused')", (name, first))
        c.execute("SELECT stream_seq.advance_slot(%s, 'g', 0, %s, %s)", (name, token, first))
    c.execute(f"SELECT count(*) FROM stream_seq.read_slot_rows(NULL::{name}, 'g', 0, %s)", (token,))
    c.execute("SELECT stream_seq.release(%s, 'g', 'setup')", (name,))
    held = c.execute("SELECT count(*) FROM stream_seq.parked_rows "
                     "WHERE stream = %s::regclass AND held", (name,)).fetchone()[0]
    assert held == rows, held


def apply(cur, row):
    cur.execute(f"INSERT INTO {name}_applied (seq) VALUES (%s)", (row["seq"],))


w = GroupWorker(dsn, name, "g", "w", handle_row=apply, handle_signals=False)
t = threading.Thread(target=w.run)
t0 = time.monotonic()
t.start()
with psycopg.connect(dsn, autocommit=True) as c:
    while time.monotonic() - t0 < limit:
        left = c.execute("SELECT count(*) FROM stream_seq.parked_rows WHERE stream = %s::regclass",
                         (name,)).fetchone()[0]
        if left == 0:
            break
        time.sleep(0.05)
    secs = time.monotonic() - t0
    w.stop()
    t.join()
    done = c.execute(f"SELECT count(*) FROM {name}_applied").fetchone()[0]
    print(f"{rows} held rows (+1 parked): {done} applied in {secs:.2f} s, "
          f"{done / secs:.1f} rows/s")
    c.execute(f"DROP TABLE {name}, {name}_applied")
