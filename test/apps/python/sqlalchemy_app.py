# sqlalchemy_app.py DSN TABLE: the recipes of doc/applications.md for
# SQLAlchemy 1.4 (2.0-style API, psycopg 2) on stream table TABLE, run by
# test/t/039_applications.pl through pgbouncer in transaction mode.  Prints
# one line per task ("task result"), which the test compares.
import sys

import psycopg2
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session, column_property, declarative_base

dsn, table = sys.argv[1], sys.argv[2]
engine = sa.create_engine("postgresql+psycopg2://", future=True,
                          creator=lambda: psycopg2.connect(dsn))
Base = declarative_base()

# The table as the database has it (the stream column included) ...
events = sa.Table(
    table, Base.metadata,
    sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=False),
    sa.Column("customer_id", sa.Integer, nullable=False),
    sa.Column("payload", sa.Text),
    sa.Column("seq", sa.BigInteger),   # nullable, no default: enable() adds it so
)


# ... and the recipe: the mapper leaves the column out of INSERT and
# UPDATE, and loads it through an expression, which is read-only.
class Event(Base):
    __table__ = events
    __mapper_args__ = {"exclude_properties": ["seq"]}
    seq = column_property(sa.cast(events.c.seq, sa.BigInteger))


# A plain mapping of the same table, without the recipe: what a generated
# model does.
class PlainEvent(Base):
    __table__ = events.to_metadata(sa.MetaData())


def row(s, id_):
    return s.execute(sa.select(events.c.seq, events.c.payload)
                     .where(events.c.id == id_)).one()


def out(*words):
    print(" ".join(str(w) for w in words), flush=True)


# DDL: the ORM creates the table, the owner makes it a stream
Base.metadata.create_all(engine, tables=[events])
with engine.begin() as c:
    c.execute(sa.text("SELECT stream_seq.enable(:t)"), {"t": table})

# insert: the number is the placeholder 0 until commit, read it after
with Session(engine) as s:
    with s.begin():
        ev = Event(id=1, customer_id=1, payload="a")
        s.add(ev)
        s.flush()
        s.refresh(ev)
        before = ev.seq
    s.refresh(ev)               # after commit: one SELECT by key
    out("insert", before, ev.seq)

# bulk insert: one INSERT of many rows (executemany)
with Session(engine) as s, s.begin():
    s.execute(sa.insert(events), [
        {"id": i, "customer_id": i, "payload": "a"} for i in (2, 3, 4)])
with Session(engine) as s:
    out("bulk", *s.scalars(sa.select(Event.seq).where(Event.id.in_([2, 3, 4]))
                           .order_by(Event.id)))

# save of a loaded row (the read-only mapping), then of a plain mapping,
# whose flush writes back only what changed
with Session(engine) as s, s.begin():
    s.get(Event, 1).payload = "b"
with Session(engine) as s:
    out("save", *row(s, 1))
with Session(engine) as s, s.begin():
    s.get(PlainEvent, 1).payload = "c"
with Session(engine) as s:
    out("save-plain", *row(s, 1))

# merge() of a detached object built by hand (its number unknown, None):
# an UPDATE of the loaded row that leaves the number alone
with Session(engine) as s, s.begin():
    s.merge(Event(id=1, customer_id=1, payload="m", seq=None))
with Session(engine) as s:
    out("merge", *row(s, 1))

# upsert without the stream column in VALUES: id 2 conflicts, id 5 is new
with Session(engine) as s, s.begin():
    stmt = pg_insert(events).values([
        {"id": 2, "customer_id": 2, "payload": "u"},
        {"id": 5, "customer_id": 5, "payload": "n"}])
    s.execute(stmt.on_conflict_do_update(
        index_elements=["id"], set_={"payload": stmt.excluded.payload}))
with Session(engine) as s:
    out("upsert", *row(s, 2), *row(s, 5))

# upsert of a loaded row as it was read, its number in VALUES
with Session(engine) as s:
    with s.begin():
        loaded = dict(s.execute(sa.select(events).where(events.c.id == 3))
                      .mappings().one())
    loaded["payload"] = "p"
    try:
        with s.begin():
            stmt = pg_insert(events).values(loaded)
            s.execute(stmt.on_conflict_do_update(
                index_elements=["id"], set_={"payload": stmt.excluded.payload}))
        out("upsert-plain", *row(s, 3))
    except sa.exc.DBAPIError as e:
        out("upsert-plain", e.orig.pgcode)

# paging below the horizon, 2 rows a page
with Session(engine) as s:
    cursor, pages = 0, []
    while True:
        with s.begin():
            seqs = s.scalars(
                sa.select(events.c.seq)
                .where(events.c.seq > cursor,
                       events.c.seq < sa.func.stream_seq.horizon(table))
                .order_by(events.c.seq).limit(2)).all()
        if not seqs:
            break
        pages.append(",".join(str(n) for n in seqs))
        cursor = seqs[-1]
    out("page", "|".join(pages), type(cursor).__name__)

# a Computed column (GENERATED ALWAYS AS ... STORED) on the stream column:
# enable() refuses it
gen = sa.Table(
    table + "_gen", sa.MetaData(),
    sa.Column("id", sa.BigInteger, primary_key=True),
    sa.Column("seq", sa.BigInteger, sa.Computed("id * 10")))
gen.create(engine)
try:
    with engine.begin() as c:
        c.execute(sa.text("SELECT stream_seq.enable(:t)"), {"t": gen.name})
    out("computed", "accepted")
except sa.exc.DBAPIError as e:
    out("computed", e.orig.pgcode)

# bulk_update_mappings() of the plain mapping with a row as it was loaded:
# an UPDATE that writes every column back, the number unchanged
with Session(engine) as s:
    with s.begin():
        loaded = dict(s.execute(sa.select(events).where(events.c.id == 4))
                      .mappings().one())
    loaded["payload"] = "k"
    with s.begin():
        s.bulk_update_mappings(PlainEvent, [loaded])
    out("bulk-update", *row(s, 4))
