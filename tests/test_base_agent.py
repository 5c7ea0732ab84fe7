"""Spec 003, 2.3-2.4: BaseAgent's workspace accessors and ``_run_phase``."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import pytest
from _support import Node, eventually, open_node

import greenroom.agents._base
from greenroom.agents import AgentRuntime, BaseAgent, HarnessSetup, PhaseResult, artifact_filename
from greenroom.embedded import read_events
from greenroom.harness import HarnessActor, Tool
from greenroom.llm import ScriptedModel
from greenroom.messages import HARNESS_PHASE, AgentResult, AgentTask, ChatReply, ModelToolCall, Submit, Usage

pytestmark = pytest.mark.anyio

STAMP = re.compile(r"\d{8}_\d{6}")


class Planner(BaseAgent):
    """Runs the phases it is given, one per entry, and keeps their results."""

    agent_type = "plan"

    def __init__(self, phases: list[dict[str, Any]], **options: Any) -> None:
        super().__init__(**options)
        self.phases = phases
        self.results: list[PhaseResult] = []

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        for phase in self.phases:
            self.results.append(await self._run_phase(**phase))
        return AgentResult(task_id=task.id, outcome=self.results[-1].stop_reason if self.results else "none")


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    async with open_node(tmp_path) as running:
        yield running


@pytest.fixture
def harness_inits(monkeypatch: pytest.MonkeyPatch) -> list[HarnessActor]:
    """A spy on ``HarnessActor.__init__``: every harness built, in order."""
    built: list[HarnessActor] = []
    original = HarnessActor.__init__

    def spy(self: HarnessActor, *args: Any, **kwargs: Any) -> None:
        built.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(HarnessActor, "__init__", spy)
    return built


async def run_tasks(node: Node, agent: BaseAgent, count: int = 1) -> list[Any]:
    tasks = [AgentTask(id=f"t{i}", type=agent.agent_type) for i in range(count)]
    await node.supervisor.ask(Submit(tasks))
    runtime = AgentRuntime("agent-1", agent.agent_type, supervisor=node.supervisor, log=node.log)
    return [await agent.execute_once(runtime) for _ in range(count)]


def setup(*script: ChatReply | str, tools: list[Tool] | None = None, **options: Any) -> HarnessSetup:
    return HarnessSetup(ScriptedModel(list(script)), tools=tools or [], **options)


# -- 2.3 workspace accessors -----------------------------------------------------------


def test_artifacts_dir_is_agents_folder_name_artifacts(tmp_path: Path) -> None:
    agent = Planner([], name="writer", agents_folder=tmp_path)
    assert agent._artifacts_dir() == tmp_path / "writer" / "artifacts"
    assert isinstance(agent._artifacts_dir(), Path)


def test_logs_dir_is_agents_folder_name_logs(tmp_path: Path) -> None:
    agent = Planner([], name="writer", agents_folder=tmp_path)
    assert agent._logs_dir() == tmp_path / "writer" / "logs"


def test_memory_dir_is_agents_folder_name_memory(tmp_path: Path) -> None:
    agent = Planner([], name="writer", agents_folder=tmp_path)
    assert agent._memory_dir() == tmp_path / "writer" / "memory"


def test_workspace_root_creates_the_directories_when_absent(tmp_path: Path) -> None:
    folder = tmp_path / "agents"
    agent = Planner([], name="writer", agents_folder=folder)
    assert not folder.exists()  # lazily: nothing made when the agent is made
    root = agent._workspace_root()
    assert root == folder / "writer"
    assert sorted(p.name for p in root.iterdir()) == ["artifacts", "logs", "memory"]
    for sub in root.iterdir():
        sub.rmdir()
    assert agent._workspace_root() == root and (root / "logs").is_dir()  # and again if removed


def test_the_agents_folder_defaults_to_the_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMING_LLM_DATA_DIR", str(tmp_path))
    agent = Planner([])
    assert agent.name == "plan"
    assert agent._logs_dir() == tmp_path / "agents" / "plan" / "logs"


def test_artifact_filename_is_safe_name_timestamp_suffix(tmp_path: Path) -> None:
    agent = Planner([], agents_folder=tmp_path)
    before = datetime.now(UTC).strftime("%Y%m%d_%H%M%S")
    name = agent._artifact_filename("some topic name")
    after = datetime.now(UTC).strftime("%Y%m%d_%H%M%S")
    match = re.fullmatch(r"some_topic_name_(\d{8}_\d{6})\.md", name)
    assert match is not None and before <= match[1] <= after


def test_artifact_filename_sanitizes_spaces_colons_and_slashes() -> None:
    now = datetime(2026, 11, 21, 9, 8, 7, tzinfo=UTC)
    assert artifact_filename("a b:c/d\\e", now=now) == "a_b_c_d_e_20261121_090807.md"


def test_artifact_filename_strips_leading_and_trailing_underscores() -> None:
    now = datetime(2026, 11, 21, 9, 8, 7, tzinfo=UTC)
    assert artifact_filename("  /topic: ", now=now) == "topic_20261121_090807.md"


def test_artifact_filename_uses_the_given_suffix(tmp_path: Path) -> None:
    agent = Planner([], agents_folder=tmp_path)
    assert agent._artifact_filename("name", suffix=".json").endswith(".json")
    assert STAMP.search(agent._artifact_filename("name", suffix=".json"))


@pytest.mark.parametrize("bad", ["..", "../x", "a/b", "a\\b", "/etc", ".hidden", "", " padded", "nul\0"])
def test_an_agent_name_that_could_escape_the_agents_folder_is_refused(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ValueError, match="Planner name must be 1-100 characters"):
        Planner([], name=bad, agents_folder=tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_an_artifact_name_never_escapes_and_a_bad_suffix_is_refused(tmp_path: Path) -> None:
    agent = Planner([], name="w", agents_folder=tmp_path)
    for hostile in ("../../etc/passwd", "/abs/path", "..\\..\\win"):
        name = agent._artifact_filename(hostile)
        target = (agent._artifacts_dir() / name).resolve()
        assert target.parent == agent._artifacts_dir().resolve() and "/" not in name and ".." not in name
    from greenroom import InvalidInput

    with pytest.raises(
        InvalidInput, match=r"artifact name has no usable characters, got '\.\.\.'"
    ) as refused:
        agent._artifact_filename("...")
    assert refused.value.field == "name"
    with pytest.raises(InvalidInput, match="artifact suffix must look like") as refused:
        agent._artifact_filename("ok", suffix="/../../x")
    assert refused.value.field == "suffix"


def test_a_workspace_symlinked_outside_the_agents_folder_is_refused(tmp_path: Path) -> None:
    folder, elsewhere = tmp_path / "agents", tmp_path / "elsewhere"
    folder.mkdir()
    elsewhere.mkdir()
    (folder / "w").symlink_to(elsewhere)
    agent = Planner([], name="w", agents_folder=folder)
    with pytest.raises(ValueError, match="resolves outside"):
        agent._workspace_root()
    assert list(elsewhere.iterdir()) == []


# -- 2.4 _run_phase -----------------------------------------------------------------------


async def test_the_first_run_phase_creates_exactly_one_harness(
    node: Node, tmp_path: Path, harness_inits: list[HarnessActor]
) -> None:
    agent = Planner(
        [{"system_prompt": "sys", "user_message": "hi"}], llm=setup("hello"), agents_folder=tmp_path
    )
    assert harness_inits == []  # not when the agent is made
    await run_tasks(node, agent)
    assert len(harness_inits) == 1
    assert harness_inits[0].system_prompt == "sys"


async def test_a_second_run_phase_reuses_the_harness(
    node: Node, tmp_path: Path, harness_inits: list[HarnessActor]
) -> None:
    phases = [
        {"system_prompt": "sys", "user_message": "one"},
        {"system_prompt": "other", "user_message": "two"},
    ]
    model = ScriptedModel(["first", "second"])
    agent = Planner(phases, llm=HarnessSetup(model), agents_folder=tmp_path)
    await run_tasks(node, agent)
    assert len(harness_inits) == 1
    second = model.requests[1]
    # the same harness: the first phase's turn is there, and the first system prompt kept
    assert [(m.role, m.content) for m in second.messages] == [
        ("system", "sys"),
        ("user", "one"),
        ("assistant", "first"),
        ("user", "two"),
    ]


async def test_a_second_run_creates_a_fresh_harness(
    node: Node, tmp_path: Path, harness_inits: list[HarnessActor]
) -> None:
    model = ScriptedModel(["first run", "second run"])
    agent = Planner([{"user_message": "go"}], llm=HarnessSetup(model), agents_folder=tmp_path)
    await run_tasks(node, agent, count=2)
    assert len(harness_inits) == 2
    assert [m.content for m in model.requests[1].messages] == ["go"]  # nothing carried over
    assert agent._harness is None  # closed when its run ended
    await anyio.wait_all_tasks_blocked()
    assert not any(h.context.ref.is_alive for h in harness_inits if h._greenroom_cell is not None)


async def test_run_phase_returns_a_phase_result_without_token_or_cost_fields(
    node: Node, tmp_path: Path
) -> None:
    agent = Planner([{"user_message": "go"}], llm=setup("done"), agents_folder=tmp_path)
    await run_tasks(node, agent)
    (result,) = agent.results
    assert isinstance(result, PhaseResult) and result.stop_reason == "done"
    assert not hasattr(result, "tokens_used") and not hasattr(result, "cost_usd")


async def test_context_label_is_forwarded_to_run_bounded(node: Node, tmp_path: Path) -> None:
    phases = [
        {"user_message": "A", "context_label": "label_a"},
        {"user_message": "B", "context_label": "label_b"},
        {"user_message": "A again", "context_label": "label_a"},
    ]
    model = ScriptedModel(["a1", "b1", "a2"])
    agent = Planner(phases, llm=HarnessSetup(model), agents_folder=tmp_path)
    await run_tasks(node, agent)
    assert [m.content for m in model.requests[1].messages] == ["B"]
    assert [m.content for m in model.requests[2].messages] == ["A", "a1", "A again"]


async def test_direct_tool_calls_make_no_llm_call(node: Node, tmp_path: Path) -> None:
    ran: list[str] = []
    model = ScriptedModel([])
    tools = [Tool("save", lambda note: ran.append(note) or "saved")]
    phases = [{"direct_tool_calls": [{"name": "save", "arguments": {"note": "x"}}]}]
    agent = Planner(phases, llm=HarnessSetup(model, tools=tools), agents_folder=tmp_path)
    await run_tasks(node, agent)
    assert model.requests == [] and ran == ["x"]
    assert agent.results[0].tool_calls[0]["result"] == "saved"


async def test_direct_tool_calls_mode_still_creates_then_reuses_the_harness(
    node: Node, tmp_path: Path, harness_inits: list[HarnessActor]
) -> None:
    tools = [Tool("save", lambda note: "saved")]
    phases = [
        {"direct_tool_calls": [{"name": "save", "arguments": {"note": "x"}}]},
        {"user_message": "now talk"},
        {"direct_tool_calls": []},
    ]
    agent = Planner(phases, llm=HarnessSetup(ScriptedModel(["talked"]), tools=tools), agents_folder=tmp_path)
    await run_tasks(node, agent)
    assert len(harness_inits) == 1
    assert [r.stop_reason for r in agent.results] == ["done", "done", "done"]


def test_base_agent_has_no_check_budget_and_stop() -> None:
    with pytest.raises(AttributeError):
        BaseAgent._check_budget_and_stop  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(AttributeError):
        Planner([])._check_budget_and_stop  # type: ignore[attr-defined]  # noqa: B018


def test_base_agent_has_no_tokens_used(tmp_path: Path) -> None:
    with pytest.raises(AttributeError):
        BaseAgent._tokens_used  # type: ignore[attr-defined]  # noqa: B018
    with pytest.raises(AttributeError):
        Planner([], agents_folder=tmp_path)._tokens_used  # type: ignore[attr-defined]  # noqa: B018
    source = Path(greenroom.agents._base.__file__).read_text()
    assert "TokenBudget" not in source and "Usage" not in source  # no token or cost utilities imported


async def test_run_phase_outside_run_or_without_llm_is_a_clear_error(node: Node, tmp_path: Path) -> None:
    agent = Planner([], llm=setup("x"), agents_folder=tmp_path)
    with pytest.raises(RuntimeError, match="only valid while run\\(\\) handles a task"):
        await agent._run_phase(user_message="x")
    no_llm = Planner([{"user_message": "x"}], agents_folder=tmp_path)
    (outcome,) = await run_tasks(node, no_llm)
    assert "has no llm" in outcome.reason  # the task failed, clearly


async def test_the_run_summary_and_phase_events_land_in_the_workspace_and_the_log(
    node: Node, tmp_path: Path
) -> None:
    usage = Usage(prompt_tokens=20, completion_tokens=5)
    script = [ChatReply("x", usage=usage), ChatReply("y", usage=usage), ChatReply("z", usage=usage)]
    phases = [{"user_message": "a"}, {"user_message": "b", "context_label": "side"}, {"user_message": "c"}]
    agent = Planner(phases, name="summarist", llm=setup(*script), agents_folder=tmp_path / "agents")
    await run_tasks(node, agent)
    summary = json.loads((tmp_path / "agents" / "summarist" / "logs" / "run_summary.json").read_text())
    assert (summary["phases"], summary["total_tokens"], summary["task_id"]) == (3, 75, "t0")
    await node.log.stop()
    phase_events = [e for e in read_events(tmp_path / "events.jsonl") if e.type == HARNESS_PHASE]
    assert [e.payload["context_label"] for e in phase_events] == [None, "side", None]
    assert {e.visibility for e in phase_events} == {"internal"} and phase_events[0].task_id == "t0"


# -- the research pattern (spec 003, 2.4), end to end ----------------------------------------


class Researcher(BaseAgent):
    agent_type = "research"

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        findings = {}
        for subtopic in task.input["subtopics"]:
            result = await self._run_phase(
                system_prompt="You research.",
                user_message=f"Phase: RESEARCH. Subtopic: '{subtopic}'.",
                tool_names=["query_knowledge_base"],
                max_iterations=3,
                context_label=f"subtopic:{subtopic}",
            )
            if result.stop_reason in ("budget_exhausted", "stop_requested"):
                break
            findings[subtopic] = result.final_text
        outline = await self._run_phase(
            system_prompt="You research.",
            user_message="Phase: SYNTHESIZE. Write the research outline.",
            tool_names=[],
            context_label=None,
        )
        path = self._artifacts_dir() / self._artifact_filename("outline")
        path.write_text(outline.final_text)
        return AgentResult(
            task_id=task.id, outcome=outline.stop_reason, artifacts={"outline": path.name, **findings}
        )


def research_model(request: Any) -> ChatReply:
    """Queries the knowledge base once per subtopic, then summarises what it saw."""
    last = request.messages[-1]
    users = [m.content for m in request.messages if m.role == "user"]
    if "SYNTHESIZE" in users[-1]:
        return ChatReply(text=f"outline from {len(request.messages)} messages")
    subtopic = users[-1].split("'")[1]
    if last.role == "tool":
        return ChatReply(text=f"notes on {subtopic}: {last.content}")
    return ChatReply(
        tool_calls=(ModelToolCall(f"q-{subtopic}", "query_knowledge_base", {"query": subtopic}),)
    )


async def test_the_research_pattern_runs_subtopics_in_their_own_contexts_then_synthesizes(
    node: Node, tmp_path: Path
) -> None:
    queried: list[str] = []

    def query_knowledge_base(query: str) -> str:
        queried.append(query)
        return f"facts about {query}"

    model = ScriptedModel(research_model)
    tools = [Tool("query_knowledge_base", query_knowledge_base), Tool("publish", lambda: "published")]
    agent = Researcher(llm=HarnessSetup(model, tools=tools), agents_folder=tmp_path / "agents")
    await node.supervisor.ask(
        Submit([AgentTask(id="r1", type="research", input={"subtopics": ["tides", "moons"]})])
    )
    runtime = AgentRuntime("researcher-1", "research", supervisor=node.supervisor, log=node.log)
    result = await agent.execute_once(runtime)

    assert isinstance(result, AgentResult) and result.outcome == "done"
    assert queried == ["tides", "moons"]
    assert result.artifacts["tides"] == "notes on tides: facts about tides"
    # each subtopic saw only its own conversation
    moons_calls = [r for r in model.requests if "moons" in (r.messages[1].content or "")]
    assert all("tides" not in (m.content or "") for r in moons_calls for m in r.messages)
    assert all([t.name for t in r.tools] == ["query_knowledge_base"] for r in moons_calls)
    # the synthesis ran in the primary context: system prompt + its own user message only
    synthesis = model.requests[-1]
    assert [(m.role, m.content) for m in synthesis.messages] == [
        ("system", "You research."),
        ("user", "Phase: SYNTHESIZE. Write the research outline."),
    ]
    assert synthesis.tools == ()
    outline = tmp_path / "agents" / "research" / "artifacts" / result.artifacts["outline"]
    assert outline.read_text() == "outline from 2 messages"


async def test_the_example_research_agent_works_in_phases_on_the_scripted_model(
    node: Node, tmp_path: Path
) -> None:
    from greenroom.agents.examples import ResearchAgent

    agent = ResearchAgent()
    agent.place_workspace(tmp_path / "agents", "research-1")  # what the daemon's host does
    await node.supervisor.ask(Submit([AgentTask(id="r", type="research", input={"topic": "leases"})]))
    runtime = AgentRuntime("research-1@1", "research", supervisor=node.supervisor, log=node.log)
    result = await agent.execute_once(runtime)
    assert isinstance(result, AgentResult)
    assert (
        result.artifacts["facts"][0] == "leases / background: point 1" and len(result.artifacts["facts"]) == 6
    )
    outline = Path(result.artifacts["outline"])
    assert outline.parent == tmp_path / "agents" / "research-1" / "artifacts"
    assert (await anyio.Path(outline).read_text()).splitlines()[:2] == [
        "Outline:",
        "- leases / background: point 1",
    ]
    summary = json.loads((tmp_path / "agents" / "research-1" / "logs" / "run_summary.json").read_text())
    assert (summary["phases"], summary["llm_calls"], summary["tool_calls"]) == (3, 5, 2)


def test_place_workspace_fills_in_only_what_the_agent_was_not_given(tmp_path: Path) -> None:
    given = Planner([], name="mine", agents_folder=tmp_path / "own")
    given.place_workspace(tmp_path / "host", "host-name")
    assert given._workspace_root() == tmp_path / "own" / "mine"
    default = Planner([])
    default.place_workspace(tmp_path / "host", "plan-2")
    assert default._workspace_root() == tmp_path / "host" / "plan-2"
    with pytest.raises(ValueError, match="name must be"):
        Planner([]).place_workspace(tmp_path, "../up")


def test_a_harness_setup_takes_one_kind_of_budget_and_checks_it() -> None:
    from greenroom.harness import TokenBudget

    model = ScriptedModel([])
    with pytest.raises(
        ValueError, match="budget \\(shared\\) or tokens_per_run / cost_per_run \\(per run\\)"
    ):
        HarnessSetup(model, budget=TokenBudget(10), tokens_per_run=10)
    with pytest.raises(ValueError, match="TokenBudget limit must be an int >= 0, got -1"):
        HarnessSetup(model, tokens_per_run=-1)
    team = TokenBudget(10)
    assert HarnessSetup(model, budget=team).budget_for_run() is team
    per_run = HarnessSetup(model, tokens_per_run=5)
    assert per_run.budget_for_run() is not per_run.budget_for_run()
    assert per_run.budget_for_run().limit == 5


# -- the harness is the agent actor's child ------------------------------------------------


class Holding(BaseAgent):
    """One phase, then waits for ``release`` while its harness is alive."""

    agent_type = "hold"

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.in_run = anyio.Event()
        self.release = anyio.Event()
        self.harness_ref: Any = None

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        await self._run_phase(user_message="hi")
        assert self._harness is not None
        self.harness_ref = self._harness.ref
        self.in_run.set()
        await self.release.wait()
        return AgentResult(task_id=task.id, outcome="done")


async def test_inside_an_agent_actor_the_harness_is_its_child_and_ends_with_the_run(
    node: Node, tmp_path: Path
) -> None:
    from greenroom.agents import AgentActor

    agent = Holding(llm=setup("hello"), agents_folder=tmp_path)
    await node.supervisor.ask(Submit([AgentTask(id="t1", type="hold")]))
    runtime = AgentRuntime("h1", "hold", supervisor=node.supervisor, log=node.log)
    ref = await node.system.spawn(lambda: AgentActor(agent, runtime), name="agent-h1")
    with anyio.fail_after(10):
        await agent.in_run.wait()
    assert agent.harness_ref._cell.parent is ref._cell  # the agent actor's child, not top-level
    agent.release.set()
    await eventually(lambda: not agent.harness_ref.is_alive)  # stopped when the run ended
    await ref.stop()


async def test_a_crashing_harness_is_seen_by_the_agent_actors_strategy(node: Node, tmp_path: Path) -> None:
    from greenroom.actors import Directive, SupervisorStrategy
    from greenroom.agents import AgentActor

    seen: list[Exception] = []

    def decide(error: Exception) -> Directive:
        seen.append(error)
        return Directive.STOP

    class Strict(AgentActor):
        supervisor_strategy = SupervisorStrategy(decider=decide)

    agent = Holding(llm=setup("hello"), agents_folder=tmp_path)
    await node.supervisor.ask(Submit([AgentTask(id="t1", type="hold")]))
    runtime = AgentRuntime("h1", "hold", supervisor=node.supervisor, log=node.log)
    ref = await node.system.spawn(lambda: Strict(agent, runtime))
    with anyio.fail_after(10):
        await agent.in_run.wait()
    agent.harness_ref.tell("not a harness message")  # receive raises TypeError: a crash
    await eventually(lambda: not agent.harness_ref.is_alive)
    assert len(seen) == 1 and isinstance(seen[0], TypeError)
    agent.release.set()
    await ref.stop()


async def test_embedded_outside_an_agent_actor_the_harness_is_top_level_and_stopped_after_the_run(
    node: Node, tmp_path: Path, harness_inits: list[HarnessActor]
) -> None:
    agent = Planner([{"user_message": "go"}], llm=setup("done"), agents_folder=tmp_path)
    refs: list[Any] = []
    original = agent._run_phase

    async def spy(**phase: Any) -> PhaseResult:
        result = await original(**phase)
        assert agent._harness is not None
        refs.append(agent._harness.ref)
        return result

    agent._run_phase = spy  # type: ignore[method-assign]
    await run_tasks(node, agent)
    (harness_ref,) = refs
    assert harness_ref._cell.parent is None
    assert not harness_ref.is_alive  # the run stopped it before returning


async def test_a_cancelled_run_still_stops_its_harness(node: Node, tmp_path: Path) -> None:
    model = ScriptedModel(["never"], latency=30)
    agent = Planner([{"user_message": "go"}], llm=HarnessSetup(model), agents_folder=tmp_path)
    await node.supervisor.ask(Submit([AgentTask(id="t0", type="plan")]))
    runtime = AgentRuntime("agent-1", "plan", supervisor=node.supervisor, log=node.log)
    task = await runtime.claim_task()
    assert task is not None
    async with anyio.create_task_group() as tg:
        tg.start_soon(agent.run, task, runtime)
        await eventually(lambda: agent._harness is not None and agent._harness.ref._cell.activation)
        assert agent._harness is not None
        harness_ref = agent._harness.ref  # its phase is running: the model call is in flight
        tg.cancel_scope.cancel()
    await eventually(lambda: not harness_ref.is_alive)
    assert model.remaining == 1  # the call was cut short, not answered


async def test_the_host_and_the_phases_touch_the_file_system_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import threading

    from greenroom.daemon import AgentHost, DaemonConfig

    data_dir = tmp_path / "new-data-dir"
    host = AgentHost(DaemonConfig(agents={}), data_dir)
    assert not data_dir.exists()  # the constructor made nothing (no blocking call there)
    async with host:
        assert host.data_dir == data_dir and data_dir.is_dir()
        on_loop: list[bool] = []
        real = greenroom.agents._base.ensure_agent_workspace

        def spy(name: str, folder: Path) -> Path:
            on_loop.append(threading.current_thread() is threading.main_thread())
            return real(name, folder)

        monkeypatch.setattr(greenroom.agents._base, "ensure_agent_workspace", spy)
        agent = Planner([{"user_message": "go"}], llm=setup("done"), agents_folder=tmp_path / "agents")
        await host.supervisor.ask(Submit([AgentTask(id="t1", type="plan")]))
        runtime = AgentRuntime("p1", "plan", supervisor=host.supervisor, log=host.log)
        await agent.execute_once(runtime)
        assert on_loop == [False]  # the workspace was made in a worker thread


async def test_run_phase_is_the_public_name_and_specs_run_phase_the_same_call() -> None:
    """The README teaches ``run_phase``; spec 003's ``_run_phase`` is the same call (both
    refuse outside a run, naming the public one)."""
    from greenroom.agents import BaseAgent

    class Idle(BaseAgent):
        agent_type = "idle"

    agent = Idle()
    for call in (agent.run_phase, agent._run_phase):
        with pytest.raises(
            RuntimeError, match=r"Idle\.run_phase\(\) is only valid while run\(\) handles a task"
        ):
            await call(user_message="hi")
