"""``MemoryStore``: a whole backend in this process's memory — the task graph, the event
log, the step journal, entities and the records — a peer of the files and PostgreSQL
behind ``greenroom.store.Store``, proved by the same contract suites
(``tests/test_store_contract.py``, ``tests/test_records_contract.py``).

For tests and embedding apps that want greenroom with no files and no server. What it
keeps lives as long as the object: its parts closed and opened again (a daemon restarted
on it) find everything, as on a data dir; the process ending loses it all. One process
owns it (``shared`` is false), as a data dir. Every call runs whole between two awaits, so
it is one transaction, and "durable" means "the object has it". It is also the shortest
worked example of a backend: the task graph is the store package's :class:`TaskGraph`
(the rules every backend obeys), each part below is what ``docs/howto/backend.md`` asks
of a third backend.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Sequence
from types import TracebackType
from typing import Any, Self

import anyio
import msgspec

from .._commit import Batcher
from .._durations import DurationCounter
from .._files import DataDirBusy
from ..actors import ActorRef, ActorStopped
from ..messages import (
    AgentTask,
    Decide,
    Event,
    GetTask,
    GraphEvent,
    GraphStats,
    ListTasks,
    Submit,
    TaskLimits,
    TaskStatus,
)
from ..store import (
    BEFORE_AN_EFFECT,
    BY_ID,
    NOTHING_READY,
    Answer,
    Claimed,
    EntityStore,
    EventsGone,
    EventStore,
    Fenced,
    GraphOwner,
    HistoryPart,
    InvalidTransition,
    Mail,
    Posted,
    Record,
    RecordStore,
    Refused,
    Reply,
    Retention,
    Step,
    StepStore,
    StoredState,
    StoreSizes,
    TaskGraph,
    TaskGraphError,
    TaskStore,
    UnknownTask,
    Written,
    apply_request,
    check_key,
    check_kind,
    check_step,
    encoded_body,
    entity_fenced,
    fenced,
    graph_events,
    over_budget,
    save_rows,
    write_rows,
)
from ..store import (
    leaving as graph_leaving,
)
from ._memory import MemoryRecordStore, RecordsKept

logger = logging.getLogger("greenroom.supervisor")
_encode = msgspec.json.encode
_decode = msgspec.json.decode


class _Entity:
    __slots__ = ("lease_until", "node", "saved_at", "state", "token", "version")

    def __init__(self) -> None:
        self.state = b""
        self.version = 0
        self.saved_at = 0.0
        self.node: str | None = None
        self.lease_until: float | None = None
        self.token = 0


class _Kept:
    """Everything a :class:`MemoryStore` keeps: what a data dir would hold."""

    def __init__(self) -> None:
        self.name = uuid.uuid4().hex[:12]
        # the task graph, as committed
        self.tasks: dict[str, AgentTask] = {}
        self.next_order = 1
        self.graph_owner: MemoryTaskStore | None = None
        self.archive: dict[str, AgentTask] = {}
        self.archive_parts: list[tuple[float, list[str]]] = []
        """Each archiving pass's tasks, with the newest one's finish: dropped whole."""
        # the event log
        self.events: list[Event] = []
        """The events kept, in order: ``events[i].seq == dropped_through + 1 + i``."""
        self.seq = 0
        self.dropped_through = 0
        self.segments: list[tuple[int, float, int]] = []
        """The closed segments, oldest first: (last seq, last event's time, bytes)."""
        self.origins: set[tuple[int, int]] = set()
        self.log_retention: Retention | None = None
        self.news: list[anyio.Event] = []
        # the step journal, entities, the records
        self.steps: dict[str, dict[tuple[str, str], Step]] = {}
        self.entities: dict[tuple[str, str], _Entity] = {}
        self.mail: dict[int, list[Any]] = {}
        self.mail_seq = 0
        self.answers: list[tuple[str, int, bool, bytes]] = []
        self.nodes: dict[str, anyio.Event] = {}
        self.records = RecordsKept()

    # -- the event log ------------------------------------------------------------------------

    def append(self, events: Sequence[Event]) -> list[Event]:
        """Number ``events`` (seq 0), keep them, roll and prune the log, wake followers."""
        retention = self.log_retention
        per_segment = retention.events_per_segment if retention is not None else math.inf
        stored = []
        for event in events:
            self.seq += 1
            kept = msgspec.structs.replace(event, seq=self.seq)
            self.events.append(kept)
            stored.append(kept)
            if kept.origin is not None:
                self.origins.add(kept.origin)
            if self.seq - self.last_closed() >= per_segment:
                self.segments.append((self.seq, kept.ts, self.open_bytes(retention)))
        if retention is not None:
            self.prune_events(retention, time.time())
        self.wake()
        return stored

    def last_closed(self) -> int:
        """The last event of the newest closed segment: the open one holds those after it."""
        return self.segments[-1][0] if self.segments else self.dropped_through

    def open_bytes(self, retention: Retention | None) -> int:
        """The open segment's size, as the budget counts it (measured only under a budget)."""
        if retention is None or retention.disk_budget is None:
            return 0
        return sum(
            len(_encode(event.payload)) + 64
            for event in self.events[self.last_closed() - self.dropped_through :]
        )

    def prune_events(self, retention: Retention, now: float) -> None:
        """Drop the closed segments ``events_for`` lets go, and those over the budget."""
        drop = 0
        if retention.events_for is not None:
            while drop < len(self.segments) and self.segments[drop][1] < now - retention.events_for:
                drop += 1
        if retention.disk_budget is not None:
            over = {part.name for part in over_budget(self.history(), retention.disk_budget)}
            while drop < len(self.segments) and f"events-{self.segments[drop][0]}" in over:
                drop += 1
        if drop:
            through = self.segments[drop - 1][0]
            del self.events[: through - self.dropped_through]
            del self.segments[:drop]
            self.dropped_through = through

    def history(self) -> list[HistoryPart]:
        """What the budget counts: the closed event segments and the archive's parts."""
        parts = [HistoryPart("events", f"events-{last}", at, size) for last, at, size in self.segments]
        for at, ids in self.archive_parts:
            size = sum(len(_encode(self.archive[i])) for i in ids if i in self.archive)
            parts.append(HistoryPart("archive", f"archive-{at}-{ids[0]}", at, size))
        return parts

    def wake(self) -> None:
        news, self.news = self.news, []
        for event in news:
            event.set()

    async def news_after(self, seq: int) -> None:
        """Wait until the log holds an event after ``seq`` (or retention dropped it)."""
        if self.seq > seq:
            return
        event = anyio.Event()
        self.news.append(event)
        await event.wait()

    # -- the task graph -----------------------------------------------------------------------

    def archived_deps(self, tasks: Sequence[AgentTask]) -> dict[str, TaskStatus]:
        return {
            dep: self.archive[dep].status
            for task in tasks
            for dep in task.depends_on
            if dep not in self.tasks and dep in self.archive
        }


class MemoryStore:
    """A whole backend in memory (see the module doc). ``async with MemoryStore() as
    store`` as any backend; its parts made on demand, each new, as the protocol says."""

    shared = False

    def __init__(self) -> None:
        self._kept = _Kept()
        self.where = f"memory:{self._kept.name}"

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None

    def __repr__(self) -> str:
        return f"MemoryStore({self.where!r})"

    async def instance(self) -> str:
        return f"memory-{self._kept.name}"

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
        return MemoryTaskStore(self._kept, lease_seconds, limits or TaskLimits(), clock, retention)

    def event_store(self, *, retention: Retention | None = None) -> EventStore:
        return MemoryEventStore(self._kept, retention)

    def step_store(self) -> StepStore:
        return MemoryStepStore(self._kept)

    def entity_store(self) -> EntityStore:
        return MemoryEntityStore(self._kept)

    def records(self) -> RecordStore:
        return MemoryRecordStore(
            live_task=lambda task_id: _live(self._kept, task_id)[1], kept=self._kept.records
        )

    # -- reading ----------------------------------------------------------------------------

    async def events(
        self, *, after: int = 0, follow: bool = False, last: int | None = None
    ) -> AsyncGenerator[Event, None]:
        kept = self._kept
        until: int | None = None
        if last is not None:  # the newest `last` of those kept now: never a refusal
            after = max(after, kept.seq - last, kept.dropped_through)
            until = None if follow else kept.seq
        position = after
        while True:
            if position < kept.dropped_through:
                raise EventsGone(position, kept.dropped_through + 1)
            batch = kept.events[position - kept.dropped_through :]
            for event in batch:
                if until is not None and event.seq > until:
                    return
                yield event
                position = event.seq
            if not batch:
                if not follow:
                    return
                await kept.news_after(position)
            else:
                await anyio.lowlevel.checkpoint()

    async def events_dropped_through(self) -> int:
        await anyio.lowlevel.checkpoint()
        return self._kept.dropped_through

    async def read_tasks(
        self, status: TaskStatus | None = None, agent_type: str | None = None, *, archived: bool = False
    ) -> list[AgentTask]:
        await anyio.lowlevel.checkpoint()
        kept = self._kept
        found = kept.archive.values() if archived else kept.tasks.values()
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
        await anyio.lowlevel.checkpoint()
        found = self._kept.tasks.get(task_id) or self._kept.archive.get(task_id)
        if found is None:
            raise UnknownTask(task_id)
        return found

    async def sizes(self) -> StoreSizes:
        await anyio.lowlevel.checkpoint()
        kept = self._kept
        by_part = {
            "tasks": sum(len(_encode(task)) for task in kept.tasks.values()),
            "archive": sum(part.bytes for part in kept.history() if part.kind == "archive"),
            "events": sum(len(_encode(event)) for event in kept.events),
            "steps": sum(len(encoded_body(step)) for steps in kept.steps.values() for step in steps.values()),
            "entities": sum(len(entity.state) for entity in kept.entities.values()),
        }
        return StoreSizes(
            len(kept.archive),
            len(kept.archive_parts),
            sum(by_part.values()),
            by_part,
            event_segments=len(kept.segments) + 1,
            events_dropped_through=kept.dropped_through,
        )

    async def read_stats(self) -> GraphStats:
        await anyio.lowlevel.checkpoint()
        kept = self._kept
        tasks = list(kept.tasks.values())
        graph = TaskGraph(tasks, now=time.time(), archived=kept.archived_deps(tasks))
        return GraphStats(
            by_status=graph.stats(),
            runnable_types=graph.runnable_types(),
            total=len(graph.tasks),
            by_type=graph.stats_by_type(),
        )


def _live(kept: _Kept, task_id: str) -> tuple[bool, AgentTask | None, float]:
    """The task as the open task store's graph has it live (``False`` first: none is
    open, nothing to fence against), and its clock."""
    owner = kept.graph_owner
    if owner is None:
        return False, None, 0.0
    return True, owner.graph.tasks.get(task_id), owner.clock()


# -- the task graph ---------------------------------------------------------------------------


class MemoryTaskStore:
    """The task graph of a :class:`MemoryStore`: the store package's :class:`TaskGraph`,
    its changes and events kept at each flush (the events straight into the log, as
    PostgreSQL writes them in the transition's transaction); one owner at a time
    (``DataDirBusy`` for a second), and what a closed one left running is recovered by
    the next, as on the files."""

    def __init__(
        self,
        kept: _Kept,
        lease_seconds: float,
        limits: TaskLimits,
        clock: Callable[[], float],
        retention: Retention | None,
    ) -> None:
        self._kept = kept
        self.lease_seconds = lease_seconds
        self.limits = limits
        self.clock = clock
        self.retention = retention
        self.graph = TaskGraph(limits=limits)
        self._owner: GraphOwner | None = None
        self._commits: Batcher[Any] = Batcher(owner="MemoryTaskStore")
        self._events: list[GraphEvent] = []
        self.writes = DurationCounter()
        self.archived = 0
        self.archive_dropped = 0
        self._next_pass = 0.0

    async def open(self, owner: GraphOwner) -> None:
        kept = self._kept
        await anyio.lowlevel.checkpoint()
        if kept.graph_owner is not None:
            raise DataDirBusy(f"the task graph of {kept.name} is open elsewhere in this process")
        tasks = list(kept.tasks.values())
        graph = TaskGraph(
            tasks, now=self.clock(), lease=self.lease_seconds, limits=self.limits,
            archived=kept.archived_deps(tasks),
        )  # fmt: skip
        graph.next_order = max(graph.next_order, kept.next_order)
        self.graph = graph
        self._owner = owner
        kept.graph_owner = self
        graph.expire_leases(self.clock(), orphaned=True)  # what its last owner left running
        self._take_events(None)
        self._keep()
        graph.became_runnable.clear()

    async def close(self) -> None:
        try:
            await self.flush()
        finally:
            if self._commits:
                stopped = ActorStopped(self._owner.context.ref, "stopped") if self._owner else None
                self._commits.fail_all(stopped or RuntimeError("the task store is closed"))
            if self._kept.graph_owner is self:
                self._kept.graph_owner = None

    @property
    def unflushed(self) -> bool:
        return bool(self._commits) or bool(self._events)

    @property
    def batch_full(self) -> bool:
        return self._commits.full

    def request(self, message: Any, reply: Reply) -> None:
        try:
            value = self._apply(message)
        except TaskGraphError as error:
            reply.fail(error)
            return
        finally:
            self.graph.archived = {}
        if value is NOTHING_READY:
            reply.succeed(None)
        else:
            self._commits.add(reply, value)
            self._take_events(message)
        graph = self.graph
        if graph.became_runnable and self._owner is not None:
            types = set(graph.became_runnable)
            graph.became_runnable.clear()
            self._owner.runnable(types)

    def _apply(self, message: Any) -> Any:
        graph, kept, now = self.graph, self._kept, self.clock()
        kind = type(message)
        if kind is ListTasks and message.archived:
            archive = list(kept.archive.values())
            return TaskGraph(archive, now=now).page(msgspec.structs.replace(message, archived=False))
        if kind is Submit:  # ids taken in the archive, dependencies met (or not) there
            wanted = {task.id for task in message.tasks} | {
                d for task in message.tasks for d in task.depends_on
            }
            graph.archived = {i: kept.archive[i].status for i in wanted if i in kept.archive}
        elif kind in BY_ID and message.task_id not in graph.tasks and message.task_id in kept.archive:
            task = kept.archive[message.task_id]
            if kind is GetTask:
                return task
            action = BY_ID[kind] if kind is not Decide else "approve" if message.approved else "deny"
            raise InvalidTransition(task.id, f"{task.status.value} (archived)", action)
        return apply_request(
            graph, message, now, self.lease_seconds,
            writes=self.writes.figures(), archived=self.archived, archive_dropped=self.archive_dropped,
        )  # fmt: skip

    def _take_events(self, message: Any) -> None:
        self._events.extend(graph_events(self.graph, message))

    def _keep(self) -> None:
        """Keep what changed and its events (the write a durable backend would make)."""
        kept, graph = self._kept, self.graph
        started = time.perf_counter()
        for task in graph.take_changes():
            kept.tasks[task.id] = task
        kept.next_order = max(kept.next_order, graph.next_order)
        events, self._events = self._events, []
        if events:
            now = time.time()
            kept.append(
                [
                    Event(
                        seq=0, ts=now, type=e.type, task_id=e.task_id, agent_id=e.agent_id, payload=e.payload
                    )
                    for e in events
                ]
            )
        self.writes.add(time.perf_counter() - started)

    async def flush(self) -> None:
        """Keep the batch's changes and events, answer it, then archive when a pass is due."""
        await anyio.lowlevel.checkpoint()
        self._keep()
        while self._commits:
            await self._commits.commit(None, stopped=self._stopped)
        retention = self.retention
        if retention is not None and self.clock() >= self._next_pass:
            self._next_pass = self.clock() + retention.check_every
            await self._archive_pass(retention)

    def _stopped(self) -> BaseException:
        owner = self._owner
        return ActorStopped(owner.context.ref, "stopped") if owner is not None else RuntimeError("closed")

    async def _archive_pass(self, retention: Retention) -> None:
        kept, graph, now = self._kept, self.graph, self.clock()
        leaving = graph_leaving(graph, retention, now)
        if leaving:
            ids = [task.id for task in leaving]
            for task in leaving:
                kept.archive[task.id] = task
                kept.tasks.pop(task.id, None)
            kept.archive_parts.append((max(task.updated_at for task in leaving), ids))
            graph.forget(ids)
            self.archived += len(ids)
            await MemoryStepStore(kept).drop(ids)  # nothing replays a finished task
        dropped_parts: list[tuple[float, list[str]]] = []
        if retention.archive_for is not None:
            dropped_parts = [part for part in kept.archive_parts if part[0] < now - retention.archive_for]
        if retention.disk_budget is not None:
            over = {
                part.name
                for part in over_budget(kept.history(), retention.disk_budget)
                if part.kind == "archive"
            }
            dropped_parts += [p for p in kept.archive_parts if f"archive-{p[0]}-{p[1][0]}" in over]
        for part in dropped_parts:
            if part in kept.archive_parts:
                kept.archive_parts.remove(part)
                for task_id in part[1]:
                    if kept.archive.pop(task_id, None) is not None:
                        self.archive_dropped += 1


# -- the event log ----------------------------------------------------------------------------


class MemoryEventStore:
    """The event log of a :class:`MemoryStore`: numbered in order, never a gap; rolled
    into segments of ``events_per_segment`` and pruned by ``events_for`` and the budget as
    it is written."""

    def __init__(self, kept: _Kept, retention: Retention | None) -> None:
        self._kept = kept
        self.retention = retention

    async def open(self, log: ActorRef | None = None) -> None:
        await anyio.lowlevel.checkpoint()
        if self.retention is not None:
            self._kept.log_retention = self.retention

    async def write(
        self, events: Sequence[Event], encoded: Sequence[bytes] | None = None
    ) -> list[Event | ValueError]:
        kept = self._kept
        answers: list[Event | ValueError | None] = []
        fresh: list[Event] = []
        for index, event in enumerate(events):
            if event.origin is not None and event.origin in kept.origins:
                answers.append(event)  # from a journal, already here: as it was
                continue
            try:
                body = encoded[index] if encoded is not None else _encode(event.payload)
                payload = _decode(body)
            except (TypeError, msgspec.EncodeError, msgspec.DecodeError) as error:
                answers.append(ValueError(f"event payload cannot be kept as JSON: {error}"))
                continue
            fresh.append(msgspec.structs.replace(event, payload=payload))
            answers.append(None)
        stored = iter(kept.append(fresh))
        await anyio.lowlevel.checkpoint()
        return [next(stored) if answer is None else answer for answer in answers]

    async def close(self) -> None:
        await anyio.lowlevel.checkpoint()


# -- the step journal -------------------------------------------------------------------------


class MemoryStepStore:
    """The step journal of a :class:`MemoryStore`: each ``(task, key, kind)`` keeps what
    was written first; fenced against the open task graph, as on the files."""

    def __init__(self, kept: _Kept) -> None:
        self._kept = kept

    def _refused(self, steps: Sequence[Step]) -> Refused:
        for step in steps:
            check_step(step)
        refused: Refused = {}
        for step in steps:
            if step.token:
                owned, task, now = _live(self._kept, step.task_id)
                at = now if step.kind in BEFORE_AN_EFFECT else None
                refusal = fenced(task, step.task_id, None, step.token, "record a step", at) if owned else None
                if refusal is not None:
                    refused[(step.task_id, step.token)] = refusal
        return refused

    async def write(self, steps: Sequence[Step], *, durable: bool = True) -> Refused:
        refused = self._refused(steps)
        for step in steps:
            if (step.task_id, step.token) in refused:
                continue
            body = encoded_body(step)
            kept = msgspec.structs.replace(step, body=_decode(body), encoded=b"", token=0)
            self._kept.steps.setdefault(step.task_id, {}).setdefault((step.key, step.kind), kept)
        await anyio.lowlevel.checkpoint()
        return refused

    async def note(self, step: Step) -> None:
        refused = self._refused([step])
        if refused:
            raise next(iter(refused.values()))
        await self.write([step])

    async def sync(self) -> None:
        await anyio.lowlevel.checkpoint()

    async def incarnation(self) -> str | None:
        await anyio.lowlevel.checkpoint()
        return f"memory:{self._kept.name}"  # nothing that returned is lost while it lives

    async def read(self, task_id: str) -> list[Step]:
        await anyio.lowlevel.checkpoint()
        return list(self._kept.steps.get(task_id, {}).values())

    async def read_many(self, task_ids: Sequence[str]) -> dict[str, list[Step]]:
        await anyio.lowlevel.checkpoint()
        return {task_id: list(self._kept.steps.get(task_id, {}).values()) for task_id in task_ids}

    async def drop(self, task_ids: Sequence[str]) -> int:
        await anyio.lowlevel.checkpoint()
        return sum(len(self._kept.steps.pop(task_id, {})) for task_id in set(task_ids))

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()


# -- entities ---------------------------------------------------------------------------------


class MemoryEntityStore:
    """Entities' states, leases and mail in a :class:`MemoryStore` (the files' rules: one
    process holds it, its hosts are the nodes)."""

    shared = False

    def __init__(self, kept: _Kept) -> None:
        self._kept = kept

    async def load(self, kind: str, keys: Sequence[str]) -> dict[str, StoredState]:
        check_kind(kind)
        wanted = [check_key(key) for key in keys]
        await anyio.lowlevel.checkpoint()
        found = {}
        for key in wanted:
            row = self._kept.entities.get((kind, key))
            if row is not None and row.version > 0:
                found[key] = StoredState(key, row.state, row.version, row.saved_at)
        return found

    async def save(self, kind: str, states: Sequence[tuple[str, bytes]]) -> dict[str, int]:
        rows = save_rows(kind, states)
        return (await self.write(kind, None, [Record(key, state) for key, state in rows])).versions

    async def write(self, kind: str, node: str | None, records: Sequence[Record]) -> Written:
        rows = write_rows(kind, records)
        kept, now = self._kept, time.time()
        versions: dict[str, int] = {}
        refused: dict[str, Fenced] = {}
        answered = False
        for record in rows:
            row = kept.entities.get((kind, record.key))
            if record.token is not None:
                holder, current = (None, None) if row is None else (row.node, row.token)
                refusal = entity_fenced(kind, record.key, node, record.token, holder, current)
                if refusal is not None:
                    refused[record.key] = refusal
                    continue
            if record.state is not None:
                if row is None:
                    row = kept.entities[(kind, record.key)] = _Entity()
                row.state, row.version, row.saved_at = record.state, row.version + 1, now
                versions[record.key] = row.version
            for seq in record.done:
                kept.mail.pop(seq, None)
            kept.answers.extend(record.answers)
            answered = answered or bool(record.answers)
        if answered:
            self._wake()
        await anyio.lowlevel.checkpoint()
        return Written(versions, refused)

    async def delete(self, kind: str, keys: Sequence[str]) -> int:
        check_kind(kind)
        wanted = [check_key(key) for key in keys]
        await anyio.lowlevel.checkpoint()
        gone = 0
        for key in wanted:
            row = self._kept.entities.pop((kind, key), None)
            gone += row is not None and row.version > 0
        return gone

    async def count(self, kind: str) -> int:
        check_kind(kind)
        await anyio.lowlevel.checkpoint()
        return sum(1 for (k, _), row in self._kept.entities.items() if k == kind and row.version > 0)

    async def claim(self, kind: str, keys: Sequence[str], node: str, lease: float) -> Claimed:
        check_kind(kind)
        wanted = sorted({check_key(key) for key in keys})
        await anyio.lowlevel.checkpoint()
        now = time.time()
        taken: list[str] = []
        states: dict[str, StoredState] = {}
        elsewhere: dict[str, str] = {}
        tokens: dict[str, int] = {}
        for key in wanted:
            row = self._kept.entities.get((kind, key))
            if row is None:
                row = self._kept.entities[(kind, key)] = _Entity()
            live = row.node is not None and row.lease_until is not None and row.lease_until >= now
            if live and row.node != node:
                elsewhere[key] = row.node  # type: ignore[assignment]  # live: it has a node
                continue
            if not live:
                row.token += 1  # a new holding: the next token
            row.node, row.lease_until = node, now + lease
            taken.append(key)
            tokens[key] = row.token
            if row.version > 0:
                states[key] = StoredState(key, row.state, row.version, row.saved_at)
        return Claimed(taken, states, elsewhere, tokens)

    async def renew(self, node: str, lease: float) -> dict[tuple[str, str], int]:
        await anyio.lowlevel.checkpoint()
        until = time.time() + lease
        held = {}
        for ident, row in self._kept.entities.items():
            if row.node == node:
                row.lease_until = until
                held[ident] = row.token
        return held

    async def release(self, kind: str, keys: Sequence[str], node: str) -> None:
        check_kind(kind)
        wanted = [check_key(key) for key in keys]
        await anyio.lowlevel.checkpoint()
        for key in wanted:
            row = self._kept.entities.get((kind, key))
            if row is not None and row.node == node:
                row.node = row.lease_until = None

    async def post(self, mail: Sequence[Posted]) -> None:
        rows = [
            (check_kind(kind), check_key(key), body, asker, ask_id) for kind, key, body, asker, ask_id in mail
        ]
        await anyio.lowlevel.checkpoint()
        for kind, key, body, asker, ask_id in rows:
            self._kept.mail_seq += 1
            self._kept.mail[self._kept.mail_seq] = [kind, key, body, asker, ask_id, None]
        if rows:
            self._wake()

    async def take_mail(self, node: str, limit: int = 256) -> list[Mail]:
        await anyio.lowlevel.checkpoint()
        taken: list[Mail] = []
        for seq, row in self._kept.mail.items():
            if len(taken) >= limit:
                break
            kind, key, body, asker, ask_id, taken_by = row
            entity = self._kept.entities.get((kind, key))
            if entity is None or entity.node != node:
                continue
            holding = f"{node}#{entity.token}"  # taken under the holding: a new one takes it again
            if taken_by == holding:
                continue
            row[5] = holding
            taken.append(Mail(seq, kind, key, body, asker, ask_id))
        return taken

    async def done_mail(self, seqs: Sequence[int]) -> None:
        await anyio.lowlevel.checkpoint()
        for seq in seqs:
            self._kept.mail.pop(seq, None)

    async def answer(self, answers: Sequence[tuple[str, int, bool, bytes]]) -> None:
        await anyio.lowlevel.checkpoint()
        self._kept.answers.extend((asker, ask_id, bool(ok), body) for asker, ask_id, ok, body in answers)
        if answers:
            self._wake()

    async def take_answers(self, node: str) -> list[Answer]:
        await anyio.lowlevel.checkpoint()
        mine = [answer for answer in self._kept.answers if answer[0] == node]
        self._kept.answers = [answer for answer in self._kept.answers if answer[0] != node]
        return [Answer(ask_id, ok, body) for _, ask_id, ok, body in mine]

    async def orphans(self, limit: int = 256) -> list[tuple[str, str]]:
        await anyio.lowlevel.checkpoint()
        now = time.time()
        found: dict[tuple[str, str], None] = {}
        for kind, key, *_ in self._kept.mail.values():
            row = self._kept.entities.get((kind, key))
            if row is None or row.node is None or (row.lease_until or 0.0) < now:
                found[(kind, key)] = None
                if len(found) >= limit:
                    break
        return list(found)

    async def wait(self, node: str, timeout: float) -> None:
        nodes = self._kept.nodes
        event = nodes.get(node)
        if event is None:  # the first call registers and returns: what came before is unknown
            nodes[node] = anyio.Event()
            await anyio.lowlevel.checkpoint()
            return
        with anyio.move_on_after(timeout):
            await event.wait()
        if event.is_set():
            nodes[node] = anyio.Event()

    def _wake(self) -> None:
        for event in self._kept.nodes.values():
            event.set()

    async def aclose(self) -> None:
        await anyio.lowlevel.checkpoint()
