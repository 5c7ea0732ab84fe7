"""``ActorCell``: one actor's mailbox, lifecycle and supervision, run by the dispatcher.

A cell owns no task. While it has messages it sits on the dispatcher's run queue and
a worker runs a batch of them; while it is idle it costs only its own memory.

Message order: one FIFO deque. ``tell``/``send``/``ask`` append ``(message, None)`` or
``(message, reply)``; kernel signals append ``(signal, CONTROL)``. ``ref.stop()`` is such
a signal, so everything accepted before it is handled first. ``context.stop()``, ``ref.stop(now=True)`` (and a
failure that stops the actor) set ``stop_now`` instead: the actor stops after the
current message and what is left in the mailbox becomes dead letters, each pending
ask failing with ``ActorStopped``.

Interruptible actors (``Actor.interruptible``): the cell holds an :class:`_Interruption`
(``None`` for other actors: one slot, and one test per batch, is all they pay). Each
message runs in a cancel scope of its own (:meth:`ActorCell.run_interruptible`), kept
there while it runs with the ask's reply; :meth:`ActorCell.interrupt` cancels it.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections import deque
from typing import TYPE_CHECKING, Any

import anyio

from .. import _tracing
from .._errors import InvalidInput, expected
from .._tracing import Traced
from ._actor import Actor
from ._exceptions import ActorStopped, AskTimeout, ChildFailed
from ._mailbox import RELEASED
from ._messages import Terminated
from ._ref import ActorRef
from ._reply import InterruptingReply, Reply, pending_reply
from ._supervision import DEFAULT_STRATEGY, Directive, SupervisorStrategy
from ._timers import Timer

if TYPE_CHECKING:
    from ._system import ActorSystem

logger = logging.getLogger("greenroom.actors")

CONTROL = object()
"""Marks a kernel signal in the mailbox (where a reply would be)."""


class _Stop:
    __slots__ = ()


STOP = _Stop()


class _Start:
    __slots__ = ("reply",)

    def __init__(self, reply: Reply) -> None:
        self.reply = reply


class _ChildFailedSignal:
    __slots__ = ("child", "error")

    def __init__(self, child: ActorCell, error: Exception) -> None:
        self.child = child
        self.error = error


class _Interruption:
    """The message an interruptible actor is handling: its cancel scope and its reply."""

    __slots__ = ("reply", "scope")

    def __init__(self) -> None:
        self.scope: anyio.CancelScope | None = None
        self.reply: Reply | None = None


class _SendWaiter:
    __slots__ = ("admitted", "event")

    def __init__(self, event: Any) -> None:
        self.event = event
        self.admitted = False


_async_receive_checked: set[type] = set()


class ActorCell:
    __slots__ = (
        "accepting",
        "actor",
        "backoff_wakeup",
        "batching",
        "children",
        "current_reply",
        "dead",
        "dead_letter_count",
        "death_waiters",
        "factory",
        "failure",
        "interrupted",
        "interruption",
        "limit",
        "mailbox",
        "name",
        "parent",
        "reason",
        "ref",
        "reserved",
        "restart_count",
        "restarts",
        "runner",
        "scheduled",
        "send_waiters",
        "started",
        "stop_now",
        "system",
        "timers",
        "watchers",
        "watching",
    )  # fmt: skip

    def __init__(
        self,
        system: ActorSystem,
        factory: Any,
        name: str,
        parent: ActorCell | None,
        limit: int | None,
    ) -> None:
        self.system = system
        self.factory = factory
        self.name = name
        self.parent = parent
        self.ref = ActorRef._create(self)
        self.mailbox: deque[tuple[Any, Any]] = deque()
        self.limit = limit
        self.reserved = 0
        self.send_waiters: deque[_SendWaiter] | None = None
        self.actor: Actor | None = None
        self.accepting = True
        self.dead = False
        self.started = False
        self.scheduled = False
        self.runner: int | None = None
        self.current_reply: Reply | None = None
        self.stop_now = False
        self.interrupted = False
        self.interruption: _Interruption | None = None
        self.batching = False
        self.children: set[ActorCell] | None = None
        self.watchers: set[ActorCell] | None = None
        self.watching: set[ActorCell] | None = None
        self.timers: set[Timer] | None = None
        self.restarts: deque[float] | None = None
        self.restart_count = 0
        self.dead_letter_count = 0
        self.death_waiters: list[Any] | None = None
        self.reason: BaseException | None = None
        self.backoff_wakeup: Any = None
        self.failure: BaseException | None = None
        """While a failure restarts or stops the actor: that error (``on_stop`` reads it)."""

    # -- creating instances -------------------------------------------------------------

    def make_actor(self) -> Actor:
        actor = self.factory()
        if not isinstance(actor, Actor):
            raise TypeError(
                f"spawn factory {self.factory!r} returned {type(actor).__name__}, "
                "expected an instance of greenroom.Actor"
            )
        cls = type(actor)
        if cls not in _async_receive_checked:
            if not inspect.iscoroutinefunction(cls.receive):
                raise TypeError(f"{cls.__name__}.receive must be an 'async def' method")
            if cls.receive_many is not None:
                if cls.interruptible is True:
                    raise TypeError(
                        f"{cls.__name__} defines receive_many and is interruptible: an interruptible "
                        "actor handles one message at a time"
                    )
                if not inspect.iscoroutinefunction(cls.receive_many):
                    raise TypeError(f"{cls.__name__}.receive_many must be an 'async def' method")
            _async_receive_checked.add(cls)
        actor._greenroom_cell = self
        self.actor = actor
        self.batching = cls.receive_many is not None
        if cls.interruptible is True:
            if self.interruption is None:
                self.interruption = _Interruption()
        else:
            self.interruption = None
        return actor

    # -- enqueueing (refusals, kernel signals, timers, waiting for room) ----------------

    def refuse(self, message: Any) -> ActorStopped:
        self.system.dead_letters.record(self.ref, message, "stopped")
        return ActorStopped(self.ref, "is stopped" if self.dead else "is stopping")

    def _box(self) -> deque[tuple[Any, Any]]:
        """The mailbox to append to: a new one if it was released (``trim``)."""
        box = self.mailbox
        if box is RELEASED:
            box = self.mailbox = deque()
        return box

    def trim(self) -> bool:
        """Release the mailbox's buffer while idle (see ``_mailbox``); whether it is."""
        if self.mailbox is RELEASED:
            return True
        if self.mailbox or self.scheduled or self.runner is not None or self.dead or not self.accepting:
            return False
        self.mailbox = RELEASED
        return True

    def enqueue_control(self, signal: Any) -> None:
        if not self.dead:
            self._box().append((signal, CONTROL))
            if not self.scheduled:
                self.system._dispatcher.schedule(self)

    def deliver_system(self, message: Any) -> None:
        """Enqueue a kernel-made message (``Terminated``): never refused for room."""
        if not self.accepting:
            self.system.dead_letters.record(self.ref, message, "stopped")
            return
        self._box().append((message, None))
        if not self.scheduled:
            self.system._dispatcher.schedule(self)

    def deliver_tick(self, message: Any) -> None:
        if not self.accepting:
            self.system.dead_letters.record(self.ref, message, "stopped")
        elif self.limit is not None and len(self.mailbox) + self.reserved >= self.limit:
            self.system.dead_letters.record(self.ref, message, "mailbox full")
        else:
            self._box().append((message, None))
            if not self.scheduled:
                self.system._dispatcher.schedule(self)

    async def wait_for_room(self, message: Any, deadline: float, timeout: float | None = None) -> None:
        """Queue up behind earlier senders until the worker admits us (reserving a slot)."""
        waiter = _SendWaiter(self.system._event_class())
        if self.send_waiters is None:
            self.send_waiters = deque()
        self.send_waiters.append(waiter)
        try:
            if deadline == math.inf:
                await waiter.event.wait()
            else:
                with anyio.move_on_after(deadline - self.system._clock()):
                    await waiter.event.wait()
        except BaseException:
            self._withdraw(waiter)
            raise
        if not waiter.admitted:
            self._withdraw(waiter)
            if not self.accepting:
                raise self.refuse(message)
            raise AskTimeout(self.ref, message, timeout if timeout is not None else math.inf)
        self.reserved -= 1
        if not self.accepting:
            raise self.refuse(message)

    def _withdraw(self, waiter: _SendWaiter) -> None:
        waiters = self.send_waiters
        if waiters is not None and waiter in waiters:
            waiters.remove(waiter)
        elif waiter.admitted:
            waiter.admitted = False
            self.reserved -= 1
            self.admit_senders()  # hand the slot to the next sender in line

    def admit_senders(self) -> None:
        waiters = self.send_waiters
        limit = self.limit
        assert waiters is not None and limit is not None
        while waiters and len(self.mailbox) + self.reserved < limit:
            waiter = waiters.popleft()
            waiter.admitted = True
            self.reserved += 1
            waiter.event.set()

    def _release_senders(self) -> None:
        waiters = self.send_waiters
        while waiters:
            waiters.popleft().event.set()  # not admitted: they see the stop and raise

    # -- identity of the running worker ---------------------------------------------

    def is_current_task(self) -> bool:
        return self.runner is not None and self.runner == anyio.get_current_task().id

    def check_not_self_ask(self) -> None:
        if self.is_current_task():
            raise RuntimeError(
                f"actor {self.name!r} asked itself; that would deadlock (use tell, "
                "or call the method directly)"
            )

    # -- watches and timers ----------------------------------------------------------

    def watch(self, target: ActorCell) -> None:
        if target is self:
            raise InvalidInput(f"actor {self.name!r} cannot watch itself", field="target", value=self.name)
        if target.dead:
            self.deliver_system(Terminated(target.ref, target.reason))
            return
        if target.watchers is None:
            target.watchers = set()
        target.watchers.add(self)
        if self.watching is None:
            self.watching = set()
        self.watching.add(target)

    def unwatch(self, target: ActorCell) -> None:
        if target.watchers is not None:
            target.watchers.discard(self)
        if self.watching is not None:
            self.watching.discard(target)

    def add_timer(self, delay: float, message: Any, interval: float | None) -> Timer:
        for field, value, strict in (("delay", delay, False), ("interval", interval, True)):
            if field == "interval" and value is None:
                continue
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value < 0
                or (strict and value == 0)
            ):
                relation = "> 0" if strict else ">= 0"
                raise InvalidInput(
                    f"timer {field} must be a finite number of seconds {relation}, got {value!r}",
                    field=field,
                    value=value,
                )
        if not self.accepting:
            raise ActorStopped(self.ref, "is stopping and cannot schedule timers")
        timer = Timer._create(self, message, interval)
        if self.timers is None:
            self.timers = set()
        self.timers.add(timer)
        self.system._timers.add(self.system._clock() + delay, timer)
        return timer

    def cancel_timers(self) -> None:
        timers = self.timers
        if timers:
            for timer in list(timers):
                timer.cancel()

    # -- interrupting (interruptible actors only) ---------------------------------------

    @property
    def activation(self) -> Reply | None:
        """The reply of the ask an interruptible actor is handling now (``None`` if idle,
        told, or not interruptible)."""
        interruption = self.interruption
        return interruption.reply if interruption is not None else None

    def interrupt(self, reply: Reply | None = None) -> bool:
        """Cancel the message being handled (only the one ``reply`` answers, if given).
        ``True`` if one was; the cancellation lands at its next checkpoint."""
        interruption = self.interruption
        if interruption is None:
            return False
        scope = interruption.scope
        if scope is None or (reply is not None and interruption.reply is not reply):
            return False
        scope.cancel()
        return True

    async def run_interruptible(self, message: Any, reply: Reply | None) -> None:
        """Handle one message of an interruptible actor in a cancel scope of its own.

        An ask whose asker already gave up is never started (a dead letter,
        ``"abandoned"``). An interrupted message is answered by ``on_interrupted``
        and is not a failure; anything else is as in the dispatcher's own loop.
        """
        if reply is not None and reply.done and type(reply) is InterruptingReply:
            self.system.dead_letters.record(self.ref, message, "abandoned")
            return
        actor = self.actor
        interruption = self.interruption
        assert actor is not None and interruption is not None
        self.current_reply = reply
        interruption.reply = reply
        scope = interruption.scope = anyio.CancelScope()
        try:
            with scope:
                value = await actor.receive(message)
        except Exception as error:
            self.current_reply = None
            if reply is not None:
                reply.fail(error)  # no-op if a deferred reply was already filled
            await self.handle_failure(error, message)
            return
        except BaseException:
            self.current_reply = None
            if reply is not None:
                reply.fail(ActorStopped(self.ref, "was stopped while handling the message"))
            raise
        finally:
            interruption.scope = None
            interruption.reply = None
        if scope.cancelled_caught:
            self.current_reply = None
            try:
                value = actor.on_interrupted(message)
            except Exception as error:
                if reply is not None:
                    reply.fail(error)
                return
        if reply is not None and (self.current_reply is reply or scope.cancelled_caught):
            self.current_reply = None
            reply.succeed(value)

    # -- tracing (only while greenroom._tracing is enabled) -------------------------------

    async def run_batch(self, batch: list[tuple[Any, Reply | None]]) -> None:
        """Hand ``batch`` to the actor's ``receive_many`` (see ``Actor.receive_many``)."""
        actor = self.actor
        assert actor is not None and actor.receive_many is not None
        deliveries = [(message, None if reply is None else pending_reply(reply)) for message, reply in batch]
        try:
            await actor.receive_many(deliveries)
        except Exception as error:
            for _, reply in batch:
                if reply is not None:
                    reply.fail(error)  # no-op for the ones already answered
            await self.handle_failure(error, batch[-1][0])
        except BaseException:
            stopped = ActorStopped(self.ref, "was stopped while handling the message")
            for _, reply in batch:
                if reply is not None:
                    reply.fail(stopped)
            raise

    async def run_traced(self, traced: Traced, reply: Reply | None) -> None:
        """Handle a message that brought its sender's trace context: in a span that is a
        child of it, with the same semantics as the dispatcher's own loop."""
        message = traced.message
        with _tracing.receiving(self.name, message, traced.context):
            if self.interruption is not None:
                await self.run_interruptible(message, reply)
                return
            if self.batching:  # a traced message is a batch of its own, in its span
                await self.run_batch([(message, reply)])
                return
            actor = self.actor
            assert actor is not None
            if reply is None:
                try:
                    await actor.receive(message)
                except Exception as error:
                    _tracing.record_failure(error)
                    await self.handle_failure(error, message)
                return
            self.current_reply = reply
            try:
                value = await actor.receive(message)
            except Exception as error:
                _tracing.record_failure(error)
                self.current_reply = None
                reply.fail(error)
                await self.handle_failure(error, message)
                return
            except BaseException:
                self.current_reply = None
                reply.fail(ActorStopped(self.ref, "was stopped while handling the message"))
                raise
            if self.current_reply is reply:  # not taken by context.reply_later()
                self.current_reply = None
                reply.succeed(value)

    # -- stopping ---------------------------------------------------------------------

    def stop_soon(self, *, now: bool) -> None:
        """``ref.stop()`` without the wait: drain, or (``now``) interrupt the current
        message and drop the queued ones."""
        self.request_stop(drain=not now)
        if now:
            self.interrupt()

    def request_stop(self, *, drain: bool) -> None:
        if self.dead:
            return
        if not drain:
            self.stop_now = True
            if not self.scheduled:
                self.system._dispatcher.schedule(self)
        if self.accepting:
            self.accepting = False
            if drain:
                self.enqueue_control(STOP)
            self._release_senders()
            actor = self.actor
            if actor is not None:
                try:
                    actor.on_stop_requested()
                except Exception:
                    logger.exception("actor %r: on_stop_requested failed (ignored)", self.name)
        if self.backoff_wakeup is not None:
            self.backoff_wakeup.set()

    async def wait_dead(self) -> None:
        if self.dead:
            return
        event = self.system._event_class()
        if self.death_waiters is None:
            self.death_waiters = []
        self.death_waiters.append(event)
        await event.wait()

    async def stop_children(self) -> None:
        children = self.children
        if not children:
            return
        now = self.stop_now  # a stop that does not wait does not wait for the children either
        for child in list(children):
            child.stop_soon(now=now)
        for child in list(children):
            await child.wait_dead()

    async def terminate(self, reason: BaseException | None) -> None:
        """Stop now: children first, then ``on_stop``, then :meth:`finalize`."""
        self.accepting = False
        self._release_senders()
        self.cancel_timers()
        await self.stop_children()
        await self._run_on_stop()
        self.finalize(reason)

    async def _run_on_stop(self) -> None:
        actor = self.actor
        if actor is not None and self.started:
            self.started = False
            try:
                await actor.on_stop()
            except Exception:
                logger.exception("actor %r: on_stop raised", self.name)

    def finalize(self, reason: BaseException | None) -> None:
        """Mark dead, turn leftovers into dead letters, tell watchers. Synchronous."""
        if self.dead:
            return
        self.dead = True
        self.accepting = False
        self.reason = reason
        system = self.system
        mailbox = self.mailbox
        while mailbox:
            message, reply = mailbox.popleft()
            if reply is CONTROL:
                if isinstance(message, _Start):
                    message.reply.fail(ActorStopped(self.ref, "stopped before it started"))
                continue
            if reply is not None:
                reply.fail(ActorStopped(self.ref, "stopped before handling the message"))
            system.dead_letters.record(self.ref, message, "dropped")
        self._release_senders()
        self.cancel_timers()
        if system._registry.get(self.name) is self:
            del system._registry[self.name]
        parent = self.parent
        if parent is None:
            system._top.discard(self)
        elif parent.children is not None:
            parent.children.discard(self)
        if self.watching:
            for target in self.watching:
                if target.watchers is not None:
                    target.watchers.discard(self)
            self.watching = None
        if self.watchers:
            for watcher in self.watchers:
                watcher.deliver_system(Terminated(self.ref, reason))
            self.watchers = None
        if self.death_waiters:
            for event in self.death_waiters:
                event.set()
            self.death_waiters = None
        if self.actor is not None:
            self.actor._greenroom_cell = None
            self.actor = None

    # -- signals and failures (the dispatcher runs the messages themselves) --------------

    async def control(self, signal: Any) -> None:
        if signal is STOP:
            await self.terminate(None)
        elif isinstance(signal, _Start):
            try:
                await self.actor.on_start()  # type: ignore[union-attr]
            except Exception as error:
                signal.reply.fail(error)
                await self.terminate(error)
            else:
                self.started = True
                signal.reply.succeed(None)
        elif isinstance(signal, _ChildFailedSignal):
            failure = ChildFailed(signal.child.ref, signal.error)
            failure.__cause__ = signal.error
            await self.handle_failure(failure, None)

    def _strategy(self) -> SupervisorStrategy:
        parent = self.parent
        if parent is None:
            return self.system._strategy
        actor = parent.actor
        strategy = actor.supervisor_strategy if actor is not None else None
        return strategy if strategy is not None else DEFAULT_STRATEGY

    async def handle_failure(self, error: Exception, message: Any) -> None:
        """Apply the parent's strategy to ``error``; a failed restart counts as another failure."""
        what = f"a {type(message).__name__} message" if message is not None else "a signal"
        while True:
            self.failure = error
            delay: float | None = 0.0
            strategy = self._strategy()
            try:
                directive = strategy.decide(error)
            except Exception:
                logger.exception("actor %r: supervisor strategy failed; stopping the actor", self.name)
                directive = Directive.STOP
            if directive is Directive.RESTART:
                if self.restarts is None:
                    self.restarts = deque()
                delay = strategy.admit_restart(self.restarts, self.system._clock())
                if delay is None:
                    logger.error(
                        "actor %r failed handling %s and exceeded %s restarts within %gs; stopping%s",
                        self.name, what, strategy.max_restarts, strategy.within, _said(error),
                        exc_info=_traceback(error),
                    )  # fmt: skip
                    await self.terminate(error)
                    return
            logger.error(
                "actor %r failed handling %s; directive: %s%s",
                self.name, what, directive.value, _said(error), exc_info=_traceback(error),
            )  # fmt: skip
            if directive is Directive.RESUME:
                self.failure = None
                return
            if directive is Directive.STOP:
                await self.terminate(error)
                return
            if directive is Directive.ESCALATE:
                await self.terminate(error)
                self._escalate(error)
                return
            if self.stop_now:
                await self.terminate(error)
                return
            if delay:
                await self._backoff(delay)
                if not self.accepting and (self.stop_now or self._only_control_queued()):
                    await self.terminate(error)  # stopped in its backoff, nothing left to handle
                    return
            try:
                await self._restart()
                return
            except Exception as restart_error:
                error, what = restart_error, "its restart"

    def _only_control_queued(self) -> bool:
        return all(kind is CONTROL for _, kind in self.mailbox)

    async def _backoff(self, delay: float) -> None:
        self.backoff_wakeup = wakeup = self.system._event_class()
        try:
            with anyio.move_on_after(delay):
                await wakeup.wait()
        finally:
            self.backoff_wakeup = None

    async def _restart(self) -> None:
        self.restart_count += 1
        self.system._restarts += 1
        self.cancel_timers()
        await self.stop_children()
        old = self.actor
        await self._run_on_stop()
        self.failure = None  # the new instance starts clean
        if old is not None:
            old._greenroom_cell = None
        self.actor = None
        actor = self.make_actor()
        if type(actor).on_start is not Actor.on_start:
            await actor.on_start()
        self.started = True

    def _escalate(self, error: Exception) -> None:
        parent = self.parent
        if parent is None:
            failure = ChildFailed(self.ref, error)
            failure.__cause__ = error
            self.system._fail(failure)
        elif parent.dead:
            logger.error(
                "actor %r escalated to its parent %r, which had already stopped", self.name, parent.name
            )
        else:
            parent.enqueue_control(_ChildFailedSignal(self, error))


def _said(error: BaseException) -> str:
    return f": {type(error).__name__}: {error}" if expected(error) else ""


def _traceback(error: BaseException) -> BaseException | None:
    return None if expected(error) else error
