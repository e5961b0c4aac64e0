"""What the synchronous and the asyncio workers share: settings, the SQL
they send, how an error is classified, and how a row becomes a dict or a
dataclass.  Nothing here talks to the server."""

import dataclasses
import logging
import os
from datetime import timedelta

from psycopg import sql

log = logging.getLogger("stream_seq_worker")

# SQLSTATEs the loop handles itself
LEASE_LOST = "SS001"            # fenced: another worker, a reset or a resize


class PermanentError(Exception):
    """The worker stopped on an error that trying again cannot cure: a
    wrong database, role or password, a stream table or consumer that does
    not exist, a privilege missing, a column or table the handler's own SQL
    names that does not exist (class 42), or a server it never reached in
    connect_attempts tries.  run() raises it after releasing the slots it
    held; "sqlstate" is the server's code (None for a connection refused
    before any SQL).  A handler may raise it too, to stop the worker
    without parking the row: the page's transaction is rolled back."""

    def __init__(self, message, sqlstate=None):
        super().__init__(message)
        self.sqlstate = sqlstate


# What a server (or pgbouncer) says when it refuses a connection for a
# reason that will not go away by itself.  psycopg reports a refused
# connection without its SQLSTATE, so its text is all there is; a server
# whose messages are translated does not match, and the worker gives up
# after connect_attempts instead.
_REFUSED_FOR_GOOD = ("password authentication failed", "authentication failed",
                     "no pg_hba.conf entry", "does not exist", "is not permitted to log in",
                     "permission denied for database", "no such database", "no such user",
                     "invalid connection option", "invalid dsn", "missing \"=\"",
                     "invalid sslmode value", "invalid port number", "invalid integer value")


class Hooks:
    """Callbacks for metrics and logging; override the ones you need.

    Each is called in the worker's loop, after the fact, with the worker
    as first argument.  An exception raised by a hook is logged and
    ignored: a hook never changes what the worker does."""

    def claimed(self, worker, slots):
        """claim() returned: the slot numbers this worker now holds."""

    def page(self, worker, slot, rows, parked, seconds):
        """A page committed: its slot (None for a plain consumer, "due"
        for retries), rows handled, rows of them parked, seconds it took."""

    def parked(self, worker, seq, error):
        """The handler failed on row "seq"; it is parked (in the page's
        transaction, which has not committed yet)."""

    def retried(self, worker, reason, error):
        """The page's transaction rolled back and is tried again; reason is
        "lease lost" (SS001), "serialization" (class 40) or "connection"."""

    def waited(self, worker, after, seconds):
        """wait() returned after "seconds"; it waited for rows after "after"."""

    def stopped(self, worker, released):
        """The worker is stopping; released says whether release() ran."""


class Settings:
    """The knobs of a worker, checked once.  Times are in seconds."""

    def __init__(self, page_size=100, lease=30.0, renew_every=None,
                 wait_timeout=5.0, due_every=1.0, due_size=100,
                 reconnect_max_delay=2.0, connect_attempts=10, progress_every=30.0):
        if page_size < 1 or due_size < 1:
            raise ValueError("page_size and due_size must be at least 1")
        if not 0 < lease <= 86400:
            raise ValueError("lease must be in (0, 86400] seconds")
        self.page_size = page_size
        self.lease = timedelta(seconds=lease)
        # renew well within the lease, and wait no longer than a renewal
        self.renew_every = lease / 3 if renew_every is None else renew_every
        if not 0 < self.renew_every < lease:
            raise ValueError("renew_every must be below the lease")
        self.wait_timeout = min(wait_timeout, self.renew_every)
        self.due_every = due_every
        self.due_size = due_size
        self.reconnect_max_delay = reconnect_max_delay
        if connect_attempts is not None and connect_attempts < 1:
            raise ValueError("connect_attempts must be at least 1, or None")
        self.connect_attempts = connect_attempts
        if progress_every is None or progress_every < 0:
            raise ValueError("progress_every must be 0 (no progress lines) or more")
        self.progress_every = progress_every


def classify(error, broken):
    """What to do about "error" raised in a page's transaction: "connection"
    (reconnect), "lease lost" (claim again), "serialization" (roll back and
    run the page again) or None: the handler's own failure, or a fault of
    the library's statements that retrying will not cure."""
    state = getattr(error, "sqlstate", None)
    if broken:
        return "connection"
    if state is None:
        return None
    if state == LEASE_LOST:
        return "lease lost"
    if state.startswith("40"):                # serialization, deadlock
        return "serialization"
    if state.startswith("08") or state in ("57P01", "57P02", "57P03"):
        return "connection"
    if state.startswith("53"):                # out of memory, connections
        return "serialization"
    return None


def refused_for_good(error):
    """Whether a failed connect() says something that will not change
    (a wrong database, role, password or connection string)."""
    if getattr(error, "sqlstate", None) is not None:
        return False
    text = str(error).lower()
    return any(m in text for m in _REFUSED_FOR_GOOD)


def handler_fault(error):
    """Whether the handler's error is its own code's, not the row's: a
    PermanentError it raised, or class 42 (a column, table or function
    that does not exist, a privilege, a syntax error) or 3F000 (no such
    schema).  Parking every row would not help: the worker stops."""
    if isinstance(error, PermanentError):
        return True
    state = getattr(error, "sqlstate", None) or ""
    return state.startswith("42") or state == "3F000"


def describe(error):
    """One line for a log or an exception: SQLSTATE, message, hint."""
    state = getattr(error, "sqlstate", None)
    diag = getattr(error, "diag", None)
    primary = getattr(diag, "message_primary", None) if state else None
    # libpq's message may run over lines ("Connection refused" and, on the
    # next, "Is the server running..."): one sentence each on one line
    lines = [" ".join(line.split()) for line in (primary or str(error)).splitlines()]
    lines = [line for line in lines if line]
    text = " ".join(line if i == len(lines) - 1 or line[-1] in ".?!:;,"
                    else line + "." for i, line in enumerate(lines))
    hint = getattr(diag, "message_hint", None) if state else None
    if hint and hint not in text:
        text += f" (hint: {hint})"
    return f"{text} [{state}]" if state else text


def server_of(conninfo, overrides=None):
    """Where a connection string points, for a message about a connection
    that failed: "host localhost, port 5433, database app" (libpq's
    defaults and PG* variables for what it leaves out), or None if it does
    not parse (psycopg then says why)."""
    try:
        from psycopg.conninfo import conninfo_to_dict
        params = conninfo_to_dict(conninfo or "", **(overrides or {}))
    except Exception:
        return None
    host = params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST")
    port = params.get("port") or os.environ.get("PGPORT") or "5432"
    db = params.get("dbname") or os.environ.get("PGDATABASE")
    return ((f"host {host}" if host else "the default socket directory")
            + f", port {port}" + (f", database {db}" if db else ""))


def slot_list(slots):
    """[0, 1, 2, 5] -> "0-2, 5"."""
    out = []
    for s in sorted(slots):
        if out and out[-1][1] == s - 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in out) or "none"


def reason_of(error):
    """The text park() records for a handler's failure."""
    state = getattr(error, "sqlstate", None)
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    head = state if state else type(error).__name__
    return f"{head}: {text}"[:500]


class Rows:
    """Turns result rows of a typed read into the handler's rows: a dict of
    the stream table's columns (numbers as int, as psycopg types them) or an
    instance of a dataclass built from the columns it declares."""

    def __init__(self, row_type):
        if row_type is None or row_type is dict:
            self.fields = None
        elif dataclasses.is_dataclass(row_type) and isinstance(row_type, type):
            self.fields = [f.name for f in dataclasses.fields(row_type) if f.init]
        else:
            raise TypeError("row_type must be dict or a dataclass")
        self.row_type = row_type

    def make(self, columns):
        if self.fields is None:
            return columns
        return self.row_type(**{k: columns[k] for k in self.fields if k in columns})


class Statements:
    """The SQL of one worker, for one stream (its qualified name, looked up
    once per connection) and one consumer.  Plain statements with
    parameters: nothing prepared, no session state."""

    INFO = sql.SQL(
        "SELECT format('%I.%I', n.nspname, c.relname), s.seq_column"
        "  FROM stream_seq.streams s JOIN pg_class c ON c.oid = s.stream"
        "  JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE s.stream = {}::regclass")
    HORIZON = "SELECT stream_seq.horizon(%s) - 1"
    CLAIM = "SELECT slot, token FROM stream_seq.claim(%s, %s, %s, %s) ORDER BY slot"
    RELEASE = "SELECT stream_seq.release(%s, %s, %s)"
    ADVANCE_SLOT = "SELECT stream_seq.advance_slot(%s, %s, %s, %s, %s)"
    ADVANCE = "SELECT stream_seq.advance(%s, %s, %s)"
    PARK = "SELECT stream_seq.park(%s, %s, %s, %s)"
    WAIT = "SELECT stream_seq.wait(%s, %s, %s)"
    # who holds the group's slots (leases still running), after a claim
    # that changed what this worker holds or left it short of its share;
    # the view computes no backlog for these columns
    HOLDERS = ("SELECT worker, count(*), max(lease_until),"
               "       (SELECT sum(1) FROM stream_seq.consumer_slots"
               "         WHERE stream = %s::regclass AND consumer = %s)"
               "  FROM stream_seq.consumer_slots"
               " WHERE stream = %s::regclass AND consumer = %s AND lease_until IS NOT NULL"
               " GROUP BY worker ORDER BY worker")

    def __init__(self, table, seq_column):
        t = sql.SQL(table)              # format('%I.%I'): quoted already
        self.table = table
        self.seq_column = seq_column
        self.read_slot = sql.SQL(
            "SELECT * FROM stream_seq.read_slot_rows(NULL::{}, %s, %s, %s, %s)").format(t)
        self.read = sql.SQL(
            "SELECT * FROM stream_seq.read_rows(NULL::{}, %s, %s)").format(t)
        # due() hands rows back as jsonb: made the table's row type again
        # (a row that retention removed has none: "gone")
        self.due = sql.SQL(
            "SELECT d.seq AS \"stream_seq.seq\", d.\"row\" IS NULL AS \"stream_seq.gone\", r.*"
            "  FROM stream_seq.due(%s, %s, %s) d,"
            "       LATERAL jsonb_populate_record(NULL::{}, d.\"row\") r"
            " ORDER BY d.seq").format(t)


def check_handlers(handle_row, handle_page):
    """Exactly one of the two handlers."""
    if (handle_row is None) == (handle_page is None):
        raise TypeError("give exactly one of handle_row and handle_page")
