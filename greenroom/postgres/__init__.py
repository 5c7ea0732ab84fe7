"""PostgreSQL stores (several daemons sharing one task graph and one event log): the
connection pool, the versioned schema, and the task graph's transactions. psycopg 3's
sync API on worker threads, so the same code runs on asyncio and trio."""

from ._chat import PostgresChatStore
from ._db import ConflictError, Database, DatabaseError, DataRefused, check_url, redact
from ._graph import CHANNEL, EventCursor, PostgresGraph
from ._log import PostgresLogActor, tail_events
from ._schema import VERSION, SchemaError, check, current_version, upgrade
from ._supervisor import PostgresSupervisorActor

__all__ = [
    "CHANNEL",
    "VERSION",
    "ConflictError",
    "DataRefused",
    "Database",
    "DatabaseError",
    "EventCursor",
    "PostgresChatStore",
    "PostgresGraph",
    "PostgresLogActor",
    "PostgresSupervisorActor",
    "SchemaError",
    "check",
    "check_url",
    "current_version",
    "redact",
    "tail_events",
    "upgrade",
]
