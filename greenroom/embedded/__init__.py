"""The embedded backend: files and SQLite under one data dir, no server (the default).

:class:`EmbeddedStore` is the backend; its parts are :class:`FileTaskStore` (the task
graph in memory, ``tasks.graph.json`` plus an fsynced journal), :class:`FileEventStore`
(``events.jsonl``), the step journal, entities and :class:`SQLiteRecordStore`
(``records.sqlite3``: the records durable features keep — budgets, load runs, the API's
tokens, the chat assistant's data). :func:`read_events`
and :func:`tail_events` read an event file from any process, without a lock.

Every name is imported on first use (``greenroom._lazy``): a command that only reads
the files does not pay for the other backend, SQLite or psycopg.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy

if TYPE_CHECKING:
    from ._events import FileEventStore
    from ._journal import GraphFileError, GraphFiles
    from ._reader import EVENTS_FILE, EventLogError, read_events
    from ._records import SQLiteRecordStore
    from ._store import EmbeddedStore
    from ._tasks import FileTaskStore

__getattr__ = lazy(
    globals(),
    {
        "FileEventStore": "._events",
        "GraphFileError": "._journal",
        "GraphFiles": "._journal",
        "EVENTS_FILE": "._reader",
        "EventLogError": "._reader",
        "read_events": "._reader",
        "SQLiteRecordStore": "._records",
        "EmbeddedStore": "._store",
        "FileTaskStore": "._tasks",
    },
)

__all__ = [
    "EVENTS_FILE",
    "EmbeddedStore",
    "EventLogError",
    "FileEventStore",
    "FileTaskStore",
    "GraphFileError",
    "GraphFiles",
    "SQLiteRecordStore",
    "read_events",
]
