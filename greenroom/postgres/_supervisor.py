"""``PostgresSupervisorActor``: the supervisor's protocol (``Claim``, ``Heartbeat``,
``Complete``, ``Fail``, ``Release``, ``Cancel``, ``Submit``, ``GetTask``, ``ListTasks``,
``Stats``, ``StopGranting``) over a task graph in PostgreSQL, shared by every daemon
pointed at it. Agents cannot tell it from the file supervisor.

Requests wait in the parent, queued by kind, until one of ``workers`` child actors is
free; each worker runs a batch on a pool connection in a worker thread and then takes the
next one from the queue. Claims of one type, and completions, that queued up meanwhile go together — up to
``batch_size`` in one statement, so one commit (one ``fsync``) serves them all — and any
other request is a transaction of its own (:class:`PostgresGraph`). Every claim and
every completion is still atomic: in a batch, each one's row, events and dependents
change in the same statement; a completion the batch could not make (not the owner, too
large a result) is tried alone, which says why, and a batch that meets a deadlock is run
one request at a time. Batching costs no latency: a request that finds a free worker
runs at once, alone.

A claim that finds nothing (``wait=True``) is parked until a ``NOTIFY
greenroom_runnable`` from any daemon names its type — a listener child waits for
notifications on a connection of its own, in a worker thread, one second at a time, so
stopping it never waits longer — and, in case a notification was missed (the connection
dropped), parked claims are retried at every lease check too. Lease reclaims run every
``lease_check_interval`` seconds on every node; each expired row is won by one.

Messages sent before ``stop()`` are answered: what a worker holds it finishes, and what
is still queued the parent runs as it stops — except claims, which get
``NoWork(closing=True)`` then (nothing is handed out while stopping). Parked claims get
``NoWork(closing=True)`` at ``StopGranting`` and ``ActorStopped`` at the stop. A grant
whose asker gave up while the transaction ran is handed back at once (``Release``), and
so is one whose asker was cancelled as it arrived. If PostgreSQL is unreachable, each
request fails with :class:`DatabaseError` (its asker retries); nothing acknowledged is
lost, because an answer is only sent after its transaction committed.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import anyio

from .._checks import check_int, check_seconds
from .._errors import InvalidInput
from ..actors import Actor, ActorRef, ActorStopped, MailboxFull, PendingReply
from ..messages import (
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
    Release,
    Stats,
    StopGranting,
    Submit,
    TaskLimits,
)
from ..supervisor import TaskGraphError
from ._db import ConflictError, Database, DatabaseError, DataRefused
from ._graph import CHANNEL, PostgresGraph
from ._schema import check

logger = logging.getLogger("greenroom.postgres")

T = TypeVar("T")


class _Job:
    __slots__ = ("message", "reply")

    def __init__(self, message: Any, reply: PendingReply | None) -> None:
        self.message = message
        self.reply = reply


class _Batch:
    """For a worker: claims of one type, or completions, or one other request."""

    __slots__ = ("jobs",)

    def __init__(self, jobs: list[_Job]) -> None:
        self.jobs = jobs


class _Runnable:
    """From the listener: tasks of these types became ready somewhere."""

    __slots__ = ("types",)

    def __init__(self, types: set[str] | None) -> None:
        self.types = types  # None: any (a missed notification is possible)


_CHECK_LEASES = object()
_LISTEN = object()


class PostgresSupervisorActor(Actor):
    def __init__(
        self,
        db: Database,
        *,
        lease_seconds: float = 30.0,
        lease_check_interval: float | None = None,
        workers: int = 8,
        batch_size: int = 64,
        limits: TaskLimits | None = None,
        listen: bool = True,
        node: str | None = None,
        instance: str | None = None,
        clock: Any = time.time,
    ) -> None:
        self.db = db
        self.lease_seconds = check_seconds("PostgresSupervisorActor", "lease_seconds", lease_seconds)
        interval = (
            lease_check_interval
            if lease_check_interval is not None
            else min(max(lease_seconds / 4, 0.05), 5.0)
        )
        self.lease_check_interval = check_seconds("PostgresSupervisorActor", "lease_check_interval", interval)
        self.workers = check_int("PostgresSupervisorActor", "workers", workers)
        self.batch_size = check_int("PostgresSupervisorActor", "batch_size", batch_size)
        self.graph = PostgresGraph(limits=limits, clock=clock)
        self.listen = listen
        self.node = node
        self.instance = instance
        """``node`` (stable per data dir) and ``instance`` (``node:pid``): with both, the
        tasks this node's previous process was running are recovered at start."""
        self.closing = False
        self._idle: list[ActorRef] = []
        self._queued: dict[Any, deque[_Job]] = {}
        """Requests waiting for a worker, by batch key, the oldest key first."""
        self._parked: dict[str, deque[tuple[PendingReply, Claim]]] = {}
        self._away_since: float | None = None
        """When PostgreSQL stopped answering (``None``: it answers)."""

    def database_failed(self, error: DatabaseError) -> None:
        """Say once that PostgreSQL is away; each request meanwhile fails and is retried."""
        if self._away_since is None:
            self._away_since = time.monotonic()
            logger.error("supervisor: %s; requests fail and are retried until it is back", error)

    def database_answered(self) -> None:
        if self._away_since is not None:
            away = time.monotonic() - self._away_since
            self._away_since = None
            logger.warning("supervisor: PostgreSQL answers again after %.1fs away", away)

    async def on_start(self) -> None:
        await self.db.run(check)  # a database without our schema is refused before any work
        if self.node is not None and self.instance is not None:
            node, instance = self.node, self.instance
            recovered = await self.db.run(lambda c: self.graph.recover_orphans(c, node, instance))
            poisoned = [t.id for t in recovered if t.status.value == "FAILED"]
            if len(recovered) > len(poisoned):
                logger.warning(
                    "supervisor: %d task(s) were IN_PROGRESS for this node's previous process; they are "
                    "queued again, not charged an attempt",
                    len(recovered) - len(poisoned),
                )
            if poisoned:
                logger.error(
                    "supervisor: failed %d task(s) as poison (running each time their process died): %s",
                    len(poisoned),
                    ", ".join(poisoned[:10]),
                )
        for index in range(self.workers):
            self._idle.append(
                await self.context.spawn(
                    lambda: _GraphWorker(self), name=f"{self.context.ref.name}.db{index}"
                )
            )
        if self.listen:
            listener = await self.context.spawn(
                lambda: _Listener(self.db, self.context.ref), name=f"{self.context.ref.name}.listen"
            )
            listener.tell(_LISTEN)
        self.context.schedule_repeatedly(self.lease_check_interval, _CHECK_LEASES)

    def _queue(self, job: _Job) -> None:
        """Queue ``job`` under its batch key: the claims of one type run together, and the
        completions; anything else on its own."""
        message = job.message
        key: Any = (
            ("claim", message.agent_type) if isinstance(message, Claim)
            else Complete if isinstance(message, Complete)
            else job
        )  # fmt: skip
        self._queued.setdefault(key, deque()).append(job)

    def _take(self) -> list[_Job] | None:
        """The oldest key's waiting requests (up to ``batch_size``), or ``None``."""
        if not self._queued:
            return None
        key = next(iter(self._queued))
        waiting = self._queued.pop(key)
        batch = [waiting.popleft() for _ in range(min(len(waiting), self.batch_size))]
        if waiting:
            self._queued[key] = waiting  # behind the other keys: each kind gets its turn
        return batch

    def _dispatch(self) -> None:
        """Give each idle worker a batch."""
        while self._idle and self._queued:
            worker = self._idle.pop()
            batch = self._take()
            assert batch is not None
            try:
                worker.tell(_Batch(batch))
            except ActorStopped:  # a worker stopped by itself (a bug): its batch goes to another
                self._queued = {object(): deque(batch), **self._queued}

    def worker_free(self, worker: ActorRef) -> list[_Job] | None:
        """Called by a worker that finished a batch, synchronously (the workers are this
        actor's hands, on its event loop, and nothing awaits in between): the next batch,
        so that a busy daemon never waits a mailbox hop between transactions, or ``None``
        with the worker marked idle."""
        batch = self._take()
        if batch is None:
            self._idle.append(worker)
        return batch

    async def receive(self, message: Any) -> Any:
        if isinstance(message, _Runnable):
            self._retry_parked(message.types)
        elif message is _CHECK_LEASES:
            self._queue(_Job(_CHECK_LEASES, None))
            self._retry_parked(None)
        elif isinstance(message, _Parked):
            if self.closing:
                message.reply.succeed(NoWork(closing=True))
            elif message.reply.wanted:
                self._parked.setdefault(message.claim.agent_type, deque()).append(
                    (message.reply, message.claim)
                )
            return None
        elif isinstance(message, StopGranting):
            self.closing = True
            for parked in self._parked.values():
                for waiting, _ in parked:
                    waiting.succeed(NoWork(closing=True))
            self._parked.clear()
            return None
        elif isinstance(message, Claim) and self.closing:
            return NoWork(closing=True)
        elif isinstance(message, _HANDLED):
            self._queue(_Job(message, self.context.reply_later()))
        else:
            raise TaskGraphError(f"the supervisor does not handle {type(message).__name__} messages")
        self._dispatch()
        return None

    def _retry_parked(self, types: set[str] | None) -> None:
        """Queue the parked claims of ``types`` (``None``: all) again; a claim that still
        finds nothing comes back parked."""
        for agent_type in list(self._parked) if types is None else [t for t in types if t in self._parked]:
            for reply, claim in self._parked.pop(agent_type):
                if reply.wanted:
                    self._queue(_Job(claim, reply))

    async def on_stop(self) -> None:
        """The workers have stopped: run what is still queued here (a claim gets
        ``NoWork(closing=True)``: nothing is handed out while stopping), and fail the
        parked claims with ``ActorStopped``."""
        queued, self._queued = list(self._queued.values()), {}
        for jobs in queued:
            if isinstance(jobs[0].message, Claim):
                for job in jobs:
                    if job.reply is not None:
                        job.reply.succeed(NoWork(closing=True))
            elif jobs[0].message is not _CHECK_LEASES:
                await _run(self, list(jobs))
        stopped = ActorStopped(self.context.ref, "stopped while the claim was waiting for work")
        for parked in self._parked.values():
            for reply, _ in parked:
                reply.fail(stopped)
        self._parked.clear()


class _Parked:
    __slots__ = ("claim", "reply")

    def __init__(self, reply: PendingReply, claim: Claim) -> None:
        self.reply = reply
        self.claim = claim


_HANDLED = (Claim, Heartbeat, Complete, Fail, Release, Cancel, Submit, GetTask, ListTasks, Stats)


class _GraphWorker(Actor):
    """Runs one batch at a time (one transaction, or one per request where a batch
    cannot be one), on a pool connection in a worker thread, then the next one waiting
    in the supervisor's queue, until none is left."""

    def __init__(self, owner: PostgresSupervisorActor) -> None:
        self.owner = owner

    async def receive(self, batch: _Batch) -> None:
        jobs: list[_Job] | None = batch.jobs
        while jobs is not None:
            await _run(self.owner, jobs)
            jobs = self.owner.worker_free(self.context.ref)


async def _run(owner: PostgresSupervisorActor, jobs: list[_Job]) -> None:
    """Run and answer ``jobs`` (of one batch key)."""
    first = jobs[0].message
    if first is _CHECK_LEASES:
        try:
            expired = await owner.db.run(owner.graph.expire_leases)
        except DatabaseError as error:
            owner.database_failed(error)
            return
        owner.database_answered()
        for task in expired:
            logger.warning("supervisor: task %r lost its lease; now %s", task.id, task.status.value)
    elif isinstance(first, Claim):
        await _claims(owner, [job for job in jobs if job.reply is None or job.reply.wanted])
    elif isinstance(first, Complete):
        await _completions(owner, jobs)
    else:
        for job in jobs:
            await _answer(owner, job.reply, partial(_call, owner, job.message))


async def _answer(owner: PostgresSupervisorActor, reply: PendingReply | None, call: Any) -> None:
    """``reply`` with what ``await call()`` returns, or the refusal it raises."""
    try:
        value = await call()
    except (InvalidInput, DatabaseError) as error:
        _failed(owner, [reply], error)
        return
    owner.database_answered()
    if reply is not None:
        reply.succeed(value)


def _failed(owner: PostgresSupervisorActor, replies: list[PendingReply | None], error: Exception) -> None:
    if isinstance(error, DatabaseError) and not isinstance(error, ConflictError):
        owner.database_failed(error)
    else:  # a refusal or a conflict: PostgreSQL answered
        owner.database_answered()
    for reply in replies:
        if reply is not None:
            reply.fail(error)


async def _call(owner: PostgresSupervisorActor, message: Any) -> Any:
    """One request other than a claim or a completion, in its own transaction."""
    graph, db, lease = owner.graph, owner.db, owner.lease_seconds
    if isinstance(message, Heartbeat):
        return await db.run(lambda c: graph.heartbeat(c, message.task_id, message.agent_id, lease))
    if isinstance(message, Fail):
        return await db.run(lambda c: graph.fail(c, message.task_id, message.agent_id, message.error))
    if isinstance(message, Release):
        return await db.run(lambda c: graph.release(c, message.task_id, message.agent_id))
    if isinstance(message, Cancel):
        return await db.run(lambda c: graph.cancel(c, message.task_id, message.reason))
    if isinstance(message, Submit):
        return await db.run(lambda c: graph.submit(c, message.tasks))
    if isinstance(message, GetTask):
        return await db.run(lambda c: graph.get(c, message.task_id))
    if isinstance(message, ListTasks):
        return await db.run(lambda c: graph.list_tasks(c, message.status, message.type))
    counts, runnable, total = await db.run(graph.stats)
    return GraphStats(by_status=counts, runnable_types=runnable, total=total)


async def _batch(
    owner: PostgresSupervisorActor,
    jobs: list[_Job],
    statement: Callable[[Any], list[T]],
    one_by_one: Callable[[PostgresSupervisorActor, list[_Job]], Awaitable[None]],
) -> list[T] | None:
    """``statement`` (one statement for all ``jobs``), or ``None`` once the jobs are
    answered otherwise: after a conflict (a deadlock with another node's batch) or a value
    PostgreSQL refused, each runs alone through ``one_by_one``, so it fails one request
    only; after any other failure all fail (their askers retry)."""
    try:
        result = await owner.db.run(statement, single=True)
    except (ConflictError, DataRefused) as error:
        if len(jobs) > 1:
            for job in jobs:
                await one_by_one(owner, [job])
        else:
            _failed(owner, [jobs[0].reply], error)
        return None
    except (InvalidInput, DatabaseError) as error:
        _failed(owner, [job.reply for job in jobs], error)
        return None
    owner.database_answered()
    return result


async def _claims(owner: PostgresSupervisorActor, jobs: list[_Job]) -> None:
    """Claims of one type in one statement; an agent left without a task is parked (if it
    waits) or told ``NoWork``."""
    if not jobs:
        return
    graph, lease = owner.graph, owner.lease_seconds
    claims: list[Claim] = [job.message for job in jobs]
    agents = [claim.agent_id for claim in claims]
    tasks = await _batch(
        owner, jobs, lambda c: graph.claim_many(c, agents, claims[0].agent_type, lease), _claims
    )
    if tasks is None:
        return
    for job, claim, task in zip(jobs, claims, tasks, strict=True):
        reply = job.reply
        if task is None:
            if reply is None:
                continue
            if claim.wait:
                try:
                    await owner.context.ref.send(_Parked(reply, claim))
                except ActorStopped:
                    reply.succeed(NoWork(closing=True))
            else:
                reply.succeed(NoWork())
        elif reply is None or not reply.wanted:
            await _hand_back(owner, task.id, claim.agent_id)
        else:
            reply.succeed(Granted(task), if_lost=partial(_lost, owner, task.id, claim.agent_id))


def _lost(owner: PostgresSupervisorActor, task_id: str, agent_id: str) -> None:
    """``if_lost`` of a grant (its asker was cancelled as it arrived): hand it back."""
    try:
        owner.context.ref.tell(Release(task_id, agent_id))
    except (ActorStopped, MailboxFull):
        logger.warning("supervisor: could not hand back %r (its lease will)", task_id)


async def _hand_back(owner: PostgresSupervisorActor, task_id: str, agent_id: str) -> None:
    """A grant whose asker gave up while the transaction ran goes back at once."""
    try:
        await owner.db.run(lambda c: owner.graph.release(c, task_id, agent_id))
    except (InvalidInput, DatabaseError) as error:
        logger.warning("supervisor: could not hand back %r (its lease will): %s", task_id, error)


async def _completions(owner: PostgresSupervisorActor, jobs: list[_Job]) -> None:
    """The usual completions in one statement; one that changed nothing (not the owner,
    too large a result) goes through the full path, which says why."""
    graph = owner.graph
    completes: list[Complete] = [job.message for job in jobs]
    items = [(m.task_id, m.agent_id, m.result) for m in completes]
    done = await _batch(owner, jobs, lambda c: graph.complete_many(c, items), _completions)
    if done is None:
        return
    for job, message, task in zip(jobs, completes, done, strict=True):
        if task is not None:
            if job.reply is not None:
                job.reply.succeed(task)
            continue
        fallback = partial(_complete_alone, graph, message)
        await _answer(owner, job.reply, partial(owner.db.run, fallback))


def _complete_alone(graph: PostgresGraph, message: Complete, connection: Any) -> Any:
    """A completion the batch left unchanged, in a transaction of its own (it says why)."""
    return graph.complete(connection, message.task_id, message.agent_id, message.result, at_once=False)


class _Listener(Actor):
    """Waits for ``NOTIFY greenroom_runnable`` on a connection of its own (one second
    at a time in a worker thread) and tells the supervisor which types became ready."""

    def __init__(self, db: Database, supervisor: ActorRef) -> None:
        self.db = db
        self.supervisor = supervisor
        self.connection: Any = None

    async def on_stop(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            await anyio.to_thread.run_sync(connection.close)

    def _wait(self) -> set[str]:
        if self.connection is None:
            self.connection = self.db.connect()
            self.connection.execute(f"LISTEN {CHANNEL}")
        return {notice.payload for notice in self.connection.notifies(timeout=1.0, stop_after=256)}

    async def receive(self, message: Any) -> None:
        try:
            types = await anyio.to_thread.run_sync(self._wait)
        except Exception as error:  # psycopg's errors, from the thread; nothing awaited here can be cancelled
            logger.warning(
                "supervisor: lost the notification connection (%s); reconnecting", type(error).__name__
            )
            connection, self.connection = self.connection, None
            if connection is not None:
                await anyio.to_thread.run_sync(connection.close)
            self.supervisor.tell(_Runnable(None))  # a notification may have been missed
            await anyio.sleep(1.0)
            types = set()
        try:
            if types:
                self.supervisor.tell(_Runnable(types))
            self.context.ref.tell(_LISTEN)
        except ActorStopped:
            return  # stopping: no more waiting
