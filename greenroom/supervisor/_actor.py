"""``SupervisorActor``: owns the task graph and grants claims by message, on any store.

Messages (``greenroom.messages``): ``Submit``, ``Claim``, ``Heartbeat``, ``Complete``,
``Fail``, ``Release``, ``Cancel``, ``GetTask``, ``ListTasks``, ``Stats``,
``StopGranting``. Ask them; a refused request raises a :class:`TaskGraphError` in the
asker and changes nothing. The actor speaks the protocol; its :class:`TaskStore` (files
under a data dir, or PostgreSQL) keeps the graph and answers each request once what it
changed is durable. What the protocol adds, the same on every store:

- A ``Claim`` must be asked. One that finds nothing and may ``wait`` is parked until work
  of its type becomes ready (the store says so), then tried again; ``NoWork`` otherwise.
- A grant whose asker stopped waiting before it was durable, or was cancelled as it
  arrived, is handed back at once (PENDING, the attempt refunded), not left to its lease.
- An agent's ``Complete`` / ``Fail`` is bounded first (``greenroom.store.bound_report``):
  an oversized result fails its attempt and says why.
- Every ``lease_check_interval`` seconds the store ends the attempts whose lease ran out.
- ``StopGranting``: from then on claims get ``NoWork(closing=True)``, parked ones too.

Messages sent before ``stop()`` are answered (the store finishes what it took; a claim
still waiting gets ``NoWork(closing=True)``); claims parked waiting for work get
``ActorStopped``; messages sent after are refused by the kernel. If the store fails (a
write the disk refused), the actor fails: its supervisor's restart opens the store again
from what is durable.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Collection
from typing import Any

import msgspec

from .._checks import check_seconds
from ..actors import Actor, ActorStopped, MailboxFull, PendingReply
from ..messages import (
    AgentTask,
    AwaitChange,
    Claim,
    Complete,
    Dependents,
    Fail,
    GetTask,
    Granted,
    GraphStats,
    Heartbeat,
    ListTasks,
    NoWork,
    Release,
    Retry,
    Stats,
    StopGranting,
    TaskStatus,
)
from ..store import ExpireLeases, TasksRunnable, TaskStore, bound_report

logger = logging.getLogger("greenroom.supervisor")


class _CheckLeases:
    __slots__ = ()


_CHECK_LEASES = _CheckLeases()

_UNCHANGING = frozenset({GetTask, ListTasks, Dependents, Heartbeat})
"""Requests that move the graph neither towards idle nor away from it (a dry-run ``Retry``
neither): not changes for ``AwaitChange``."""


class _GrantLost(msgspec.Struct, frozen=True):
    """Told to itself: this grant reached its asker's slot, but the asker was cancelled
    before taking it (see ``PendingReply.succeed``'s ``if_lost``)."""

    task_id: str
    owner: str
    attempt: int


class _Told:
    """The reply of a told request: nothing to answer; a refusal is logged (``level``)."""

    __slots__ = ("kind", "level")

    def __init__(self, kind: str, level: int = logging.WARNING) -> None:
        self.kind = kind
        self.level = level

    @property
    def wanted(self) -> bool:
        return True

    def succeed(self, value: Any) -> None:
        pass

    def fail(self, error: BaseException) -> None:
        logger.log(self.level, "supervisor: refused a told %s: %s", self.kind, error)


class _Changed:
    """A reply passed on as it is; answered, it counts as a change of the graph (what
    ``AwaitChange`` waits for): the store has made it durable, so a ``Stats`` asked from
    now on sees it."""

    __slots__ = ("inner", "owner")

    def __init__(self, owner: SupervisorActor, inner: Any) -> None:
        self.owner = owner
        self.inner = inner

    @property
    def wanted(self) -> bool:
        return bool(getattr(self.inner, "wanted", True))

    def succeed(self, value: Any) -> None:
        self.inner.succeed(value)
        self.owner._changed()

    def fail(self, error: BaseException) -> None:
        self.inner.fail(error)


class _Counted:
    """A reply passed on as it is, counting in its supervisor what it answers: a
    completion (``completed``), a failed attempt (``failures``), or the ``Stats`` answer
    given those counts (and ``changes``: the count of changes when it was asked)."""

    __slots__ = ("changes", "failure", "inner", "owner")

    def __init__(self, owner: SupervisorActor, inner: Any, *, failure: bool = False) -> None:
        self.owner = owner
        self.inner = inner
        self.failure = failure
        self.changes = owner.changes

    @property
    def wanted(self) -> bool:
        return bool(getattr(self.inner, "wanted", True))

    def succeed(self, value: Any) -> None:
        owner = self.owner
        if isinstance(value, GraphStats):
            value = msgspec.structs.replace(
                value,
                completed_here=owner.completed,
                granted_here=owner.granted,
                failures_here=owner.failures,
                changes=self.changes,
            )
        elif self.failure:
            owner.failures += 1
        elif isinstance(value, AgentTask) and value.status is TaskStatus.COMPLETED:
            owner.completed += 1
        self.inner.succeed(value)

    def fail(self, error: BaseException) -> None:
        self.inner.fail(error)


class _ClaimReply:
    """A claim's answer from the store (the task, or ``None``) made into the protocol's:
    ``Granted`` (handed back if its asker gave up), a parked claim, or ``NoWork``."""

    __slots__ = ("claim", "found_nothing", "owner", "pending", "seen", "sweeping")

    def __init__(self, owner: SupervisorActor, pending: PendingReply, claim: Claim) -> None:
        self.owner = owner
        self.pending = pending
        self.claim = claim
        self.seen = owner.notified
        """The owner's count of "tasks became ready" when this claim went to the store."""
        self.sweeping = False
        """Tried again from the parked ones: a ``None`` now puts it back in its place."""
        self.found_nothing = False

    @property
    def wanted(self) -> bool:
        return self.pending.wanted

    def succeed(self, task: AgentTask | None) -> None:
        owner, pending = self.owner, self.pending
        if task is not None:
            if pending.wanted:
                owner.granted += 1
                pending.succeed(Granted(task), if_lost=owner._hand_back_later(task))
            else:  # the asker gave up while the grant was made durable
                owner._hand_back(task)
            return
        if self.sweeping:
            self.found_nothing = True
        elif owner.closing:
            pending.succeed(NoWork(closing=True))
        elif self.claim.wait and pending.wanted:
            if owner.notified != self.seen:  # work became ready while the store looked: look again
                self.seen = owner.notified
                owner.store.request(self.claim, self)
                return
            owner._park(self)
        else:
            pending.succeed(NoWork())
            owner._changed()  # its agent found no work: its host may be idle

    def fail(self, error: BaseException) -> None:
        self.pending.fail(error)


class SupervisorActor(Actor):
    """The task graph's one owner: the protocol, over ``store`` (a :class:`TaskStore`;
    the daemon gets one from its backend, ``Store.task_store(...)``).

    ``lease_check_interval``: how often expired leases are looked for (default: a quarter
    of the store's ``lease_seconds``, between 0.05 and 5 seconds).
    """

    def __init__(self, store: TaskStore, *, lease_check_interval: float | None = None) -> None:
        if not isinstance(store, TaskStore):
            raise TypeError(f"SupervisorActor store must be a TaskStore, got {store!r}")
        self.store = store
        self.limits = store.limits
        lease = store.lease_seconds
        if lease_check_interval is None:
            lease_check_interval = min(max(lease / 4, 0.05), 5.0)
        self.lease_check_interval = check_seconds(
            "SupervisorActor", "lease_check_interval", lease_check_interval
        )
        self.closing = False
        self.completed = 0
        self.granted = 0
        """Claims granted through this actor since it started (``GraphStats.granted_here``)."""
        self.failures = 0
        """Failed attempts reported to it since it started (``GraphStats.failures_here``)."""
        """Tasks completed through this actor since it started (``GraphStats.completed_here``)."""
        self._parked: dict[str, deque[_ClaimReply]] = {}
        self.notified = 0
        """How many times tasks were said to become ready: a claim the store answered "none"
        after one (its query may have run before that work committed) is tried again
        instead of parked — a store that answers later would otherwise lose the wake-up."""
        self.changes = 0
        """Changes of the graph seen by this actor (``GraphStats.changes``, ``AwaitChange``)."""
        self._awaiting: list[PendingReply] = []

    # -- lifecycle --------------------------------------------------------------------

    async def on_start(self) -> None:
        await self.store.open(self)
        self.context.schedule_repeatedly(self.lease_check_interval, _CHECK_LEASES)

    async def on_stop(self) -> None:
        self.closing = True  # a claim the store still answers gets NoWork(closing=True)
        try:
            await self.store.close()
        finally:
            stopped = ActorStopped(self.context.ref, "stopped while the claim was waiting for work")
            parked, self._parked = self._parked, {}
            for waiting in parked.values():
                for reply in waiting:
                    reply.pending.fail(stopped)
            awaiting, self._awaiting = self._awaiting, []
            for pending in awaiting:
                pending.fail(ActorStopped(self.context.ref, "stopped while a change was awaited"))

    # -- messages ---------------------------------------------------------------------

    async def receive(self, message: Any) -> Any:
        context = self.context
        store = self.store
        kind = type(message)
        if kind is Claim:
            self._claim(message, context.reply_later())
        elif kind is Complete or kind is Fail:
            pending = context.reply_later()
            reply: Any = pending or _Told(kind.__name__)
            report = bound_report(message, self.limits)  # (an oversized result is a failed attempt)
            store.request(report, _Changed(self, _Counted(self, reply, failure=type(report) is Fail)))
        elif message is _CHECK_LEASES:
            store.request(ExpireLeases(), _Changed(self, _Told("lease check")))
        elif kind is TasksRunnable:
            self.runnable(message.types)
            self._changed()  # another daemon's work made these ready
        elif kind is _GrantLost:
            release = Release(message.task_id, message.owner, attempt=message.attempt)
            # refused only if the attempt ended meanwhile (its lease, a cancel): nothing to hand back
            store.request(release, _Changed(self, _Told("hand-back of a lost grant", logging.INFO)))
        elif kind is AwaitChange:
            self._await_change(message.after, context.reply_later())
        elif kind is StopGranting:
            self._stop_granting()
        elif kind is Stats:
            store.request(message, _Counted(self, context.reply_later() or _Told("Stats")))
        else:
            reply = context.reply_later() or _Told(kind.__name__)
            if not (kind in _UNCHANGING or (kind is Retry and message.dry_run)):
                reply = _Changed(self, reply)
            store.request(message, reply)
        if context.queued == 0 or store.batch_full:
            await store.flush()
            while store.unflushed and context.queued == 0:  # taken while answering: hand-backs
                await store.flush()
        return None

    def _claim(self, claim: Claim, pending: PendingReply | None) -> None:
        if pending is None:  # a grant nobody hears would sit IN_PROGRESS until its lease ran out
            logger.warning(
                "supervisor: refused a told Claim: a Claim must be asked, not told (agent %r)", claim.agent_id
            )
            return
        if self.closing:
            pending.succeed(NoWork(closing=True))
            return
        self.store.request(claim, _ClaimReply(self, pending, claim))

    def _stop_granting(self) -> None:
        self.closing = True
        parked, self._parked = self._parked, {}
        for waiting in parked.values():
            for reply in waiting:
                reply.pending.succeed(NoWork(closing=True))

    # -- parked claims ----------------------------------------------------------------

    def _park(self, reply: _ClaimReply) -> None:
        parked = self._parked.setdefault(reply.claim.agent_type, deque())
        if len(parked) >= 64 and not parked[0].wanted:  # askers that gave up leave the line
            parked = self._parked[reply.claim.agent_type] = deque(r for r in parked if r.wanted)
        parked.append(reply)
        self._changed()  # an agent waits for work: its host may be idle

    # -- changes ----------------------------------------------------------------------

    def _changed(self) -> None:
        self.changes += 1
        awaiting, self._awaiting = self._awaiting, []
        for pending in awaiting:
            pending.succeed(self.changes)

    def _await_change(self, after: int, pending: PendingReply | None) -> None:
        if pending is None:
            return  # told, not asked: nobody to wake
        if self.changes > after:
            pending.succeed(self.changes)
        else:
            if len(self._awaiting) >= 64:  # askers that gave up leave the line
                self._awaiting = [waiting for waiting in self._awaiting if waiting.wanted]
            self._awaiting.append(pending)

    def runnable(self, types: Collection[str] | None) -> None:
        """Tasks of ``types`` (``None``: of any type) may be ready: the parked claims of
        those types are tried again, oldest first. A store that answers a claim at once
        stops a type's sweep at the first that finds nothing (the rest keep their places);
        one that answers later gets them all, and parks again what finds nothing."""
        self.notified += 1
        if self.closing or not self._parked:
            return
        wanted = list(self._parked) if types is None else [t for t in types if t in self._parked]
        for agent_type in wanted:
            waiting = self._parked.pop(agent_type, None)
            while waiting:
                reply = waiting.popleft()
                if not reply.wanted:
                    continue
                reply.sweeping = True
                reply.found_nothing = False
                self.store.request(reply.claim, reply)
                reply.sweeping = False
                if reply.found_nothing:  # nothing more of this type now: back in its place
                    waiting.appendleft(reply)
                    break
            if waiting:
                again = self._parked.pop(agent_type, None)
                if again:
                    waiting.extend(again)
                self._parked[agent_type] = waiting

    # -- grants handed back -------------------------------------------------------------

    def _hand_back(self, task: AgentTask) -> None:
        assert task.owner is not None
        logger.info("supervisor: %r was granted to %r, who stopped waiting; handed back", task.id, task.owner)
        self.store.request(
            Release(task.id, task.owner, attempt=task.attempt),
            _Told("hand-back of an unwanted grant", logging.INFO),
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
