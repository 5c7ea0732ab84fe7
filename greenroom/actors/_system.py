"""``ActorSystem``: spawns actors, names them, and owns every task they run on."""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Callable
from types import TracebackType
from typing import Any

import anyio

from .._checks import check_int, check_seconds
from .._errors import InvalidInput, expected
from ._actor import Actor
from ._backend import primitives
from ._cell import ActorCell, _Start
from ._deadletters import DeadLetters
from ._defaults import DEFAULT_MAILBOX_SIZE
from ._dispatcher import Dispatcher
from ._exceptions import ActorStopped, ChildFailed
from ._ref import ActorRef
from ._reply import Reply
from ._statistics import SystemStatistics
from ._supervision import DEFAULT_STRATEGY, SupervisorStrategy
from ._timers import TimerService

logger = logging.getLogger("greenroom.actors")

_NAME = re.compile(r"[^\s/$][^\s/]{0,199}")


class ActorSystem:
    """A set of actors and the task group they all run in.

    ``async with ActorSystem() as system:`` starts it; leaving the block shuts it down:
    spawning is refused, every top-level actor is stopped as by ``ref.stop()`` (each
    drains what it had accepted, stops its children first, then runs ``on_stop``),
    within ``shutdown_timeout`` seconds. Actors still running at that deadline are
    cancelled; what they had queued becomes dead letters and their pending asks fail
    with ``ActorStopped``; ``on_stop`` then runs for every actor that was not cancelled
    mid-message, within a second ``shutdown_timeout``. When the block is left by
    cancellation, actors are not drained: that second phase runs at once. Shutdown is
    shielded and takes at most twice ``shutdown_timeout``. Either way every pending
    ``ask`` ends, and no task outlives the block.

    A failure escalated past the top-level actors (see ``Directive.ESCALATE``) cancels
    the body of the block, shuts down as above and raises ``ChildFailed``.

    ``throughput`` is how many messages a worker handles before it lets other tasks
    run; ``max_idle_workers`` how many idle worker tasks it keeps.
    """

    def __init__(
        self,
        *,
        supervisor_strategy: SupervisorStrategy | None = None,
        shutdown_timeout: float = 10.0,
        throughput: int = 256,
        max_idle_workers: int = 64,
        dead_letters_kept: int = 1000,
    ) -> None:
        if supervisor_strategy is not None and not isinstance(supervisor_strategy, SupervisorStrategy):
            raise TypeError(
                f"ActorSystem supervisor_strategy must be a SupervisorStrategy, got {supervisor_strategy!r}"
            )
        self._shutdown_timeout = check_seconds(
            "ActorSystem", "shutdown_timeout", shutdown_timeout, zero_ok=True
        )
        self._throughput = check_int("ActorSystem", "throughput", throughput)
        self._max_idle = check_int("ActorSystem", "max_idle_workers", max_idle_workers)
        self.dead_letters = DeadLetters(check_int("ActorSystem", "dead_letters_kept", dead_letters_kept))
        self._strategy = supervisor_strategy or DEFAULT_STRATEGY
        self._registry: dict[str, ActorCell] = {}
        self._top: set[ActorCell] = set()
        self._names = itertools.count(1)
        self._state = "new"
        self._restarts = 0
        self._failure: ChildFailed | None = None
        self._event_class: Any = None
        self._clock: Callable[[], float] = anyio.current_time

    # -- lifecycle ------------------------------------------------------------------

    async def __aenter__(self) -> ActorSystem:
        if self._state != "new":
            raise RuntimeError("an ActorSystem can be entered only once")
        self._event_class, self._clock = primitives()
        self._timers = TimerService(self._event_class)
        self._dispatcher = Dispatcher(self._event_class, self._throughput, self._max_idle)
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        try:
            self._task_group.start_soon(self._timers.run, name="greenroom-timers")
            await self._task_group.start(self._dispatcher.run, name="greenroom-workers")
        except BaseException as error:
            self._task_group.cancel_scope.cancel()
            await self._task_group.__aexit__(type(error), error, error.__traceback__)
            raise
        self._body = anyio.CancelScope()
        self._body.__enter__()
        self._state = "running"
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if self._body.__exit__(exc_type, exc, tb):  # our own cancellation (an escalation)
            exc_type, exc, tb = None, None, None
        cancelled = exc is not None and isinstance(exc, anyio.get_cancelled_exc_class())
        try:
            with anyio.CancelScope(shield=True):
                await self._shutdown(graceful=not cancelled)
        finally:
            self._task_group.cancel_scope.cancel()
            try:
                suppressed = await self._task_group.__aexit__(exc_type, exc, tb)
            except BaseExceptionGroup as group:
                # The kernel's own tasks never raise: a group holding only the body's
                # exception is that exception, and it propagates as itself.
                if exc is not None and group.exceptions == (exc,):
                    return False
                raise
        if self.dead_letters.count:
            logger.info("actor system shut down with %d dead letters", self.dead_letters.count)
        if self._failure is not None and exc is None:
            raise self._failure
        return suppressed

    async def _shutdown(self, *, graceful: bool) -> None:
        self._state = "closing"
        if graceful:
            with anyio.move_on_after(self._shutdown_timeout):
                top = list(self._top)
                for cell in top:
                    cell.request_stop(drain=True)
                for cell in top:
                    await cell.wait_dead()
        live = [cell for cell in self._registry.values() if not cell.dead]
        if live:
            if graceful:
                logger.warning(
                    "%d actors still running %gs into shutdown; cancelling them",
                    len(live), self._shutdown_timeout,
                )  # fmt: skip
            await self._kill(live)
        self._state = "closed"

    async def _kill(self, live: list[ActorCell]) -> None:
        """Cancel the workers, then finish every live actor, children before parents.

        ``on_stop`` runs for each actor that was not cancelled mid-message (those were
        idle, or waiting behind a stuck parent), within a ``shutdown_timeout`` of its own.
        """
        dispatcher = self._dispatcher
        dispatcher.closed = True
        for cell in live:
            cell.accepting = False
        group = dispatcher.task_group
        if group is not None:
            group.cancel_scope.cancel()

        def depth(cell: ActorCell) -> int:
            n, parent = 0, cell.parent
            while parent is not None:
                n, parent = n + 1, parent.parent
            return n

        with anyio.move_on_after(self._shutdown_timeout):
            for cell in sorted(live, key=depth, reverse=True):
                if not cell.dead and not cell.interrupted:
                    await cell._run_on_stop()
                cell.finalize(ActorStopped(cell.ref, "was cancelled at system shutdown"))
        for cell in live:  # any the deadline cut short
            cell.finalize(ActorStopped(cell.ref, "was cancelled at system shutdown"))

    def _fail(self, failure: ChildFailed) -> None:
        if self._failure is None:
            self._failure = failure
            cause = failure.error
            plain = expected(cause)
            logger.error(
                "a top-level actor escalated a failure; shutting the system down%s",
                f": {type(cause).__name__}: {cause}" if plain else "",
                exc_info=None if plain else failure,
            )
            if self._state == "running":
                self._body.cancel()

    # -- spawning and lookup --------------------------------------------------------

    async def spawn(
        self,
        factory: Callable[[], Actor],
        *,
        name: str | None = None,
        mailbox_size: int | None = DEFAULT_MAILBOX_SIZE,
    ) -> ActorRef:
        """Create a top-level actor and return its ref once its ``on_start`` has run.

        ``factory`` is a zero-argument callable returning an :class:`Actor` (a class,
        a ``functools.partial``, a lambda); a restart calls it again. ``name`` must be
        unique in the system (default: generated, starting with ``$``).
        ``mailbox_size`` bounds the mailbox (``None``: unbounded).

        Raises ``TypeError``/``ValueError`` for a bad factory, name or size, and
        re-raises what the factory or ``on_start`` raised (nothing stays registered).
        If cancelled while ``on_start`` runs, the actor is stopped.
        """
        return await self._spawn(factory, name, mailbox_size, None)

    async def _spawn(
        self,
        factory: Callable[[], Actor],
        name: str | None,
        mailbox_size: int | None,
        parent: ActorCell | None,
    ) -> ActorRef:
        if self._state != "running":
            raise RuntimeError(
                "spawn() needs a running ActorSystem (inside 'async with ActorSystem()'); "
                f"this one is {self._state}"
            )
        if parent is not None and not parent.accepting:
            raise ActorStopped(parent.ref, "is stopping and cannot spawn children")
        if isinstance(factory, Actor) or not callable(factory):
            raise TypeError(
                f"spawn() takes a zero-argument factory returning an Actor (a class, a partial, "
                f"a lambda), got {factory!r}"
            )
        if mailbox_size is not None and (
            isinstance(mailbox_size, bool) or not isinstance(mailbox_size, int) or mailbox_size < 1
        ):
            raise InvalidInput(
                f"spawn mailbox_size must be an int >= 1 or None, got {mailbox_size!r}",
                field="mailbox_size",
                value=mailbox_size,
            )
        if name is not None:
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise InvalidInput(
                    f"spawn name must be 1-200 characters without whitespace or '/', "
                    f"not starting with '$', got {name!r}",
                    field="name",
                    value=name,
                )
            if name in self._registry:
                raise InvalidInput(
                    f"spawn name {name!r} is already taken by a live actor", field="name", value=name
                )
        cell = ActorCell(self, factory, name or "", parent, mailbox_size)
        actor = cell.make_actor()
        if name is None:
            name = f"${type(actor).__name__.lower()}-{next(self._names)}"
            while name in self._registry:
                name = f"${type(actor).__name__.lower()}-{next(self._names)}"
        cell.name = name
        self._registry[name] = cell
        if parent is None:
            self._top.add(cell)
        else:
            if parent.children is None:
                parent.children = set()
            parent.children.add(cell)
        if type(actor).on_start is Actor.on_start:
            cell.started = True
            return cell.ref
        reply = Reply(self._event_class())
        cell.enqueue_control(_Start(reply))
        try:
            await reply.wait()
        except anyio.get_cancelled_exc_class():
            cell.request_stop(drain=False)
            raise
        return cell.ref

    def lookup(self, name: str) -> ActorRef | None:
        """The live actor registered as ``name``, or ``None``."""
        cell = self._registry.get(name)
        return cell.ref if cell is not None and not cell.dead else None

    @property
    def actors(self) -> list[ActorRef]:
        """Every live actor, top-level and children."""
        return [cell.ref for cell in self._registry.values() if not cell.dead]

    def statistics(self) -> SystemStatistics:
        """Live actors, waiting messages, restarts and dead letters, now (a snapshot)."""
        live = [cell for cell in self._registry.values() if not cell.dead]
        letters = self.dead_letters
        return SystemStatistics(
            actors=len(live),
            mailbox_depth=sum(len(cell.mailbox) for cell in live),
            restarts=self._restarts,
            dead_letters=letters.count,
            dead_letters_by_reason={str(reason): n for reason, n in letters.by_reason.items()},
        )

    def __repr__(self) -> str:
        return f"<ActorSystem {self._state}, {len(self._registry)} actors>"
