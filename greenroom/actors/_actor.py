"""``Actor``: the class users subclass, and ``ActorContext``: its view of the kernel."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar, final

from .._errors import InvalidInput
from .._guard import NoPublicConstructor
from ._defaults import DEFAULT_MAILBOX_SIZE
from ._exceptions import Interrupted
from ._reply import PendingReply, pending_reply
from ._supervision import SupervisorStrategy

if TYPE_CHECKING:
    from ._cell import ActorCell
    from ._ref import ActorRef
    from ._system import ActorSystem
    from ._timers import Timer


class Actor:
    """An actor: private state plus ``receive``, called for one message at a time.

    Messages from one sender are handled in the order they were sent. The value
    ``receive`` returns answers an ``ask``; an exception it raises goes to the asker
    (if any) and to the parent's :class:`SupervisorStrategy`, and is logged.

    Lifecycle: ``on_start`` runs before the first message (``spawn`` waits for it and
    re-raises its error); ``on_stop`` runs once the actor stops, after its children
    have stopped. On restart the failed instance gets ``on_stop``, the new one
    ``on_start``. ``on_stop_requested`` is told, synchronously, when a stop is first
    requested, even mid-``receive``. ``self.context`` is available from ``on_start`` on,
    not in ``__init__``.

    Set ``supervisor_strategy`` on a parent class to decide for its children.

    Set ``interruptible = True`` on a class whose ``receive`` does long, cancellable
    work (a model call, a tool call): each message is then handled in a cancel scope
    the kernel can cancel. ``ref.interrupt()`` cuts the current message short;
    ``ref.stop(now=True)`` does too, then drops what is queued; an asker that gives up
    (its ask timed out, or it was cancelled) interrupts the message it asked about, and
    a queued ask whose asker gave up is never started. An interrupted message answers
    its asker with what ``on_interrupted`` returns (by default it raises
    :class:`Interrupted`); it is not a failure. Actors that do not opt in pay nothing.
    """

    supervisor_strategy: ClassVar[SupervisorStrategy | None] = None
    interruptible: ClassVar[bool] = False
    _greenroom_cell: ActorCell | None = None
    _greenroom_context: ActorContext | None = None

    async def on_start(self) -> None:
        """Called once before the first message of this instance."""

    async def on_stop(self) -> None:
        """Called once when this instance is done (stop, failure, restart, shutdown)."""

    def on_stop_requested(self) -> None:
        """Called once, synchronously, in the stopper's task, when this actor is first
        asked to stop (``ref.stop()``, ``context.stop()``, its parent or the system
        stopping; not when a failure stops it) — possibly while ``receive`` is busy.
        Default: nothing.

        Override it to cut short a wait inside ``receive`` that would hold the stop up
        (cancel a ``CancelScope`` the wait runs in). It must not block or await; an
        exception is logged and ignored. The stop itself goes on as requested: what a
        draining stop accepted is still handled, new messages are refused.
        """

    def on_interrupted(self, message: Any) -> Any:
        """Called (interruptible actors only), synchronously, once the handling of
        ``message`` was interrupted; what it returns answers the ask, what it raises
        fails it (nothing reaches the supervisor). Default: raise :class:`Interrupted`.

        Override it to answer with what was done before the interruption (the harness
        answers a phase cut short by an immediate stop with its ``stop_requested``
        result). It must not await.
        """
        raise Interrupted(self.context.ref, message)

    async def receive(self, message: Any) -> Any:
        """Handle one message; the return value answers an ``ask``."""
        raise TypeError(f"{type(self).__name__} does not handle {type(message).__name__} messages")

    receive_many: Callable[[list[tuple[Any, PendingReply | None]]], Awaitable[None]] | None = None
    """Opt in to batch delivery: define ``async def receive_many(self, deliveries)`` on a
    subclass and the kernel hands it every message ready in the mailbox at once (up to the
    system's ``throughput``), in order, instead of calling ``receive`` for each.

    ``deliveries`` is a list of ``(message, reply)``: ``reply`` is a :class:`PendingReply`
    for an asked message — answer each one, now or later, as with
    ``context.reply_later()`` — and ``None`` for a told one. ``context.queued`` is what
    arrived since the batch was taken. If ``receive_many`` raises, every reply of the batch
    not yet answered fails with that exception and the parent's strategy decides, once,
    as for a failed ``receive``. Kernel signals (stop, watch) are handled between batches,
    so messages sent before ``stop()`` are all delivered, as with ``receive``; messages
    sent after it are refused. Not for an interruptible actor (it handles one message at
    a time, each in its own cancel scope): spawning one that defines both is a ``TypeError``.
    """

    @property
    def context(self) -> ActorContext:
        cell = self._greenroom_cell
        if cell is None:
            raise RuntimeError(
                f"{type(self).__name__}.context is available from on_start on, "
                "once the actor has been spawned, not in __init__"
            )
        context = self._greenroom_context
        if context is None or context._cell is not cell:
            context = self._greenroom_context = ActorContext._create(cell)
        return context


@final
class ActorContext(metaclass=NoPublicConstructor):
    """What an actor may do to the kernel: its own ref, children, watches, timers, stop."""

    __slots__ = ("_cell",)
    _made_by = "an actor has its own, as self.context (from on_start on)"

    def __init__(self, cell: ActorCell) -> None:
        self._cell = cell

    @property
    def ref(self) -> ActorRef:
        """This actor's own ref."""
        return self._cell.ref

    @property
    def system(self) -> ActorSystem:
        return self._cell.system

    @property
    def parent(self) -> ActorRef | None:
        """The parent's ref, or ``None`` for a top-level actor."""
        parent = self._cell.parent
        return parent.ref if parent is not None else None

    @property
    def children(self) -> list[ActorRef]:
        children = self._cell.children
        return [child.ref for child in children] if children else []

    @property
    def failure(self) -> BaseException | None:
        """In ``on_stop``: the error this instance is stopped for — a failure that restarts
        it (the next instance starts clean) or stops it for good — or ``None`` for a
        requested stop. An instance whose changes should not outlive a failure (an entity
        saving its state) checks it."""
        return self._cell.failure

    @property
    def queued(self) -> int:
        """How many messages (and kernel signals) wait in this actor's mailbox now.

        ``0`` inside ``receive`` means this is the last message of the batch at hand:
        the moment for an actor that batches work (group commit) to flush it.
        """
        return len(self._cell.mailbox)

    def reply_later(self) -> PendingReply | None:
        """Take the reply to the message being handled out of ``receive``.

        Returns ``None`` when the message was told, not asked. Otherwise the kernel
        no longer answers the ask with ``receive``'s return value; the actor answers
        it when it likes through the returned :class:`PendingReply` (for example once
        a batch has been written durably). The asker's timeout and cancellation work
        as usual. Only valid inside ``receive`` (``RuntimeError`` while the actor is not
        handling a message; from a task other than the one running ``receive``, it would
        take the reply of whatever message is being handled, so don't).
        """
        cell = self._cell
        if cell.runner is None:  # (not a task-identity check: that would cost ~4 µs per call)
            raise RuntimeError("context.reply_later() is only valid inside the actor's receive")
        reply = cell.current_reply
        if reply is None:
            return None
        cell.current_reply = None
        return pending_reply(reply)

    async def spawn(
        self,
        factory: Callable[[], Actor],
        *,
        name: str | None = None,
        mailbox_size: int | None = DEFAULT_MAILBOX_SIZE,
    ) -> ActorRef:
        """Spawn a child supervised by this actor; it stops before this actor does.

        Same contract as :meth:`ActorSystem.spawn`.
        """
        return await self._cell.system._spawn(factory, name, mailbox_size, self._cell)

    def watch(self, ref: ActorRef) -> None:
        """Receive ``Terminated(ref, reason)`` when ``ref`` stops (at once if it already has)."""
        self._cell.watch(ref._cell)

    def unwatch(self, ref: ActorRef) -> None:
        """Stop watching; no ``Terminated`` is delivered for ``ref`` after this returns
        unless it was already queued."""
        self._cell.unwatch(ref._cell)

    def stop(self, child: ActorRef | None = None, *, now: bool = False) -> None:
        """Stop this actor, or one of its children; returns at once (watch the child, or
        ``await child.stop()``, to wait for its end).

        This actor (no ``child``): it stops after the message being handled; messages
        still queued become dead letters and their pending asks fail with
        ``ActorStopped``. New messages are refused at once. (``await
        self.context.ref.stop()`` from outside drains the mailbox first instead.)

        A child: as ``child.stop()`` would (it handles what it had accepted, then
        stops), or with ``now=True`` as ``child.stop(now=True)``: its current message
        is interrupted (if the child is interruptible) and its queue dropped. Raises
        ``ValueError`` if ``child`` is not a child of this actor.
        """
        if child is None:
            self._cell.request_stop(drain=False)
            return
        cell = child._cell
        if cell.parent is not self._cell:
            raise InvalidInput(
                f"actor {self._cell.name!r} can stop itself and its children, not {child.name!r}",
                field="child",
                value=child.name,
            )
        cell.stop_soon(now=now)

    def schedule_once(self, delay: float, message: object) -> Timer:
        """Deliver ``message`` to this actor after ``delay`` seconds, unless cancelled."""
        return self._cell.add_timer(delay, message, None)

    def schedule_repeatedly(
        self, interval: float, message: object, *, initial_delay: float | None = None
    ) -> Timer:
        """Deliver ``message`` every ``interval`` seconds (first after ``initial_delay``,
        default ``interval``) until cancelled or the actor stops or restarts."""
        return self._cell.add_timer(interval if initial_delay is None else initial_delay, message, interval)
