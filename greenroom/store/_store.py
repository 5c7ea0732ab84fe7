"""``Store``: one backend — everything greenroom keeps durably, chosen once.

The embedded store (``greenroom.embedded.EmbeddedStore``: files and SQLite under a data
dir) and the PostgreSQL store (``greenroom.postgres.PostgresStore``: one database several
daemons share) are peers behind this interface, the way httpx's transports are. Whoever
starts greenroom (the daemon, the CLI, a test, an embedding app) opens one and asks it
for what it needs; nothing else knows which one it is.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

import msgspec

from ..messages import AgentTask, Event, GraphStats, TaskLimits, TaskStatus
from ._entities import EntityStore
from ._events import EventStore
from ._records import RecordStore
from ._retention import Retention
from ._steps import StepStore
from ._tasks import TaskStore


class StoreSizes(msgspec.Struct, frozen=True):
    """The store's size (``greenroom status``): archived tasks and the parts they are in
    (segments on the files, days on PostgreSQL), bytes on disk, in all and per part (a
    file or directory under the data dir, a table with its partitions), and the event
    log's segments."""

    archived_tasks: int = 0
    archive_parts: int = 0
    bytes: int = 0
    by_part: dict[str, int] = {}
    event_segments: int = 0
    """The event log's segments (files; partitions), the open one included."""
    events_dropped_through: int = 0
    """The last event ``seq`` retention dropped (0: none)."""


@runtime_checkable
class Store(Protocol):
    """A backend, opened with ``async with``. Its parts (a ``TaskStore`` for the
    supervisor actor, an ``EventStore`` for the log actor, ``records()``) are made on
    demand, each new, so an actor restarted by its supervisor gets a fresh one."""

    where: str
    """Where it keeps things, fit to print (a path; a URL without its password)."""

    shared: bool
    """Several processes may use it at once (then owner ids name the node)."""

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...

    async def instance(self) -> str:
        """This process's name in the owner ids of the tasks its agents run."""
        ...

    def task_store(
        self,
        *,
        lease_seconds: float = 30.0,
        limits: TaskLimits | None = None,
        instance: str | None = None,
        clock: Callable[[], float] = time.time,
        retention: Retention | None = None,
    ) -> TaskStore:
        """The task graph's storage for a supervisor actor; each transition and the events
        it causes become one durable fact, the backend's own way. ``instance``:
        this process's name (see :meth:`instance`), so a restart recognises the tasks its
        previous process was running. ``retention``: when finished tasks leave the live
        graph for the archive (``None``: never)."""
        ...

    def event_store(self, *, retention: Retention | None = None) -> EventStore:
        """The event log's storage for a log actor. ``retention``: when the log rolls into
        segments and which ones go (``None``: everything is kept)."""
        ...

    def step_store(self) -> StepStore:
        """The step journal of durable agent work (a new one each call, as the records:
        its user closes it with ``aclose``)."""
        ...

    def entity_store(self) -> EntityStore:
        """Entities' saved states (a new one each call: its user closes it)."""
        ...

    def records(self) -> RecordStore:
        """Keyed records with versions — what a durable feature keeps (a budget's total,
        a load run's records) in a collection of its own, built on this in the feature's
        package (a new one each call: its user closes it). A write under a task attempt
        (``fence``) is checked against this store's task graph."""
        ...

    def events(
        self, *, after: int = 0, follow: bool = False, last: int | None = None
    ) -> AsyncGenerator[Event, None]:
        """The events with ``seq > after`` in order (``last``: only the newest ``last`` of
        those stored now); with ``follow``, then every new one until cancelled. Never one
        twice, never one skipped: events after ``after`` that retention dropped raise
        ``EventsGone`` (at once, or for a follower that fell behind, when it gets there).
        Readable while a daemon writes, from any process."""
        ...

    async def events_dropped_through(self) -> int:
        """The last ``seq`` retention dropped from the event log (0: none): a reader after
        an older one gets ``EventsGone``."""
        ...

    async def read_tasks(
        self, status: TaskStatus | None = None, agent_type: str | None = None, *, archived: bool = False
    ) -> list[AgentTask]:
        """The tasks as stored, in submission order (for commands run with no daemon);
        ``archived``: the archived ones instead. Writes nothing."""
        ...

    async def read_task(self, task_id: str) -> AgentTask:
        """One task as stored, live or archived (``UnknownTask`` if none); writes nothing."""
        ...

    async def sizes(self) -> StoreSizes:
        """What the store holds beyond the live graph, and its bytes on disk."""
        ...

    async def read_stats(self) -> GraphStats:
        """The tasks' counts as stored; writes nothing."""
        ...
