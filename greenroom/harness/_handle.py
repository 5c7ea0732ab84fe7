"""``Harness``: the typed handle on a harness actor (spawn, run phases, stop, close)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from .._checks import check_int
from .._guard import NoPublicConstructor
from ..actors import ActorContext, ActorRef, ActorSystem
from ..llm import ChatModel
from ..messages import ChatMessage, GetHistory, RunBounded
from ._actor import HarnessActor
from ._phase import PhaseResult
from ._stop import StopSignal

_RUN_ENDS = frozenset({"done", "budget_exhausted", "stop_requested"})


class Harness(metaclass=NoPublicConstructor):
    """A harness actor and the calls it answers. Build one with :meth:`spawn` (calling the
    class is a ``TypeError``: a handle over an actor is made where the actor is)."""

    _made_by = "Harness.spawn(system_or_context, model, ...) builds one"

    def __init__(self, ref: ActorRef, stop: StopSignal) -> None:
        self.ref = ref
        self.stop_signal = stop

    @classmethod
    async def spawn(
        cls,
        spawner: ActorSystem | ActorContext,
        model: ChatModel,
        *,
        name: str | None = None,
        stop: StopSignal | None = None,
        **options: Any,
    ) -> Harness:
        """Spawn a :class:`HarnessActor` (``options`` are its keyword arguments) in a
        system, or as a child of the actor whose ``context`` is given (its life is then
        bounded by its parent's, and its failures go to the parent's strategy)."""
        stop = stop if stop is not None else StopSignal()
        ref = await spawner.spawn(lambda: HarnessActor(model, stop=stop, **options), name=name)
        return cls._create(ref, stop)

    async def run_bounded(
        self,
        user_message: str = "",
        tool_names: Sequence[str] | None = None,
        max_iterations: int = 10,
        continue_context: bool = True,
        context_label: str | None = None,
        direct_tool_calls: Iterable[dict[str, Any]] | None = None,
    ) -> PhaseResult:
        """Run at most ``max_iterations`` model+tool turns in the context named
        ``context_label`` (``None``: the primary context), or, with
        ``direct_tool_calls``, just those tool calls (no model call, no budget gate).

        Waits as long as the phase takes (bound it with the model's call timeout, the
        sandbox's tool timeout, ``max_iterations`` and the budget). On cancellation the
        kernel interrupts the phase: the model call and tool call in flight are
        cancelled and the unfinished turn is discarded from the history (a phase still
        queued never starts); the harness stays usable. Raises the model's
        ``ModelError`` (the history keeps only the turns completed before it),
        ``ValueError`` for a bad argument, ``Interrupted`` if someone else interrupted
        the phase (``ref.interrupt()``), and ``ActorStopped`` once the harness was closed.
        """
        message = RunBounded(
            user_message=user_message,
            tool_names=None if tool_names is None else tuple(tool_names),
            max_iterations=max_iterations,
            continue_context=continue_context,
            context_label=context_label,
            direct_tool_calls=None if direct_tool_calls is None else tuple(direct_tool_calls),
        )
        result: PhaseResult = await self.ref.ask(message, timeout=None)
        return result

    async def run(
        self,
        user_message: str,
        *,
        tool_names: Sequence[str] | None = None,
        max_iterations: int = 10,
        max_phases: int = 10,
    ) -> PhaseResult:
        """Run phases in the primary context until one ends ``done``,
        ``budget_exhausted`` or ``stop_requested`` (or ``max_phases`` phases ran; the
        last result is then ``max_iterations``). The first phase sends
        ``user_message``; later ones continue the conversation. Cancellation as in
        :meth:`run_bounded`."""
        check_int("Harness.run", "max_phases", max_phases)
        result = await self.run_bounded(user_message, tool_names, max_iterations, True, None)
        for _ in range(max_phases - 1):
            if result.stop_reason in _RUN_ENDS:
                break
            result = await self.run_bounded("", tool_names, max_iterations, True, None)
        return result

    async def history(self, context_label: str | None = None) -> tuple[ChatMessage, ...]:
        """A copy of one context's history, as it is once the phases asked for before
        this call have ended (it waits for them, as long as they take; cancelling the
        wait is safe). Raises ``ActorStopped`` once the harness was closed."""
        history: tuple[ChatMessage, ...] = await self.ref.ask(GetHistory(context_label), timeout=None)
        return history

    def request_stop(self, *, immediate: bool = False) -> None:
        """Signal a stop (see :class:`StopSignal`: every harness sharing it stops);
        returns at once."""
        self.stop_signal.request(immediate=immediate)

    async def aclose(self, *, now: bool = False) -> None:
        """Stop the actor; return once it has stopped. By default the phases already
        asked for run first; ``now=True`` interrupts the running phase (its asker gets
        ``Interrupted``) and drops the queued ones (``ActorStopped``). If the caller is
        cancelled the stop still happens; only the wait is abandoned."""
        await self.ref.stop(now=now)
