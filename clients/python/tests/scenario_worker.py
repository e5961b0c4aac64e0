"""The worker of test/t/043_python_library.pl: a GroupWorker (or, with
"async", an AsyncGroupWorker) of group "shipping" of "events" that records
each row in shipping_applied (whose CHECK refuses the poison rows, of
customer -1), with short times so that a killed worker's slots are taken
over quickly.  Prints its stats as one line when it stops.

    scenario_worker.py DSN NAME sync|async
"""

import asyncio
import json
import sys

from stream_seq_worker import AsyncGroupWorker, GroupWorker

INSERT = ("INSERT INTO shipping_applied (seq, customer_id, payload, worker) "
          "VALUES (%s, %s, %s, %s)")
TIMES = dict(lease=2.0, renew_every=0.5, wait_timeout=0.5, due_every=0.2, page_size=50)


def main(dsn, name, mode):
    def handle(cur, row):
        cur.execute(INSERT, (row["seq"], row["customer_id"], row["payload"]["kind"], name))

    async def ahandle(cur, row):
        await cur.execute(INSERT, (row["seq"], row["customer_id"], row["payload"]["kind"], name))

    if mode == "async":
        w = AsyncGroupWorker(dsn, "events", "shipping", name, handle_row=ahandle, **TIMES)
        asyncio.run(w.run())
    else:
        w = GroupWorker(dsn, "events", "shipping", name, handle_row=handle, **TIMES)
        w.run()
    print(f"{name} stopped: {json.dumps(w.stats, sort_keys=True)}", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
