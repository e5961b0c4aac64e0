"""stream_seq_worker: workers for stream_seq consumers and consumer groups,
on psycopg 3 (sync and asyncio), and the producer's helpers.

    from stream_seq_worker import GroupWorker
    GroupWorker("dbname=app", "events", "shipping", "shipping-1",
                handle_row=lambda cur, row: ...).run()

See README.md beside this package for what the workers do and why."""

from ._common import Hooks, PermanentError
from .aio import AsyncConsumerWorker, AsyncGroupWorker
from .producer import last_numbers, wait_visible
from .sync import ConsumerWorker, GroupWorker

__version__ = "0.8.0"
# the stream_seq SQL objects this version needs (read_rows(),
# read_slot_rows(), due(); last_numbers() for the producer's helper)
REQUIRES_EXTENSION = "0.6.0"

__all__ = ["GroupWorker", "ConsumerWorker", "AsyncGroupWorker",
           "AsyncConsumerWorker", "Hooks", "PermanentError", "last_numbers",
           "wait_visible"]
