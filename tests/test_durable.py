"""Durable phases (issue 24): a harness given a task's step journal records every model
reply and tool result before acting on it, and a later attempt replays them — on both
stores, on both event loops.

The model is a scripted one that counts what it is asked; the tools count their runs.
Real processes killed with SIGKILL are in ``test_crash_storm.py``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from _stores import make_store
from mcp.server.mcpserver import Context

from greenroom import ActorRef, ActorSystem
from greenroom.harness import (
    ApprovalNeeded,
    Harness,
    ReplayDiverged,
    RiskLevel,
    Sandbox,
    StepJournalActor,
    Tool,
)
from greenroom.harness._actor import _request_digest
from greenroom.harness._journal import (
    DropSteps,
    OpenTaskJournal,
    ReadSteps,
    RecordSteps,
    TaskJournal,
    fingerprint,
)
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
    message: str = "write it down", decisions: dict[str, Any] | None = None,
) -> tuple[Any, TaskJournal, Harness]:  # fmt: skip
    journal = await TaskJournal.load("t1", attempt, writer, decisions)
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
        # 2 replies, 1 begun, 1 released, 2 results (and on PostgreSQL, where the release is a
        # database write, the call noted running the instant before the tool was invoked)
        assert (journal.recorded, journal.replayed) == (6 if store_url is None else 7, 0)

        again_model = model_for_two_turns()
        again, replay, harness = await run_attempt(system, writer, again_model, effects.tools(), 2)
        assert again_model.requests == []  # nothing asked again
        assert effects.ran == [("note", "hello"), ("look", "sky")]  # nothing run again
        assert (replay.recorded, replay.replayed) == (0, 4)
        assert again.final_text == first.final_text and again.tool_calls == first.tool_calls
        assert await harness.history() == first_history  # the context is rebuilt
        assert harness_spent(harness) == 0  # nothing spent again...
        actor: Any = harness.ref._cell.actor
        assert actor.budget.spent == 2 * (30 + 10)  # ...and the budget continues from what was
        await harness.aclose()


async def test_each_model_step_keeps_what_the_call_cost_and_replays_as_before(
    store_url: str | None, tmp_path: Path
) -> None:
    """Issue 40's step journal: a model reply is recorded with its cost by the harness's
    price (what the status page shows per call), and a replay reads it as the reply."""
    from greenroom.llm import Price

    price = Price(input=3.0, output=15.0)
    effects = Effects()
    async with journal_on(store_url, tmp_path / "data") as (system, writer):
        journal = await TaskJournal.load("t1", 1, writer, None)
        harness = await Harness.spawn(
            system, model_for_two_turns(), tools=effects.tools(), price=price,
            sandbox=Sandbox(max_risk=RiskLevel.WRITES), journal=journal,
        )  # fmt: skip
        first = await harness.run_bounded("write it down", max_iterations=5)
        await harness.aclose()
        again, _, harness = await run_attempt(system, writer, model_for_two_turns(), effects.tools(), 2)
        await harness.aclose()
        assert again.final_text == first.final_text
    async with await make_store(store_url, tmp_path / "data") as store:
        steps = store.step_store()
        models = [step for step in await steps.read("t1") if step.kind == "model"]
        await steps.aclose()
    assert len(models) == 2
    for step in models:
        usage = Usage(**step.body["usage"])
        assert step.body["cost"] == pytest.approx(price.cost(usage)) and step.body["cost"] > 0


async def test_a_call_that_changed_things_is_the_stores_before_the_phase_goes_on(
    store_url: str | None, tmp_path: Path
) -> None:
    """The result of a call that is not read-only is kept (what a crash from then on
    finds: noted from the harness's own task, ``StepStore.note``) before the next model
    request is sent — not with whatever next waits for the disk — so a crash asks a person
    only about a call it cut short. Seen from a fresh store on the same data dir at each
    request: the next process's view, which folds the notes in."""
    data_dir = tmp_path / "data"
    seen: list[list[tuple[str, str]]] = []
    async with await make_store(store_url, data_dir) as reader:

        class Looking:  # a model that does not stream: its calls are whole, through chat
            def __init__(self, inner: ScriptedModel) -> None:
                self.inner = inner

            async def chat(self, request: ChatRequest, *, timeout: float | None = None) -> ChatReply:
                steps = reader.step_store()
                try:
                    seen.append([(step.key, step.kind) for step in await steps.read("t1")])
                finally:
                    await steps.aclose()
                return await self.inner.chat(request, timeout=timeout)

            async def aclose(self) -> None:
                pass

        effects = Effects()
        model = Looking(ScriptedModel(lambda r: model_for_two_turns()._respond(r)))  # type: ignore[misc]
        async with journal_on(store_url, data_dir) as (system, writer):
            result, _, harness = await run_attempt(system, writer, model, effects.tools(), 1)
            await harness.aclose()
    assert result.stop_reason == "done"
    assert seen[0] == []
    assert ("p0/main/m0/t0", "tool") in seen[1], seen[1]  # note's result, before turn 2 was asked


def harness_spent(harness: Harness) -> int:
    actor: Any = harness.ref._cell.actor
    return int(actor.spend.total_tokens)


async def test_a_tool_only_phase_is_replayed_too(store_url: str | None, tmp_path: Path) -> None:
    """``direct_tool_calls``: each call is a step; a second attempt does not run them."""
    effects = Effects()
    calls = [{"name": "note", "arguments": {"text": "once"}}, {"name": "look", "arguments": {"what": "sea"}}]
    async with journal_on(store_url, tmp_path / "data") as (system, writer):
        results = []
        for attempt in (1, 2):
            journal = await TaskJournal.load("direct", attempt, writer)
            harness = await Harness.spawn(
                system, model_for_two_turns(), tools=effects.tools(), sandbox=Sandbox(), journal=journal
            )
            results.append(await harness.run_bounded(direct_tool_calls=calls))
            await harness.aclose()
        assert effects.ran == [("note", "once"), ("look", "sea")]  # the second attempt ran nothing
        assert results[0].tool_calls == results[1].tool_calls and journal.replayed == 2


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


def _dead_process() -> str:
    """A ``writer`` naming a process of this machine that has ended (started, reaped)."""
    import subprocess
    import sys

    from greenroom._process import boot_id

    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    return f"{boot_id()}:{done.pid}"


async def _crashed_mid_tool(
    writer: ActorRef, *, released: bool = True, incarnation: str | None = "", by: str | None = None
) -> None:
    """What a process killed while ``note`` ran leaves: the reply that asked for it, and
    ``note`` recorded as begun and let run, with no result (on a journal with nothing else
    for it). ``released=False``: killed before it was let run. ``incarnation``: the one
    the beginning names (``""``: the store's own; ``None``: none, as before releases)."""
    await writer.ask(DropSteps(("t1",)))
    _, sink = await writer.ask(OpenTaskJournal("t1"))
    if incarnation == "":
        incarnation = sink.incarnation if sink.incarnation is not None else "durable"
    specs = tuple(sorted((tool.spec() for tool in Effects().tools()), key=_name))
    request = ChatRequest((_user("write it down"),), specs)
    offered = tuple(map(_name, specs))
    asked = fingerprint(("note", {"text": "hello"}, None))
    steps = (
        Step(task_id="t1", key="p0/main/m0", kind="model", fingerprint=_request_digest(request, offered),
             body=dict(_builtins(first_reply()))),
        Step(task_id="t1", key="p0/main/m0/t0", kind="tool_started", fingerprint=asked,
             body={} if incarnation is None else {"release": incarnation, "writer": by or _dead_process()}),
    )  # fmt: skip
    if released:
        steps += (Step(task_id="t1", key="p0/main/m0/t0", kind="tool_released", fingerprint=asked),)
    await writer.ask(RecordSteps(steps))


async def test_a_call_begun_but_never_let_run_runs_without_asking_anyone(
    store_url: str | None, tmp_path: Path
) -> None:
    """A crash between a call's beginning and its release (the disk sync in between, the
    wake-up after it) left a call that cannot have run: it runs, nobody is asked. Unless
    the store may have lost the release since (another incarnation: the machine rebooted),
    the beginning predates releases, or the process that began it still lives: then it
    may have run, and a person is asked."""
    async with journal_on(store_url, tmp_path / "data") as (system, writer):
        await _crashed_mid_tool(writer, released=False)
        effects = Effects()
        result, journal, harness = await run_attempt(
            system, writer, model_for_two_turns(), effects.tools(), 2
        )
        await harness.aclose()
        assert effects.ran == [("note", "hello"), ("look", "sky")] and result.stop_reason == "done"
        assert journal.has("p0/main/m0/t0", "tool_released")  # released this time
        from greenroom.harness._journal import _writer

        for incarnation, by in (("boot:another", None), (None, None), ("", _writer())):
            # the release may have been lost (a reboot); a step from before releases; the
            # process that began it still lives (an attempt whose lease ran out may yet run it)
            await _crashed_mid_tool(writer, released=False, incarnation=incarnation, by=by)
            effects = Effects()
            with pytest.raises(ApprovalNeeded) as asked:
                await run_attempt(system, writer, model_for_two_turns(), effects.tools(), 2)
            assert effects.ran == [] and "may have run" in asked.value.call["question"]


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
    """Begun, no result: a tool that changes things and takes no idempotency key is not
    run again blindly — the task waits for a person to say whether to (yes: it runs once
    more; done: it is recorded as done, not run; no: that is its result); one that takes
    a key runs with the same key a first attempt would have had; a read-only one simply
    runs."""
    async with journal_on(store_url, tmp_path / "data") as (system, writer):
        await _crashed_mid_tool(writer)
        effects = Effects()
        with pytest.raises(ApprovalNeeded) as asked:
            await run_attempt(system, writer, model_for_two_turns(), effects.tools(), 2)
        assert effects.ran == []
        assert asked.value.call["step"] == "p0/main/m0/t0#rerun" and asked.value.call["tool"] == "note"
        assert "may have run" in asked.value.call["question"]
        yes = {"p0/main/m0/t0#rerun": {"approved": True, "by": "ops"}}
        result, _, harness = await run_attempt(
            system, writer, model_for_two_turns(), effects.tools(), 3, decisions=yes
        )
        await harness.aclose()
        assert effects.ran == [("note", "hello"), ("look", "sky")] and result.stop_reason == "done"

    async with journal_on(store_url, tmp_path / "no") as (system, writer):
        await _crashed_mid_tool(writer)
        effects = Effects()
        no = {"p0/main/m0/t0#rerun": {"approved": False, "by": "ops", "reason": "it did run"}}
        result, _, harness = await run_attempt(
            system, writer, model_for_two_turns(), effects.tools(), 2, decisions=no
        )
        await harness.aclose()
        assert effects.ran == [("look", "sky")]
        assert result.tool_calls[0]["error"] == "not run again: ops said no: it did run"

    async with journal_on(store_url, tmp_path / "done") as (system, writer):
        await _crashed_mid_tool(writer)
        effects = Effects()
        done = {"p0/main/m0/t0#rerun": {"approved": True, "as_done": True, "by": "ops", "reason": "I saw it"}}
        result, _, harness = await run_attempt(
            system, writer, model_for_two_turns(), effects.tools(), 2, decisions=done
        )
        await harness.aclose()
        assert effects.ran == [("look", "sky")]  # recorded as done: not run again
        assert result.tool_calls[0]["ok"] is True
        assert result.tool_calls[0]["result"] == "recorded as done by ops, not run: I saw it"

    async with journal_on(store_url, tmp_path / "keyed") as (system, writer):
        await _crashed_mid_tool(writer)
        effects = Effects()
        model = model_for_two_turns()
        result, _, harness = await run_attempt(system, writer, model, effects.tools(keyed=True), 2)
        await harness.aclose()
        assert effects.ran == [("note", "t1/p0/main/m0/t0"), ("look", "sky")]
        assert len(model.requests) == 1 and result.stop_reason == "done"  # only the second turn was asked


# -- approvals -----------------------------------------------------------------------------


class WireAgent:
    """Built per test: a durable agent whose tool ``wire`` needs a person's approval."""

    @staticmethod
    def make(runs: list[dict[str, Any]], model: ScriptedModel) -> Any:
        from greenroom.agents import AgentRuntime, BaseAgent
        from greenroom.harness import HarnessSetup
        from greenroom.messages import AgentResult, AgentTask

        def wire(amount: int, to: str) -> str:
            runs.append({"amount": amount, "to": to})
            return f"sent {amount} to {to}"

        class Agent(BaseAgent):
            agent_type = "w"

            async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
                result = await self._run_phase(user_message=f"pay for {task.id}", max_iterations=4)
                return AgentResult(task_id=task.id, outcome="done", notes=result.final_text)

        setup = HarnessSetup(
            model,
            tools=[
                Tool("wire", wire, risk=RiskLevel.EXECUTES, requires_approval=True, approval_expires_in=600)
            ],
            sandbox=Sandbox(max_risk=RiskLevel.EXECUTES),
        )
        return Agent(llm=setup)


def wire_model() -> ScriptedModel:
    def respond(request: ChatRequest) -> ChatReply:
        last = request.messages[-1]
        if last.role == "tool":
            return ChatReply(text=f"the bank said: {last.content}", usage=USAGE)
        return ChatReply(tool_calls=(ModelToolCall("c1", "wire", {"amount": 5, "to": "alice"}),), usage=USAGE)

    return ScriptedModel(respond)


async def test_a_call_that_needs_approval_parks_the_task_and_runs_once_when_approved(
    store_url: str | None, tmp_path: Path
) -> None:
    from _stores import open_node

    from greenroom.agents import AgentRuntime
    from greenroom.messages import AgentTask, Decide, GetTask, Submit, TaskStatus
    from greenroom.store import InvalidSubmission, InvalidTransition

    runs: list[dict[str, Any]] = []
    async with await make_store(store_url, tmp_path / "data") as store, open_node(store) as node:
        writer = await node.system.spawn(lambda: StepJournalActor(store.step_store()), name="journal")
        runtime = AgentRuntime("a1", "w", supervisor=node.supervisor, log=node.log, journal=writer)
        sup = node.supervisor
        await sup.ask(Submit([AgentTask(id="pay", type="w"), AgentTask(id="refund", type="w")]))

        first_model = wire_model()
        assert await WireAgent.make(runs, first_model).execute_once(runtime) is None  # parked
        waiting = await sup.ask(GetTask("pay"))
        assert waiting.status is TaskStatus.WAITING and waiting.owner is None and runs == []
        assert waiting.waiting is not None
        assert waiting.waiting["expires_at"] - waiting.waiting["since"] == 600  # the tool's expiry
        call = {key: waiting.waiting[key] for key in ("step", "tool", "arguments", "risk")}
        assert call == {"step": "p0/main/m0/t0", "tool": "wire", "arguments": {"amount": 5, "to": "alice"},
                        "risk": "EXECUTES"}  # fmt: skip

        await sup.ask(Decide("pay", approved=True, by="ops", step="p0/main/m0/t0"))
        with pytest.raises(InvalidTransition):  # a second approval changes nothing
            await sup.ask(Decide("pay", approved=True, by="ops again"))
        resumed_model = wire_model()
        result = await WireAgent.make(runs, resumed_model).execute_once(runtime)
        assert result is not None and result.notes == "the bank said: sent 5 to alice"
        assert runs == [{"amount": 5, "to": "alice"}]  # exactly the call shown, once
        assert len(resumed_model.requests) == 1  # the first reply came from the journal
        assert (await sup.ask(GetTask("pay"))).status is TaskStatus.COMPLETED

        assert await WireAgent.make(runs, wire_model()).execute_once(runtime) is None  # refund parks
        with pytest.raises(InvalidSubmission, match="as_done"):  # "it is done" is an approval
            await sup.ask(Decide("refund", approved=False, by="ops", as_done=True))
        await sup.ask(Decide("refund", approved=False, by="ops", reason="not today"))
        denied = await WireAgent.make(runs, wire_model()).execute_once(runtime)
        assert denied is not None and "denied by ops: not today" in denied.notes
        assert runs == [{"amount": 5, "to": "alice"}]  # a denied call never ran
        await writer.stop()


def test_an_approval_expiry_must_be_a_number_of_seconds() -> None:
    for bad in (-1, 0, "soon"):
        with pytest.raises(ValueError, match="approval_expires_in"):
            Tool("t", lambda: 1, approval_expires_in=bad)  # type: ignore[arg-type]


async def test_a_harness_without_a_journal_refuses_a_call_that_needs_approval() -> None:
    """Only a durable harness can wait for a person: any other refuses the call (the model
    is told why) and runs nothing."""
    runs: list[dict[str, Any]] = []

    def wire(amount: int, to: str) -> str:
        runs.append({"amount": amount, "to": to})
        return "sent"

    async with ActorSystem() as system:
        tools = [Tool("wire", wire, risk=RiskLevel.EXECUTES, requires_approval=True)]
        harness = await Harness.spawn(
            system, wire_model(), tools=tools, sandbox=Sandbox(max_risk=RiskLevel.EXECUTES)
        )
        result = await harness.run_bounded("pay", max_iterations=3)
        await harness.aclose()
    assert runs == []
    refused = "tool 'wire' needs a person's approval, which needs a durable harness"
    assert result.tool_calls[0]["error"] == refused
    assert result.stop_reason == "done"  # the model saw the refusal and answered


async def test_a_journal_whose_syncer_is_gone_still_makes_its_steps_durable_when_it_stops(
    store_url: str | None, tmp_path: Path
) -> None:
    """The syncer is the journal's child: it stops first (and could be gone earlier). Steps
    handed meanwhile are synced by the journal's own stop, and their waiters answered —
    no ``ActorStopped`` out of a tell to the stopped child."""
    async with await make_store(store_url, tmp_path / "data") as store, ActorSystem() as system:
        writer = await system.spawn(lambda: StepJournalActor(store.step_store()), name="journal")
        actor: Any = writer._cell.actor
        await actor._syncer.stop()
        journal = await TaskJournal.load("t1", 1, writer)
        assert journal.record_soon("p0/main/m0", "model", "f", b'{"text":"kept"}')
        await journal.handed()  # the store has it; nothing can sync it but the stop
        assert [s.key for s in await writer.ask(ReadSteps("t1"))] == ["p0/main/m0"]  # it still serves
        await writer.stop()
        await journal.sync()  # answered: durable, no error
    async with await make_store(store_url, tmp_path / "data") as store:
        steps = store.step_store()
        try:
            assert [s.body for s in await steps.read("t1")] == [{"text": "kept"}]
        finally:
            await steps.aclose()


async def test_a_stale_attempts_steps_are_refused_and_its_call_never_runs_twice(
    store_url: str | None, tmp_path: Path
) -> None:
    """Issue 49: attempt 1 runs a writing tool; while it runs, its lease is gone and the
    task is granted again (attempt 2, a newer fencing token). When the tool returns, the
    step of its result is refused (``Fenced``: the phase ends, nothing more is written
    under token 1), and attempt 2 — finding the call let run without a result — asks a
    person instead of running it again: the tool ran once."""
    import anyio
    from _stores import open_node

    from greenroom.messages import AgentTask, Claim, Release, Submit
    from greenroom.store import Fenced

    effects: list[str] = []
    running, returning = anyio.Event(), anyio.Event()

    async def write(text: str) -> str:
        effects.append(text)
        running.set()
        await returning.wait()  # the lease is gone meanwhile (a pause, a blocked loop)
        return f"wrote {text}"

    tools = [Tool("note", write, risk=RiskLevel.WRITES)]
    async with await make_store(store_url, tmp_path / "data") as store, open_node(store) as node:
        sup = node.supervisor
        await sup.ask(Submit([AgentTask(id="t1", type="w")]))
        first = (await sup.ask(Claim("a", "w"))).task
        writer = await node.system.spawn(lambda: StepJournalActor(store.step_store()), name="journal")
        journal = await TaskJournal.load("t1", first.attempt, writer, token=first.token)
        harness = await Harness.spawn(
            node.system, model_for_two_turns(), tools=tools, sandbox=Sandbox(max_risk=RiskLevel.WRITES),
            journal=journal,
        )  # fmt: skip
        outcome: list[Any] = []

        async def attempt_one() -> None:
            try:
                outcome.append(await harness.run_bounded("write it down", max_iterations=5))
            except Fenced as fenced:
                outcome.append(fenced)

        async with anyio.create_task_group() as tg:
            tg.start_soon(attempt_one)
            await running.wait()
            await journal.sync()  # what the call recorded before it ran is the store's, under token 1
            await sup.ask(Release("t1", "a", token=first.token))  # (as its lease running out would)
            second = (await sup.ask(Claim("b", "w"))).task
            assert second.token == first.token + 1
            returning.set()
        assert isinstance(outcome[0], Fenced), outcome
        # refused under its own token: when the attempt ended (released), or once granted again
        assert outcome[0].token == first.token and outcome[0].current in (first.token, second.token)
        steps = await writer.ask(ReadSteps("t1"))
        running = [] if store_url is None else ["tool_running"]  # (a release made by a database write)
        assert [s.kind for s in steps if s.key == "p0/main/m0/t0"] == [
            "tool_started",
            "tool_released",
            *running,
        ]
        await harness.aclose()
        journal2 = await TaskJournal.load("t1", second.attempt, writer, token=second.token)
        harness2 = await Harness.spawn(
            node.system, model_for_two_turns(), tools=tools, sandbox=Sandbox(max_risk=RiskLevel.WRITES),
            journal=journal2,
        )  # fmt: skip
        with pytest.raises(ApprovalNeeded):  # "it may have run": a person says, the tool is not run again
            await harness2.run_bounded("write it down", max_iterations=5)
        await harness2.aclose()
        await writer.stop()
    assert effects == ["hello"]


async def test_a_writing_tool_knows_its_calls_key_and_token_and_never_starts_past_its_lease(
    store_url: str | None, tmp_path: Path
) -> None:
    """Issue 49's effects fenced where they can be: a tool reads its call's idempotency key
    and its attempt's fencing token (``current_call``, also in a plain function's worker
    thread) to hand to the system it changes. And before a writing tool starts, its
    beginning is written only while the attempt's lease is current by the store's clock:
    an attempt whose lease lapsed — nobody took the task yet, its token is still the
    newest — does not start the effect (``Fenced``, "by the store's clock")."""
    import time

    import anyio
    from _stores import open_node

    from greenroom.harness import ToolCall, current_call
    from greenroom.messages import AgentTask, Claim, Submit
    from greenroom.store import Fenced

    seen: list[ToolCall | None] = []

    def note(text: str) -> str:  # a plain function: it runs in a worker thread
        seen.append(current_call())
        return f"noted {text}"

    tools = [Tool("note", note, risk=RiskLevel.WRITES), Tool("look", lambda what: what)]
    now = [time.time() - 1000.0]  # the graph's clock, as the claims see it
    async with (
        await make_store(store_url, tmp_path / "data") as store,
        open_node(store, lease_check_interval=3600, clock=lambda: now[0]) as node,
    ):
        sup = node.supervisor
        await sup.ask(Submit([AgentTask(id="t1", type="w"), AgentTask(id="t2", type="w")]))
        writer = await node.system.spawn(lambda: StepJournalActor(store.step_store()), name="journal")
        first = (await sup.ask(Claim("a", "w"))).task
        now[0] = time.time()  # while it works, its lease runs out (1,000 s ago, by the store's clock)
        journal = await TaskJournal.load(first.id, first.attempt, writer, token=first.token)
        harness = await Harness.spawn(
            node.system, model_for_two_turns(), tools=tools, sandbox=Sandbox(max_risk=RiskLevel.WRITES),
            journal=journal,
        )  # fmt: skip
        with pytest.raises(Fenced, match="by the store's clock"):
            await harness.run_bounded("write it down", max_iterations=5)
        assert seen == []  # the effect never started
        await harness.aclose()
        second = (await sup.ask(Claim("a", "w"))).task  # a lease good from now on
        journal = await TaskJournal.load(second.id, second.attempt, writer, token=second.token)
        harness = await Harness.spawn(
            node.system, model_for_two_turns(), tools=tools, sandbox=Sandbox(max_risk=RiskLevel.WRITES),
            journal=journal,
        )  # fmt: skip
        with anyio.fail_after(30):
            await harness.run_bounded("write it down", max_iterations=5)
        await harness.aclose()
        await writer.stop()
    step = "p0/main/m0/t0"
    assert seen == [ToolCall(f"{second.id}/{step}", second.token, second.id, step)]
    assert second.token > 0


def test_a_call_released_by_a_database_write_is_asked_about_only_if_it_was_noted_running() -> None:
    """Issue 49's crash window on PostgreSQL: a call's release there is a durable database
    write, and the instant before the tool is invoked its harness notes ``tool_running``
    (under the data dir, folded in by the next process there). A released call without
    that note, whose process is gone and whose notes this process folded (the release
    names them), never ran: it runs without asking. With the note — or when the notes are
    another's, or its process may still be alive — it may have run: a person is asked."""
    import os
    import subprocess
    import sys

    from greenroom._process import boot_id
    from greenroom.harness._journal import StepSink

    boot = boot_id()
    if boot is None:
        pytest.skip("this machine does not say its boot id")
    gone = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                              capture_output=True, text=True, check=True).stdout)  # fmt: skip

    def journal(writer: str, notes: str, *, running: bool, ours: str = "notes-here") -> TaskJournal:
        recorded = [
            Step(task_id="t1", key="k", kind="tool_started", fingerprint="f", body={"writer": writer}),
            Step(task_id="t1", key="k", kind="tool_released", fingerprint="f", body={"notes": notes}),
        ]
        if running:
            recorded.append(Step(task_id="t1", key="k", kind="tool_running", fingerprint="f", body={}))
        sink = StepSink(None, None, None, ours)  # type: ignore[arg-type]
        return TaskJournal("t1", 2, recorded, None, sink=sink)  # type: ignore[arg-type]

    dead = f"{boot}:{gone}"
    assert not journal(dead, "notes-here", running=False).may_have_run("k")  # never invoked
    assert journal(dead, "notes-here", running=True).may_have_run("k")  # invoked: it may have run
    assert journal(dead, "notes-elsewhere", running=False).may_have_run("k")  # not our notes
    assert journal(f"{boot}:{os.getpid()}", "notes-here", running=False).may_have_run("k")  # alive


async def test_an_mcp_tool_of_a_durable_harness_is_given_its_calls_key_and_token(
    store_url: str | None, tmp_path: Path
) -> None:
    """Issue 49/50: an MCP server's tool run by a durable harness
    (``MCPClient.harness_tools``) gets its call's idempotency key, its attempt's fencing
    token and its task in the call's ``_meta``, as a Python tool gets them from
    ``current_call`` — so a server can fence what it changes too."""
    import logging

    from _stores import open_node
    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    from greenroom.harness import MCPClient
    from greenroom.messages import AgentTask, Claim, Submit

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    server = MCPServer("ledger", log_level="WARNING")
    root.handlers[:] = handlers
    root.setLevel(level)
    seen: list[dict[str, Any]] = []

    @server.tool()
    def note(text: str, ctx: Context) -> str:
        """Note a text."""
        seen.append(dict(ctx.request_context.meta or {}))
        return f"noted {text}"

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def look(what: str) -> str:
        """Look at something."""
        return f"saw {what}"

    async with (
        await make_store(store_url, tmp_path / "data") as store,
        open_node(store) as node,
        MCPClient(server, call_timeout=5.0) as client,
    ):
        await node.supervisor.ask(Submit([AgentTask(id="t1", type="w")]))
        granted = (await node.supervisor.ask(Claim("a", "w"))).task
        writer = await node.system.spawn(lambda: StepJournalActor(store.step_store()), name="journal")
        journal = await TaskJournal.load("t1", granted.attempt, writer, token=granted.token)
        harness = await Harness.spawn(
            node.system, model_for_two_turns(), tools=client.harness_tools(),
            sandbox=Sandbox(max_risk=RiskLevel.WRITES), journal=journal,
        )  # fmt: skip
        result = await harness.run_bounded("write it down", max_iterations=5)
        await harness.aclose()
        await writer.stop()
    assert result.stop_reason == "done"
    (meta,) = seen
    assert meta["dev.greenroom/idempotency_key"] == "t1/p0/main/m0/t0"
    assert (meta["dev.greenroom/fencing_token"], meta["dev.greenroom/task_id"]) == (granted.token, "t1")
