"""``EmbeddedStore``: the default backend — files and SQLite under one data dir, no server.

``tasks.graph.json`` + its journal (the task graph, :class:`FileTaskStore`),
``events.jsonl`` (the event log, :class:`FileEventStore`) and ``records.sqlite3`` (the
records durable features keep, :class:`SQLiteRecordStore`). One daemon owns a data dir at a time (OS locks);
readers (``read_tasks``, ``events``) take no lock a writer would wait on, and never write.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import Self

import anyio

from .._files import OwnerLock, resolve_data_dir
from ..messages import AgentTask, Event, GraphStats, ListTasks, TaskLimits, TaskStatus
from ..store import (
    EntityStore,
    EventStore,
    RecordStore,
    Retention,
    StepStore,
    StoreSizes,
    TaskGraph,
    TaskStore,
    UnknownTask,
)
from ._archive import TaskArchive
from ._events import FileEventStore
from ._journal import GraphFiles
from ._reader import EVENTS_DIR, EVENTS_FILE, dropped_through, last_seq, segments, tail_events
from ._tasks import FileTaskStore


class EmbeddedStore:
    """The files of ``data_dir`` (default ``$STREAMING_LLM_DATA_DIR`` or
    ``~/.local/share/greenroom``). ``create``: make the data dir if it is missing
    (``False`` for a command that only reads: a missing one is an ``InvalidInput``).
    ``compact_min_bytes``: the journal's size before it is folded into the snapshot."""

    shared = False

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        create: bool = True,
        compact_min_bytes: int = 1 << 20,
    ) -> None:
        self._data_dir_arg = data_dir
        self._create = create
        self.compact_min_bytes = compact_min_bytes
        self.data_dir: Path
        self.where = "" if data_dir is None else str(data_dir)
        self._tasks: FileTaskStore | None = None

    async def __aenter__(self) -> Self:
        self.data_dir = await anyio.to_thread.run_sync(
            partial(resolve_data_dir, self._data_dir_arg, create=self._create)
        )
        self.where = str(self.data_dir)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def __repr__(self) -> str:
        return f"EmbeddedStore({self.where!r})"

    async def instance(self) -> str:
        return f"{socket.gethostname()}-{os.getpid()}"

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
        tasks = FileTaskStore(
            self.data_dir,
            lease_seconds=lease_seconds,
            limits=limits,
            compact_min_bytes=self.compact_min_bytes,
            clock=clock,
            retention=retention,
            steps=self.step_store,
        )
        self._tasks = tasks  # the attempts the step journal's writes are fenced against
        return tasks

    def event_store(self, *, retention: Retention | None = None) -> EventStore:
        return FileEventStore(self.data_dir, retention=retention)

    def step_store(self) -> StepStore:
        from ._steps import STEPS_DB, SQLiteStepStore

        return SQLiteStepStore(self.data_dir / STEPS_DB, live_task=self._live_task)

    def _live_task(self, task_id: str) -> tuple[bool, AgentTask | None, float]:
        """The task as this process's task graph has it live (``None``: not live), and the
        graph's clock; ``False`` first when this process owns no open task graph (nothing
        to fence against here)."""
        tasks = self._tasks
        if tasks is None or not tasks.is_open:
            return False, None, 0.0
        return True, tasks.graph.tasks.get(task_id), tasks.clock()

    def entity_store(self) -> EntityStore:
        from ._entities import ENTITIES_DB, SQLiteEntityStore

        return SQLiteEntityStore(self.data_dir / ENTITIES_DB)

    def records(self) -> RecordStore:
        from ._records import RECORDS_DB, SQLiteRecordStore

        return SQLiteRecordStore(self.data_dir / RECORDS_DB, live_task=self._live_task)

    # -- reading ----------------------------------------------------------------------------

    async def events(
        self, *, after: int = 0, follow: bool = False, last: int | None = None
    ) -> AsyncGenerator[Event, None]:
        path = self.data_dir / EVENTS_FILE
        until: int | None = None
        if last is not None:  # the newest `last` of those kept now: never a refusal
            newest = await anyio.to_thread.run_sync(last_seq, path)
            floor = await anyio.to_thread.run_sync(dropped_through, path)
            after = max(after, newest - last, floor)
            until = None if follow else newest
        async with aclosing(tail_events(path, after_seq=after, follow=follow, poll_interval=0.1)) as events:
            async for event in events:
                if until is not None and event.seq > until:
                    return
                yield event

    async def events_dropped_through(self) -> int:
        return await anyio.to_thread.run_sync(dropped_through, self.data_dir / EVENTS_FILE)

    def _load(self) -> tuple[list[AgentTask], dict[str, TaskStatus]]:
        """The live graph as on disk, and the final status of the archived tasks it
        depends on: never creates, cuts or locks anything for writing (a shared lock
        excludes an owner while it reads). Blocking."""
        lock = OwnerLock(self.data_dir / "tasks.graph.lock", "the task graph")
        lock.acquire_shared()
        archive = TaskArchive(self.data_dir)
        try:
            files = GraphFiles(self.data_dir)
            tasks = files.load(owner=False, archived=archive.statuses_blocking)[0]
            return tasks, files.archived_deps
        finally:
            archive.close_blocking()
            lock.release()

    async def read_tasks(
        self, status: TaskStatus | None = None, agent_type: str | None = None, *, archived: bool = False
    ) -> list[AgentTask]:
        if archived:
            archive = TaskArchive(self.data_dir)
            try:
                return await archive.page(ListTasks(status, agent_type))
            finally:
                await archive.aclose()
        return await anyio.to_thread.run_sync(self.read_tasks_blocking, status, agent_type)

    def read_tasks_blocking(
        self, status: TaskStatus | None = None, agent_type: str | None = None
    ) -> list[AgentTask]:
        """:meth:`read_tasks` of the live graph in the calling thread, with no event loop
        (a command that only reads answers without starting one); usable without
        ``async with`` (the data dir is resolved here, never created)."""
        self._resolve()
        found, _ = self._load()
        return sorted(
            (
                task
                for task in found
                if (status is None or task.status is status)
                and (agent_type is None or task.type == agent_type)
            ),
            key=lambda task: task.order,
        )

    async def read_task(self, task_id: str) -> AgentTask:
        tasks, _ = await anyio.to_thread.run_sync(self._load)
        for task in tasks:
            if task.id == task_id:
                return task
        archive = TaskArchive(self.data_dir)
        try:
            found = await archive.get(task_id)
        finally:
            await archive.aclose()
        if found is None:
            raise UnknownTask(task_id)
        return found

    async def sizes(self) -> StoreSizes:
        return await anyio.to_thread.run_sync(self.sizes_blocking)

    def sizes_blocking(self) -> StoreSizes:
        """:meth:`sizes` in the calling thread, with no event loop (see
        :meth:`read_tasks_blocking`)."""
        self._resolve()
        archive = TaskArchive(self.data_dir)
        try:
            archived = archive.sizes_blocking()
        finally:
            archive.close_blocking()
        by_part = _file_sizes(self.data_dir)
        log = self.data_dir / EVENTS_FILE
        return StoreSizes(
            archived.tasks,
            archived.segments,
            sum(by_part.values()),
            by_part,
            event_segments=len(segments(log)) + 1,
            events_dropped_through=dropped_through(log),
        )

    async def read_stats(self) -> GraphStats:
        return await anyio.to_thread.run_sync(self.read_stats_blocking)

    def read_stats_blocking(self) -> GraphStats:
        """:meth:`read_stats` in the calling thread, with no event loop."""
        self._resolve()
        tasks, archived = self._load()
        graph = TaskGraph(tasks, now=time.time(), archived=archived)
        return GraphStats(
            by_status=graph.stats(),
            runnable_types=graph.runnable_types(),
            total=len(graph.tasks),
            by_type=graph.stats_by_type(),
        )

    def _resolve(self) -> None:
        """The data dir, resolved here when the store was not entered (a blocking read)."""
        if not hasattr(self, "data_dir"):
            self.data_dir = resolve_data_dir(self._data_dir_arg, create=False)
            self.where = str(self.data_dir)


def _file_sizes(data_dir: Path) -> dict[str, int]:
    """The bytes of each file the store keeps under the data dir (the archive's segments
    together, as ``archive/``). Blocking."""
    sizes: dict[str, int] = {}
    for path in sorted(data_dir.iterdir()):
        if path.is_file() and not path.name.endswith((".lock", ".tmp")):
            sizes[path.name] = path.stat().st_size
    for name in ("archive", EVENTS_DIR):
        directory = data_dir / name
        if directory.is_dir():
            sizes[f"{name}/"] = sum(path.stat().st_size for path in directory.iterdir() if path.is_file())
    return sizes
