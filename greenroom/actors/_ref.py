"""``ActorRef``: the only handle anyone holds on an actor.

Messages sent before ``stop()`` are handled, in order; messages sent after it fail at
once with ``ActorStopped`` and are counted as dead letters. ``stop(now=True)``
interrupts the message being handled (interruptible actors) and drops the queued ones
as dead letters, their asks failing with ``ActorStopped``. A ref stays valid (and
hashable) after its actor has stopped; it just refuses messages.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING, Any, TypeVar, final, overload

import anyio
from anyio.lowlevel import checkpoint

from .. import _tracing
from .._errors import InvalidInput
from .._guard import NoPublicConstructor
from .._request import Request
from ._defaults import DEFAULT_ASK_TIMEOUT
from ._exceptions import MailboxFull
from ._mailbox import RELEASED
from ._reply import InterruptingReply, Reply
from ._statistics import ActorStatistics

if TYPE_CHECKING:
    from ._cell import ActorCell
    from ._system import ActorSystem

R = TypeVar("R")


@final
class ActorRef(metaclass=NoPublicConstructor):
    __slots__ = ("__weakref__", "_cell")
    _made_by = "system.spawn() returns one, and actor.context.ref is an actor's own"

    def __init__(self, cell: ActorCell) -> None:
        self._cell = cell

    @property
    def name(self) -> str:
        return self._cell.name

    @property
    def system(self) -> ActorSystem:
        """The system this actor lives in (to spawn peers next to it)."""
        return self._cell.system

    @property
    def is_alive(self) -> bool:
        """``True`` until the actor has stopped (it may already refuse messages)."""
        return not self._cell.dead

    @property
    def queued(self) -> int:
        """Messages waiting in the mailbox now: a gauge for status pages (it changes as
        soon as it is read; never a basis for a decision)."""
        return len(self._cell.mailbox)

    def trim(self) -> bool:
        """Give back an idle actor's mailbox buffer (~0.7 KB) until its next message: for
        an owner of many actors that sit idle (the entity host trims the entities no
        message reached since its last sweep). ``False`` (nothing done) unless the actor
        is alive and idle. Nothing changes for senders."""
        return self._cell.trim()

    @property
    def idle(self) -> bool:
        """``True`` while the actor handles no message and has none queued (alive or not):
        what an owner checks before stopping an actor it would otherwise interrupt."""
        cell = self._cell
        return not cell.mailbox and cell.runner is None

    def statistics(self) -> ActorStatistics:
        """Its mailbox depth and bound, waiting senders, restarts and dead letters, now
        (a snapshot; valid after the actor stopped too)."""
        cell = self._cell
        return ActorStatistics(
            name=cell.name,
            alive=not cell.dead,
            mailbox_depth=len(cell.mailbox),
            mailbox_limit=cell.limit,
            senders_waiting=len(cell.send_waiters) if cell.send_waiters else 0,
            restarts=cell.restart_count,
            dead_letters=cell.dead_letter_count,
            children=len(cell.children) if cell.children else 0,
        )

    def tell(self, message: Any) -> None:
        """Enqueue ``message`` and return at once; never blocks, never yields.

        Raises ``MailboxFull`` if the bounded mailbox has no room (nothing enqueued) and
        ``ActorStopped`` once the actor is stopping (the message becomes a dead letter).
        A failure while handling it goes to the actor's supervisor and the log.
        """
        cell = self._cell
        if not cell.accepting:
            raise cell.refuse(message)
        limit = cell.limit
        if limit is not None and (len(cell.mailbox) + cell.reserved >= limit or cell.send_waiters):
            raise MailboxFull(self, limit)
        box = cell.mailbox
        if box is RELEASED:
            box = cell.mailbox = deque()
        box.append((_tracing.wrap(message) if _tracing.enabled else message, None))
        if not cell.scheduled:
            cell.system._dispatcher.schedule(cell)

    async def send(self, message: Any) -> None:
        """Enqueue ``message``, waiting for room in a full mailbox (backpressure).

        Always a checkpoint (as every anyio and trio async call is): it yields to the
        event loop even when there is room, so ``while True: await ref.send(x)`` lets
        others run; a cancellation delivered there means nothing was sent. Use ``tell``
        for the never-yielding send. Senders waiting for room are admitted in arrival
        order; on cancellation while waiting, the message is withdrawn and never
        delivered. Raises ``ActorStopped`` if the actor stops before room was found.
        Does not wait for the message to be handled.
        """
        await checkpoint()
        cell = self._cell
        if not cell.accepting:
            raise cell.refuse(message)
        limit = cell.limit
        if limit is not None and (len(cell.mailbox) + cell.reserved >= limit or cell.send_waiters):
            await cell.wait_for_room(message, math.inf)
        box = cell.mailbox
        if box is RELEASED:
            box = cell.mailbox = deque()
        box.append((_tracing.wrap(message) if _tracing.enabled else message, None))
        if not cell.scheduled:
            cell.system._dispatcher.schedule(cell)

    @overload
    async def ask(self, message: Request[R], timeout: float | None = ..., *, interrupt: bool = ...) -> R: ...

    @overload
    async def ask(self, message: Any, timeout: float | None = ..., *, interrupt: bool = ...) -> Any: ...

    async def ask(
        self, message: Any, timeout: float | None = DEFAULT_ASK_TIMEOUT, *, interrupt: bool = True
    ) -> Any:
        """Send ``message`` and wait for the value the actor's ``receive`` returns (typed
        ``R`` for a message that is a ``Request[R]``).

        Raises the exception ``receive`` raised for this message; ``AskTimeout`` (a
        ``TimeoutError``) after ``timeout`` seconds (``None``: wait as long as it
        takes), counting any wait for mailbox room; ``ActorStopped`` if the actor is
        stopping or stops before handling it; ``Interrupted`` if its handling was
        interrupted by someone else (``interrupt()``, ``stop(now=True)``), unless the
        actor's ``on_interrupted`` answers instead.

        Giving up — the timeout passing, or this task being cancelled — works by the
        actor's kind. An interruptible actor (``interrupt=True``, the default) has the
        message's handling interrupted as well, or never starts it if it is still
        queued: no work runs on for an asker that left. Otherwise the message stays
        accepted: the actor still handles it and the reply is dropped (a value filled
        in after the cancellation but before this task resumed goes to the replier's
        ``if_lost``, see ``PendingReply.succeed``). An actor asking itself would
        deadlock, so that raises ``RuntimeError`` at once.
        """
        cell = self._cell
        if timeout is not None and not (timeout > 0):
            raise InvalidInput(
                f"ask timeout must be a positive number of seconds or None, got {timeout!r}",
                field="timeout",
                value=timeout,
            )
        if not cell.accepting:
            raise cell.refuse(message)
        if cell.runner is not None:
            cell.check_not_self_ask()
        system = cell.system
        if interrupt and cell.interruption is not None:
            reply: Reply = InterruptingReply(system._event_class(), cell)
        else:
            reply = Reply(system._event_class())
        limit = cell.limit
        deadline = math.inf if timeout is None else system._clock() + timeout
        if limit is not None and (len(cell.mailbox) + cell.reserved >= limit or cell.send_waiters):
            await cell.wait_for_room(message, deadline, timeout)
        if timeout is not None:
            reply.ref = self
            reply.message = message
            reply.timeout = timeout
            reply.timers = timers = system._timers
            timers.add(deadline, reply)
        box = cell.mailbox
        if box is RELEASED:
            box = cell.mailbox = deque()
        box.append((_tracing.wrap(message) if _tracing.enabled else message, reply))
        if not cell.scheduled:
            system._dispatcher.schedule(cell)
        try:
            await reply.event.wait()
        except anyio.get_cancelled_exc_class():
            if not reply.done:
                reply.abandon()
            elif reply.error is None:
                reply.lost()  # filled, but this task was cancelled before it could take it
            raise
        if reply.error is not None:
            raise reply.error
        return reply.value

    def interrupt(self) -> bool:
        """Cut short the message the actor is handling now; return at once.

        Only for an interruptible actor (``TypeError`` otherwise). The message's handling
        is cancelled at its next checkpoint; its asker gets what the actor's
        ``on_interrupted`` answers (by default ``Interrupted``); the actor stays alive
        and takes the next message. Queued messages are not touched. Returns ``True``
        if a message was being handled, ``False`` if the actor was idle or stopped (then
        nothing happens: an interrupt is never kept for a later message).
        """
        cell = self._cell
        if cell.interruption is None:
            raise TypeError(
                f"actor {cell.name!r} is not interruptible (set interruptible = True on its class)"
            )
        return cell.interrupt()

    async def stop(self, *, now: bool = False) -> None:
        """Stop the actor, then its children, then ``on_stop``; return when it has stopped.

        By default the actor first handles every message accepted before this call.
        With ``now=True`` it does not: the message being handled is interrupted (if the
        actor is interruptible; otherwise it is finished), the queued ones become dead
        letters and their asks fail with ``ActorStopped``.

        Idempotent (a later ``now=True`` still cuts a draining stop short). Messages sent
        after this call fail with ``ActorStopped``. The stop is requested before the
        first checkpoint: if the caller is cancelled, the stop still happens; only the
        wait is abandoned. Called by the actor on its own ref, it returns at once (the
        actor stops once the current message is done).
        """
        cell = self._cell
        cell.stop_soon(now=now)
        if not cell.dead and not cell.is_current_task():
            await cell.wait_dead()

    def __repr__(self) -> str:
        return f"<ActorRef {self._cell.name!r}{'' if self.is_alive else ' (stopped)'}>"
