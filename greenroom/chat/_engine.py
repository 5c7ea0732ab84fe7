"""``LLMAgentEngine`` (spec 002): a chat model with tools decides; ``DecisionContext`` in,
``AgentDecision`` out.

One decision: a PENDING decision-log event, then up to ``max_iterations`` model calls;
each tool call the model asks for runs through the ``ToolExecutor`` (and a
tool-invocation event), except ``delete_task``, which becomes a :class:`PendingAction`
the user must confirm (``yes delete``). At most ``max_tool_calls`` calls run in one
decision; the next is refused and the model gets one tool-free turn to answer (what was
done is kept). The reply about tool results is made from the results
(``_replies``), never from the model's text. Model failures end in the spec's friendly
texts, with ``error`` set; a failure after tools already ran says first what was done
(so nobody retries an add that happened), then that the rest failed. The decision-log
event is completed at the end, with the failure's reason when there was one.

The decision type follows what the model means, not the reply's punctuation: text is
RESPOND_ONLY (a greeting ending in "?" too); a call to the engine's own
``ask_clarification`` tool, or tool results that need the user to say more ("which
one?", "more details?") with nothing done, are ASK_CLARIFICATION; tools that ran are
INVOKE_TOOL; a delete is REQUEST_CONFIRMATION.

The history sent is the last ``include_history_messages`` messages that fit
``max_history_tokens`` (estimated, calibrated by the server's counts) and the model's
context window. A request the server says does not fit its window
(:class:`~greenroom.llm.ContextTooLong`) is sent again once with the history fitted to
the window the server named (or without history); if even that does not fit, the user
is told plainly that the message is too long.

Cancellation (the runner's deadline interrupts its actor) propagates at once: the model
call and the tool call in flight are cancelled; nothing here is persisted.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Sequence
from typing import Any

import anyio
import msgspec

from .._errors import InvalidInput
from ..actors import ActorRef, ActorStopped
from ..harness import (
    BoundedLoop,
    RiskLevel,
    Sandbox,
    Spend,
    StopSignal,
    TokenBudget,
    ToolRefused,
    ToolTimedOut,
)
from ..llm import ChatModel, ContextTooLong, ModelError, Price, RateLimited, open_stream
from ..llm._price import price_of
from ..llm._tokens import TokenGauge
from ..messages import Append, ChatMessage, ChatReply, ChatRequest, ModelToolCall, ToolOutcome, ToolSpec
from . import _replies as replies
from ._kept import StoredPending
from ._stream import ReplyStreamer, ToolFinished, ToolStarted
from ._tools import ToolExecutor, ToolResult, match_task
from ._types import (
    CONSTITUTION,
    AgentDecision,
    AgentEngineConfig,
    DecisionContext,
    DecisionType,
    PendingAction,
    ToolCall,
)

logger = logging.getLogger("greenroom.chat")

CHAT_DECISION = "CHAT_DECISION"
CHAT_TOOL = "CHAT_TOOL"
CONFIRMATION = "yes delete"
BULK_DELETE = "delete_completed_tasks"
CONFIRMED_TOOLS = frozenset({"delete_task", BULK_DELETE})
"""Tools that never run without the user's confirmation."""

_encoder = msgspec.json.Encoder()


ASK_CLARIFICATION = "ask_clarification"
ASK_SPEC = ToolSpec(
    ASK_CLARIFICATION,
    "Ask the user a question when you cannot tell which task operation they want, or which task.",
    {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]},
)
"""The engine's own tool: the model says it is asking (``ASK_CLARIFICATION``), rather than
the engine guessing from a reply's punctuation (a greeting ends in "?" too)."""
_ASKING_CODES = frozenset({"AMBIGUOUS", "INVALID_INPUT"})
"""Tool results the engine answers with a question of its own ("which one?", "more details")."""


_ANY_CONFIRMATION = re.compile(r"yes delete(?: \d+ tasks?)?")


def _said(message: str) -> str:
    return " ".join(message.lower().split()).strip(" .!'\"")


def confirmation_phrase(pending: PendingAction | StoredPending) -> str:
    """What the user replies to confirm ``pending``: ``yes delete`` for one task; for a
    bulk delete, the count too (``yes delete 3 tasks``), so a reflex does not confirm it."""
    if pending.tool_name == BULK_DELETE:
        count = len(pending.parameters.get("task_ids") or ())
        return f"{CONFIRMATION} {count} {replies.tasks_word(count)}"
    return CONFIRMATION


def is_confirmation(message: str, pending: PendingAction | StoredPending | None = None) -> bool:
    """``message`` confirms ``pending`` (its exact phrase); without one, ``message`` is
    any confirmation phrase at all."""
    said = _said(message)
    if pending is None:
        return _ANY_CONFIRMATION.fullmatch(said) is not None
    return said == confirmation_phrase(pending)


class LLMAgentEngine:
    """``llm_adapter``: any ``ChatModel``; ``tool_executor``: a ``ToolExecutor`` (its
    ``tool_specs()`` when it has one: the schemas offered to the model); ``constitution``:
    the system prompt (spec 002's template by default). ``log``: the log actor the
    decision and tool-invocation events go to (internal; no user id, no secrets).

    A decision runs on the harness's :class:`~greenroom.harness.BoundedLoop`, with the
    harness's guarantees: ``budget`` (a :class:`~greenroom.harness.TokenBudget`, in tokens
    or money, shareable with agents' harnesses) admits every model call and refuses once
    spent; ``stop`` (a :class:`~greenroom.harness.StopSignal`) ends decisions before their
    next model call, or, immediate, interrupts the request actors running them; every tool
    call passes ``sandbox`` (risk level, rate limits, timeout). ``price``: what the
    model's tokens cost (default: the model's own); ``spend`` counts every call.
    """

    def __init__(
        self,
        llm_adapter: ChatModel,
        tool_executor: ToolExecutor,
        constitution: str = CONSTITUTION,
        max_iterations: int = 5,
        *,
        config: AgentEngineConfig | None = None,
        log: ActorRef | None = None,
        clock: Any = time.time,
        budget: TokenBudget | None = None,
        stop: StopSignal | None = None,
        sandbox: Sandbox | None = None,
        price: Price | None = None,
    ) -> None:
        if not isinstance(llm_adapter, ChatModel):
            raise TypeError(f"LLMAgentEngine llm_adapter must be a ChatModel, got {llm_adapter!r}")
        if not isinstance(tool_executor, ToolExecutor):
            raise TypeError(f"LLMAgentEngine tool_executor must be a ToolExecutor, got {tool_executor!r}")
        if not isinstance(constitution, str) or not constitution.strip():
            raise InvalidInput(
                f"LLMAgentEngine constitution must be non-empty text, got {constitution!r:.80}",
                field="constitution",
            )
        self.config = config if config is not None else AgentEngineConfig(max_iterations=max_iterations)
        self.llm = llm_adapter
        self.tools = tool_executor
        self.constitution = constitution
        self.log = log
        self.clock = clock
        self.tokens = TokenGauge()
        """Prompt-size estimates, calibrated by the model's reported usage."""
        self.context_window = self.config.context_window
        """The model's window in tokens: configured, or learned from a ``ContextTooLong``."""
        self.budget = budget if budget is not None else TokenBudget()
        self.stop = stop if stop is not None else StopSignal()
        self.sandbox = sandbox if sandbox is not None else Sandbox()
        self.price = price if price is not None else price_of(llm_adapter)
        self.budget.check_priced("LLMAgentEngine", self.price)
        self.spend = Spend()
        """Every model call's usage and cost, over the engine's lifetime."""

    def _specs(self) -> tuple[ToolSpec, ...]:
        specs = getattr(self.tools, "tool_specs", None)
        if callable(specs):
            offered = tuple(specs())
        else:
            offered = tuple(ToolSpec(name) for name in self.tools.get_available_tools())
        return (*offered, ASK_SPEC)

    async def process_message(
        self, context: DecisionContext, *, streamer: ReplyStreamer | None = None
    ) -> AgentDecision:
        """Decide what to do about ``context.message`` (see the module docstring). With a
        ``streamer``, the model's calls stream: its words go to the streamer as they are
        made, and each tool call's start and end."""
        decision_id = uuid.uuid4().hex
        started = time.monotonic()
        await self._event(
            CHAT_DECISION,
            {
                "decision_id": decision_id,
                "conversation_id": context.conversation_id,
                "message": context.message[:500],
                "intent_type": "LLM_PROCESSING",
                "decision_type": "PENDING",
                "outcome_category": "PENDING",
                "duration_ms": 0,
            },
        )
        done = _Done(Spend(into=self.spend))
        done.streamer = streamer
        reason: str | None = None
        try:
            decision = await self._decide(context, decision_id, done)
        except ContextTooLong as error:
            reason = f"context_length_exceeded: {error}"
            logger.warning("chat: decision %s: the request does not fit the model: %s", decision_id, error)
            decision = _failed(replies.TOO_LONG, done)
        except RateLimited as error:
            reason = f"rate_limited: {error}"
            logger.warning("chat: decision %s: %s", decision_id, error)
            decision = _failed(replies.RATE_LIMITED, done)
        except ModelError as error:
            reason = f"{type(error).__name__}: {error}"
            logger.warning("chat: decision %s: the model call failed: %s", decision_id, error)
            decision = _failed(replies.LLM_FAILED, done)
        except anyio.get_cancelled_exc_class():
            raise
        except Exception as error:  # a model or tool adapter bug: a friendly text, the details in the log
            reason = f"{type(error).__name__}: {error}"[:500]
            logger.exception("chat: decision %s failed", decision_id)
            decision = _failed(replies.LLM_FAILED, done)
        payload: dict[str, Any] = {
            "decision_id": decision_id,
            "conversation_id": context.conversation_id,
            "intent_type": "LLM",
            "decision_type": decision.decision_type.value,
            "outcome_category": "ERROR" if decision.error else "SUCCESS",
            "tool_calls": len(decision.records),
            "llm_calls": done.spend.calls,
            "total_tokens": done.spend.total_tokens,
            "cost": round(done.spend.cost, 6),
            "duration_ms": int((time.monotonic() - started) * 1000),
        }
        if reason is not None or done.note is not None:
            payload["reason"] = reason if reason is not None else done.note
        await self._event(CHAT_DECISION, payload)
        return decision

    async def _send(self, messages: list[ChatMessage], done: _Done, request: ChatRequest) -> ChatReply:
        """One model call, under the loop's admission: the reply. A request the server
        says is too long is sent again with the history (``messages[1 : 1 + history]``)
        fitted to the window it named, or dropped; ``messages`` and ``done.history`` are
        trimmed in place. Raises ``ContextTooLong`` when even that does not fit."""
        while True:
            history = done.history
            try:
                # once tools ran, the answer is made from their results, never from the
                # model's words: those are not streamed
                streamer = None if (done.said or done.records) else done.streamer
                reply = await self._call(request, streamer)
            except ContextTooLong as error:
                if error.limit is not None:
                    self.context_window = error.limit
                if history == 0:
                    raise
                past = messages[1 : 1 + history]
                rest = [messages[0], *messages[1 + history :]]
                kept = self.tokens.fit(past, self._room(rest, request.tools)) if error.limit else []
                if len(kept) >= history:  # the estimate says it fits: trust the server, drop it all
                    kept = []
                logger.info(
                    "chat: the request did not fit the model's window; sent again with %d of %d "
                    "history messages",
                    len(kept),
                    history,
                )
                messages[1 : 1 + history] = kept
                done.history = len(kept)
                request = msgspec.structs.replace(request, messages=tuple(messages))
                continue
            self.tokens.observe(request, reply.usage)
            return reply

    async def _call(self, request: ChatRequest, streamer: ReplyStreamer | None) -> ChatReply:
        """One model call: whole, or streamed to ``streamer`` (its words as they come)."""
        timeout = float(self.config.timeout_seconds)
        if streamer is None:
            return await self.llm.chat(request, timeout=timeout)
        async with open_stream(self.llm, request, timeout=timeout) as stream:
            async for delta in stream:
                if delta.text:
                    await streamer.text(delta.text)
        return stream.reply

    def _room(self, rest: list[ChatMessage], tools: tuple[ToolSpec, ...]) -> int:
        """Tokens the history may take: its own budget, and what the model's window
        leaves beside the rest of the request and the reply."""
        config = self.config
        room = config.max_history_tokens
        if self.context_window is not None:
            reply = config.max_tokens if config.max_tokens is not None else 512
            room = min(room, self.context_window - self.tokens.estimate(rest, tools) - reply)
        return max(0, room)

    async def _decide(self, context: DecisionContext, decision_id: str, done: _Done) -> AgentDecision:
        """The turn: a confirmation of what waits for one, or the model asked — and its
        tool calls run — until it answers, asks the user, or a limit ends the turn."""
        if self.stop.requested:  # as a harness phase does: nothing starts after a stop
            done.note = "stop_requested"
            return _failed(replies.STOPPED, done)
        confirmed = await self._confirmed(context, decision_id, done)
        if confirmed is not None:
            return confirmed
        config = self.config
        specs = self._specs()
        messages = self._conversation(context, specs, done)
        loop = BoundedLoop(
            self.llm,
            budget=self.budget,
            stop=self.stop,
            sandbox=self.sandbox,
            max_iterations=config.max_iterations,
            price=self.price,
            spend=done.spend,
        )
        while True:
            allowed = done.tools_allowed
            request = ChatRequest(
                tuple(messages),
                specs if allowed else (),
                "auto" if allowed else "none",
                temperature=config.temperature,
                max_tokens=config.max_tokens,
            )
            reply = await loop.call(request, lambda request: self._send(messages, done, request))
            if reply is None:
                return _ended(loop.stop_reason, done)
            if not reply.tool_calls or not allowed:
                return _answered(reply, done)
            asking = next((call for call in reply.tool_calls if call.name == ASK_CLARIFICATION), None)
            if asking is not None:  # the model asks the user: nothing else of this turn runs
                return _asking_user(asking, done)
            messages.append(ChatMessage("assistant", reply.text, reply.tool_calls))
            decided = await self._run_calls(reply.tool_calls, context, decision_id, messages, done)
            if decided is not None:
                return decided

    async def _confirmed(
        self, context: DecisionContext, decision_id: str, done: _Done
    ) -> AgentDecision | None:
        """The turn when the message confirms the action waiting for it (run now, or too
        late); ``None`` when it does not."""
        pending = context.pending_confirmation
        if pending is None or not is_confirmation(context.message, pending):
            return None
        if pending.expires_at < self.clock():
            return AgentDecision(DecisionType.RESPOND_ONLY, response_text=replies.NOTHING_PENDING)
        result = await self._run_tool(
            decision_id, pending.tool_name, pending.parameters, context.user_id, done.records, done.streamer
        )
        return AgentDecision(
            DecisionType.INVOKE_TOOL,
            tool_calls=[ToolCall(pending.tool_name, pending.parameters)],
            response_text=replies.for_result(pending.tool_name, result),
            records=done.records,
        )

    def _conversation(
        self, context: DecisionContext, specs: tuple[ToolSpec, ...], done: _Done
    ) -> list[ChatMessage]:
        """The request's messages: the constitution, as much recent history as fits, the
        user's message."""
        config = self.config
        recent = (
            context.message_history[-config.include_history_messages :]
            if config.include_history_messages
            else ()
        )
        system = ChatMessage("system", self.constitution)
        user = ChatMessage("user", context.message)
        past = self.tokens.fit(
            [ChatMessage(m.role, m.content) for m in recent], self._room([system, user], specs)
        )
        done.history = len(past)
        return [system, *past, user]

    async def _run_calls(
        self,
        calls: Sequence[ModelToolCall],
        context: DecisionContext,
        decision_id: str,
        messages: list[ChatMessage],
        done: _Done,
    ) -> AgentDecision | None:
        """Run the reply's tool calls in order, each result going back to the model; the
        turn ends here for a destructive call (it asks for a confirmation) or when nothing
        could run (said now, not guessed on). ``None``: the model is asked again."""
        said = done.said
        for call in calls:
            result = await self._call_result(call, context, decision_id, done)
            if isinstance(result, AgentDecision):
                return result
            done.asked = done.asked or (not result.success and result.error_code in _ASKING_CODES)
            content = _encoder.encode(msgspec.structs.asdict(result)).decode()
            messages.append(ChatMessage("tool", content, tool_call_id=call.id))
        if said and not done.records and not done.limit_hit:
            # nothing ran (not found, ambiguous, bad arguments): say so now, not guess on;
            # "which one?" and "more details?" are the engine asking the user
            text = replies.combine(said)
            if done.asked:
                return AgentDecision(
                    DecisionType.ASK_CLARIFICATION, clarification_question=text, response_text=text
                )
            return AgentDecision(DecisionType.RESPOND_ONLY, response_text=text)
        return None

    async def _call_result(
        self, call: ModelToolCall, context: DecisionContext, decision_id: str, done: _Done
    ) -> ToolResult | AgentDecision:
        """One tool call's result (what was said of it noted in ``done``), or the turn's
        end when the call needs the user to confirm it."""
        said = done.said
        if call.arguments_error is not None:  # malformed arguments: ask, do not guess
            result = ToolResult(
                success=False, error="arguments were not an object", error_code="INVALID_INPUT"
            )
        elif call.name in CONFIRMED_TOOLS:
            ask = await self._confirmation(call.name, call.arguments, context.user_id)
            if isinstance(ask, PendingAction):
                return _asking_to_confirm(ask, done)
            result = ask  # not found, ambiguous: said as such
        elif len(done.records) >= self.config.max_tool_calls:  # the 11th: refused; one tool-free turn
            done.limit_hit = True
            done.tools_allowed = False
            return ToolResult(success=False, error="tool call limit reached", error_code="INVALID_INPUT")
        else:
            result = await self._run_tool(
                decision_id, call.name, call.arguments, context.user_id, done.records, done.streamer
            )
            done.calls.append(ToolCall(call.name, _visible(call.arguments)))
        said.append(replies.for_result(call.name, result))
        return result

    async def _confirmation(
        self, tool_name: str, arguments: dict[str, Any], user_id: str
    ) -> PendingAction | ToolResult:
        """Resolve the task a destructive call means, so the confirmation names it and
        is bound to exactly that task."""
        if tool_name == BULK_DELETE:
            return await self._bulk_confirmation(user_id)
        listing = await self._execute("list_tasks", {"status": "all"}, user_id)
        if not listing.success or not isinstance(listing.data, list):
            return ToolResult(success=False, error="listing failed", error_code="SYSTEM_ERROR")
        task_id = arguments.get("task_id")
        found = match_task(
            listing.data, task_id if isinstance(task_id, int) else None, arguments.get("title")
        )
        if isinstance(found, dict) and "success" in found:
            return msgspec.convert(found, ToolResult)
        return PendingAction(
            tool_name,
            {"task_id": found["id"]},
            str(found.get("title", "")),
            self.clock() + self.config.confirmation_seconds,
        )

    async def _bulk_confirmation(self, user_id: str) -> PendingAction | ToolResult:
        """Bind a bulk delete to the completed tasks there are now: the confirmation
        removes exactly those (not one completed after it was asked), once."""
        listing = await self._execute("list_tasks", {"status": "completed"}, user_id)
        if not listing.success or not isinstance(listing.data, list):
            return ToolResult(success=False, error="listing failed", error_code="SYSTEM_ERROR")
        found = [t for t in listing.data if isinstance(t, dict) and isinstance(t.get("id"), int)]
        if not found:
            return ToolResult(
                success=False, error="no completed tasks", error_code="NOT_FOUND", data={"none": "completed"}
            )
        return PendingAction(
            BULK_DELETE,
            {"task_ids": [t["id"] for t in found]},
            "\n".join(str(t.get("title", "")) for t in found[:5]),  # what the prompt shows
            self.clock() + self.config.confirmation_seconds,
        )

    async def _run_tool(
        self,
        decision_id: str,
        tool_name: str,
        parameters: dict[str, Any],
        user_id: str,
        records: list[ToolOutcome],
        streamer: ReplyStreamer | None = None,
    ) -> ToolResult:
        visible = _visible(parameters)
        if streamer is not None:
            await streamer.event(ToolStarted(tool_name))
        started = time.perf_counter()
        result = await self._execute(tool_name, visible, user_id)
        duration = int((time.perf_counter() - started) * 1000)
        if streamer is not None:
            await streamer.event(ToolFinished(tool_name, result.success, duration))
        records.append(result.outcome(tool_name, visible, duration))
        await self._event(
            CHAT_TOOL,
            {
                "decision_id": decision_id,
                "tool_name": tool_name,
                "parameters": visible,
                "result": _logged(result.data),
                "success": result.success,
                "error_code": result.error_code,
                "error_message": result.error,
                "duration_ms": duration,
            },
        )
        return result

    async def _execute(self, tool_name: str, parameters: dict[str, Any], user_id: str) -> ToolResult:
        """One tool call through the sandbox (risk level, rate limits, timeout), as a
        harness's are; a refusal or a timeout is a ``SYSTEM_ERROR`` result."""
        risk_of = getattr(self.tools, "tool_risk", None)
        risk = risk_of(tool_name) if callable(risk_of) else RiskLevel.WRITES
        try:
            return await self.sandbox.guard(
                tool_name, risk, lambda: self.tools.execute(tool_name, parameters, user_id)
            )
        except (ToolRefused, ToolTimedOut) as refused:
            logger.warning("chat: tool %r: %s", tool_name, refused)
            return ToolResult(success=False, error=str(refused), error_code="SYSTEM_ERROR")

    async def _event(self, kind: str, payload: dict[str, Any]) -> None:
        """An internal event through the log actor, waiting for room (never dropped)."""
        if self.log is None:
            return
        try:
            await self.log.send(Append(type=kind, payload=payload))
        except ActorStopped:
            logger.warning("chat: the log actor is stopped; a %s event was not logged", kind)


MAX_LOGGED_RESULT = 8192
"""Bytes of a tool's result a tool-invocation event carries; a larger one is summarised."""


def _logged(data: Any) -> Any:
    """The tool's result as its event carries it (spec 002's ``result``): the data itself,
    or, past ``MAX_LOGGED_RESULT`` bytes (a long task list), how big it was."""
    encoded = _encoder.encode(data)
    if len(encoded) <= MAX_LOGGED_RESULT:
        return data
    summary: dict[str, Any] = {"truncated": True, "bytes": len(encoded)}
    if isinstance(data, list):
        summary["items"] = len(data)
    return summary


def _visible(parameters: dict[str, Any]) -> dict[str, Any]:
    """The parameters as recorded and logged: never a user id."""
    return {k: v for k, v in parameters.items() if k != "user_id"}


class _Done:
    """What a decision did before it ended: what an error reply reports first."""

    __slots__ = (
        "asked", "calls", "history", "limit_hit", "note", "records", "said", "spend", "streamer",
        "tools_allowed",
    )  # fmt: skip

    def __init__(self, spend: Spend) -> None:
        self.records: list[ToolOutcome] = []
        self.said: list[str] = []
        """The replies about what was done, in order."""
        self.calls: list[ToolCall] = []
        self.tools_allowed = True
        """Tools are offered (no more once the call limit was reached: one tool-free turn)."""
        self.limit_hit = False
        self.asked = False
        """A result the engine answers with a question ("which one?")."""
        self.note: str | None = None
        self.history = 0
        """History messages the request being built holds (after ``system``)."""
        self.spend = spend
        """This decision's model calls: tokens and cost (counted into the engine's)."""
        self.streamer: ReplyStreamer | None = None
        """Where its model's words and tool events go as they happen (``None``: nowhere)."""


def _failed(text: str, done: _Done) -> AgentDecision:
    """The friendly error text; after tools ran, first what they did, then that the
    rest failed (the error stays set: the request did not finish)."""
    if not done.records:
        return AgentDecision(DecisionType.RESPOND_ONLY, response_text=text, error=text)
    return AgentDecision(
        DecisionType.INVOKE_TOOL,
        tool_calls=done.calls or None,
        response_text=replies.combine(done.said, replies.REST_FAILED.format(cause=replies.brief(text))),
        records=done.records,
        error=text,
    )


def _answered(reply: ChatReply, done: _Done) -> AgentDecision:
    """The turn's end on a reply without tool calls: what the tools did (or that the limit
    was reached), a question back when every call needs the user to say more, else the
    model's own words (or why there are none)."""
    records = done.records
    if records or done.limit_hit:
        text = replies.combine(done.said, replies.TOO_MANY_CALLS if done.limit_hit else None)
        if done.asked and not any(record.ok for record in records):
            # every call that ran needs the user to say more: the turn asks
            return AgentDecision(
                DecisionType.ASK_CLARIFICATION,
                tool_calls=done.calls,
                clarification_question=text,
                response_text=text,
                records=records,
            )
        return AgentDecision(
            DecisionType.INVOKE_TOOL, tool_calls=done.calls, response_text=text, records=records
        )
    if not reply.text.strip():
        # nothing to show: say that, not that something broke
        done.note = f"the model's reply was empty (finish_reason {reply.finish_reason!r})"
        text = replies.CUT_OFF if reply.finish_reason == "length" else replies.NO_ANSWER
        return AgentDecision(DecisionType.RESPOND_ONLY, response_text=text)
    return AgentDecision(DecisionType.RESPOND_ONLY, response_text=replies.clean_text(reply.text))


def _asking_user(asking: ModelToolCall, done: _Done) -> AgentDecision:
    """The model's question to the user ends the turn (after what was done so far)."""
    question = replies.clean_text(str(asking.arguments.get("question") or ""))
    if question == replies.SYSTEM_ERROR:
        question = replies.INVALID.format(what="what you have in mind")
    text = replies.combine([*done.said, question]) if done.said else question
    return AgentDecision(
        DecisionType.ASK_CLARIFICATION,
        tool_calls=done.calls or None,
        clarification_question=question,
        response_text=text,
        records=done.records,
    )


def _asking_to_confirm(ask: PendingAction, done: _Done) -> AgentDecision:
    """A destructive call waits for the user's confirmation, naming exactly what it does."""
    if ask.tool_name == BULK_DELETE:
        count = len(ask.parameters["task_ids"])
        prompt = replies.confirm_bulk(count, ask.title.split("\n"), confirmation_phrase(ask))
    else:
        prompt = replies.CONFIRM_DELETE.format(title=replies.quote(ask.title))
    return AgentDecision(
        DecisionType.REQUEST_CONFIRMATION,
        tool_calls=done.calls or None,
        response_text=replies.combine([*done.said, prompt]),
        pending_action=ask,
        records=done.records,
    )


def _ended(stop_reason: str | None, done: _Done) -> AgentDecision:
    """The turn's end when the loop stopped asking: a spent budget or a stop (an error),
    or too many iterations (what was done, and that the request was too complex)."""
    if stop_reason != "max_iterations":  # the budget is spent, or a stop came
        done.note = stop_reason
        return _failed(replies.STOPPED if stop_reason == "stop_requested" else replies.BUDGET_SPENT, done)
    return AgentDecision(
        DecisionType.RESPOND_ONLY,
        tool_calls=done.calls or None,
        response_text=replies.combine(done.said, replies.TOO_COMPLEX),
        records=done.records,
        error=replies.TOO_COMPLEX,
    )
