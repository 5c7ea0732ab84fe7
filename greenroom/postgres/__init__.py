"""The PostgreSQL backend: several daemons sharing one task graph, one event log and the
records durable features keep (budgets, load runs, the API's tokens, the chat assistant's
data). psycopg 3's sync API on worker threads, so the same code runs on
asyncio and trio.

:class:`PostgresStore` is the backend; its parts are :class:`PostgresTaskStore`,
:class:`PostgresEventStore` and :class:`PostgresRecordStore` (peers of the embedded ones),
over a :class:`Database` pool and a versioned schema (:func:`upgrade`).

Every name is imported on first use (``greenroom._lazy``): a command that only reads
the files does not pay for the other backend, SQLite or psycopg.
"""

from typing import TYPE_CHECKING

from .._lazy import lazy

if TYPE_CHECKING:
    from ._db import ConflictError, Database, DatabaseError, DataRefused, check_url, redact
    from ._events import PostgresEventStore
    from ._records import PostgresRecordStore
    from ._schema import VERSION, SchemaError, check, current_version, upgrade
    from ._store import PostgresStore
    from ._tasks import PostgresTaskStore

__getattr__ = lazy(
    globals(),
    {
        "ConflictError": "._db",
        "Database": "._db",
        "DatabaseError": "._db",
        "DataRefused": "._db",
        "check_url": "._db",
        "redact": "._db",
        "PostgresEventStore": "._events",
        "PostgresRecordStore": "._records",
        "VERSION": "._schema",
        "SchemaError": "._schema",
        "check": "._schema",
        "current_version": "._schema",
        "upgrade": "._schema",
        "PostgresStore": "._store",
        "PostgresTaskStore": "._tasks",
    },
)

__all__ = [
    "VERSION",
    "ConflictError",
    "DataRefused",
    "Database",
    "DatabaseError",
    "PostgresEventStore",
    "PostgresRecordStore",
    "PostgresStore",
    "PostgresTaskStore",
    "SchemaError",
    "check",
    "check_url",
    "current_version",
    "redact",
    "upgrade",
]
