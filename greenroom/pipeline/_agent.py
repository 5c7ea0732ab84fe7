"""``Agent`` (spec 004): one configuration-driven stage, run on an envelope.

``await agent.process(env)`` runs the lifecycle the spec draws, step by step: record the
start (``hop_count`` + 1, an ``AGENT_STARTED`` event), the pre-process hook, the main
processing, the required-output check, the output set in the envelope, the
post-process hook, routing, and the completion record (an ``AGENT_COMPLETED`` event with
status, duration and error). A hook may return the envelope or ``None`` (the envelope as
it changed it in place). A stage with ``has_policies`` also holds its output to the
visibility policy: an output that tries to surface text to the user (only the narrator
may) fails the stage. Processing modes, in the spec's priority: the mock handler
(``use_mock``), then the LLM (``has_llm``), then tools (``has_tools``), then the service
default (no output; hooks only).

A failure at any step is a :class:`StageFailed` naming the stage (and the field, for a
missing output field or a reply that is not JSON); the envelope records it. Cancellation
propagates untouched (the stage actor's interruption, or a caller giving up).
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, runtime_checkable

import anyio
import msgspec

from .._errors import GreenroomError, InvalidInput
from ..actors import ActorRef, ActorStopped
from ..llm import ChatModel
from ..log._policy import surfacing_flag
from ..messages import Append, ChatMessage, ChatRequest
from ._config import AgentConfig
from ._contracts import (
    AgentOutcome,
    IdempotencyClass,
    StandardToolResult,
    ToolErrorDetails,
    ToolStatus,
    normalize_tool_result,
)
from ._envelope import Envelope, StageRecord

AGENT_STARTED = "AGENT_STARTED"
AGENT_COMPLETED = "AGENT_COMPLETED"

ProcessHook = Callable[[Envelope], Envelope | Awaitable[Envelope]]
OutputHook = Callable[[Envelope, dict[str, Any]], Envelope | Awaitable[Envelope]]
MockHandler = Callable[[Envelope], dict[str, Any] | Awaitable[dict[str, Any]]]


class StageFailed(GreenroomError):
    """A stage could not produce its output; ``stage`` and ``field`` say where."""

    def __init__(self, stage: str, message: str, *, field: str | None = None) -> None:
        super().__init__(f"stage {stage!r}: {message}")
        self.stage = stage
        self.field = field


@runtime_checkable
class PromptRegistry(Protocol):
    def get(self, key: str, context: dict[str, Any]) -> str: ...


@runtime_checkable
class StageToolExecutor(Protocol):
    """Spec 004's tool executor: a tool's name and parameters in, its result out (any
    legacy shape: it is normalized to a ``StandardToolResult``)."""

    async def execute(self, tool_name: str, params: dict[str, Any]) -> Any: ...


async def _maybe_await(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class Agent:
    """``Agent(config, logger, llm, tools)``: refuses an invalid config, ``has_llm``
    without a model and ``has_tools`` without a tool executor (``InvalidInput`` naming
    the field). ``prompts``: a ``PromptRegistry`` (else a built-in prompt); ``events``:
    the log actor the lifecycle events go to (waiting for room, never dropped)."""

    def __init__(
        self,
        config: AgentConfig,
        logger: logging.Logger | None = None,
        llm: ChatModel | None = None,
        tools: StageToolExecutor | None = None,
        *,
        prompts: PromptRegistry | None = None,
        events: ActorRef | None = None,
    ) -> None:
        if not isinstance(config, AgentConfig):
            raise InvalidInput(
                f"Agent config must be an AgentConfig, got {type(config).__name__}",
                field="config",
                value=config,
            )
        if config.has_llm and llm is None:
            raise InvalidInput(
                f"stage {config.name!r} has_llm but no model was given", field="llm", value=None
            )
        if llm is not None and not isinstance(llm, ChatModel):
            raise InvalidInput(
                f"stage {config.name!r}: llm must be a ChatModel, got {llm!r}", field="llm", value=llm
            )
        if config.has_tools and tools is None:
            raise InvalidInput(
                f"stage {config.name!r} has_tools but no tool executor was given", field="tools", value=None
            )
        self.config = config
        self.name = config.name
        self.logger = logger or logging.getLogger(f"greenroom.pipeline.{config.name}")
        self.llm = llm
        self.tools = tools
        self.prompts = prompts
        self.events = events
        self.use_mock = False
        self.pre_process: ProcessHook | None = None
        self.post_process: OutputHook | None = None
        self.mock_handler: MockHandler | None = None

    def set_event_context(self, events: ActorRef | None) -> None:
        self.events = events

    async def process(self, env: Envelope) -> Envelope:
        """Run this stage on ``env`` (see the module docstring). Sets ``env.outcome``
        and ``env.next_stage``; raises :class:`StageFailed` (recorded in the envelope)."""
        config = self.config
        env.hop_count += 1
        started = time.perf_counter()
        if self.events is not None:
            await self._emit(
                AGENT_STARTED, {"stage": self.name, "envelope_id": env.envelope_id, "hop": env.hop_count}
            )
        try:
            if self.pre_process is not None:
                env = self._hooked(env, await _maybe_await(self.pre_process(env)), "pre_process")
            output = await self._main(env)
            if not isinstance(output, dict):
                raise StageFailed(self.name, f"its output must be an object, got {type(output).__name__}")
            missing = [name for name in config.required_output_fields if name not in output]
            if missing:
                raise StageFailed(self.name, f"output lacks required field {missing[0]!r}", field=missing[0])
            if config.has_policies:
                flag = surfacing_flag(output, "output")
                if flag is not None:  # only the narrator may show text to users
                    raise StageFailed(self.name, f"output tries to reach the user ({flag})", field=flag)
            env.set_output(config.key, output)
            if self.post_process is not None:
                env = self._hooked(env, await _maybe_await(self.post_process(env, output)), "post_process")
            env.outcome, env.next_stage, env.question = self._route(output)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as error:
            failure = (
                error
                if isinstance(error, StageFailed)
                else StageFailed(self.name, f"{type(error).__name__}: {error}")
            )
            duration = int((time.perf_counter() - started) * 1000)
            env.history.append(StageRecord(self.name, AgentOutcome.ERROR.value, duration, str(failure)))
            env.outcome, env.next_stage = AgentOutcome.ERROR, None
            await self._completed(env, "error", duration, str(failure)[:500])
            raise failure from (None if failure is error else error)
        duration = int((time.perf_counter() - started) * 1000)
        shown = msgspec.json.encode(env.outputs.get(config.key, {})).decode()
        summary = shown if len(shown) <= 120 else shown[:119] + "…"
        env.history.append(StageRecord(self.name, env.outcome.value, duration, None, summary))
        await self._completed(env, env.outcome.value, duration, None)
        return env

    def _hooked(self, env: Envelope, returned: Any, hook: str) -> Envelope:
        """What a hook hands on: the envelope it returned, or — returning ``None``, as a
        function that changes its argument in place does — the envelope as it changed it."""
        if returned is None:
            return env
        if not isinstance(returned, Envelope):
            raise StageFailed(
                self.name,
                f"{hook} must return the envelope or None, got {type(returned).__name__}",
                field=hook,
            )
        return returned

    # -- the processing modes ---------------------------------------------------------------

    async def _main(self, env: Envelope) -> dict[str, Any]:
        config = self.config
        if self.use_mock and self.mock_handler is not None:
            return dict(await _maybe_await(self.mock_handler(env)))
        if config.has_llm:
            return await self._llm(env)
        if config.has_tools:
            return await self._tools(env)
        return {}

    def _prompt(self, env: Envelope) -> str:
        config = self.config
        context = {
            "raw_input": env.raw_input,
            "outputs": env.outputs,
            "metadata": env.metadata,
            "stage": self.name,
        }
        if self.prompts is not None and config.prompt_key:
            return self.prompts.get(config.prompt_key, context)
        fields = ", ".join(config.required_output_fields) or "any fields you need"
        return (
            f"You are the '{self.name}' stage of a pipeline.\n"
            f"Input: {env.raw_input}\n"
            f"Outputs of earlier stages: {msgspec.json.encode(env.outputs).decode()}\n"
            f"Answer with one JSON object with these fields: {fields}."
        )

    async def _llm(self, env: Envelope) -> dict[str, Any]:
        assert self.llm is not None
        config = self.config
        request = ChatRequest(
            (ChatMessage("user", self._prompt(env)),),
            temperature=config.temperature,
            max_tokens=config.max_tokens,
        )
        reply = await self.llm.chat(request)
        try:
            output = msgspec.json.decode(reply.text.strip() or "null")
        except msgspec.DecodeError:
            raise StageFailed(self.name, "the model's reply is not JSON", field="reply") from None
        if not isinstance(output, dict):
            raise StageFailed(self.name, "the model's reply is not a JSON object", field="reply")
        return output

    async def _tools(self, env: Envelope) -> dict[str, Any]:
        """Run the plan's steps (``outputs["plan"]["steps"]``: ``{"tool", "parameters"}``)."""
        assert self.tools is not None
        config = self.config
        plan = env.outputs.get("plan") or {}
        steps = plan.get("steps") if isinstance(plan, dict) else None
        if not isinstance(steps, list):
            raise StageFailed(self.name, "there is no plan (outputs['plan']['steps'])", field="plan")
        results: list[dict[str, Any]] = []
        for index, step in enumerate(steps):
            name = step.get("tool") if isinstance(step, dict) else None
            params = step.get("parameters", {}) if isinstance(step, dict) else {}
            started = time.perf_counter()
            if not isinstance(name, str) or not isinstance(params, dict):
                result = StandardToolResult.failure(
                    ToolErrorDetails("invalid_step", f"step {index} is not a tool call")
                )
            elif name not in config.allowed_tools:
                result = StandardToolResult.failure(
                    ToolErrorDetails("access_denied", f"stage {self.name!r} may not use tool {name!r}")
                )
            else:
                effect = f"{self.name}:{index}:{name}"
                once = name in config.non_idempotent_tools or self._non_idempotent(name)
                if once and effect in env.done_effects:
                    results.append(
                        {"tool": name, "status": "skipped", "reason": "already ran for this envelope"}
                    )
                    continue
                if once:
                    env.done_effects.add(effect)  # at most once, even if it fails half-way
                try:
                    result = normalize_tool_result(await self.tools.execute(name, dict(params)))
                except anyio.get_cancelled_exc_class():
                    raise
                except Exception as error:
                    result = StandardToolResult.failure(
                        ToolErrorDetails.from_exception(error, recoverable=True)
                    )
            entry = {
                "tool": name,
                **result.to_dict(),
                "duration_ms": int((time.perf_counter() - started) * 1000),
            }
            results.append(entry)
        failed = sum(1 for r in results if r.get("status") == ToolStatus.ERROR.value)
        return {"results": results, "succeeded": len(results) - failed, "failed": failed}

    def _non_idempotent(self, name: str) -> bool:
        """What the tool layer says of a tool (a harness tool's risk level), if it says."""
        judge = getattr(self.tools, "idempotency", None)
        return callable(judge) and judge(name) is IdempotencyClass.NON_IDEMPOTENT

    # -- routing and events -----------------------------------------------------------------

    def _route(self, output: dict[str, Any]) -> tuple[AgentOutcome, str | None, str | None]:
        raw = output.get("outcome", AgentOutcome.SUCCESS.value)
        try:
            outcome = AgentOutcome(raw)
        except ValueError:
            raise StageFailed(self.name, f"unknown outcome {raw!r}", field="outcome") from None
        question = output.get("question") if isinstance(output.get("question"), str) else None
        for rule in self.config.routing_rules:
            if output.get(rule.condition) == rule.value:
                return outcome, rule.target, question
        return outcome, self.config.default_next, question

    async def _completed(self, env: Envelope, status: str, duration: int, error: str | None) -> None:
        if self.events is None:
            return
        payload = {
            "stage": self.name,
            "envelope_id": env.envelope_id,
            "status": status,
            "duration_ms": duration,
        }
        await self._emit(AGENT_COMPLETED, {**payload, "error": error})

    async def _emit(self, kind: str, payload: dict[str, Any]) -> None:
        if self.events is None:
            return
        try:
            await self.events.send(Append(type=kind, payload=payload))
        except ActorStopped:
            self.logger.warning("the log actor is stopped; a %s event was not logged", kind)
