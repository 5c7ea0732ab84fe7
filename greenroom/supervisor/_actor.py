"""``SupervisorActor``: owns the task graph and grants claims by message.

Messages (``greenroom.messages``): ``Submit``, ``Claim``, ``Heartbeat``, ``Complete``,
``Fail``, ``Release``, ``Cancel``, ``GetTask``, ``ListTasks``, ``Stats``,
``StopGranting``. Ask them; a refused request raises a :class:`TaskGraphError` in the
asker and changes nothing.

Group commit (``greenroom._commit.GroupCommit``): the actor applies each message to the
graph in memory and keeps the reply; when its mailbox is empty (or ``max_batch``
replies wait), it writes every change of the batch as one journal line with one
fsync, and only then answers the batch. A reply means durable. Messages that arrive
during the write form the next batch. A ``Claim`` must be asked; a grant whose asker
stopped waiting (timed out or cancelled) before the grant was durable is handed back
at once (PENDING, attempt refunded) rather than left to its lease. If the write fails,
the batch's askers get the error and the actor fails, so its supervisor restarts it
and the graph is reloaded from what is on disk.

The outbox: the events a batch's transitions cause (``TASK_*``, and the ``AGENT_RESULT``
of a ``Complete`` or ``Fail``) are written in the same journal line, then sent to the
log actor (``AppendBatch``, waiting for mailbox room, never dropped), each tagged with
its origin. The journal is the source of truth: on start the actor asks the log how far
it got and sends what it lacks, so after any crash every committed transition has
exactly one event. The journal is compacted only once the log has every event in it.

Messages sent before ``stop()`` are answered (the last batch is committed first);
claims parked waiting for work get ``ActorStopped``; messages sent after are refused
by the kernel. The OS lock on the data dir is held from ``on_start`` to ``on_stop``.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec

from .._checks import check_int, check_seconds
from .._commit import GroupCommit
from .._files import OwnerLock, resolve_data_dir
from .._threads import run_blocking
from ..actors import Actor, ActorRef, ActorStopped, MailboxFull, PendingReply
from ..messages import (
    AgentError,
    AgentTask,
    AppendBatch,
    Cancel,
    Claim,
    Complete,
    Fail,
    GetTask,
    Granted,
    GraphStats,
    Heartbeat,
    ListTasks,
    NoWork,
    OutboxDelivered,
    OutboxEvent,
    OutboxLost,
    OutboxPosition,
    Release,
    Stats,
    StopGranting,
    Submit,
    TaskLimits,
    TaskStatus,
)
from ._errors import TaskGraphError
from ._graph import TaskGraph
from ._outbox import Outbox, result_event, transition_payload
from ._store import GraphStore

_encode = msgspec.json.encode

logger = logging.getLogger("greenroom.supervisor")


class _CheckLeases:
    __slots__ = ()


_CHECK_LEASES = _CheckLeases()


class _GrantLost(msgspec.Struct, frozen=True):
    """Told to itself: this grant reached its asker's slot, but the asker was cancelled
    before taking it (see ``PendingReply.succeed``'s ``if_lost``)."""

    task_id: str
    owner: str
    attempt: int


class SupervisorActor(Actor):
    """The only writer of ``<data dir>/tasks.graph.json`` (and its journal).

    ``data_dir``: default ``$STREAMING_LLM_DATA_DIR`` or ``~/.local/share/greenroom``.
    ``lease_seconds``: how long a claim lasts without a heartbeat. ``log``: the log
    actor the outbox's events go to (the lifecycle events and agents' results, after
    they are durable in the journal); it must be running before this actor starts. ``recover_orphans``:
    on start, end every attempt left IN_PROGRESS (agents talk to the supervisor in its
    own process, and the lock proves the previous one is gone), instead of waiting
    for their leases to run out. ``clock``: the wall clock leases are stamped with.
    On a clean stop the journal is folded into ``tasks.graph.json``.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        lease_seconds: float = 30.0,
        lease_check_interval: float | None = None,
        log: ActorRef | None = None,
        max_batch: int = 4096,
        compact_min_bytes: int = 1 << 20,
        recover_orphans: bool = True,
        limits: TaskLimits | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._data_dir_arg = data_dir
        self.limits = limits or TaskLimits()
        self.lease_seconds = check_seconds("SupervisorActor", "lease_seconds", lease_seconds)
        if lease_check_interval is None:
            lease_check_interval = min(max(lease_seconds / 4, 0.01), 5.0)
        self.lease_check_interval = check_seconds(
            "SupervisorActor", "lease_check_interval", lease_check_interval
        )
        self.max_batch = check_int("SupervisorActor", "max_batch", max_batch)
        self.log = log
        self.compact_min_bytes = compact_min_bytes
        self.recover_orphans = recover_orphans
        self.clock = clock
        self.closing = False
        self._commits: GroupCommit[Any] = GroupCommit(self.max_batch)
        self._outbox: list[OutboxEvent] = []
        """The events of the batch being built (written with it)."""
        self._sending: Outbox | None = None
        """The committed events on their way to the log (with a log only)."""
        self._resend: list[AppendBatch] = []
        self._parked: dict[str, deque[tuple[PendingReply, Claim]]] = {}
        self._lock: OwnerLock | None = None
        self._broken = False
        self._store: GraphStore | None = None
        self.graph = TaskGraph(limits=self.limits)

    # -- lifecycle --------------------------------------------------------------------

    async def on_start(self) -> None:
        data_dir = await anyio.to_thread.run_sync(resolve_data_dir, self._data_dir_arg)
        self.data_dir: Path = data_dir
        lock = OwnerLock(data_dir / "tasks.graph.lock", "the task graph")
        await anyio.to_thread.run_sync(lock.acquire)
        self._lock = lock
        store = GraphStore(data_dir, compact_min_bytes=self.compact_min_bytes)
        try:
            tasks, _ = await anyio.to_thread.run_sync(store.load)
            self._store = store
            self.graph = graph = TaskGraph(
                tasks, now=self.clock(), lease=self.lease_seconds, limits=self.limits
            )
            if self.log is not None:
                self._sending = Outbox(self.context.ref)
                await self._redeliver(store)
            if self.recover_orphans:
                orphans = graph.expire_leases(self.clock(), orphaned=True)
                if orphans:
                    poisoned = [t.id for t in orphans if t.status is TaskStatus.FAILED]
                    if len(orphans) > len(poisoned):
                        logger.warning(
                            "supervisor: %d task(s) were IN_PROGRESS for a process that stopped; they "
                            "are queued again, not charged an attempt, and run one suspect at a time",
                            len(orphans) - len(poisoned),
                        )
                    if poisoned:
                        logger.error(
                            "supervisor: failed %d task(s) as poison (running each time their process "
                            "died, max_crashes %d): %s",
                            len(poisoned),
                            self.limits.max_crashes,
                            ", ".join(poisoned[:10]) + (" ..." if len(poisoned) > 10 else ""),
                        )
                    self._take_events(None)
                    await self._write_and_deliver(graph.take_changes())
        except BaseException:
            self._store = None
            store.close()
            lock.release()
            self._lock = None
            raise
        self.context.schedule_repeatedly(self.lease_check_interval, _CHECK_LEASES)

    async def _redeliver(self, store: GraphStore) -> None:
        """Send the log the committed events it lacks (a crash came between a commit and
        the log's write): it says how far it got, so nothing is sent twice."""
        assert self.log is not None and self._sending is not None
        try:
            position = await self.log.ask(OutboxPosition(), timeout=None)
        except ActorStopped:
            logger.warning("supervisor: the log actor is stopped; the events wait in the journal")
            position = None
            sends = []
        else:
            sends = self._sending.restore(position, store.outbox)
        if sends:
            logger.warning(
                "supervisor: the event log lacks %d committed event(s); appending them",
                sum(len(message.events) for message in sends),
            )
        for message in sends:
            await self._send_to_log(message)

    async def on_stop(self) -> None:
        if self._broken:  # a write failed: memory is ahead of disk, keep only what is on disk
            if self._store is not None:
                self._store.close()
                self._store = None
        elif self._store is not None:
            try:
                await self._commit()  # answer what was handled; normally empty by now
            except Exception:
                logger.exception("supervisor: the final commit failed")
        stopped = ActorStopped(self.context.ref, "stopped while the claim was waiting for work")
        for parked in self._parked.values():
            for pending, _ in parked:
                pending.fail(stopped)
        self._parked.clear()
        self._commits.fail_all(ActorStopped(self.context.ref, "stopped"))
        store = self._store
        if store is not None:
            self._store = None
            try:
                if store.journal_bytes:
                    await self._wait_for_log()
                    await anyio.to_thread.run_sync(
                        store.compact, list(self.graph.tasks.values()), self._unconfirmed()
                    )
            except OSError:
                logger.exception("supervisor: folding the journal into %s failed", store.graph_path)
            finally:
                store.close()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _unconfirmed(self) -> list[Any]:
        return self._sending.unconfirmed() if self._sending is not None else []

    async def _wait_for_log(self) -> None:
        """Before folding the journal at a stop: let the log confirm what it was sent
        (what it has not is kept in the snapshot's outbox, so this is only tidiness)."""
        if self.log is None or self._sending is None or not len(self._sending):
            return
        try:
            with anyio.move_on_after(5):
                position = await self.log.ask(OutboxPosition(), timeout=None)
                if position is not None:
                    self._sending.confirmed(position)
        except ActorStopped:
            pass

    # -- messages ---------------------------------------------------------------------

    # -- messages ---------------------------------------------------------------------

    async def receive(self, message: Any) -> Any:
        context = self.context
        pending = context.reply_later()
        if type(message) is Fail or type(message) is Complete:
            message = self._bounded(message)
        try:
            value = self._handle(message, pending)
        except TaskGraphError as error:
            if pending is None:
                logger.warning("supervisor: refused a told %s: %s", type(message).__name__, error)
            else:
                pending.fail(error)
        else:
            if pending is not None and value is not _PARKED:
                self._commits.add(pending, value)
            self._take_events(message)
        if context.queued == 0 or len(self._commits) >= self.max_batch:
            await self._commit()

    def _bounded(self, message: Fail | Complete) -> Fail | Complete:
        """An agent's report within the limits: a long failure reason cut (as stored and
        logged, so ``AGENT_RESULT`` holds the same text), an oversized result turned
        into a failed attempt that says why (the task, not the daemon, pays for it)."""
        limits = self.limits
        if isinstance(message, Fail):
            error = limits.clip(message.error)
            return message if error is message.error else Fail(message.task_id, message.agent_id, error)
        size = len(_encode(message.result))
        if size <= limits.max_result_bytes:
            return message
        reason = f"the result is {size} bytes, larger than max_result_bytes ({limits.max_result_bytes})"
        return Fail(message.task_id, message.agent_id, AgentError(reason=reason))

    def _take_events(self, message: Any) -> None:
        """Move the events of what was just applied into the batch's outbox, in order:
        the graph's transitions, then an agent's result (``Complete`` / ``Fail``)."""
        outbox = self._outbox
        for kind, task in self.graph.take_events():
            outbox.append(OutboxEvent(kind, task.id, task.owner, transition_payload(task)))
        if isinstance(message, Complete):
            outbox.append(result_event(message.task_id, message.agent_id, message.result))
        elif isinstance(message, Fail):
            outbox.append(result_event(message.task_id, message.agent_id, message.error))

    def _handle(self, message: Any, pending: PendingReply | None) -> Any:
        graph = self.graph
        now = self.clock()
        if isinstance(message, Claim):
            return self._claim(message, pending, now)
        if isinstance(message, Heartbeat):
            return graph.heartbeat(message.task_id, message.agent_id, now, self.lease_seconds)
        if isinstance(message, Complete):
            return graph.complete(message.task_id, message.agent_id, message.result, now)
        if isinstance(message, Fail):
            return graph.fail(message.task_id, message.agent_id, message.error, now)
        if isinstance(message, Submit):
            return graph.submit(message.tasks, now)
        if isinstance(message, GetTask):
            return graph.get(message.task_id)
        if isinstance(message, ListTasks):
            return [
                task
                for task in graph.tasks.values()
                if (message.status is None or task.status is message.status)
                and (message.type is None or task.type == message.type)
            ]
        if isinstance(message, Release):
            return graph.release(message.task_id, message.agent_id, now)
        if isinstance(message, Cancel):
            return graph.cancel(message.task_id, message.reason, now)
        if isinstance(message, _GrantLost):
            task = graph.tasks.get(message.task_id)
            if (
                task is not None
                and task.status is TaskStatus.IN_PROGRESS
                and task.owner == message.owner
                and task.attempt == message.attempt
            ):
                graph.release(task.id, message.owner, now)
                logger.info(
                    "supervisor: %r was granted to %r, who was cancelled; handed back", task.id, message.owner
                )
            return None
        if isinstance(message, OutboxDelivered):
            if self._sending is not None:
                self._sending.confirmed(message.origin)
            return None
        if isinstance(message, OutboxLost):
            if self._sending is not None:
                resend = self._sending.lost(message.position)
                if resend:
                    logger.warning(
                        "supervisor: the event log lost %d batch(es) of events in a failed write; sending "
                        "them again",
                        len(resend),
                    )
                self._resend.extend(resend)
            return None
        if message is _CHECK_LEASES:
            expired = graph.expire_leases(now)
            for task in expired:
                logger.warning("supervisor: task %r lost its lease; now %s", task.id, task.status.value)
            return None
        if isinstance(message, Stats):
            return GraphStats(
                by_status=graph.stats(), runnable_types=graph.runnable_types(), total=len(graph.tasks)
            )
        if isinstance(message, StopGranting):
            self.closing = True
            for parked in self._parked.values():
                for waiting, _ in parked:
                    self._commits.add(waiting, NoWork(closing=True))
            self._parked.clear()
            return None
        raise TaskGraphError(f"the supervisor does not handle {type(message).__name__} messages")

    def _claim(self, claim: Claim, pending: PendingReply | None, now: float) -> Any:
        if pending is None:  # a grant nobody hears would sit IN_PROGRESS until its lease ran out
            raise TaskGraphError(f"a Claim must be asked, not told (agent {claim.agent_id!r})")
        if self.closing:
            return NoWork(closing=True)
        task = self.graph.claim(claim.agent_id, claim.agent_type, now, self.lease_seconds)
        if task is not None:
            return Granted(task)
        if not claim.wait:
            return NoWork()
        parked = self._parked.setdefault(claim.agent_type, deque())
        if len(parked) >= 64 and not parked[0][0].wanted:
            self._parked[claim.agent_type] = parked = deque(p for p in parked if p[0].wanted)
        parked.append((pending, claim))
        return _PARKED

    def _grant_parked(self) -> None:
        graph = self.graph
        types = graph.became_runnable
        if not types:
            return
        if self._parked:
            now = self.clock()
            for agent_type in types:
                parked = self._parked.get(agent_type)
                while parked and graph.has_runnable(agent_type):
                    pending, claim = parked.popleft()
                    if not pending.wanted:
                        continue
                    task = graph.claim(claim.agent_id, agent_type, now, self.lease_seconds)
                    assert task is not None  # has_runnable said so
                    self._commits.add(pending, Granted(task))
                if parked is not None and not parked:
                    del self._parked[agent_type]
        types.clear()

    async def _commit(self) -> None:
        """Make the batch's changes and events durable (one write, one fsync), answer
        it, then hand its events to the log."""
        self._grant_parked()
        self._take_events(None)
        graph = self.graph
        store = self._store
        assert store is not None
        changed = graph.take_changes()
        events, self._outbox = self._outbox, []
        abandoned: list[AgentTask] = []

        def answer(pending: PendingReply, value: Any) -> None:
            if not isinstance(value, Granted):
                pending.succeed(value)
            elif pending.wanted:
                pending.succeed(value, if_lost=self._hand_back_later(value.task))
            else:
                abandoned.append(value.task)  # the asker gave up while the grant was being written

        written: list[int] = []

        def write() -> None:
            written.append(store.append(changed, events))

        try:
            await self._commits.commit(
                write if changed or events else None,
                stopped=lambda: ActorStopped(self.context.ref, "stopped"),
                answer=answer,
            )
        except BaseException:
            self._broken = True
            raise  # restart reloads the graph from disk: nothing unacknowledged survives
        if events and written:
            await self._deliver(written[0], events)
        if self._resend:
            resend, self._resend = self._resend, []
            for message in resend:
                await self._send_to_log(message)
        if abandoned:
            now = self.clock()
            for task in abandoned:
                assert task.owner is not None
                graph.release(task.id, task.owner, now)
                logger.info(
                    "supervisor: %r was granted to %r, who stopped waiting; handed back", task.id, task.owner
                )
            await self._commit()  # durable, and offered to any parked claim
        elif store.wants_compaction:
            try:
                await run_blocking(store.compact, list(graph.tasks.values()), self._unconfirmed())
            except BaseException:
                self._broken = True
                raise

    async def _write_and_deliver(self, changed: list[AgentTask]) -> None:
        """A commit with no replies (start-up recovery): write, then deliver."""
        store = self._store
        assert store is not None
        events, self._outbox = self._outbox, []
        seq = await anyio.to_thread.run_sync(store.append, changed, events)
        if events:
            await self._deliver(seq, events)

    async def _deliver(self, seq: int, events: list[OutboxEvent]) -> None:
        """Send a durable batch's events to the log (kept until it confirms them)."""
        if self._sending is not None:
            await self._send_to_log(self._sending.send(seq, events))

    async def _send_to_log(self, message: AppendBatch) -> None:
        """Wait for room in the log's mailbox: an event is never dropped. A stopped log
        leaves the events in the journal (or the snapshot) for the next start."""
        assert self.log is not None
        try:
            await self.log.send(message)
        except ActorStopped:
            logger.warning(
                "supervisor: the log actor is stopped; %d event(s) of batch %d wait in the journal",
                len(message.events),
                message.seq,
            )

    def _hand_back_later(self, task: AgentTask) -> Callable[[], None]:
        """``if_lost`` for a grant: tell this actor to hand the task back."""
        ref = self.context.ref
        assert task.owner is not None
        lost = _GrantLost(task.id, task.owner, task.attempt)

        def hand_back() -> None:
            try:
                ref.tell(lost)
            except (ActorStopped, MailboxFull):  # its lease brings it back instead
                logger.warning("supervisor: could not hand back %r (its lease will)", task.id)

        return hand_back


_PARKED: Any = object()
