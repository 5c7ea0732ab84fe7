"""The embedded backend: files and SQLite under one data dir, no server (the default).

:class:`EmbeddedStore` is the backend; its parts are :class:`FileTaskStore` (the task
graph in memory, ``tasks.graph.json`` plus an fsynced journal), :class:`FileEventStore`
(``events.jsonl``) and :class:`SQLiteChatStore` (``chat.sqlite3``). :func:`read_events`
and :func:`tail_events` read an event file from any process, without a lock.
"""

from ._chat import SQLiteChatStore
from ._events import FileEventStore
from ._journal import GraphFileError, GraphFiles
from ._reader import EVENTS_FILE, EventLogError, read_events
from ._store import EmbeddedStore
from ._tasks import FileTaskStore

__all__ = [
    "EVENTS_FILE",
    "EmbeddedStore",
    "EventLogError",
    "FileEventStore",
    "FileTaskStore",
    "GraphFileError",
    "GraphFiles",
    "SQLiteChatStore",
    "read_events",
]
