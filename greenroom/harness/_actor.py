"""``HarnessActor``: bounded phases of model and tool work, one history per context label.

Ask it ``RunBounded(...)``; the reply is a :class:`PhaseResult`. Phases run one at a
time, in mailbox order. A model error (``ModelError``, or anything the model raised)
fails that ask and leaves the histories as they were before the failed turn; the actor
keeps running. ``GetHistory(label)`` answers a copy of one context's history.

The actor is interruptible: an immediate stop (``StopSignal.request(immediate=True)``)
interrupts the phase it is running, which ends at once with ``stop_requested`` (the
model call and tool call in flight cancelled, the unfinished turn discarded). An asker
that gives up (cancelled, or its ask timed out) interrupts its phase the same way, and
a phase still queued when its asker gave up is never started.

Messages sent before ``stop()`` are handled in order; messages sent after are refused;
``stop(now=True)`` interrupts the running phase and drops the queued ones.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import anyio
import msgspec

from .._checks import check_int, check_name
from .._errors import InvalidInput
from .._files import replace_durably
from ..actors import Actor, ActorRef, ActorStopped, MailboxFull
from ..llm import ChatModel, Price
from ..llm._price import price_of
from ..messages import (
    HARNESS_PHASE,
    Append,
    CallTiming,
    ChatMessage,
    ChatReply,
    ChatRequest,
    GetHistory,
    RecordError,
    RunBounded,
    ToolOutcome,
    ToolSpec,
    convert,
)
from ._budget import TokenBudget
from ._journal import ApprovalNeeded, ReplayDiverged, TaskJournal, fingerprint
from ._loop import BoundedLoop, Spend
from ._phase import PhaseResult, StopReason
from ._sandbox import Sandbox, ToolRefused, ToolTimedOut
from ._stop import StopSignal
from ._timings import CallTimings
from ._tools import RiskLevel, Tool, ToolCall, called, calling

logger = logging.getLogger("greenroom.harness")

_encoder = msgspec.json.Encoder()


_MAY_HAVE_RUN = (
    "it began in an earlier attempt and left no result: it may have run. Run it again (approve), "
    "record it as done without running it (approve --as-done), or tell the model it did not run (deny)?"
)


class RecordedReply(ChatReply, frozen=True, forbid_unknown_fields=True, gc=False):
    """A model reply as the step journal keeps it: the reply, and what it cost (by the
    harness's price when it was made; ``None``: the model had no price). A reply recorded
    before this field existed reads with ``cost=None``."""

    cost: float | None = None


def _request_digest(request: ChatRequest, tools: tuple[str, ...]) -> str:
    """What a model call asks, for the journal's divergence check, in time independent of
    the history's length: the messages since the last reply (the user's message, or the
    tool results), how many came before, the system prompt and the tools offered
    (``tools``: their names). What came before was itself checked, step by step, when it
    was asked."""
    messages = request.messages
    start = len(messages)
    while start > 0 and messages[start - 1].role != "assistant":
        start -= 1
    system = messages[0].content if messages and messages[0].role == "system" else None
    return fingerprint((len(messages), system, messages[start:], tools, request.tool_choice))


def _write_file(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_durably(path, data)


class _Phase:
    """What the running phase has done so far: what an interrupted phase answers with."""

    __slots__ = ("records", "text", "timings")

    def __init__(self) -> None:
        self.text = ""
        self.records: list[dict[str, Any]] = []  # spec 003's view of each ToolOutcome
        self.timings: list[CallTiming] = []  # of the model calls made now (not replayed)


def _check_run_bounded(message: RunBounded) -> None:
    check_int("RunBounded", "max_iterations", message.max_iterations, minimum=0)
    if not isinstance(message.user_message, str):
        raise InvalidInput(
            f"RunBounded user_message must be a string, got {message.user_message!r}", field="user_message"
        )
    if message.context_label is not None:
        check_name("RunBounded", "context_label", message.context_label)
    if message.tool_names is not None and (
        not isinstance(message.tool_names, tuple) or not all(isinstance(n, str) for n in message.tool_names)
    ):
        raise InvalidInput(
            f"RunBounded tool_names must be a list of tool names or None, got {message.tool_names!r}",
            field="tool_names",
            value=message.tool_names,
        )
    if message.direct_tool_calls is not None and not isinstance(message.direct_tool_calls, tuple):
        raise InvalidInput(
            f"RunBounded direct_tool_calls must be a list or None, got {message.direct_tool_calls!r}",
            field="direct_tool_calls",
            value=message.direct_tool_calls,
        )


def _recorded(record: dict[str, Any]) -> ToolOutcome:
    """A tool step's record, as the journal keeps it (spec 003's dict), read back."""
    return convert(record, ToolOutcome, "a journaled tool record")


def _failed(call: ToolOutcome, text: str) -> ToolOutcome:
    return ToolOutcome.failed(call.name, call.arguments, text, id=call.id)


class HarnessActor(Actor):
    """Drives a model and tools in bounded phases (spec 003, 2.2).

    ``tools``: every tool this harness knows. ``tool_allowlist``: the names it may run
    (``None``: all of ``tools``); a phase's ``tool_names`` narrows it further.
    ``budget``: the token budget every model call is admitted by, checked before each
    call (``None``: an unlimited one, still counted); share one for a team.
    ``stop``: the stop signal (share one to stop a team). ``summary_path``: where
    ``run_summary.json`` is written (atomically) after every phase, with the token
    totals of this harness's lifetime. ``log``: the log actor, told one
    ``HARNESS_PHASE`` event per phase. ``call_timeout``: seconds per model call
    (``None``: the model's default). ``journal``: the task's :class:`TaskJournal` —
    each model reply and tool result is recorded before the phase acts on it, and a step
    already recorded is answered from it (see ``_journal.py``).
    """

    def __init__(
        self,
        model: ChatModel,
        *,
        system_prompt: str = "",
        tools: Iterable[Tool] = (),
        tool_allowlist: Iterable[str] | None = None,
        sandbox: Sandbox | None = None,
        budget: TokenBudget | None = None,
        stop: StopSignal | None = None,
        agent_id: str = "harness",
        task_id: str | None = None,
        summary_path: str | os.PathLike[str] | None = None,
        log: ActorRef | None = None,
        call_timeout: float | None = None,
        price: Price | None = None,
        journal: TaskJournal | None = None,
        timings: CallTimings | None = None,
    ) -> None:
        if not isinstance(model, ChatModel):
            raise TypeError(f"HarnessActor model must be a ChatModel, got {model!r}")
        if not isinstance(system_prompt, str):
            raise InvalidInput(
                f"HarnessActor system_prompt must be a string, got {system_prompt!r}", field="system_prompt"
            )
        self.model = model
        self.system_prompt = system_prompt
        self.tools: dict[str, Tool] = {}
        for tool in tools:
            if not isinstance(tool, Tool):
                raise TypeError(f"HarnessActor tools must be Tool objects, got {tool!r}")
            if tool.name in self.tools:
                raise InvalidInput(f"HarnessActor tools: two tools are named {tool.name!r}", field="tools")
            self.tools[tool.name] = tool
        if tool_allowlist is None:
            self.tool_allowlist = frozenset(self.tools)
        else:
            self.tool_allowlist = frozenset(tool_allowlist)
            unknown = sorted(self.tool_allowlist - self.tools.keys())
            if unknown:
                raise InvalidInput(
                    f"HarnessActor tool_allowlist names tools it was not given: {unknown}",
                    field="tool_allowlist",
                )
        self.sandbox = sandbox if sandbox is not None else Sandbox()
        self.budget = budget if budget is not None else TokenBudget()
        self.stop = stop if stop is not None else StopSignal()
        self.agent_id = check_name("HarnessActor", "agent_id", agent_id)
        self.task_id = task_id
        self.summary_path = None if summary_path is None else Path(summary_path)
        self.log = log
        self.call_timeout = call_timeout
        self.price = price if price is not None else price_of(model)
        self.budget.check_priced("HarnessActor", self.price)
        self._phase: _Phase | None = None
        self._unsent: list[Append] = []
        self.histories: dict[str | None, list[ChatMessage]] = {}
        self.phases = 0
        self.spend = Spend()
        """What this harness's model calls used over its lifetime: calls, tokens, cost."""
        self.tool_call_count = 0
        self._specs: dict[str, ToolSpec] = {name: tool.spec() for name, tool in self.tools.items()}
        self.journal = journal
        """The task's step journal (durable phases), or ``None``: nothing is recorded."""
        self._reported = (0, 0)  # the journal's counts at the last phase event
        self.timings = timings if timings is not None else CallTimings()
        """Times to first token and rates of this harness's streamed model calls (shared
        with its setup's, when spawned from a :class:`HarnessSetup`)."""

    interruptible = True

    @property
    def llm_calls(self) -> int:
        return self.spend.calls

    @property
    def prompt_tokens(self) -> int:
        return self.spend.prompt_tokens

    @property
    def completion_tokens(self) -> int:
        return self.spend.completion_tokens

    async def on_start(self) -> None:
        self.stop._attach(self.context.ref)

    async def on_stop(self) -> None:
        self.stop._detach(self.context.ref)
        if self._unsent:
            await self._send_unsent()

    def on_interrupted(self, message: Any) -> Any:
        """A phase cut short by an immediate stop ends ``stop_requested`` with what it
        did; any other interruption (an asker that left, ``ref.interrupt()``) raises
        ``Interrupted``. Either way the unfinished turn never reached the history."""
        phase, self._phase = self._phase, None
        if isinstance(message, RunBounded) and self.stop.requested and phase is not None:
            result = PhaseResult(phase.text, phase.records, "stop_requested")
            self.phases += 1
            self._report(message, result, phase)
            return result
        return super().on_interrupted(message)

    async def receive(self, message: Any) -> Any:
        if self._unsent:
            await self._send_unsent()
        if isinstance(message, GetHistory):
            return tuple(self.histories.get(message.context_label, ()))
        if not isinstance(message, RunBounded):
            raise TypeError(f"HarnessActor does not handle {type(message).__name__} messages")
        try:
            _check_run_bounded(message)
            self._phase = phase = _Phase()
            if message.direct_tool_calls is not None:
                result = await self._tool_phase(message.direct_tool_calls, phase)
            else:
                result = await self._llm_phase(message, phase)
            if self.journal is not None:  # durable before the agent acts on the phase
                await self.journal.sync()
        except Exception as error:
            # fail this ask, not the actor: a restart would lose every history
            self._phase = None
            if self.journal is not None and not isinstance(error, ActorStopped):
                await self._sync_after(error)
            pending = self.context.reply_later()
            if pending is None:
                logger.warning("harness: a told RunBounded failed: %s", error)
            else:
                pending.fail(error)
            return None
        self._phase = None
        self.phases += 1
        self._report(message, result, phase)
        if self.summary_path is not None:
            with anyio.CancelScope(shield=True):  # a finished phase is reported as finished
                await self._write_summary(result.stop_reason)
        return result

    async def _sync_after(self, error: Exception) -> None:
        """What the failed phase recorded is durable before its failure is reported (a
        task parked for a person is replayed up to exactly the call it shows)."""
        assert self.journal is not None
        try:
            await self.journal.sync()
        except Exception as lost:  # the phase's own error is the one to report
            logger.warning("harness %r: steps before %r not written: %s", self.agent_id, error, lost)

    # -- LLM mode -----------------------------------------------------------------------

    def _allowed(self, tool_names: tuple[str, ...] | None) -> frozenset[str]:
        if tool_names is None:
            return self.tool_allowlist
        unknown = sorted(set(tool_names) - self.tools.keys())
        if unknown:
            raise InvalidInput(f"RunBounded tool_names names unknown tools: {unknown}", field="tool_names")
        return self.tool_allowlist.intersection(tool_names)

    async def _llm_phase(self, message: RunBounded, phase: _Phase) -> PhaseResult:
        label = message.context_label
        if not message.continue_context:
            self.histories[label] = []
        history = self.histories.setdefault(label, [])
        allowed = self._allowed(message.tool_names)
        specs = tuple(self._specs[name] for name in sorted(allowed))
        # the turn being built: it reaches the history only once it is complete
        pending: list[ChatMessage] = (
            [ChatMessage("user", message.user_message)] if message.user_message else []
        )
        records = phase.records
        system = (ChatMessage("system", self.system_prompt),) if self.system_prompt else ()
        loop = BoundedLoop(
            self.model,
            budget=self.budget,
            stop=self.stop,
            sandbox=self.sandbox,
            max_iterations=message.max_iterations,
            call_timeout=self.call_timeout,
            price=self.price,
            spend=self.spend,
            timings=self.timings,
        )
        journal = self.journal
        place = f"p{journal.next_phase()}/{label or 'main'}" if journal is not None else ""
        offered = tuple(spec.name for spec in specs)
        while True:
            request = ChatRequest((*system, *history, *pending), specs)
            key = f"{place}/m{loop.iterations}"
            if journal is None:
                reply = await loop.call(request)
                if reply is not None and reply.timing is not None:
                    phase.timings.append(reply.timing)
            else:
                reply = await self._journaled_call(loop, request, key, offered, phase)
            if reply is None:
                break
            tool_calls = reply.tool_calls
            pending.append(ChatMessage("assistant", reply.text, tool_calls))
            for index, call in enumerate(tool_calls):
                outcome, content = await self._run_tool(
                    loop, call.id, call.name, call.arguments, call.arguments_error, allowed,
                    step=f"{key}/t{index}" if journal is not None else None,
                )  # fmt: skip
                records.append(outcome.as_record())
                pending.append(ChatMessage("tool", content, tool_call_id=call.id))
            phase.text = reply.text
            history.extend(pending)  # the whole turn, at once
            pending = []
            if not tool_calls:
                return PhaseResult(reply.text, records, "done")
        assert loop.stop_reason is not None
        return PhaseResult(phase.text, records, loop.stop_reason)

    async def _journaled_call(
        self, loop: BoundedLoop, request: ChatRequest, key: str, offered: tuple[str, ...], phase: _Phase
    ) -> ChatReply | None:
        """The model's reply at ``key``: from the journal when it is recorded there (no
        request, no budget; ``ReplayDiverged`` if the request differs), else from the
        model, recorded durably before the phase acts on it."""
        journal = self.journal
        assert journal is not None
        asked = _request_digest(request, offered)
        step = journal.get(key, "model", asked, f"a model request with digest {asked}")
        if step is not None:
            recorded: ChatReply = convert(step.body, RecordedReply, f"journal step {key!r}")
            return loop.replayed(recorded)
        reply = await loop.call(request)
        if reply is not None and reply.timing is not None:
            phase.timings.append(reply.timing)
        if reply is not None:  # durable before anything acts on it (see ``receive``)
            price = self.price
            cost = None if price is None else round(price.cost(reply.usage), 10)
            encoded = _encoder.encode(RecordedReply(**msgspec.structs.asdict(reply), cost=cost))
            if not journal.record_soon(key, "model", asked, encoded):
                await journal.record(key, "model", asked, msgspec.json.decode(encoded))
        return reply

    # -- tool calls (both modes) --------------------------------------------------------

    async def _run_tool(
        self,
        loop: BoundedLoop | None,
        call_id: str,
        name: str,
        arguments: dict[str, Any],
        arguments_error: str | None,
        allowed: frozenset[str],
        *,
        step: str | None = None,
    ) -> tuple[ToolOutcome, str]:
        """Run one call through every check: its outcome and the text the model is shown
        (:meth:`ToolOutcome.content`). A refusal or failure is a failed outcome.

        ``step``: its place in the task's journal. A result recorded there is answered
        from it (the tool does not run); a call that changes things is recorded as begun
        before it runs, and one that began in an earlier attempt without a result runs
        again only if it takes an idempotency key, or a person says so (the task parks on
        the question; a "no" is the call's result)."""
        journal = self.journal if step is not None else None
        asked = ""
        if journal is not None:
            assert step is not None
            asked = fingerprint((name, arguments, arguments_error))
            done = journal.get(step, "tool", asked, f"tool {name!r} with {arguments!r}")
            if done is not None:
                self.tool_call_count += 1
                return _recorded(done.body["record"]), str(done.body["content"])
            ran = await self._tool_outcome(
                loop, call_id, name, arguments, arguments_error, allowed, journal, step, asked
            )
            outcome, content = ran.shown()
            body = {"record": outcome.as_record(), "content": content}  # spec 003's record
            encoded = _encoder.encode(body)
            # a call that changed things: its result kept at once, from this task — the
            # window in which a crash leaves it a question is the tool's own run
            noted = journal.has(step, "tool_started") and await journal.note(step, "tool", asked, encoded)
            if not journal.record_soon(step, "tool", asked, encoded):
                await journal.record(step, "tool", asked, body)
            elif not noted and journal.has(step, "tool_started"):  # the store has it before
                await journal.handed()  # anything else runs, so a crash from now on asks nobody
            return outcome, content
        ran = await self._tool_outcome(loop, call_id, name, arguments, arguments_error, allowed, None, "", "")
        return ran.shown()

    async def _tool_outcome(
        self,
        loop: BoundedLoop | None,
        call_id: str,
        name: str,
        arguments: dict[str, Any],
        arguments_error: str | None,
        allowed: frozenset[str],
        journal: TaskJournal | None,
        step: str,
        asked: str,
    ) -> ToolOutcome:
        self.tool_call_count += 1
        record = ToolOutcome(name=name, arguments=arguments, ok=False, id=call_id)
        tool = self.tools.get(name)
        if tool is None:
            return _failed(record, f"unknown tool {name!r}")
        if name not in allowed:
            return _failed(record, f"tool {name!r} is not allowed in this phase")
        if arguments_error is not None:
            return _failed(record, arguments_error)
        if self.sandbox.needs_approval(tool):
            if journal is None:  # only a durable harness can wait for a person
                return _failed(
                    record, f"tool {name!r} needs a person's approval, which needs a durable harness"
                )
            refused = self._ask_person(journal, step, record, name, arguments, tool)
            if refused is not None:
                return refused
        if journal is not None and tool.risk is not RiskLevel.READ_ONLY:
            keyed = tool.takes_idempotency_key  # a keyed call runs again with its key, unasked
            if not keyed and journal.may_have_run(step):
                refused = self._ask_person(
                    journal, f"{step}#rerun", record, name, arguments, tool, _MAY_HAVE_RUN
                )
                if refused is not None:
                    return refused
            await journal.begin(step, asked, f"{name} {arguments!r:.200}", release=not keyed)
        key = f"{journal.task_id}/{step}" if journal else call_id  # the same in every attempt
        if tool.takes_idempotency_key:
            arguments = {**arguments, "idempotency_key": key}
        context = calling(
            ToolCall(
                key,
                journal.token or None if journal else None,
                journal.task_id if journal else None,
                step if journal else None,
            )
        )
        try:
            result = await (self.sandbox.run(tool, arguments) if loop is None else loop.tool(tool, arguments))
        except (RecordError, ToolRefused, ToolTimedOut) as refused:
            return _failed(record, str(refused))
        except Exception as failed:  # cancellation is a BaseException: it propagates
            return _failed(record, f"{type(failed).__name__}: {failed}")
        finally:
            called(context)
        return ToolOutcome(name=name, arguments=arguments, ok=True, result=result, id=call_id)

    @staticmethod
    def _ask_person(
        journal: TaskJournal,
        place: str,
        record: ToolOutcome,
        name: str,
        arguments: dict[str, Any],
        tool: Tool,
        question: str | None = None,
    ) -> ToolOutcome | None:
        """A call a person decides: whether it may run (``place`` is its step), or, with
        ``question``, whether a call that may have run runs again (``<step>#rerun``).
        ``None`` when the answer is yes (it runs); the "no", or "it is done" (``as_done``:
        it does not run), as its result (the model sees it); undecided, ``ApprovalNeeded``
        (the task parks on exactly this call)."""
        decision = journal.decisions.get(place)
        if decision is None:
            call: dict[str, Any] = {
                "step": place,
                "tool": name,
                "arguments": arguments,
                "risk": tool.risk.name,
            }
            if question is not None:
                call["question"] = question
            if tool.approval_expires_in is not None:
                call["expires_in"] = tool.approval_expires_in
            raise ApprovalNeeded(journal.task_id, call)
        if decision.get("tool") not in (None, name):  # a decision is about the call that was shown
            shown = f"a decision about tool {decision.get('tool')!r}"
            raise ReplayDiverged(journal.task_id, place, shown, repr(name))
        by = decision.get("by", "a person")
        reason = f": {decision['reason']}" if decision.get("reason") else ""
        if not decision.get("approved"):
            said = f"not run again: {by} said no" if question is not None else f"denied by {by}"
            return _failed(record, said + reason)
        if decision.get("as_done"):  # it happened (by hand, or in the attempt that died)
            said = f"recorded as done by {by}, not run{reason}"
            return ToolOutcome(name=name, arguments=arguments, ok=True, result=said, id=record.id)
        return None

    async def _tool_phase(self, calls: tuple[dict[str, Any], ...], phase: _Phase) -> PhaseResult:
        """Tool-only mode: no model call and no budget gate; the stop check at entry,
        then the allowlist and the sandbox for every call. With a journal, each call is a
        step of its own (``p<phase>/direct/t<index>``): a replay does not run it again."""
        records = phase.records
        place = f"p{self.journal.next_phase()}/direct" if self.journal is not None else None
        if self.stop.requested:
            return PhaseResult("", records, "stop_requested")
        for index, call in enumerate(calls):
            records.append(await self._direct_call(index, call, place))
        return PhaseResult("", records, "done")

    async def _direct_call(self, index: int, call: Any, place: str | None = None) -> dict[str, Any]:
        call_id = f"direct-{index}"
        if not isinstance(call, dict):
            return {"id": call_id, "name": None, "arguments": {}, "ok": False,
                    "error": f"direct_tool_calls[{index}] must be an object, got {call!r:.200}"}  # fmt: skip
        call_id = call.get("id", call_id)
        name = call.get("name")
        arguments = call.get("arguments", {})
        problem = None
        if not isinstance(name, str):
            problem = f"direct_tool_calls[{index}].name must be a tool name, got {name!r:.200}"
        elif not isinstance(arguments, dict):
            problem = f"direct_tool_calls[{index}].arguments must be an object, got {arguments!r:.200}"
            arguments = {}
        if problem is not None:
            self.tool_call_count += 1
            return {"id": call_id, "name": name, "arguments": arguments, "ok": False, "error": problem}
        assert isinstance(name, str)
        step = None if place is None else f"{place}/t{index}"
        outcome, _ = await self._run_tool(
            None, str(call_id), name, arguments, None, self.tool_allowlist, step=step
        )
        return outcome.as_record()

    # -- reporting ----------------------------------------------------------------------

    def summary(self, last_stop_reason: StopReason | None = None) -> dict[str, Any]:
        return {
            "agent_id": self.agent_id,
            "task_id": self.task_id,
            "phases": self.phases,
            **self.spend.as_dict(),
            "tool_calls": self.tool_call_count,
            "last_stop_reason": last_stop_reason,
            "contexts": sorted(label for label in self.histories if label is not None),
            "updated_at": time.time(),
        }

    async def _write_summary(self, stop_reason: StopReason) -> None:
        path = self.summary_path
        assert path is not None
        data = _encoder.encode(self.summary(stop_reason)) + b"\n"
        await anyio.to_thread.run_sync(_write_file, path, data)

    def _report(self, message: RunBounded, result: PhaseResult, phase: _Phase) -> None:
        if self.log is None:
            return
        payload: dict[str, Any] = {
            "context_label": message.context_label,
            "mode": "tools" if message.direct_tool_calls is not None else "llm",
            "stop_reason": result.stop_reason,
            "tool_calls": len(result.tool_calls),
            "total_tokens": self.spend.total_tokens,
            "cost": round(self.spend.cost, 6),
        }
        if phase.timings:  # the phase's model calls made now (not replayed)
            payload["model_calls"] = [
                {
                    "first_token_ms": round(timing.first_token * 1000, 3),
                    "tokens_per_second": None
                    if timing.tokens_per_second is None
                    else round(timing.tokens_per_second, 3),
                }
                for timing in phase.timings
            ]
        journal = self.journal
        if journal is not None:  # how much of the phase came from the journal: a replay shows
            payload["replayed"] = journal.replayed - self._reported[0]
            payload["recorded"] = journal.recorded - self._reported[1]
            self._reported = (journal.replayed, journal.recorded)
        append = Append(type=HARNESS_PHASE, payload=payload, task_id=self.task_id, agent_id=self.agent_id)
        if self._unsent:  # keep their order
            self._unsent.append(append)
            return
        try:
            self.log.tell(append)  # the common case: room, no wait
        except MailboxFull:
            self._unsent.append(append)  # never dropped: sent, waiting for room, before the next message
        except ActorStopped as error:
            logger.warning("harness %r: phase event not logged: %s", self.agent_id, error)

    async def _send_unsent(self) -> None:
        """Send the phase events a full log mailbox refused, waiting for room. A
        cancelled send is withdrawn, so an event leaves this list only once accepted."""
        log = self.log
        assert log is not None
        while self._unsent:
            try:
                await log.send(self._unsent[0])
            except ActorStopped as error:
                logger.warning(
                    "harness %r: %d phase event(s) not logged: %s", self.agent_id, len(self._unsent), error
                )
                self._unsent.clear()
                return
            del self._unsent[0]
