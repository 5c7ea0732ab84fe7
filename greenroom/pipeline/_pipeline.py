"""``Pipeline``: stage actors passing envelopes, like a production line.

Each stage of a :class:`PipelineConfig` is a :class:`StageActor` holding its
:class:`Agent`. ``await pipeline.run(raw_input)`` hands a new envelope to the first
stage; each stage processes one envelope at a time and passes it on as a message (to
the stage routing names, waiting for room: backpressure), so many envelopes are in
flight at once and the stages overlap. The envelope comes back to the caller when a
stage's route ends (no next stage), when a stage fails (``ERROR``, with the reason),
when a stage asks to ``clarify`` or ``confirm`` (paused: the caller gets the question
and resumes with :meth:`Pipeline.resume`), or when it would exceed ``max_hops``
(``TERMINATE``, so ``loop_back`` and ``replan`` never loop forever). A resumed envelope
continues at the stage that paused it; a non-idempotent tool step that already ran is
never run again. ``await pipeline.run_many(raw_inputs)`` sends several at once and wakes
once, when the last is back (one result per input, in order).

A failure while a stage holds an envelope — a stage failing (``ERROR``), or a bug in a
hook or a stage raising anything — fails that envelope only, with a clear error; the
stage keeps serving the next one. No caller waits forever: an envelope passed to a stage
that is stopped fails at once, and :meth:`Pipeline.aclose` fails every envelope still in
flight (``ActorStopped``). Messages sent to a stopped pipeline fail with ``ActorStopped``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, final

import anyio

from .._errors import GreenroomError, InvalidInput
from .._guard import NoPublicConstructor
from ..actors import Actor, ActorRef, ActorStopped, ActorSystem, MailboxFull, PendingReply
from ._agent import Agent, StageFailed
from ._config import PipelineConfig
from ._contracts import AgentOutcome
from ._envelope import Envelope

logger = logging.getLogger("greenroom.pipeline")


class PipelineError(GreenroomError):
    """An envelope could not go on: a stage raised while it held it (a bug in a hook or a
    stage), or the stage it was passed to is stopped. ``stage`` names the stage that held
    it."""

    def __init__(self, message: str, *, stage: str | None = None) -> None:
        super().__init__(message)
        self.stage = stage


@dataclass(slots=True)
class PipelineResult:
    """How an envelope left the pipeline: ``outcome`` (``SUCCESS`` at the end of its route,
    ``ERROR``, ``TERMINATE`` past the hop limit, ``CLARIFY`` / ``CONFIRM`` when paused),
    the ``stage`` it left from, and the ``question`` or ``error`` if any."""

    envelope: Envelope
    outcome: AgentOutcome
    stage: str
    question: str | None = None
    error: str | None = None
    trail: list[str] = field(default_factory=list)

    @property
    def paused(self) -> bool:
        return self.outcome.pauses()


class _Batch:
    """What :meth:`Pipeline.run_many` waits on: one result per envelope, in order."""

    __slots__ = ("abandoned", "done", "left", "results")

    def __init__(self, size: int) -> None:
        self.results: list[PipelineResult | BaseException | None] = [None] * size
        self.left = size
        self.done = anyio.Event()
        self.abandoned = False


class _Slot:
    """One envelope's answer in a :class:`_Batch`: the same calls a stage makes on a
    :class:`PendingReply` (``succeed``, ``fail``, ``wanted``); the first fill counts."""

    __slots__ = ("batch", "filled", "hop", "index")

    def __init__(self, batch: _Batch, index: int) -> None:
        self.batch = batch
        self.index = index
        self.filled = False
        self.hop: _Hop | None = None
        """The hop this slot answers (its envelope names a failure's result); let go once filled."""

    @property
    def wanted(self) -> bool:
        return not self.filled and not self.batch.abandoned

    def succeed(self, value: Any) -> None:
        self._fill(value)

    def fail(self, error: BaseException) -> None:
        self._fill(error)

    def _fill(self, value: PipelineResult | BaseException) -> None:
        if self.filled:
            return
        self.filled = True
        hop, self.hop = self.hop, None
        if isinstance(value, PipelineError) and hop is not None:  # a bug failed it: an ERROR result
            env = hop.envelope
            value = PipelineResult(
                env, AgentOutcome.ERROR, value.stage or "", error=str(value), trail=_trail(env)
            )
        batch = self.batch
        batch.results[self.index] = value
        batch.left -= 1
        if not batch.left:
            batch.done.set()


class _Hop:
    __slots__ = ("envelope", "reply")

    def __init__(self, envelope: Envelope, reply: PendingReply | _Slot) -> None:
        self.envelope = envelope
        self.reply = reply


class StageActor(Actor):
    """One stage: processes an envelope, then passes it on or returns it. A stage that
    awaits a model or tools is an :class:`InterruptibleStageActor`; a mock or service stage
    is not (a cancel scope per envelope would be its largest cost)."""

    def __init__(self, agent: Agent, pipeline: Pipeline) -> None:
        self.agent = agent
        self.pipeline = pipeline
        self.ref: ActorRef | None = None
        self.max_hops = pipeline.config.max_hops

    async def on_start(self) -> None:
        # kept: a stage cancelled at shutdown may unwind after its context is gone
        self.ref = self.context.ref

    async def receive(self, message: Any) -> Any:
        if type(message) is _Hop:  # passed on by the stage before
            hop = message
        elif isinstance(message, Envelope):  # asked: the start of an envelope's journey
            pending = self.context.reply_later()
            if pending is None:
                raise InvalidInput(
                    "an envelope must be asked (its result has to reach someone)", field="message"
                )
            hop = _Hop(message, pending)
            self.pipeline._in_flight[pending] = None  # leaves once answered (or by aclose)
        else:
            raise TypeError(f"StageActor does not handle {type(message).__name__} messages")
        # One coroutine per envelope and stage: the step is written out here, not awaited
        # as a method of its own (a coroutine frame is a measurable share of a hop).
        reply = hop.reply
        name = self.agent.name
        handed = False
        try:
            try:
                env = await self.agent.process(hop.envelope)
            except StageFailed as failed:
                env = hop.envelope
                reply.succeed(
                    PipelineResult(env, AgentOutcome.ERROR, name, error=str(failed), trail=_trail(env))
                )
                return None
            outcome = env.outcome
            if outcome is not _SUCCESS and outcome is not None:  # SUCCESS neither pauses nor ends
                if outcome in _PAUSES:
                    env.metadata["paused_at"] = name
                    reply.succeed(
                        PipelineResult(env, outcome, name, question=env.question, trail=_trail(env))
                    )
                    return None
                if outcome in _TERMINAL:
                    reply.succeed(PipelineResult(env, outcome, name, trail=_trail(env)))
                    return None
            next_stage = env.next_stage
            if next_stage is None:
                reply.succeed(PipelineResult(env, _SUCCESS, name, trail=_trail(env)))
                return None
            max_hops = self.max_hops
            if env.hop_count >= max_hops:
                reply.succeed(
                    PipelineResult(
                        env,
                        AgentOutcome.TERMINATE,
                        name,
                        error=f"stopped after {env.hop_count} hops (max_hops {max_hops})",
                        trail=_trail(env),
                    )
                )
                return None
            hop.envelope = env
            stage = self.pipeline.stages[next_stage]
            try:
                # The same hop goes on (no allocation per stage). ``tell`` while there is
                # room: handing on is then not a checkpoint, so the worker goes on to the
                # next envelope in this stage's mailbox (or to the next stage) without a
                # task switch per hop; only a full mailbox waits, in ``send`` (backpressure).
                try:
                    stage.tell(hop)
                except MailboxFull:
                    await stage.send(hop)
                handed = True  # still on its way: the books keep it
            except ActorStopped:
                reply.fail(
                    PipelineError(
                        f"stage {next_stage!r} is stopped; the envelope cannot go on", stage=next_stage
                    )
                )
        except Exception as error:  # the envelope's failure, not the stage's: it serves the next one
            logger.error("pipeline: stage %r failed on an envelope", name, exc_info=error)
            reply.fail(PipelineError(f"stage {name!r} failed: {type(error).__name__}: {error}", stage=name))
        except BaseException:
            if self.ref is not None:
                reply.fail(ActorStopped(self.ref, "was stopped while it held the envelope"))
            raise
        finally:
            if not handed and not reply.wanted:
                self.pipeline._in_flight.pop(reply, None)
        return None


class InterruptibleStageActor(StageActor):
    """A stage that waits on a model or tools: its asker giving up (or ``interrupt()``)
    cancels the call in flight."""

    interruptible = True


_SUCCESS = AgentOutcome.SUCCESS
_PAUSES = frozenset(o for o in AgentOutcome if o.pauses())
_TERMINAL = frozenset(o for o in AgentOutcome if o.is_terminal())


def _trail(env: Envelope) -> list[str]:
    return [record.stage for record in env.history]


@final
class Pipeline(metaclass=NoPublicConstructor):
    """The stage actors of one :class:`PipelineConfig`, built with :meth:`spawn` (or
    :func:`open_pipeline`, which resolves the config's agents and closes it after)."""

    _made_by = "Pipeline.spawn(system, config, agents) or open_pipeline(system, config) builds one"

    def __init__(self, config: PipelineConfig) -> None:
        self.config = config
        self.stages: dict[str, ActorRef] = {}
        self._first = config.first.name
        self._in_flight: dict[PendingReply | _Slot, None] = {}
        """The replies of envelopes on their way (a stage enters them; answered ones leave)."""

    @classmethod
    async def spawn(
        cls,
        system: ActorSystem,
        config: PipelineConfig,
        agents: dict[str, Agent],
        *,
        mailbox_size: int = 1000,
    ) -> Pipeline:
        """One stage actor per stage of ``config``; ``agents`` gives each stage's
        :class:`Agent` by name (every stage needs one, and no other)."""
        names = [stage.name for stage in config.stages]
        missing = sorted(set(names) - agents.keys())
        extra = sorted(agents.keys() - set(names))
        if missing or extra:
            raise InvalidInput(
                f"pipeline {config.name!r}: agents must match its stages "
                f"(missing {missing}, unknown {extra})",
                field="agents",
                value=sorted(agents),
            )
        pipeline = cls._create(config)
        for stage in config.stages:
            agent = agents[stage.name]
            if agent.config != stage:
                raise InvalidInput(
                    f"pipeline {config.name!r}: the agent for {stage.name!r} has another config",
                    field=f"agents.{stage.name}",
                    value=agent.config,
                )
            waits = (stage.has_llm or stage.has_tools) and not agent.use_mock
            kind = InterruptibleStageActor if waits else StageActor
            pipeline.stages[stage.name] = await system.spawn(
                lambda agent=agent, kind=kind: kind(agent, pipeline),  # type: ignore[misc]
                name=f"{config.name}:{stage.name}",
                mailbox_size=mailbox_size,
            )
        return pipeline

    async def run(self, raw_input: str, *, metadata: dict[str, Any] | None = None) -> PipelineResult:
        """Send a new envelope through, from the first stage; return how it left.

        Waits as long as the route takes (bound each stage with its model's and tools'
        timeouts; ``max_hops`` bounds the route). Cancelling the wait interrupts the
        first stage if it is still working on this envelope; a later stage finishes it.
        """
        if not isinstance(raw_input, str):
            raise InvalidInput(f"raw_input must be text (got {type(raw_input).__name__})", field="raw_input")
        env = Envelope(raw_input=raw_input, metadata=dict(metadata or {}))
        result: PipelineResult = await self.stages[self._first].ask(env, timeout=None)
        return result

    async def run_many(
        self, raw_inputs: Sequence[str], *, metadata: dict[str, Any] | None = None
    ) -> list[PipelineResult]:
        """Send a new envelope through for each of ``raw_inputs``; return how each left,
        in the same order. Each envelope travels on its own, exactly as with :meth:`run`
        (the stages overlap; one envelope's failure touches no other), but the call hands
        them to the first stage together and wakes once, when the last is back: with many
        short envelopes that is the larger part of the runtime's cost per envelope.

        Each result is a :class:`PipelineResult`; an envelope that a bug failed (the
        :class:`PipelineError` :meth:`run` raises) comes back as an ``ERROR`` result whose
        ``error`` says so, so one failure never hides the other results. Raises
        ``ActorStopped`` if the pipeline is closed, before or while the envelopes travel.
        ``InvalidInput`` names the first input that is not text (``raw_inputs[i]``), and
        then no envelope is sent.

        Waits as long as the longest route takes; handing over waits for room in the
        first stage's mailbox (backpressure). Cancelling the wait abandons the results:
        envelopes already handed over finish their routes, the rest are not sent.
        """
        if isinstance(raw_inputs, str) or not isinstance(raw_inputs, Sequence):
            raise InvalidInput(
                f"raw_inputs must be a sequence of texts (got {type(raw_inputs).__name__})",
                field="raw_inputs",
            )
        for index, raw in enumerate(raw_inputs):
            if not isinstance(raw, str):
                raise InvalidInput(
                    f"raw_inputs[{index}] must be text (got {type(raw).__name__})",
                    field=f"raw_inputs[{index}]",
                    value=raw,
                )
        if not raw_inputs:
            return []
        batch = _Batch(len(raw_inputs))
        first = self.stages[self._first]
        in_flight = self._in_flight
        base = metadata or {}
        try:
            for index, raw in enumerate(raw_inputs):
                slot = _Slot(batch, index)
                hop = slot.hop = _Hop(Envelope(raw_input=raw, metadata=dict(base)), slot)
                in_flight[slot] = None  # leaves once answered (or by aclose)
                try:
                    first.tell(hop)
                except MailboxFull:
                    await first.send(hop)
            await batch.done.wait()
        except BaseException:  # closed, or the caller gave up: nobody waits for these any more
            batch.abandoned = True
            for slot in [s for s in in_flight if type(s) is _Slot and s.batch is batch]:
                in_flight.pop(slot, None)
            raise
        results: list[PipelineResult] = []
        for value in batch.results:
            if not isinstance(value, PipelineResult):
                assert isinstance(value, BaseException), value
                raise value  # ActorStopped: the pipeline was closed while it travelled
            results.append(value)
        return results

    async def resume(self, envelope: Envelope, answer: str) -> PipelineResult:
        """Continue a paused envelope at the stage that paused it, with ``answer`` in
        ``metadata["answer"]``. ``InvalidInput`` if it is not paused."""
        stage = envelope.metadata.get("paused_at")
        if not isinstance(stage, str) or stage not in self.stages:
            raise InvalidInput("this envelope is not paused at a stage of this pipeline", field="envelope")
        envelope.metadata["paused_at"] = None
        envelope.metadata["answer"] = answer
        result: PipelineResult = await self.stages[stage].ask(envelope, timeout=None)
        return result

    async def aclose(self) -> None:
        """Stop the stages (each handles what it had accepted), then fail any envelope
        still on its way (``ActorStopped``: its caller never waits forever)."""
        try:
            for ref in self.stages.values():
                await ref.stop()
        finally:
            waiting, self._in_flight = list(self._in_flight), {}
            for reply in waiting:
                if reply.wanted:
                    reply.fail(ActorStopped(self.stages[self._first], "the pipeline was closed"))
