"""``PostgresStore``: the backend several daemons share — one PostgreSQL database holding
the task graph, the event log and the chat assistant's data.

Each daemon still has a data dir of its own (its tokens, its API address, and its node
name: ``node.id``, made once and kept, so a restarted daemon recognises the tasks its
previous process was running). The database's schema must be this greenroom's
(``greenroom db upgrade``); the password comes from the environment (``PGPASSWORD``) or
the URL, and is never shown.
"""

from __future__ import annotations

import os
import re
import socket
import time
import uuid
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import anyio

from .._files import replace_durably, resolve_data_dir
from ..messages import AgentTask, Event, GraphStats, ListTasks, TaskLimits, TaskStatus
from ..store import (
    EntityStore,
    EventStore,
    RecordStore,
    Retention,
    StepStore,
    StoreSizes,
    TaskStore,
)
from ._db import Database, check_url, redact
from ._events import PostgresEventStore, dropped_through, event_parts, partitions_repair, tail_events
from ._graph import Notify, PostgresGraph
from ._records import PostgresRecordStore
from ._schema import check
from ._steps import PostgresStepStore
from ._tasks import PostgresTaskStore

NODE_FILE = "node.id"


def node_id(data_dir: Path, name: str = NODE_FILE) -> str:
    """This data dir's node name on a shared database (made once, then kept, in the file
    ``name``): with the pid it names the agents' owner ids, so a restarted daemon
    recognises the tasks its previous process was running. Blocking."""
    path = data_dir / name
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        text = ""
    if not re.fullmatch(r"[A-Za-z0-9.-]{1,80}-[0-9a-f]{8}", text):
        text = f"{re.sub(r'[^A-Za-z0-9.-]', '-', socket.gethostname())[:60]}-{uuid.uuid4().hex[:8]}"
        replace_durably(path, (text + "\n").encode())
    return text


class PostgresStore:
    """The database at ``url`` (``postgresql://user@host/db``). ``data_dir``: this
    process's own data dir (its node name; ``None``: the default one, made if missing —
    commands that only read never need it). ``pool_size``: connections kept to the
    server (its transactions run on them at once). ``workers``, ``batch_size``: see
    :class:`PostgresTaskStore`."""

    shared = True

    def __init__(
        self,
        url: str,
        *,
        data_dir: str | os.PathLike[str] | None = None,
        pool_size: int = 16,
        workers: int = 8,
        batch_size: int = 64,
        notify: Notify = "commit",
        node_file: str = NODE_FILE,
    ) -> None:
        self.url = check_url(url)
        self.node_file = node_file
        """The data dir's file holding this process's node name (``greenroom run --workers``
        gives each worker slot its own: a node is one process at a time)."""
        self.notify = notify
        self.where = redact(url)
        self._data_dir_arg = data_dir
        self.pool_size = pool_size
        self.workers = workers
        self.batch_size = batch_size
        self.db = Database(url, max_size=pool_size)
        self.event_width = Retention().events_per_segment
        """The width (in ``seq``) of the event log's partitions, made ahead and when an
        append finds none for its row (``[retention] events_per_segment``)."""
        self.db.repairs.append(partitions_repair(lambda: self.event_width))
        self.node: str | None = None

    def __repr__(self) -> str:
        return f"PostgresStore({self.where!r})"

    async def __aenter__(self) -> Self:
        await self.db.__aenter__()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.db.__aexit__(exc_type, exc, tb)

    async def instance(self) -> str:
        if self.node is None:
            data_dir = await anyio.to_thread.run_sync(resolve_data_dir, self._data_dir_arg)
            self.node = await anyio.to_thread.run_sync(node_id, data_dir, self.node_file)
        return f"{self.node}:{os.getpid()}"

    # -- the parts ------------------------------------------------------------------------

    def task_store(
        self,
        *,
        lease_seconds: float = 30.0,
        limits: TaskLimits | None = None,
        instance: str | None = None,
        clock: Callable[[], float] = time.time,
        retention: Retention | None = None,
    ) -> TaskStore:
        """The graph writes its own events, in each transition's transaction. With
        ``instance`` (see :meth:`instance`), the tasks this node's previous process was
        running are recovered at open."""
        if retention is not None:
            self.event_width = retention.events_per_segment
        return PostgresTaskStore(
            self.db,
            event_width=self.event_width,
            lease_seconds=lease_seconds,
            limits=limits,
            workers=self.workers,
            batch_size=self.batch_size,
            node=None if instance is None else instance.rpartition(":")[0],
            instance=instance,
            clock=clock,
            retention=retention,
            notify=self.notify,
        )

    def event_store(self, *, retention: Retention | None = None) -> EventStore:
        if retention is not None:
            self.event_width = retention.events_per_segment
        return PostgresEventStore(self.db, retention=retention)

    def step_store(self) -> StepStore:
        return PostgresStepStore(self.db, self._data_dir_arg)

    def entity_store(self) -> EntityStore:
        from ._entities import PostgresEntityStore

        return PostgresEntityStore(self.db)

    def records(self) -> RecordStore:
        return PostgresRecordStore(self.db)

    # -- reading ----------------------------------------------------------------------------

    async def events(
        self, *, after: int = 0, follow: bool = False, last: int | None = None
    ) -> AsyncGenerator[Event, None]:
        stream = tail_events(self.db, after=after, follow=follow, last=last)
        try:
            async for event in stream:
                yield event
        finally:
            await stream.aclose()

    async def events_dropped_through(self) -> int:
        await self.db.run(check)
        return await self.db.run(dropped_through)

    async def read_tasks(
        self, status: TaskStatus | None = None, agent_type: str | None = None, *, archived: bool = False
    ) -> list[AgentTask]:
        graph = PostgresGraph()
        await self.db.run(check)
        listing = ListTasks(status, agent_type, archived=archived)
        return await self.db.run(lambda c: graph.list_tasks(c, listing))

    async def read_task(self, task_id: str) -> AgentTask:
        graph = PostgresGraph()
        await self.db.run(check)
        return await self.db.run(lambda c: graph.get(c, task_id))

    async def sizes(self) -> StoreSizes:
        def measure(connection: Any) -> StoreSizes:
            tasks, days = PostgresGraph.archive_sizes(connection)
            rows = connection.execute(
                "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = current_schema() AND c.relkind = 'r' AND c.relname LIKE 'gr\\_%' "
                "ORDER BY c.relname"
            ).fetchall()
            by_part: dict[str, int] = {}
            for name, size in rows:  # a partitioned table's parts under its name
                table = re.sub(r"^(gr_events)_\d+_\d+$|^(gr_archive)_d\d+$", r"\1\2", name)
                by_part[table] = by_part.get(table, 0) + int(size)
            return StoreSizes(
                tasks,
                days,
                sum(by_part.values()),
                by_part,
                event_segments=len(event_parts(connection)),
                events_dropped_through=dropped_through(connection),
            )

        await self.db.run(check)
        return await self.db.run(measure)

    async def read_stats(self) -> GraphStats:
        graph = PostgresGraph()
        await self.db.run(check)
        return await self.db.run(graph.stats)
