"""``PostgresTaskStore``: the task graph in PostgreSQL, shared by every daemon pointed at it —
the PostgreSQL peer of the embedded file task store, behind the one supervisor actor.

Requests wait here, queued by kind, until one of ``workers`` helpers (actors, children of
the supervisor) is free; each runs a batch on a pool connection in a worker thread, then
takes the next one from the queue. Claims of one type, and completions, go together — up
to ``batch_size`` in one statement, so one commit (one ``fsync``) serves them all — and
any other request is a transaction of its own (:class:`PostgresGraph`). A kind has one
transaction in flight at a time (a second only for a full batch): what arrives meanwhile
gathers behind it, which is group commit — a worker per request ran them one by one and a
busy daemon paid a statement and a commit per claim. Every claim and every completion is
still atomic: in a batch, each one's row, events and dependents change in the same
statement; a completion the batch could not make is tried alone, which says why, and a
batch that meets a conflict (a deadlock with another node's batch) or a value PostgreSQL
refuses runs one request at a time. Batching costs no latency when idle: a request with
nothing of its kind in flight runs at once, alone; other kinds never wait for it.

Every request is answered, whatever a statement raises: a refusal, a ``DatabaseError``
(PostgreSQL away: the asker retries), or — for an error nobody foresaw — an
``InternalError``, logged with its traceback; the worker lives on.

Tasks that became ready anywhere are announced with ``NOTIFY greenroom_runnable``: a
listener (another helper) waits for them on a connection of its own, one second at a time
in a worker thread, and tells the supervisor, which tries its parked claims again; in
case a notification was missed (the connection dropped), parked claims are tried again at
every lease check too. Lease reclaims run at every lease check on every node; each
expired row is won by one.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar, cast

import anyio
import msgspec

from .._checks import check_int, check_seconds
from .._commit import Batch, Batcher
from .._durations import DurationCounter
from .._errors import GreenroomError, InternalError, InvalidInput
from ..actors import Actor, ActorRef, ActorStopped
from ..messages import (
    Cancel,
    Claim,
    Complete,
    Decide,
    Dependents,
    Fail,
    GetTask,
    Heartbeat,
    ListTasks,
    Park,
    Release,
    Retry,
    Stats,
    Submit,
    TaskLimits,
)
from ..store import ExpireLeases, GraphOwner, Reply, Retention, TaskGraphError, TasksRunnable, lease_report
from ._db import ConflictError, Database, DatabaseError, DataRefused
from ._events import ensure_event_parts, maintain
from ._graph import CHANNEL, Notify, PostgresGraph
from ._schema import check

logger = logging.getLogger("greenroom.postgres")

T = TypeVar("T")


class _Job:
    __slots__ = ("message", "reply")

    def __init__(self, message: Any, reply: Reply) -> None:
        self.message = message
        self.reply = reply


def _jobs(batch: Batch[Any]) -> list[_Job]:
    """A worker's batch as jobs: claims of one type, or completions, or one other request
    (``batch.key``: which lane it came from)."""
    return [_Job(message, cast(Reply, reply)) for reply, message in batch]


_LISTEN = object()
_ANY = "\x00any"
"""What the listener says when it has just begun listening: any type may be ready."""
_HANDLED = (
    Claim,
    Park,
    Decide,
    Dependents,
    Retry,
    Heartbeat,
    Complete,
    Fail,
    Release,
    Cancel,
    Submit,
    GetTask,
    ListTasks,
    Stats,
    ExpireLeases,
)


class PostgresTaskStore:
    """The task graph on ``db`` (whose schema must be this greenroom's).

    ``node`` (stable per data dir) and ``instance`` (``node:pid``): with both, the tasks
    this node's previous process was running are recovered at open (re-queued uncharged,
    or failed as poison at ``limits.max_crashes``); other nodes' tasks are left to their
    leases. ``listen``: wait for other nodes' news of ready work (off: only lease checks).
    """

    def __init__(
        self,
        db: Database,
        *,
        lease_seconds: float = 30.0,
        limits: TaskLimits | None = None,
        workers: int = 8,
        batch_size: int = 64,
        listen: bool = True,
        node: str | None = None,
        instance: str | None = None,
        clock: Callable[[], float] = time.time,
        retention: Retention | None = None,
        notify: Notify = "commit",
        event_width: int | None = None,
    ) -> None:
        self.db = db
        self.retention = retention
        self.event_width = event_width or (retention or Retention()).events_per_segment
        """The width of the event log's partitions made ahead at open."""
        self.clock = clock
        self.next_archive_pass = 0.0
        """When (``clock()``) the next retention pass is due."""
        self.lease_seconds = check_seconds("PostgresTaskStore", "lease_seconds", lease_seconds)
        self.limits = limits or TaskLimits()
        self.workers = check_int("PostgresTaskStore", "workers", workers)
        self.batch_size = check_int("PostgresTaskStore", "batch_size", batch_size)
        self.graph = PostgresGraph(limits=self.limits, clock=clock, notify=notify)
        self._announcer: ActorRef | None = None
        self.to_announce: set[str] = set()
        """``notify = "batched"``: ready types the announcer has not sent yet."""
        self.listen = listen
        self.node = node
        self.instance = instance
        self.owner: GraphOwner | None = None
        self._idle: list[ActorRef] = []
        self._lanes: Batcher[Any] = Batcher(max_batch=self.batch_size, owner="PostgresTaskStore")
        """Requests waiting for a worker, by lane (claims of one type, completions, each
        other request alone), the oldest lane first; one transaction in flight per lane."""
        self.writes = DurationCounter()
        """Each transaction that changed the graph (a batch or one request) since it opened."""
        self.archived = 0
        self.archive_dropped = 0
        """Tasks its retention passes moved to the archive, and archived tasks they dropped."""
        self._away_since: float | None = None
        """When PostgreSQL stopped answering (``None``: it answers)."""

    # -- opening and closing ------------------------------------------------------------

    async def open(self, owner: GraphOwner) -> None:
        self.owner = owner
        await self.db.run(check)  # a database without our schema is refused before any work
        width = self.event_width
        await self.db.run(lambda c: ensure_event_parts(c, width))  # the log's next partitions
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
                    "supervisor: failed %d task(s) as poison (their process died while each ran alone): %s",
                    len(poisoned),
                    ", ".join(poisoned[:10]),
                )
        # a call whose approval expired while no daemon ran is denied before anyone sees it
        expired = await self.db.run(self.graph.expire_leases)
        for task in expired:
            logger.warning(lease_report(task), task.id, task.status.value)
        context = owner.context
        for index in range(self.workers):
            self._idle.append(
                await context.spawn(lambda: _GraphWorker(self), name=f"{context.ref.name}.db{index}")
            )
        if self.listen:
            listener = await context.spawn(
                lambda: _Listener(self.db, context.ref), name=f"{context.ref.name}.listen"
            )
            listener.tell(_LISTEN)
        if self.graph.notify == "batched":
            self._announcer = await context.spawn(
                lambda: _Announcer(self), name=f"{context.ref.name}.announce"
            )

    async def close(self) -> None:
        """The workers have stopped: run what is still queued here (a claim is answered
        ``None``: nothing is handed out while stopping)."""
        for batch in self._lanes.drain():
            self._lanes.done(batch)
            jobs = _jobs(batch)
            if isinstance(jobs[0].message, Claim):
                for job in jobs:
                    job.reply.succeed(None)
            elif not isinstance(jobs[0].message, ExpireLeases):
                await _run(self, jobs)

    def announce(self) -> None:
        """Unless the transactions announced them (``notify = "commit"``): tell this
        daemon's supervisor at once which types became ready, and the announcer (batched)
        to tell the other daemons."""
        if self.graph.notify == "commit" or self.owner is None:
            return
        types = self.graph.take_ready()
        if not types:
            return
        try:
            self.owner.context.ref.tell(TasksRunnable(types))
            if self._announcer is not None:
                self.to_announce.update(types)
                self._announcer.tell(_ANNOUNCE)
        except ActorStopped:
            return

    # -- requests -----------------------------------------------------------------------

    unflushed = False
    batch_full = False

    async def flush(self) -> None:
        """Nothing to do: a request goes to a worker as it is taken."""

    def request(self, message: Any, reply: Reply) -> None:
        if not isinstance(message, _HANDLED):
            reply.fail(TaskGraphError(f"the supervisor does not handle {type(message).__name__} messages"))
            return
        if isinstance(message, ExpireLeases) and self.owner is not None:
            self.owner.runnable(None)  # a notification may have been missed: try the parked claims
        key: Any = (
            ("claim", message.agent_type) if isinstance(message, Claim)
            else Complete if isinstance(message, Complete)
            else object()
        )  # fmt: skip
        self._lanes.add(reply, message, key)
        self._dispatch()

    def batch_ended(self, batch: Batch[Any]) -> None:
        """``batch``'s transaction is over (its lane may run again)."""
        self._lanes.done(batch)

    def _dispatch(self) -> None:
        """Give each idle worker a batch: the oldest lane's requests (up to ``batch_size``).
        A lane with a transaction in flight is passed over until that one ends, unless a
        full batch waits: its requests gather meanwhile, so one statement and one commit
        serve them all (group commit), where a worker each would have run them one by one."""
        while self._idle and self._lanes:
            batch = self._lanes.take()
            if batch is None:  # what waits gathers behind a transaction in flight
                return
            worker = self._idle.pop()
            try:
                worker.tell(batch)
            except ActorStopped:  # a worker stopped by itself (a bug): its batch goes to another
                self._lanes.put_back(batch)

    def worker_free(self, worker: ActorRef, done: Batch[Any]) -> Batch[Any] | None:
        """Called by a worker that finished ``done``, synchronously (the workers are the
        supervisor's hands, on its event loop, and nothing awaits in between): the next
        batch, so that a busy daemon never waits a mailbox hop between transactions, or
        ``None`` with the worker marked idle (and the others given what became free)."""
        self.batch_ended(done)
        batch = self._lanes.take()
        if batch is None:
            self._idle.append(worker)
        else:
            self._dispatch()  # a key this batch's end freed may have work for an idle one
        return batch

    # -- PostgreSQL away and back -------------------------------------------------------

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


class _GraphWorker(Actor):
    """Runs one batch at a time (one transaction, or one per request where a batch
    cannot be one), on a pool connection in a worker thread, then the next one waiting
    in the store's queue, until none is left."""

    def __init__(self, store: PostgresTaskStore) -> None:
        self.store = store

    async def receive(self, batch: Batch[Any]) -> None:
        next_batch: Batch[Any] | None = batch
        while next_batch is not None:
            done = next_batch
            try:
                await _run(self.store, _jobs(done))  # answers every job, whatever happens
                self.store.announce()
            except BaseException:  # stopping: the key is free for whoever runs the rest
                self.store.batch_ended(done)
                raise
            next_batch = self.store.worker_free(self.context.ref, done)


async def _run(store: PostgresTaskStore, jobs: list[_Job]) -> None:
    """Run and answer ``jobs`` (of one batch key). Whatever is raised, every request still
    waiting is answered: with the error if greenroom's, else with an ``InternalError`` (a
    bug, logged with its traceback); a cancellation answers them ``ActorStopped``."""
    try:
        await _run_jobs(store, jobs)
    except Exception as error:
        logger.exception("supervisor: a batch of %d request(s) failed unexpectedly", len(jobs))
        failure = (
            error
            if isinstance(error, GreenroomError)
            else InternalError(f"the task store failed: {type(error).__name__}: {error}")
        )
        for job in jobs:
            if job.reply.wanted:
                job.reply.fail(failure)
    except BaseException:
        owner = store.owner
        stopped: BaseException = (
            ActorStopped(owner.context.ref, "stopped") if owner is not None else RuntimeError("stopped")
        )
        for job in jobs:
            if job.reply.wanted:
                job.reply.fail(stopped)
        raise


async def _run_jobs(store: PostgresTaskStore, jobs: list[_Job]) -> None:
    first = jobs[0].message
    if isinstance(first, ExpireLeases):
        try:
            expired = await store.db.run(store.graph.expire_leases)
        except DatabaseError as error:
            store.database_failed(error)
            return
        store.database_answered()
        for task in expired:
            logger.warning(lease_report(task), task.id, task.status.value)
        retention = store.retention
        if retention is not None and store.clock() >= store.next_archive_pass:
            store.next_archive_pass = store.clock() + retention.check_every
            await _archive_pass(store, retention)
        for job in jobs:
            job.reply.succeed(None)
    elif isinstance(first, Claim):
        await _claims(store, [job for job in jobs if job.reply.wanted])
    elif isinstance(first, Complete):
        await _completions(store, jobs)
    else:
        for job in jobs:
            timed = not isinstance(job.message, _READS)
            await _answer(store, job.reply, partial(_call, store, job.message), timed=timed)


async def _archive_pass(store: PostgresTaskStore, retention: Retention) -> None:
    """Move what the policy lets go into the archive, a batch per transaction, drop the
    archive's days past ``archive_for``, and the history past ``events_for`` and the
    disk budget (every daemon may run one: rows being moved by another are skipped, and
    partitions change under an advisory lock)."""
    graph, now = store.graph, store.clock()
    try:
        if retention.archives:
            before = now - retention.archive_after if retention.archive_after is not None else -math.inf
            moved = await store.db.run(
                lambda c: graph.archive(c, before, retention.keep_finished, retention.batch)
            )
            store.archived += moved
            if moved:
                logger.info("supervisor: archived %d finished task(s)", moved)
        if retention.archive_for is not None:
            horizon = now - retention.archive_for
            dropped = await store.db.run(lambda c: graph.drop_archive(c, horizon))
            store.archive_dropped += dropped
            if dropped:
                logger.info("supervisor: dropped %d archived task(s) past archive_for", dropped)
        through, dropped = await store.db.run(lambda c: maintain(c, retention, now))
        if through:
            logger.info("supervisor: retention dropped the events through seq %d", through)
        store.archive_dropped += dropped
        if dropped:
            logger.info("supervisor: dropped %d archived task(s) past the disk budget", dropped)
    except DatabaseError as error:  # the next pass tries again
        logger.warning("supervisor: archiving failed: %s", error)


_READS = (GetTask, ListTasks, Dependents, Stats)
"""Requests that change nothing: not counted as writes."""


async def _answer(
    store: PostgresTaskStore, reply: Reply, call: Callable[[], Awaitable[Any]], *, timed: bool = True
) -> None:
    """``reply`` with what ``await call()`` returns, or the refusal it raises; ``timed``:
    counted in ``store.writes`` (a change, not a read)."""
    started = time.perf_counter()
    try:
        value = await call()
    except (InvalidInput, DatabaseError) as error:
        _failed(store, [reply], error)
        return
    store.database_answered()
    if timed:
        store.writes.add(time.perf_counter() - started)
    reply.succeed(value)


def _failed(store: PostgresTaskStore, replies: list[Reply], error: Exception) -> None:
    if isinstance(error, DatabaseError) and not isinstance(error, ConflictError):
        store.database_failed(error)
    else:  # a refusal or a conflict: PostgreSQL answered
        store.database_answered()
    for reply in replies:
        reply.fail(error)


async def _call(store: PostgresTaskStore, message: Any) -> Any:
    """One request other than a claim or a completion, in its own transaction."""
    graph, db, lease = store.graph, store.db, store.lease_seconds
    if isinstance(message, Heartbeat):
        return await db.run(
            lambda c: graph.heartbeat(c, message.task_id, message.agent_id, lease, message.token)
        )
    if isinstance(message, Fail):
        return await db.run(
            lambda c: graph.fail(c, message.task_id, message.agent_id, message.error, message.token)
        )
    if isinstance(message, Release):
        return await db.run(
            lambda c: graph.release(c, message.task_id, message.agent_id, message.attempt, message.token)
        )
    if isinstance(message, Cancel):
        return await db.run(lambda c: graph.cancel(c, message.task_id, message.reason))
    if isinstance(message, Park):
        return await db.run(
            lambda c: graph.park(c, message.task_id, message.agent_id, message.call, message.token)
        )
    if isinstance(message, Decide):
        return await db.run(lambda c: graph.decide(c, message))
    if isinstance(message, Retry):
        return await db.run(lambda c: graph.retry(c, message))
    if isinstance(message, Submit):
        return await db.run(lambda c: graph.submit(c, message.tasks))
    if isinstance(message, GetTask):
        return await db.run(lambda c: graph.get(c, message.task_id))
    if isinstance(message, Dependents):
        return await db.run(lambda c: graph.dependents(c, message.task_id))
    if isinstance(message, ListTasks):
        return await db.run(lambda c: graph.list_tasks(c, message))
    stats = await db.run(graph.stats)
    return msgspec.structs.replace(
        stats,
        writes=store.writes.figures(),
        archived_here=store.archived,
        archive_dropped_here=store.archive_dropped,
    )


async def _batch(
    store: PostgresTaskStore,
    jobs: list[_Job],
    statement: Callable[[Any], list[T]],
    one_by_one: Callable[[PostgresTaskStore, list[_Job]], Awaitable[None]],
) -> list[T] | None:
    """``statement`` (one statement for all ``jobs``), or ``None`` once the jobs are
    answered otherwise: after a conflict (a deadlock with another node's batch) or a value
    PostgreSQL refused, each runs alone through ``one_by_one``, so it fails one request
    only; after any other failure all fail (their askers retry)."""
    started = time.perf_counter()
    try:
        result = await store.db.run(statement, single=True)
    except (ConflictError, DataRefused) as error:
        if len(jobs) > 1:
            for job in jobs:
                await one_by_one(store, [job])
        else:
            _failed(store, [jobs[0].reply], error)
        return None
    except (InvalidInput, DatabaseError) as error:
        _failed(store, [job.reply for job in jobs], error)
        return None
    store.database_answered()
    store.writes.add(time.perf_counter() - started)
    return result


async def _claims(store: PostgresTaskStore, jobs: list[_Job]) -> None:
    """Claims of one type in one statement; each answered with its task or ``None``."""
    if not jobs:
        return
    graph, lease = store.graph, store.lease_seconds
    claims: list[Claim] = [job.message for job in jobs]
    agents = [claim.agent_id for claim in claims]
    tasks = await _batch(
        store, jobs, lambda c: graph.claim_many(c, agents, claims[0].agent_type, lease), _claims
    )
    if tasks is None:
        return
    for job, task in zip(jobs, tasks, strict=True):
        job.reply.succeed(task)


async def _completions(store: PostgresTaskStore, jobs: list[_Job]) -> None:
    """The usual completions in one statement; one that changed nothing (not the owner,
    too large a result) goes through the full path, which says why."""
    graph = store.graph
    completes: list[Complete] = [job.message for job in jobs]
    items = [(m.task_id, m.agent_id, m.result, m.token) for m in completes]
    done = await _batch(store, jobs, lambda c: graph.complete_many(c, items), _completions)
    if done is None:
        return
    for job, message, task in zip(jobs, completes, done, strict=True):
        if task is not None:
            job.reply.succeed(task)
            continue
        fallback = partial(_complete_alone, graph, message)
        await _answer(store, job.reply, partial(store.db.run, fallback))


def _complete_alone(graph: PostgresGraph, message: Complete, connection: Any) -> Any:
    """A completion the batch left unchanged, in a transaction of its own (it says why)."""
    return graph.complete(
        connection, message.task_id, message.agent_id, message.result, at_once=False, token=message.token
    )


class _Announcer(Actor):
    """``notify = "batched"``: sends the types that became ready as ``NOTIFY`` in a
    transaction of its own, all that gathered since the last one, at most one every 20 ms
    (the commits that made them ready never wait on the notification queue's lock)."""

    def __init__(self, store: PostgresTaskStore) -> None:
        self.store = store

    async def receive(self, message: Any) -> None:
        store = self.store
        types, store.to_announce = sorted(store.to_announce), set()
        if not types:
            return  # sent with an earlier message's
        try:
            await store.db.run(lambda c: [c.execute("SELECT pg_notify(%s, %s)", (CHANNEL, t)) for t in types])
        except DatabaseError as error:  # the others find them at their next lease check
            logger.warning("supervisor: could not announce ready tasks: %s", error)
        await anyio.sleep(0.02)  # pacing: what becomes ready meanwhile goes in the next one


_ANNOUNCE = object()


class _Listener(Actor):
    """Waits for ``NOTIFY greenroom_runnable`` on a connection of its own (in a worker
    thread, up to a second at a time) and tells the supervisor which types became ready as
    soon as a notification arrives."""

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
            # a claim parked before this connection listened may have missed what was
            # announced meanwhile: every parked claim looks once more, now
            return {_ANY}
        # back as soon as a packet of notifications arrives (up to a second without one):
        # gathering them for the whole second kept a parked claim waiting up to a second
        return {notice.payload for notice in self.connection.notifies(timeout=1.0, stop_after=1)}

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
            try:
                self.supervisor.tell(TasksRunnable(None))  # a notification may have been missed
            except ActorStopped:
                return
            await anyio.sleep(1.0)
            types = set()
        try:
            if _ANY in types:
                self.supervisor.tell(TasksRunnable(None))
            elif types:
                self.supervisor.tell(TasksRunnable(frozenset(types)))
            self.context.ref.tell(_LISTEN)
        except ActorStopped:
            return  # stopping: no more waiting
