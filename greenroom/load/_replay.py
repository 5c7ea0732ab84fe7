"""Replay: recorded sessions sent again, with their shapes and their timing — from a JSONL
trace of OpenAI-format requests, or from greenroom's own step journals.

A trace has one JSON object a line: ``{"session": ID, "at": SECONDS, "messages": [...]}``,
optionally ``"max_tokens"`` and ``"tools"`` (OpenAI's ``tools`` list); ``at`` is when the
request was sent (any origin; differences are what count). A journal gives, per task, its
model calls' sizes (the recorded usage) and when each was sent (the step's time less the
call's duration): its requests are replayed as text of the recorded prompt size, asking for
the recorded output size.

Timing: sessions start at their recorded offsets from the first; within a session each
request is due at its recorded offset from the session's start, but never before the
request ahead of it has its answer (a turn needs the reply before it) — so a slower server
stretches a session as it would a real agent, and every request is timed from when it was
due.
"""

from __future__ import annotations

import json
import random
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import anyio
import msgspec

from .._errors import InvalidInput
from ..llm import ChatModel
from ..llm._sse import parse_arguments
from ..messages import ChatMessage, ChatRequest, ToolSpec
from ._measure import LoadReport, LoopWatch, RequestRecord, SessionRecord, Slo, process_cpu, summary
from ._run import WHOLE, Ready, RunRaw, Share
from ._session import Sessions
from ._workload import Workload, text_of


class RecordedRequest(msgspec.Struct, frozen=True):
    """One recorded request: when it was sent (``at``), what it asked."""

    at: float
    messages: tuple[ChatMessage, ...]
    max_tokens: int | None = None
    tools: tuple[ToolSpec, ...] = ()


Recording = dict[str, list[RecordedRequest]]
"""Recorded requests by session, each session's in the order sent."""


def read_trace(path: str | Path) -> Recording:
    """A JSONL trace; ``InvalidInput`` naming the line and the field of the first thing
    wrong (nothing is replayed from a bad trace)."""
    where = str(path)
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidInput(
            f"--replay {where!r} cannot be read: {error}", field="--replay", value=where
        ) from None
    sessions: Recording = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        field = f"{where}:{number}"
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as error:
            raise InvalidInput(f"{field} is not JSON: {error}", field=field) from None
        try:
            session, request = _recorded(raw, field)
        except ValueError as error:
            raise InvalidInput(str(error), field=field) from None
        sessions.setdefault(session, []).append(request)
    if not sessions:
        raise InvalidInput(f"--replay {where!r} holds no request", field="--replay", value=where)
    for requests in sessions.values():
        requests.sort(key=lambda request: request.at)
    return sessions


def _recorded(raw: object, field: str) -> tuple[str, RecordedRequest]:
    if not isinstance(raw, dict):
        raise ValueError(f"{field} must be a JSON object, got {raw!r:.80}")
    session, at, messages = raw.get("session"), raw.get("at"), raw.get("messages")
    if not isinstance(session, str | int) or isinstance(session, bool):
        raise ValueError(f"{field}: session must be a string or a number, got {session!r}")
    if isinstance(at, bool) or not isinstance(at, int | float):
        raise ValueError(f"{field}: at must be a number of seconds, got {at!r}")
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"{field}: messages must be a non-empty list, got {messages!r:.80}")
    max_tokens = raw.get("max_tokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise ValueError(f"{field}: max_tokens must be a whole number >= 1, got {max_tokens!r}")
    tools = tuple(_tool(tool, f"{field}: tools[{i}]") for i, tool in enumerate(raw.get("tools") or ()))
    parsed = tuple(_message(message, f"{field}: messages[{i}]") for i, message in enumerate(messages))
    return str(session), RecordedRequest(float(at), parsed, max_tokens, tools)


def _message(raw: object, field: str) -> ChatMessage:
    if not isinstance(raw, dict) or raw.get("role") not in ("system", "user", "assistant", "tool"):
        raise ValueError(f"{field} must be an OpenAI message with a role, got {raw!r:.80}")
    content = raw.get("content")
    if isinstance(content, list):  # content parts: their text
        content = "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    if content is not None and not isinstance(content, str):
        raise ValueError(f"{field}.content must be text, got {content!r:.80}")
    calls = []
    for index, call in enumerate(raw.get("tool_calls") or ()):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ValueError(f"{field}.tool_calls[{index}] must have a function with a name")
        arguments = function.get("arguments")
        text = arguments if isinstance(arguments, str) or arguments is None else json.dumps(arguments)
        calls.append(parse_arguments(str(call.get("id", f"call-{index}")), function["name"], text))
    tool_call_id = raw.get("tool_call_id")
    return ChatMessage(
        raw["role"], content, tuple(calls), None if tool_call_id is None else str(tool_call_id)
    )


def _tool(raw: object, field: str) -> ToolSpec:
    function = raw.get("function") if isinstance(raw, dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise ValueError(f"{field} must be an OpenAI tool with a function name")
    parameters = function.get("parameters") or {"type": "object", "properties": {}}
    return ToolSpec(function["name"], str(function.get("description", "")), parameters)


def recording_from_steps(steps: Iterable[Any], seed: int = 0) -> Recording:
    """A recording of journals' model calls (``Step`` s of any number of tasks): per task,
    a request of the recorded prompt size asking for the recorded output size, sent when
    the recorded one was (the step's time less its call's duration)."""
    rng = random.Random(seed)
    sessions: Recording = {}
    for step in steps:
        if step.kind != "model":
            continue
        body = step.body
        usage = body.get("usage") or {}
        prompt = int(usage.get("prompt_tokens") or 0)
        completion = int(usage.get("completion_tokens") or 0)
        timing = body.get("timing") or {}
        sent = float(step.at) - float(timing.get("duration") or 0.0)
        messages = (ChatMessage("user", text_of(max(1, prompt), rng)),)
        sessions.setdefault(step.task_id, []).append(
            RecordedRequest(sent, messages, max(1, completion) or None)
        )
    for requests in sessions.values():
        requests.sort(key=lambda request: request.at)
    return sessions


async def replay(
    model: ChatModel,
    recording: Recording,
    *,
    speed: float = 1.0,
    slo: Slo | None = None,
    records: list[RequestRecord] | None = None,
    share: Share = WHOLE,
    ready: Ready | None = None,
    recorded: Callable[[RequestRecord], Awaitable[None]] | None = None,
    raw: RunRaw | None = None,
) -> LoadReport:
    """Send ``recording`` again (``speed``: 2 replays twice as fast); the same report as
    ``run_load`` (``workload`` ``"replay"``). ``share``, ``ready``, ``recorded``, ``raw``:
    as :func:`run_load`'s (a share of a replay is its sessions ``k`` with
    ``k % parts == part``, each at its offset from the whole recording's first)."""
    if not speed > 0:
        raise InvalidInput(f"speed must be > 0, got {speed!r}", field="speed", value=speed)
    share.check()
    sessions = Sessions(model, Workload("replay"), recorded=recorded)
    origin = min(requests[0].at for requests in recording.values())
    if ready is not None:
        await anyio.sleep_until(await ready())
    watch = LoopWatch()
    started = anyio.current_time()
    cpu = process_cpu()

    async def one(index: int, requests: Sequence[RecordedRequest]) -> None:
        first = requests[0].at
        start = started + (first - origin) / speed
        due = start
        error: str | None = None
        model_s = 0.0
        for turn, recorded in enumerate(requests):
            due = max(due, start + (recorded.at - first) / speed)
            request = ChatRequest(recorded.messages, recorded.tools, max_tokens=recorded.max_tokens)
            record, _, _ = await sessions.ask(index, turn, request, due)
            model_s += record.end - record.sent
            due = record.end
            if record.error is not None:
                error = record.error
                break
        sessions.sessions.append(
            SessionRecord(
                index,
                start,
                anyio.current_time(),
                len(requests),
                len(requests),
                model_s,
                0.0,
                0,
                error is None,
                error,
            )
        )

    async with anyio.create_task_group() as watching:
        watching.start_soon(watch.run)
        async with anyio.create_task_group() as tg:
            for index, requests in enumerate(recording.values()):
                if index % share.parts == share.part:
                    tg.start_soon(one, index, requests)
        watching.cancel_scope.cancel()
    report = summary(
        sessions.requests, sessions.sessions, duration=anyio.current_time() - started, offered_rate=None,
        client_cpu_s=process_cpu() - cpu, loop_lags=watch.lags, slo=slo or Slo(),
    )  # fmt: skip
    report.workload = "replay"
    if raw is not None:
        raw.sessions, raw.lags = sessions.sessions, watch.lags
    report.recorded_requests = sum(len(requests) for requests in recording.values())
    if records is not None:
        records.extend(sessions.requests)
    return report
