# drivers.py DRIVER DSN TABLE: the driver recipes of doc/applications.md
# (DRIVER: psycopg, psycopg2 or asyncpg) on stream table TABLE, run by
# test/t/039_applications.pl through pgbouncer in transaction mode.  Prints
# one line per task ("task result"), which the test compares.
import asyncio
import sys

driver, dsn, table = sys.argv[1:4]
UPSERT = (f"INSERT INTO {table} (id, customer_id, payload) VALUES (%s, %s, %s) "
          "ON CONFLICT (id) DO UPDATE SET payload = EXCLUDED.payload")
UPSERT_PLAIN = (f"INSERT INTO {table} (id, customer_id, payload, seq) "
                "VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (id) DO UPDATE SET payload = EXCLUDED.payload")
PAGE = (f"SELECT seq FROM {table} WHERE seq > %s "
        f"AND seq < stream_seq.horizon('{table}') ORDER BY seq LIMIT 2")


def out(*words):
    print(" ".join(str(w) for w in words), flush=True)


def dbapi(mod, conn, tx, pgcode):
    """The tasks with a DB-API driver (psycopg 2 and 3 share the style);
    tx() is a transaction block."""
    def row(id_):
        with conn.cursor() as c:
            c.execute(f"SELECT seq, payload FROM {table} WHERE id = %s", [id_])
            return c.fetchone()

    with tx():
        with conn.cursor() as c:
            c.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, "
                      "customer_id int NOT NULL, payload text)")
            c.execute("SELECT stream_seq.enable(%s)", [table])
    # insert: RETURNING gives the placeholder 0, the number exists after commit
    with tx():
        with conn.cursor() as c:
            c.execute(f"INSERT INTO {table} (id, customer_id, payload) "
                      "VALUES (1, 1, 'a') RETURNING seq")
            before = c.fetchone()[0]
    with tx():
        out("insert", before, row(1)[0])
    # bulk insert: COPY (psycopg 3) or executemany (psycopg 2)
    with tx():
        with conn.cursor() as c:
            rows = [(i, i, "a") for i in (2, 3, 4)]
            if mod == "psycopg":
                with c.copy(f"COPY {table} (id, customer_id, payload) "
                            "FROM STDIN") as copy:
                    for r in rows:
                        copy.write_row(r)
            else:
                c.executemany(f"INSERT INTO {table} (id, customer_id, payload) "
                              "VALUES (%s, %s, %s)", rows)
    with tx():
        out("bulk", *(row(i)[0] for i in (2, 3, 4)))
    # save of a loaded row: every column written back as read
    with tx():
        with conn.cursor() as c:
            c.execute(f"SELECT id, customer_id, seq FROM {table} WHERE id = 1")
            id_, cust, seq = c.fetchone()
            c.execute(f"UPDATE {table} SET customer_id = %s, payload = %s, "
                      "seq = %s WHERE id = %s", [cust, "b", seq, id_])
    with tx():
        out("save", *row(1))
    # upsert without the stream column
    with tx():
        with conn.cursor() as c:
            c.execute(UPSERT, [2, 2, "u"])
            c.execute(UPSERT, [5, 5, "n"])
    with tx():
        out("upsert", *row(2), *row(5))
    # upsert of a loaded row, its number in VALUES
    try:
        with tx():
            seq = row(3)[0]
            with conn.cursor() as c:
                c.execute(UPSERT_PLAIN, [3, 3, "p", seq])
        with tx():
            out("upsert-plain", *row(3))
    except mod.Error as e:
        out("upsert-plain", pgcode(e))
    # paging below the horizon, the same statement more times than
    # psycopg 3 takes to prepare one (prepare_threshold: 5)
    cursor, pages = 0, []
    for _ in range(8):
        with tx():
            with conn.cursor() as c:
                c.execute(PAGE, [cursor])
                seqs = [r[0] for r in c.fetchall()]
        if seqs:
            pages.append(",".join(str(n) for n in seqs))
            cursor = seqs[-1]
    out("page", "|".join(pages), type(cursor).__name__)


async def with_asyncpg():
    import asyncpg
    params = dict(kv.split("=", 1) for kv in dsn.split())
    # pgbouncer in transaction mode: no statement cache
    conn = await asyncpg.connect(host=params["host"], port=int(params["port"]),
                                 user=params["user"], database=params["dbname"],
                                 statement_cache_size=0)
    q = {k: v.replace("%s", "$1", 1).replace("%s", "$2", 1)
         .replace("%s", "$3", 1).replace("%s", "$4", 1)
         for k, v in (("upsert", UPSERT), ("plain", UPSERT_PLAIN),
                      ("page", PAGE))}

    # and every statement in a transaction: asyncpg prepares (unnamed) and
    # executes in two round trips, between which pgbouncer may hand the
    # server connection to another transaction (26000)
    async def row(id_):
        async with conn.transaction():
            r = await conn.fetchrow(f"SELECT seq, payload FROM {table} "
                                    "WHERE id = $1", id_)
        return tuple(r)

    async with conn.transaction():
        await conn.execute(f"CREATE TABLE {table} (id bigint PRIMARY KEY, "
                           "customer_id int NOT NULL, payload text)")
        await conn.execute("SELECT stream_seq.enable($1)", table)
    async with conn.transaction():
        before = await conn.fetchval(
            f"INSERT INTO {table} (id, customer_id, payload) "
            "VALUES (1, 1, 'a') RETURNING seq")
    out("insert", before, (await row(1))[0])
    async with conn.transaction():
        await conn.copy_records_to_table(
            table, records=[(i, i, "a") for i in (2, 3, 4)],
            columns=["id", "customer_id", "payload"])
    out("bulk", *[(await row(i))[0] for i in (2, 3, 4)])
    async with conn.transaction():
        r = await conn.fetchrow(f"SELECT id, customer_id, seq FROM {table} "
                                "WHERE id = 1")
        await conn.execute(f"UPDATE {table} SET customer_id = $1, "
                           "payload = $2, seq = $3 WHERE id = $4",
                           r["customer_id"], "b", r["seq"], r["id"])
    out("save", *await row(1))
    async with conn.transaction():
        await conn.execute(q["upsert"], 2, 2, "u")
        await conn.execute(q["upsert"], 5, 5, "n")
    out("upsert", *await row(2), *await row(5))
    try:
        async with conn.transaction():
            await conn.execute(q["plain"], 3, 3, "p", (await row(3))[0])
        out("upsert-plain", *await row(3))
    except asyncpg.PostgresError as e:
        out("upsert-plain", e.sqlstate)
    cursor, pages = 0, []
    for _ in range(8):
        async with conn.transaction():
            seqs = [r["seq"] for r in await conn.fetch(q["page"], cursor)]
        if seqs:
            pages.append(",".join(str(n) for n in seqs))
            cursor = seqs[-1]
    out("page", "|".join(pages), type(cursor).__name__)
    await conn.close()


if driver == "psycopg":
    import psycopg
    # pgbouncer in transaction mode: no server-side prepared statements
    with psycopg.connect(dsn, prepare_threshold=None, autocommit=True) as conn:
        dbapi(psycopg, conn, conn.transaction, lambda e: e.sqlstate)
    # without it: two clients, one statement each, run in turns; after 5
    # runs each prepares it under the same name, on the server connection
    # that pgbouncer hands both in turn
    a = psycopg.connect(dsn, autocommit=True)
    b = psycopg.connect(dsn, autocommit=True)
    try:
        for _ in range(8):
            for c in (a, b):
                c.execute(PAGE, [0]).fetchall()
        out("default-prepare", "ok")
    except psycopg.Error as e:
        out("default-prepare", e.sqlstate)
    a.close()
    b.close()
elif driver == "psycopg2":
    import psycopg2
    conn = psycopg2.connect(dsn)
    dbapi(psycopg2, conn, lambda: conn, lambda e: e.pgcode)
    conn.close()
elif driver == "asyncpg":
    asyncio.run(with_asyncpg())
else:
    sys.exit(f"unknown driver {driver}")
