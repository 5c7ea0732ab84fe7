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
never run again.

A failure while a stage holds an envelope — a stage failing (``ERROR``), or a bug in a
hook or a stage raising anything — fails that envelope only, with a clear error; the
stage keeps serving the next one. No caller waits forever: an envelope passed to a stage
that is stopped fails at once, and :meth:`Pipeline.aclose` fails every envelope still in
flight (``ActorStopped``). Messages sent to a stopped pipeline fail with ``ActorStopped``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, final

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
    stage), or the stage it was passed to is stopped."""


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


class _Hop:
    __slots__ = ("envelope", "reply")

    def __init__(self, envelope: Envelope, reply: PendingReply) -> None:
        self.envelope = envelope
        self.reply = reply


class StageActor(Actor):
    """One stage: processes an envelope, then passes it on or returns it. A stage that
    awaits a model or tools is an :class:`InterruptibleStageActor`; a mock or service stage
    is not (a cancel scope per envelope would be its largest cost)."""

    def __init__(self, agent: Agent, pipeline: Pipeline) -> None:
        self.agent = agent
        self.pipeline = pipeline

    async def receive(self, message: Any) -> Any:
        if type(message) is _Hop:  # passed on by the stage before
            hop = message
        elif isinstance(message, Envelope):  # asked: the start of an envelope's journey
            reply = self.context.reply_later()
            if reply is None:
                raise InvalidInput(
                    "an envelope must be asked (its result has to reach someone)", field="message"
                )
            hop = _Hop(message, reply)
            self.pipeline._in_flight[reply] = None  # leaves once answered (or by aclose)
        else:
            raise TypeError(f"StageActor does not handle {type(message).__name__} messages")
        # One coroutine per envelope and stage: the step is written out here, not awaited
        # as a method of its own (a coroutine frame is a measurable share of a hop).
        reply = hop.reply
        name = self.agent.name
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
            max_hops = self.pipeline.config.max_hops
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
            except ActorStopped:
                reply.fail(PipelineError(f"stage {next_stage!r} is stopped; the envelope cannot go on"))
        except Exception as error:  # the envelope's failure, not the stage's: it serves the next one
            logger.error("pipeline: stage %r failed on an envelope", name, exc_info=error)
            reply.fail(PipelineError(f"stage {name!r} failed: {type(error).__name__}: {error}"))
        except BaseException:
            reply.fail(ActorStopped(self.context.ref, "was stopped while it held the envelope"))
            raise
        finally:
            if not reply.wanted:
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
        self._in_flight: dict[PendingReply, None] = {}
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
