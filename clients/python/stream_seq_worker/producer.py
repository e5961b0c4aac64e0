"""The producer's side: the numbers a commit got, and waiting until the
consumers can read them."""

from datetime import timedelta


def last_numbers(conn, stream):
    """(first, last): the lowest and highest number of the last transaction
    of this session that committed rows to "stream", or None if none did.
    Call it after the commit, on the connection that committed.  The answer
    is kept in the server's backend: behind a pooler in transaction mode
    the next transaction may run on another backend and get another
    client's numbers, so use a direct (or session-mode) connection there,
    or read the row back by its key."""
    first, last = conn.execute(
        "SELECT first, last FROM stream_seq.last_numbers(%s)", (stream,)).fetchone()
    return None if first is None else (first, last)


def wait_visible(conn, stream, seq, timeout=10.0):
    """Wait until number "seq" is below the horizon of "stream" (every
    consumer can read it), at most "timeout" seconds; True if it is.  Works
    through any pooler (one statement), holding a server connection while
    it waits.  "conn" must be in autocommit: wait() refuses REPEATABLE READ
    and a transaction's snapshot would not move."""
    (horizon,) = conn.execute(
        "SELECT stream_seq.wait(%s, %s, %s)",
        (stream, seq - 1, timedelta(seconds=timeout))).fetchone()
    return horizon > seq
