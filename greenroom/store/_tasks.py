"""``TaskStore``: where the task graph is kept, behind the one supervisor actor.

The supervisor actor (``greenroom.supervisor.SupervisorActor``) speaks the protocol —
asks and tells, claims parked until work of their type exists, grants handed back when
their asker gave up, ``StopGranting``, lease checks on a timer — and hands every request
to its ``TaskStore``, which decides how it is made durable: the embedded store applies it
to the graph in memory and writes a batch of them with one ``fsync``; the PostgreSQL store
runs it as a transaction on a pool, several at once. Either way a request is answered only
once what it changed is durable, and a refused one changes nothing.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Protocol, runtime_checkable

import msgspec

from ..actors import ActorContext
from ..messages import TaskLimits


class ExpireLeases(msgspec.Struct, frozen=True):
    """From the supervisor's lease timer to its store: end the attempts whose lease ran out
    (PENDING again while attempts remain). The store logs what it reclaimed."""


class TasksRunnable(msgspec.Struct, frozen=True):
    """To the supervisor (from its store's helpers, such as a listener for another node's
    news): tasks of ``types`` may have become ready (``None``: of any type); parked claims
    of those types are tried again."""

    types: frozenset[str] | None = None


@runtime_checkable
class Reply(Protocol):
    """What a store answers a request through: exactly once, with its value or its refusal.
    ``wanted`` is false once the asker stopped waiting (a store may skip the work then)."""

    @property
    def wanted(self) -> bool: ...

    def succeed(self, value: Any) -> None: ...

    def fail(self, error: BaseException) -> None: ...


class GraphOwner(Protocol):
    """What a store may use of the actor that drives it."""

    @property
    def context(self) -> ActorContext:
        """The actor's context: a store may spawn helpers as its children (they stop
        before the store is closed) and tell the actor messages such as
        :class:`TasksRunnable`."""
        ...

    def runnable(self, types: Collection[str] | None) -> None:
        """Tasks of ``types`` became ready (``None``: maybe of any type): the parked claims
        of those types are tried again, at once, on the actor's own task."""
        ...


@runtime_checkable
class TaskStore(Protocol):
    """The task graph's storage. One actor drives it, from its own task; nothing here
    is called concurrently except the answers a store's own helpers give.

    Requests are the supervisor's messages (``Submit``, ``Claim``, ``Heartbeat``,
    ``Complete``, ``Fail``, ``Release``, ``Cancel``, ``GetTask``, ``ListTasks``,
    ``Stats``), :class:`ExpireLeases`, and any message the store's own helpers send the
    actor; a store refuses what it does not know with a ``TaskGraphError``. A ``Claim``
    is answered with the granted ``AgentTask`` or ``None`` (nothing of that type is
    ready): the actor turns that into ``Granted``, a parked claim or ``NoWork``.
    """

    lease_seconds: float
    limits: TaskLimits

    async def open(self, owner: GraphOwner) -> None:
        """Load or connect, recover what a dead process left running, start helpers.
        Raises ``DataError`` (a damaged or busy store) and leaves nothing half-open."""
        ...

    def request(self, message: Any, reply: Reply) -> None:
        """Take one request; answer ``reply`` once its change is durable (or at once with
        its refusal, or with ``None`` for a claim that found nothing)."""
        ...

    @property
    def unflushed(self) -> bool:
        """Requests are taken that only :meth:`flush` makes durable and answers."""
        ...

    @property
    def batch_full(self) -> bool:
        """Enough is waiting that :meth:`flush` should not wait for the mailbox to drain."""
        ...

    async def flush(self) -> None:
        """The actor's mailbox is drained (or the batch is full): make what was taken
        durable and answer it. Requests taken meanwhile wait for the next flush."""
        ...

    async def close(self) -> None:
        """At the actor's stop, its helpers stopped: answer everything taken (a claim with
        ``None``: nothing is handed out while stopping), then release what was held."""
        ...
