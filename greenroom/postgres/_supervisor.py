"""``PostgresSupervisorActor``: the supervisor's protocol (``Claim``, ``Heartbeat``,
``Complete``, ``Fail``, ``Release``, ``Cancel``, ``Submit``, ``GetTask``, ``ListTasks``,
``Stats``, ``StopGranting``) over a task graph in PostgreSQL, shared by every daemon
pointed at it. Agents cannot tell it from the file supervisor.

Each request is one transaction (:class:`PostgresGraph`), run by one of ``workers``
child actors, so that many run at once on the pool's connections; the parent only routes
and keeps the parked claims. A claim that finds nothing (``wait=True``) is parked until a
``NOTIFY greenroom_runnable`` from any daemon names its type — a listener child waits for
notifications on a connection of its own, in a worker thread, one second at a time, so
stopping it never waits longer — and, in case a notification was missed (the connection
dropped), parked claims are retried at every lease check too. Lease reclaims run every
``lease_check_interval`` seconds on every node; each expired row is won by one.

Messages sent before ``stop()`` are answered; parked claims get ``NoWork(closing=True)``
at ``StopGranting`` and ``ActorStopped`` at the stop. A grant whose asker gave up while the
transaction ran is handed back at once (``Release``). If PostgreSQL is unreachable, each
request fails with :class:`DatabaseError` (its asker retries); nothing acknowledged is
lost, because an answer is only sent after its transaction committed.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any

import anyio

from .._checks import check_int, check_seconds
from ..actors import Actor, ActorRef, ActorStopped, PendingReply
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
from ._db import Database, DatabaseError
from ._graph import CHANNEL, PostgresGraph
from ._schema import check

logger = logging.getLogger("greenroom.postgres")


class _Job:
    __slots__ = ("message", "reply")

    def __init__(self, message: Any, reply: PendingReply | None) -> None:
        self.message = message
        self.reply = reply


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
        self.graph = PostgresGraph(limits=limits, clock=clock)
        self.listen = listen
        self.node = node
        self.instance = instance
        """``node`` (stable per data dir) and ``instance`` (``node:pid``): with both, the
        tasks this node's previous process was running are recovered at start."""
        self.closing = False
        self._pool: list[ActorRef] = []
        self._next = 0
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
            self._pool.append(
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

    def _route(self, job: _Job) -> None:
        worker = self._pool[self._next]
        self._next = (self._next + 1) % len(self._pool)
        worker.tell(job)

    async def receive(self, message: Any) -> Any:
        if isinstance(message, _Runnable):
            await self._retry_parked(message.types)
            return None
        if message is _CHECK_LEASES:
            self._route(_Job(_CHECK_LEASES, None))
            await self._retry_parked(None)
            return None
        if isinstance(message, _Parked):
            if self.closing:
                message.reply.succeed(NoWork(closing=True))
            elif message.reply.wanted:
                self._parked.setdefault(message.claim.agent_type, deque()).append(
                    (message.reply, message.claim)
                )
            return None
        if isinstance(message, StopGranting):
            self.closing = True
            for parked in self._parked.values():
                for waiting, _ in parked:
                    waiting.succeed(NoWork(closing=True))
            self._parked.clear()
            return None
        if isinstance(message, Claim) and self.closing:
            return NoWork(closing=True)
        if not isinstance(message, _HANDLED):
            raise TaskGraphError(f"the supervisor does not handle {type(message).__name__} messages")
        self._route(_Job(message, self.context.reply_later()))
        return None

    async def _retry_parked(self, types: set[str] | None) -> None:
        """Hand the parked claims of ``types`` (``None``: all) back to the workers; a claim
        that still finds nothing comes back parked."""
        for agent_type in list(self._parked) if types is None else [t for t in types if t in self._parked]:
            parked = self._parked.pop(agent_type)
            for reply, claim in parked:
                if reply.wanted:
                    self._route(_Job(claim, reply))


class _Parked:
    __slots__ = ("claim", "reply")

    def __init__(self, reply: PendingReply, claim: Claim) -> None:
        self.reply = reply
        self.claim = claim


_HANDLED = (Claim, Heartbeat, Complete, Fail, Release, Cancel, Submit, GetTask, ListTasks, Stats)


class _GraphWorker(Actor):
    """Runs one request's transaction at a time, on a pool connection in a worker thread."""

    def __init__(self, owner: PostgresSupervisorActor) -> None:
        self.owner = owner

    async def receive(self, job: _Job) -> None:
        owner = self.owner
        message, reply = job.message, job.reply
        graph, db = owner.graph, owner.db
        lease = owner.lease_seconds
        try:
            if message is _CHECK_LEASES:
                for expired in await db.run(graph.expire_leases):
                    logger.warning(
                        "supervisor: task %r lost its lease; now %s", expired.id, expired.status.value
                    )
                return
            value: Any
            if isinstance(message, Claim):
                task = await db.run(
                    lambda c: graph.claim(c, message.agent_id, message.agent_type, lease), single=True
                )
                if task is None:
                    if message.wait and reply is not None:
                        owner.context.ref.tell(_Parked(reply, message))
                        return
                    value = NoWork()
                else:
                    value = Granted(task)
                    if reply is not None and not reply.wanted:
                        await db.run(lambda c: graph.release(c, task.id, message.agent_id))
                        return
            elif isinstance(message, Heartbeat):
                value = await db.run(lambda c: graph.heartbeat(c, message.task_id, message.agent_id, lease))
            elif isinstance(message, Complete):
                value = await db.run(
                    lambda c: graph.complete_at_once(c, message.task_id, message.agent_id, message.result),
                    single=True,
                )
                if value is None:  # not the owner in progress, or too large: the full path says why
                    value = await db.run(
                        lambda c: graph.complete(
                            c, message.task_id, message.agent_id, message.result, at_once=False
                        )
                    )
            elif isinstance(message, Fail):
                value = await db.run(
                    lambda c: graph.fail(c, message.task_id, message.agent_id, message.error)
                )
            elif isinstance(message, Release):
                value = await db.run(lambda c: graph.release(c, message.task_id, message.agent_id))
            elif isinstance(message, Cancel):
                value = await db.run(lambda c: graph.cancel(c, message.task_id, message.reason))
            elif isinstance(message, Submit):
                value = await db.run(lambda c: graph.submit(c, message.tasks))
            elif isinstance(message, GetTask):
                value = await db.run(lambda c: graph.get(c, message.task_id))
            elif isinstance(message, ListTasks):
                value = await db.run(lambda c: graph.list_tasks(c, message.status, message.type))
            else:
                counts, runnable, total = await db.run(graph.stats)
                value = GraphStats(by_status=counts, runnable_types=runnable, total=total)
        except (TaskGraphError, DatabaseError) as error:
            if isinstance(error, DatabaseError):
                owner.database_failed(error)
            else:
                owner.database_answered()
            if reply is not None:
                reply.fail(error)
            return
        owner.database_answered()
        if reply is not None:
            reply.succeed(value)


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
