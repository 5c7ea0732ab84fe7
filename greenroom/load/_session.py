"""One virtual user: an agent session of several turns against the model under load, its
tools really run, every request timed from the instant it was due."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable, Sequence

import anyio

from .._errors import InvalidInput
from ..llm import ChatModel, ModelError, open_stream
from ..messages import ChatMessage, ChatRequest, ModelToolCall, ToolOutcome, ToolSpec
from ._measure import RequestRecord, SessionRecord
from ._tools import LoadTool, call_tool
from ._workload import SyntheticTool, Workload, prepare_text, text_of


class Sessions:
    """What every session of a run shares: the model, the workload, its tools (offered as
    schemas, run when called), the shared system prompt, where records go (``recorded``:
    awaited with each request's record as it is made, before the session goes on — a
    daemon's load agent writes it to the store there).

    Made before a run's clock starts, it does the work done once a process (the prompts'
    word pool, the system prompt): no request is charged the generator's own start-up."""

    def __init__(
        self,
        model: ChatModel,
        workload: Workload,
        *,
        seed: int = 0,
        tools: Sequence[LoadTool] = (),
        recorded: Callable[[RequestRecord], Awaitable[None]] | None = None,
    ) -> None:
        self.model = model
        self.workload = workload
        self.seed = seed
        self.requests: list[RequestRecord] = []
        self.sessions: list[SessionRecord] = []
        names = [tool.name for tool in workload.tools] + [tool.name for tool in tools]
        if len(set(names)) != len(names):
            raise InvalidInput(f"two tools of the load have one name: {sorted(names)}", field="tools")
        self.tool_runs: dict[str, int] = dict.fromkeys(names, 0)
        self.in_flight = 0
        self._recorded = recorded
        self._tools = {tool.name: tool for tool in workload.tools}
        self._own = {tool.name: tool for tool in tools}
        self._specs = tuple(
            ToolSpec(
                tool.name,
                tool.description or f"The {tool.name} tool.",
                {"type": "object", "properties": {"query": {"type": "string"}}},
            )
            for tool in workload.tools
        ) + tuple(tool.spec() for tool in tools)
        prepare_text()
        system = workload.system_prompt_tokens
        self._system = (ChatMessage("system", text_of(system, random.Random(seed))),) if system else ()

    async def run(self, index: int, scheduled: float) -> SessionRecord:
        """Session ``index``, due at ``scheduled`` (the loop's clock). Never raises for the
        model's failures: a failed request ends its session, recorded as failed."""
        workload = self.workload
        rng = random.Random(self.seed * 1_000_003 + index)
        messages: list[ChatMessage] = list(self._system)
        turns = workload.turns.draw_int(rng, 1)
        due = scheduled
        model_s = tools_s = 0.0
        requests = tool_calls = 0
        error: str | None = None
        done_turns = 0
        for turn in range(turns):
            messages.append(ChatMessage("user", text_of(workload.prompt_tokens.draw_int(rng, 1), rng)))
            max_tokens = workload.output_tokens.draw_int(rng, 1)
            rounds = 0
            while True:
                request = ChatRequest(
                    tuple(messages),
                    self._specs,
                    workload.tool_choice if self._specs else "auto",
                    max_tokens=max_tokens,
                )
                record, reply_text, calls = await self.ask(index, turn, request, due)
                requests += 1
                model_s += record.end - record.sent
                if record.error is not None:
                    error = record.error
                    break
                messages.append(ChatMessage("assistant", reply_text, calls))
                if not calls or rounds >= workload.max_tool_rounds:
                    break
                rounds += 1
                started = anyio.current_time()
                for call in calls:
                    _, content = (await self._tool(call, rng)).shown()
                    messages.append(ChatMessage("tool", content, tool_call_id=call.id))
                    tool_calls += 1
                tools_s += anyio.current_time() - started
                due = anyio.current_time()  # the model is asked again as the tools end
            if error is not None:
                break
            done_turns += 1
            due = anyio.current_time() + workload.think_s.draw(rng)  # the user thinks, then asks
        session = SessionRecord(
            index, scheduled, anyio.current_time(), done_turns, requests, model_s, tools_s, tool_calls,
            error is None, error,
        )  # fmt: skip
        self.sessions.append(session)
        return session

    async def ask(
        self, index: int, turn: int, request: ChatRequest, due: float
    ) -> tuple[RequestRecord, str, tuple[ModelToolCall, ...]]:
        await anyio.sleep_until(due)
        sent = anyio.current_time()
        first: float | None = None
        last = 0.0
        gaps: list[float] = []
        self.in_flight += 1
        try:
            async with open_stream(self.model, request) as stream:
                async for delta in stream:
                    if delta.text or delta.tool_call is not None:
                        now = anyio.current_time()
                        if first is None:
                            first = now
                        else:
                            gaps.append(now - last)
                        last = now
            reply = stream.reply
        except ModelError as failure:
            record = RequestRecord(
                index, turn, due, sent, first, anyio.current_time(), 0, 0, tuple(gaps), failure.kind,
                detail=str(failure)[:500],
            )  # fmt: skip
            self.requests.append(record)
            if self._recorded is not None:
                await self._recorded(record)
            return record, "", ()
        finally:
            self.in_flight -= 1
        usage = reply.usage
        record = RequestRecord(
            index, turn, due, sent, first, anyio.current_time(), usage.prompt_tokens,
            usage.completion_tokens, tuple(gaps), None, len(reply.tool_calls),
            usage_estimated=stream.usage_estimated,
        )  # fmt: skip
        self.requests.append(record)
        if self._recorded is not None:
            await self._recorded(record)
        return record, reply.text, reply.tool_calls

    async def _tool(self, call: ModelToolCall, rng: random.Random) -> ToolOutcome:
        """Run the tool the model called: a synthetic one (its latency, its answer's size),
        or one of the user's or an MCP server's (:func:`call_tool`); a tool the workload
        does not have answers that it does not exist."""
        own = self._own.get(call.name)
        if own is not None:
            self.tool_runs[own.name] += 1
            return await call_tool(own, call)
        tool: SyntheticTool | None = self._tools.get(call.name)
        if tool is None:
            return ToolOutcome.failed(call.name, call.arguments, f"no tool named {call.name!r}", id=call.id)
        self.tool_runs[tool.name] += 1
        await anyio.sleep(tool.latency_s.draw(rng))
        text = text_of(tool.result_tokens.draw_int(rng, 1), rng)
        return ToolOutcome(name=call.name, arguments=call.arguments, ok=True, result=text, id=call.id)
