"""``FileTaskStore``: the task graph in memory, made durable in ``tasks.graph.json`` plus an
fsynced journal — the embedded peer of the PostgreSQL task store.

Group commit: each request is applied to the graph in memory (:class:`TaskGraph`) as it
is taken and its answer is kept; at :meth:`flush` (the supervisor's mailbox is drained, or
``max_batch`` answers wait) every change of the batch is written as one journal line with
one ``fsync``, and only then is the batch answered. A claim that finds nothing is answered
at once (nothing to make durable). If the write fails, the batch's askers get the error
and the store is broken: the supervisor fails, and its restart reloads what is on disk.

The outbox: the events a batch's transitions cause (``TASK_*``, and the ``AGENT_RESULT``
of a ``Complete`` or ``Fail``) are written in the same journal line, then sent to the log
actor the data dir's event store opened (an ``AppendMany`` with the batch's origin,
waiting for mailbox room, never dropped). The journal is the source of truth: on open the
store sends what the log lacks, so after any crash every committed transition has exactly
one event (:mod:`._outbox`). A compaction keeps the events the log has not confirmed.

The OS lock on the data dir is held from :meth:`open` to :meth:`close`; on a clean close
the journal is folded into ``tasks.graph.json``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from .._checks import check_int, check_seconds
from .._commit import Batcher
from .._durations import DurationCounter
from .._files import OwnerLock, resolve_data_dir
from .._threads import run_blocking
from ..actors import ActorStopped, MailboxFull
from ..messages import (
    AppendMany,
    Decide,
    Flush,
    GetTask,
    GraphEvent,
    ListTasks,
    Submit,
    TaskLimits,
    TaskStatus,
)
from ..store import (
    BY_ID,
    NOTHING_READY,
    GraphOwner,
    InvalidTransition,
    Reply,
    Retention,
    StepStore,
    TaskGraph,
    TaskGraphError,
    UnknownTask,
    apply_request,
    graph_events,
)
from ..store import (
    leaving as graph_leaving,
)
from ._archive import TaskArchive
from ._journal import GraphFiles
from ._outbox import Outbox, OutboxBatch, outbox_for

logger = logging.getLogger("greenroom.supervisor")


class FileTaskStore:
    """The task graph of ``data_dir`` (default ``$STREAMING_LLM_DATA_DIR`` or
    ``~/.local/share/greenroom``).

    The events go to the log actor open on the same data dir (see :mod:`._outbox`; with
    none, they wait in the journal). ``recover_orphans``: on
    open, end every attempt left IN_PROGRESS (agents talk to the supervisor in its own
    process, and the lock proves the previous one is gone) instead of waiting for their
    leases: the death is not charged as an attempt, and a task that was running each time
    its process died (``limits.max_crashes``) fails as a poison task. ``clock``: the wall
    clock leases are stamped with. ``steps``: the step journal, whose ``drop`` forgets the
    steps of archived tasks (nothing replays a finished task).
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        lease_seconds: float = 30.0,
        limits: TaskLimits | None = None,
        max_batch: int = 4096,
        compact_min_bytes: int = 1 << 20,
        recover_orphans: bool = True,
        clock: Callable[[], float] = time.time,
        retention: Retention | None = None,
        steps: Callable[[], StepStore] | None = None,
    ) -> None:
        self._data_dir_arg = data_dir
        self.steps = steps
        """The step journal archived tasks' steps are dropped through (a new one per pass,
        closed after; ``None``: the data dir's own)."""
        self.lease_seconds = check_seconds("FileTaskStore", "lease_seconds", lease_seconds)
        self.limits = limits or TaskLimits()
        self.max_batch = check_int("FileTaskStore", "max_batch", max_batch)
        self.compact_min_bytes = compact_min_bytes
        self.recover_orphans = recover_orphans
        self.clock = clock
        self.graph = TaskGraph(limits=self.limits)
        self._owner: GraphOwner | None = None
        self._commits: Batcher[Any] = Batcher(max_batch=self.max_batch, owner="FileTaskStore")
        self.writes = DurationCounter()
        """Each durable write (the journal's append and fsync) since it opened."""
        self.archived = 0
        self.archive_dropped = 0
        """Tasks it moved to the archive, and archived tasks it dropped, since it opened."""
        self._outbox: list[GraphEvent] = []
        """The events of the batch being built (written with it)."""
        self._sending: Outbox | None = None
        """The committed events on their way to the log (the data dir's outbox)."""
        self._lock: OwnerLock | None = None
        self._files: GraphFiles | None = None
        self._broken = False
        self.retention = retention
        self.archive: TaskArchive | None = None
        self._archive_used = False
        """Whether any task was ever archived: until then nothing waits for a lookup."""
        self._deferred: list[tuple[Any, Reply]] = []
        """Requests taken while an archive lookup is due: applied, in order, at the flush."""
        self._next_pass = 0.0

    # -- opening and closing ------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        """This process owns the data dir's graph now (between ``open`` and ``close``)."""
        return self._files is not None

    async def open(self, owner: GraphOwner) -> None:
        self._owner = owner
        data_dir = await anyio.to_thread.run_sync(resolve_data_dir, self._data_dir_arg)
        self.data_dir: Path = data_dir
        lock = OwnerLock(data_dir / "tasks.graph.lock", "the task graph")
        await anyio.to_thread.run_sync(lock.acquire)
        self._lock = lock
        files = GraphFiles(data_dir, compact_min_bytes=self.compact_min_bytes)
        archive = self.archive = TaskArchive(data_dir)
        try:
            tasks, _ = await anyio.to_thread.run_sync(lambda: files.load(archived=archive.statuses_blocking))
            self._archive_used = await archive.used()
            self._files = files
            self.graph = graph = TaskGraph(
                tasks, now=self.clock(), lease=self.lease_seconds, limits=self.limits,
                archived=files.archived_deps,
            )  # fmt: skip
            self._sending = await anyio.to_thread.run_sync(outbox_for, data_dir)
            await self._redeliver(files)
            if self.recover_orphans:
                self._recover(graph)
                self._take_events(None)
                await self._write_and_deliver()
        except BaseException:
            self._files = None
            files.close()
            with anyio.CancelScope(shield=True):
                await archive.aclose()
            lock.release()
            self._lock = None
            raise
        graph.became_runnable.clear()  # nothing can be parked yet

    def _recover(self, graph: TaskGraph) -> None:
        orphans = graph.expire_leases(self.clock(), orphaned=True)
        if not orphans:
            return
        poisoned = [t.id for t in orphans if t.status is TaskStatus.FAILED]
        if len(orphans) > len(poisoned):
            logger.warning(
                "supervisor: %d task(s) were IN_PROGRESS for a process that stopped; they are queued "
                "again, not charged an attempt (one that died with the process more than once runs alone)",
                len(orphans) - len(poisoned),
            )
        if poisoned:
            logger.error(
                "supervisor: failed %d task(s) as poison (their process died while each ran alone, "
                "max_crashes %d): %s",
                len(poisoned),
                self.limits.max_crashes,
                ", ".join(poisoned[:10]) + (" ..." if len(poisoned) > 10 else ""),
            )

    async def _redeliver(self, files: GraphFiles) -> None:
        """Send the log the committed events it lacks (a crash came between a commit and
        the log's write): the event store knows how far it got, so nothing is sent twice."""
        assert self._sending is not None
        sends = self._sending.restore(files.outbox)
        if sends:
            logger.warning(
                "supervisor: the event log lacks %d committed event(s); appending them",
                sum(len(batch.events) for batch in sends),
            )
        for batch in sends:
            await self._send_to_log(batch.seq, batch.message())

    async def close(self) -> None:
        files = self._files
        if files is not None and not self._broken:
            try:
                await self.flush()  # answer what was handled; normally empty by now
            except Exception:
                logger.exception("supervisor: the final commit failed")
        self._files = None
        if self._commits:
            owner = self._owner
            stopped = ActorStopped(owner.context.ref, "stopped") if owner is not None else None
            self._commits.fail_all(stopped or RuntimeError("the task store is closed"))
        if files is not None:
            try:
                # a broken store's memory is ahead of its disk: only what is on disk is kept
                if files.journal_bytes and not self._broken:
                    await self._wait_for_log()
                    await anyio.to_thread.run_sync(
                        files.compact, list(self.graph.tasks.values()), self._unconfirmed()
                    )
            except OSError:
                logger.exception("supervisor: folding the journal into %s failed", files.graph_path)
            finally:
                files.close()
        if self.archive is not None:
            await self.archive.aclose()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _unconfirmed(self) -> list[OutboxBatch]:
        return self._sending.unconfirmed() if self._sending is not None else []

    async def _wait_for_log(self) -> None:
        """Before folding the journal: let the log write what it was sent (what it has
        not is kept in the snapshot's outbox, so this is only tidiness)."""
        sending = self._sending
        if sending is None or sending.log is None or not len(sending):
            return
        try:
            with anyio.move_on_after(5):
                await sending.log.ask(Flush(), timeout=None)
        except ActorStopped:
            pass

    # -- requests -----------------------------------------------------------------------

    @property
    def unflushed(self) -> bool:
        return bool(self._commits) or bool(self._outbox) or bool(self._deferred)

    @property
    def batch_full(self) -> bool:
        return len(self._commits) >= self.max_batch

    def request(self, message: Any, reply: Reply) -> None:
        if self._deferred or self._needs_archive(message):
            self._deferred.append((message, reply))  # and what follows it: the order holds
            return
        self._take(message, reply)

    def _needs_archive(self, message: Any) -> bool:
        """Whether answering ``message`` needs the archive: a submission (its ids must not
        be taken there; its dependencies may be there), a task that is not in the live
        graph, an archived listing."""
        kind = type(message)
        if kind is ListTasks:
            return bool(message.archived)
        if not self._archive_used:
            return False
        if kind is Submit:
            return True
        return kind in BY_ID and message.task_id not in self.graph.tasks

    def _take(self, message: Any, reply: Reply) -> None:
        try:
            value = self._apply(message)
        except TaskGraphError as error:
            reply.fail(error)
            return
        if value is NOTHING_READY:
            reply.succeed(None)  # a claim that found nothing: no change to make durable
        else:
            self._commits.add(reply, value)
            self._take_events(message)
        graph = self.graph
        if graph.became_runnable and self._owner is not None:
            types = set(graph.became_runnable)
            graph.became_runnable.clear()
            self._owner.runnable(types)

    def _apply(self, message: Any) -> Any:
        return apply_request(
            self.graph, message, self.clock(), self.lease_seconds,
            writes=self.writes.figures(), archived=self.archived, archive_dropped=self.archive_dropped,
        )  # fmt: skip

    def _take_events(self, message: Any) -> None:
        """Move the events of what was just applied into the batch's outbox, in order."""
        self._outbox.extend(graph_events(self.graph, message))

    # -- making it durable --------------------------------------------------------------

    async def flush(self) -> None:
        """Make the batch's changes and events durable (one write, one fsync), answer
        it, then hand its events to the log. Requests that waited for the archive are
        taken first; an archiving pass follows when one is due."""
        files = self._files
        assert files is not None
        if self._deferred:
            await self._take_deferred()
        changed = self.graph.take_changes()
        events, self._outbox = self._outbox, []
        written: list[int] = []

        def write() -> None:
            written.append(files.append(changed, events))

        async def write_batch(_: object) -> None:
            started = time.perf_counter()
            await run_blocking(write)
            self.writes.add(time.perf_counter() - started)

        owner = self._owner
        assert owner is not None
        commits = self._commits
        stopped = lambda: ActorStopped(owner.context.ref, "stopped")  # noqa: E731
        try:
            taken = await commits.commit(write_batch if changed or events else None, stopped=stopped)
            if taken is None and (changed or events):
                await write_batch(None)
            while commits:  # more than a batch's worth (requests that waited for the archive)
                await commits.commit(None, stopped=stopped)  # their changes were in the write
        except BaseException:
            self._broken = True
            raise  # the owner fails; its restart reloads the graph from disk
        if events and written:
            await self._deliver(written[0], events)
        if files.wants_compaction:
            try:
                await run_blocking(files.compact, list(self.graph.tasks.values()), self._unconfirmed())
            except BaseException:
                self._broken = True
                raise
        retention = self.retention
        if retention is not None and self.clock() >= self._next_pass:
            self._next_pass = self.clock() + retention.check_every
            await self._archive_pass(retention)

    # -- the archive --------------------------------------------------------------------

    async def _take_deferred(self) -> None:
        """Look up, in one query, what the waiting requests need from the archive, then
        take them in order: an archived task is read from it; one that is neither live
        nor archived is unknown; a submission sees the archived ids and dependencies."""
        archive, graph = self.archive, self.graph
        assert archive is not None
        deferred, self._deferred = self._deferred, []
        wanted: set[str] = set()
        for message, _ in deferred:
            if type(message) is Submit:
                for task in message.tasks:
                    wanted.add(task.id)
                    wanted.update(task.depends_on)
            elif type(message) in BY_ID:
                wanted.add(message.task_id)
        wanted.difference_update(graph.tasks)
        graph.archived = await archive.statuses(sorted(wanted)) if wanted and self._archive_used else {}
        try:
            for message, reply in deferred:
                kind = type(message)
                if kind is ListTasks and message.archived:
                    reply.succeed(await archive.page(message))
                    continue
                task_id = getattr(message, "task_id", None)
                if kind not in BY_ID or task_id in graph.tasks or task_id not in graph.archived:
                    self._take(message, reply)
                elif kind is GetTask:
                    found = await archive.get(task_id)
                    if found is None:
                        reply.fail(UnknownTask(task_id))
                    else:
                        reply.succeed(found)
                else:
                    status = f"{graph.archived[task_id].value} (archived)"
                    action = BY_ID[kind] if kind is not Decide else "approve" if message.approved else "deny"
                    reply.fail(InvalidTransition(task_id, status, action))
        finally:
            graph.archived = {}

    async def _drop_steps(self, task_ids: list[str]) -> None:
        """The step journals of archived tasks go with them, through the step journal's
        own ``drop``: nothing replays a finished task."""
        if self.steps is None:
            from ._steps import STEPS_DB, SQLiteStepStore

            journal: StepStore = SQLiteStepStore(self.data_dir / STEPS_DB)
        else:
            journal = self.steps()
        try:
            await journal.drop(task_ids)
        finally:
            await journal.aclose()

    async def _archive_pass(self, retention: Retention) -> None:
        """Move the finished tasks the policy lets go into the archive (written there
        durably first, then forgotten here with a journal line), and drop what the
        archive keeps no longer."""
        archive, files, graph = self.archive, self._files, self.graph
        assert archive is not None and files is not None
        now = self.clock()
        leaving = graph_leaving(graph, retention, now)
        if leaving:
            await archive.add(leaving)
            ids = [task.id for task in leaving]
            graph.forget(ids)
            try:
                await run_blocking(files.append, [], [], ids)
            except BaseException:
                self._broken = True  # memory is ahead of the disk: the restart reloads it
                raise
            self._archive_used = True
            self.archived += len(ids)
            await self._drop_steps(ids)
            logger.info("supervisor: archived %d finished task(s)", len(ids))
        if retention.archive_for is not None:
            dropped = await archive.drop_finished_before(now - retention.archive_for)
            self.archive_dropped += dropped
            if dropped:
                logger.info("supervisor: dropped %d archived task(s) past archive_for", dropped)
        dropped = await archive.drop_over_budget(retention.disk_budget)
        self.archive_dropped += dropped
        if dropped:
            logger.info("supervisor: dropped %d archived task(s) past the disk budget", dropped)

    async def _write_and_deliver(self) -> None:
        """A commit with no replies (recovery at open): write, then deliver."""
        files = self._files
        assert files is not None
        changed = self.graph.take_changes()
        events, self._outbox = self._outbox, []
        if not changed and not events:
            return
        seq = await anyio.to_thread.run_sync(files.append, changed, events)
        if events:
            await self._deliver(seq, events)

    async def _deliver(self, seq: int, events: list[GraphEvent]) -> None:
        """Send a durable batch's events to the log (kept until it has them)."""
        if self._sending is not None:
            message = self._sending.committed(seq, events)
            if message is not None:
                await self._send_to_log(seq, message)

    async def _send_to_log(self, seq: int, message: AppendMany) -> None:
        """Wait for room in the log's mailbox: an event is never dropped. A stopped log
        leaves the events in the outbox, the journal or the snapshot for the next one.

        With room, the batch is enqueued before this task yields (``tell``; ``send`` is a
        checkpoint): the replies this commit answered wake their askers only after their
        events are on the way, so an agent's next event never overtakes its own result."""
        log = self._sending.log if self._sending is not None else None
        if log is None:
            return
        try:
            try:
                log.tell(message)
            except MailboxFull:
                await log.send(message)
        except ActorStopped:
            logger.warning(
                "supervisor: the log actor is stopped; %d event(s) of batch %d wait for the next one",
                len(message.appends),
                seq,
            )
