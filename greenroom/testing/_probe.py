"""``Probe``: an actor that records what it receives, and the test's handle on it.

Every message the probe's actor receives (told or asked; a ``Terminated`` of an actor it
watches) is queued in arrival order until a test takes it with :meth:`Probe.expect`.
Messages sent after the probe stopped fail as for any actor (``ActorStopped``); those
already queued stay readable.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar, overload

import anyio

from ..actors import Actor, ActorRef, ActorSystem, Terminated

M = TypeVar("M")


class ProbeTimeout(AssertionError):
    """What a probe expected did not arrive in time (an ``AssertionError``: a test fails)."""


class ProbeStopped(AssertionError):
    """What a probe expected cannot arrive: the probe stopped, and what it received before
    has been taken (an ``AssertionError``: a test fails)."""


class _ProbeActor(Actor):
    def __init__(self, answer: Callable[[Any], Any] | None) -> None:
        self.inbox: deque[Any] = deque()
        self.arrived = anyio.Event()
        self.stopped = False
        self._answer = answer

    async def on_stop(self) -> None:
        self.stopped = True
        self.arrived.set()  # a waiting expect learns that nothing more will come

    async def receive(self, message: Any) -> Any:
        self.inbox.append(message)
        self.arrived.set()
        return self._answer(message) if self._answer is not None else None

    async def next(self) -> Any:
        """The oldest message not taken yet, once there is one (cancelled: nothing taken);
        :class:`ProbeStopped` once the probe stopped and nothing is left."""
        while not self.inbox:
            if self.stopped:
                raise ProbeStopped("the probe is stopped: it receives nothing more")
            if self.arrived.is_set():
                self.arrived = anyio.Event()
            await self.arrived.wait()
        return self.inbox.popleft()


class Probe:
    """A recording actor for tests. Make one with ``await Probe.spawn(system)``; send to
    :attr:`ref`; take what arrived with :meth:`expect`.

    An ask to the probe is answered with what ``answer(message)`` returns (``None``
    without one), as soon as it arrives.
    """

    def __init__(self, ref: ActorRef, actor: _ProbeActor) -> None:
        self.ref = ref
        self._actor = actor
        self.received: list[Any] = []
        """Everything :meth:`expect` took so far, in order."""

    @classmethod
    async def spawn(
        cls, system: ActorSystem, *, name: str | None = None, answer: Callable[[Any], Any] | None = None
    ) -> Probe:
        """Spawn the probe's actor in ``system`` (unbounded mailbox) and return the probe."""
        actor = _ProbeActor(answer)
        ref = await system.spawn(lambda: actor, name=name, mailbox_size=None)
        return cls(ref, actor)

    @overload
    async def expect(
        self, message_type: type[M], *, within: float = 1.0, where: Callable[[M], bool] | None = None
    ) -> M: ...

    @overload
    async def expect(
        self,
        message_type: tuple[type[Any], ...],
        *,
        within: float = 1.0,
        where: Callable[[Any], bool] | None = None,
    ) -> Any: ...

    async def expect(
        self,
        message_type: type[Any] | tuple[type[Any], ...],
        *,
        within: float = 1.0,
        where: Callable[[Any], bool] | None = None,
    ) -> Any:
        """Take the next message; it must be a ``message_type`` (and satisfy ``where``).

        Waits up to ``within`` seconds (of the loop's clock: virtual under
        :func:`virtual_time`). Raises :class:`ProbeTimeout` if nothing arrives in time,
        ``AssertionError`` naming the message if the next one is something else (it is
        taken all the same: a probe checks an exact sequence). Cancelled while waiting,
        it takes nothing. On a stopped probe with nothing left, :class:`ProbeStopped` at
        once. ``TypeError`` if ``message_type`` is not a type or a tuple of types.
        """
        _check_type(message_type)
        message = await self._next(within, f"a {_names(message_type)}")
        if not isinstance(message, message_type):
            raise AssertionError(f"expected a {_names(message_type)}, got {message!r}")
        if where is not None and not where(message):
            raise AssertionError(
                f"expected a {_names(message_type)} that satisfies {where!r}, got {message!r}"
            )
        return message

    async def expect_no_message(self, *, within: float) -> None:
        """Wait ``within`` seconds (of the loop's clock); fail with ``AssertionError`` naming
        the first message that arrives meanwhile (or was already waiting)."""
        with anyio.move_on_after(within):
            try:
                message = await self._actor.next()
            except ProbeStopped:
                return  # nothing can arrive
            self.received.append(message)
            raise AssertionError(f"expected no message for {within} s, got {message!r}")

    def watch(self, ref: ActorRef) -> None:
        """Have the probe watch ``ref``: its ``Terminated`` arrives like any message (at
        once if it has stopped already)."""
        self._actor.context.watch(ref)

    async def expect_terminated(self, ref: ActorRef, *, within: float = 1.0) -> Terminated:
        """Take the next message: it must be the ``Terminated`` of ``ref`` (watch it first)."""
        return await self.expect(Terminated, within=within, where=_of(ref))

    async def stop(self) -> None:
        """Stop the probe's actor (what it already received stays readable)."""
        await self.ref.stop()

    async def _next(self, within: float, what: str) -> Any:
        try:
            with anyio.fail_after(within):
                message = await self._actor.next()
        except TimeoutError:
            raise ProbeTimeout(f"expected {what} within {within} s, got nothing") from None
        except ProbeStopped:
            raise ProbeStopped(f"expected {what}, but the probe is stopped and has nothing left") from None
        self.received.append(message)
        return message


def _check_type(message_type: object) -> None:
    kinds = message_type if isinstance(message_type, tuple) else (message_type,)
    if not kinds or not all(isinstance(kind, type) for kind in kinds):
        raise TypeError(
            f"Probe.expect takes a message type or a tuple of types (such as Ping, not 'Ping'), "
            f"got {message_type!r}"
        )


def _of(ref: ActorRef) -> Callable[[Terminated], bool]:
    def of(message: Terminated) -> bool:
        return message.ref == ref

    of.__qualname__ = f"terminated of {ref.name!r}"
    return of


def _names(message_type: type[Any] | tuple[type[Any], ...]) -> str:
    if isinstance(message_type, tuple):
        return " or ".join(t.__name__ for t in message_type)
    return message_type.__name__
