"""Durable phases (issue 24): a harness given a task's step journal records every model
reply and tool result before acting on it, and a later attempt replays them — on both
stores, on both event loops.

The model is a scripted one that counts what it is asked; the tools count their runs.
A real process killed with SIGKILL is in ``test_a_killed_daemon_resumes_without_asking_again``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from _stores import make_store

from greenroom import ActorRef, ActorSystem
from greenroom.harness import (
    Harness,
    ReplayDiverged,
    RiskLevel,
    Sandbox,
    StepJournalActor,
    Tool,
    ToolMayHaveRun,
)
from greenroom.harness._journal import RecordSteps, TaskJournal, fingerprint
from greenroom.llm import ScriptedModel
from greenroom.messages import ChatReply, ChatRequest, ModelToolCall, Usage
from greenroom.store import Step

pytestmark = pytest.mark.anyio

USAGE = Usage(prompt_tokens=30, completion_tokens=10)


def first_reply() -> ChatReply:
    calls = (ModelToolCall("c1", "note", {"text": "hello"}), ModelToolCall("c2", "look", {"what": "sky"}))
    return ChatReply(tool_calls=calls, usage=USAGE)


def model_for_two_turns() -> ScriptedModel:
    """Turn 1 asks for ``note`` (changes things) and ``look`` (read-only); turn 2 answers."""

    def respond(request: ChatRequest) -> ChatReply:
        if request.messages[-1].role == "tool":
            return ChatReply(text=f"done after {len(request.messages)} messages", usage=USAGE)
        return first_reply()

    return ScriptedModel(respond)


class Effects:
    """What the tools did, in order, with the idempotency key each was given."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, Any]] = []

    def tools(self, *, keyed: bool = False) -> list[Tool]:
        def note(text: str) -> str:
            self.ran.append(("note", text))
            return f"noted {text}"

        def keyed_note(text: str, idempotency_key: str = "") -> str:
            self.ran.append(("note", idempotency_key))
            return f"noted {text}"

        def look(what: str) -> str:
            self.ran.append(("look", what))
            return f"{what} is blue"

        return [
            Tool("note", keyed_note if keyed else note, risk=RiskLevel.WRITES),
            Tool("look", look, risk=RiskLevel.READ_ONLY),
        ]


@asynccontextmanager
async def journal_on(store_url: str | None, data_dir: Path) -> AsyncIterator[tuple[ActorSystem, ActorRef]]:
    async with await make_store(store_url, data_dir) as store, ActorSystem() as system:
        writer = await system.spawn(lambda: StepJournalActor(store.step_store()), name="journal")
        yield system, writer
        await writer.stop()


async def run_attempt(
    system: ActorSystem, writer: ActorRef, model: ScriptedModel, tools: list[Tool], attempt: int,
    message: str = "write it down",
) -> tuple[Any, TaskJournal, Harness]:  # fmt: skip
    journal = await TaskJournal.load("t1", attempt, writer)
    harness = await Harness.spawn(
        system, model, tools=tools, sandbox=Sandbox(max_risk=RiskLevel.WRITES), journal=journal
    )
    result = await harness.run_bounded(message, max_iterations=5)
    return result, journal, harness


async def test_a_second_attempt_replays_every_step_without_asking_the_model_or_running_a_tool(
    store_url: str | None, tmp_path: Path
) -> None:
    effects = Effects()
    async with journal_on(store_url, tmp_path / "data") as (system, writer):
        first_model = model_for_two_turns()
        first, journal, harness = await run_attempt(system, writer, first_model, effects.tools(), 1)
        first_history = await harness.history()
        await harness.aclose()
        assert first.stop_reason == "done" and first.final_text == "done after 4 messages"
        assert len(first_model.requests) == 2 and effects.ran == [("note", "hello"), ("look", "sky")]
        assert (journal.recorded, journal.replayed) == (5, 0)  # 2 replies, 1 begun, 2 results

        again_model = model_for_two_turns()
        again, replay, harness = await run_attempt(system, writer, again_model, effects.tools(), 2)
        assert again_model.requests == []  # nothing asked again
        assert effects.ran == [("note", "hello"), ("look", "sky")]  # nothing run again
        assert (replay.recorded, replay.replayed) == (0, 4)
        assert again.final_text == first.final_text and again.tool_calls == first.tool_calls
        assert await harness.history() == first_history  # the context is rebuilt
        assert harness_spent(harness) == 0  # no budget spent twice
        await harness.aclose()


def harness_spent(harness: Harness) -> int:
    actor: Any = harness.ref._cell.actor
    return int(actor.spend.total_tokens)


async def test_a_replay_asked_something_else_stops_naming_the_step(
    store_url: str | None, tmp_path: Path
) -> None:
    effects = Effects()
    async with journal_on(store_url, tmp_path / "data") as (system, writer):
        _, _, harness = await run_attempt(system, writer, model_for_two_turns(), effects.tools(), 1)
        await harness.aclose()
        changed = model_for_two_turns()
        with pytest.raises(ReplayDiverged, match=r"replay diverged at step 'p0/main/m0'") as diverged:
            await run_attempt(system, writer, changed, effects.tools(), 2, message="write something else")
        assert diverged.value.key == "p0/main/m0" and changed.requests == []
        assert effects.ran == [("note", "hello"), ("look", "sky")]


async def _crashed_mid_tool(writer: ActorRef) -> None:
    """What a process killed while ``note`` ran leaves: the reply that asked for it, and
    ``note`` recorded as begun, with no result."""
    specs = tuple(sorted((tool.spec() for tool in Effects().tools()), key=_name))
    request = ChatRequest((_user("write it down"),), specs)
    steps = (
        Step(task_id="t1", key="p0/main/m0", kind="model", fingerprint=fingerprint(request),
             body=dict(_builtins(first_reply()))),
        Step(task_id="t1", key="p0/main/m0/t0", kind="tool_started",
             fingerprint=fingerprint(("note", {"text": "hello"}, None))),
    )  # fmt: skip
    await writer.ask(RecordSteps(steps))


def _user(text: str) -> Any:
    from greenroom.messages import ChatMessage

    return ChatMessage("user", text)


def _name(spec: Any) -> str:
    return str(spec.name)


def _builtins(value: Any) -> Any:
    import msgspec

    return msgspec.to_builtins(value)


async def test_a_tool_that_may_have_run_is_not_run_again_blindly(
    store_url: str | None, tmp_path: Path
) -> None:
    """Begun, no result: a tool that changes things and takes no idempotency key stops the
    attempt (never silently twice); one that takes a key runs with the same key a first
    attempt would have had; a read-only one simply runs."""
    async with journal_on(store_url, tmp_path / "data") as (system, writer):
        await _crashed_mid_tool(writer)
        effects = Effects()
        with pytest.raises(ToolMayHaveRun, match=r"tool 'note' \(step 'p0/main/m0/t0'\)"):
            await run_attempt(system, writer, model_for_two_turns(), effects.tools(), 2)
        assert effects.ran == []

    async with journal_on(store_url, tmp_path / "keyed") as (system, writer):
        await _crashed_mid_tool(writer)
        effects = Effects()
        model = model_for_two_turns()
        result, _, harness = await run_attempt(system, writer, model, effects.tools(keyed=True), 2)
        await harness.aclose()
        assert effects.ran == [("note", "t1/p0/main/m0/t0"), ("look", "sky")]
        assert len(model.requests) == 1 and result.stop_reason == "done"  # only the second turn was asked
