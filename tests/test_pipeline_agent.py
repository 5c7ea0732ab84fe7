"""Spec 004: the contracts, ``AgentConfig`` and one ``Agent`` stage's lifecycle (both backends)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from _support import file_log

from greenroom import ActorSystem
from greenroom._errors import InvalidInput
from greenroom.embedded import read_events
from greenroom.harness import RiskLevel
from greenroom.llm import ScriptedModel
from greenroom.messages import Flush
from greenroom.pipeline import (
    AGENT_COMPLETED,
    AGENT_STARTED,
    Agent,
    AgentConfig,
    AgentOutcome,
    Envelope,
    IdempotencyClass,
    PipelineConfig,
    RoutingRule,
    StageFailed,
    StandardToolResult,
    ToolErrorDetails,
    ToolResultData,
    ToolStatus,
    load_pipeline,
    normalize_tool_result,
)

# -- contracts ---------------------------------------------------------------------------------


def test_outcomes_say_what_they_mean() -> None:
    # clarify and confirm end a run too (spec 004); resuming is a new run: pauses() tells them apart
    assert {o for o in AgentOutcome if o.is_terminal()} == {
        AgentOutcome.ERROR, AgentOutcome.TERMINATE, AgentOutcome.CLARIFY, AgentOutcome.CONFIRM
    }  # fmt: skip
    assert {o for o in AgentOutcome if o.requires_loop()} == {AgentOutcome.LOOP_BACK, AgentOutcome.REPLAN}
    assert AgentOutcome.SUCCESS.is_success() and not AgentOutcome.ERROR.is_success()
    assert {o for o in AgentOutcome if o.pauses()} == {AgentOutcome.CLARIFY, AgentOutcome.CONFIRM}


def test_tool_status_parses_and_refuses_naming_the_value() -> None:
    assert ToolStatus.from_string(" Success ") is ToolStatus.SUCCESS
    with pytest.raises(InvalidInput, match="tool status must be 'success' or 'error' \\(got 'maybe'\\)"):
        ToolStatus.from_string("maybe")


def test_idempotency_class_follows_the_risk_level() -> None:
    assert IdempotencyClass.from_risk_level(RiskLevel.READ_ONLY) is IdempotencyClass.SAFE
    assert IdempotencyClass.from_risk_level(RiskLevel.WRITES) is IdempotencyClass.IDEMPOTENT
    assert IdempotencyClass.from_risk_level(RiskLevel.EXECUTES) is IdempotencyClass.NON_IDEMPOTENT


def test_standard_tool_results_validate_across_fields() -> None:
    StandardToolResult.success({"n": 1}).validate()
    StandardToolResult.failure(ToolErrorDetails.not_found("file", "a.txt")).validate()
    with pytest.raises(InvalidInput, match="successful tool result cannot carry an error"):
        StandardToolResult(ToolStatus.SUCCESS, {}, ToolErrorDetails("x", "y")).validate()
    with pytest.raises(InvalidInput, match="failed tool result needs error details"):
        StandardToolResult(ToolStatus.ERROR).validate()
    assert ToolErrorDetails.not_found("file", "a.txt").message == "file not found: a.txt"
    assert ToolErrorDetails.from_exception(KeyError("k"), recoverable=True).error_type == "KeyError"


def test_tool_result_data_extracts_the_known_fields_and_keeps_the_rest() -> None:
    data = ToolResultData.from_dict({"items_explored": ["a"], "evidence": [{"line": 3}], "extra": 7})
    assert data.items_explored == ["a"] and data.evidence == [{"line": 3}] and data.raw == {"extra": 7}
    with pytest.raises(InvalidInput, match="items_pending must be a list"):
        ToolResultData.from_dict({"items_pending": "a"})


def test_legacy_results_are_normalized() -> None:
    assert normalize_tool_result({"rows": 2}) == StandardToolResult.success({"rows": 2})
    assert normalize_tool_result(None) == StandardToolResult.success()
    failed = normalize_tool_result({"status": "error", "error": "disk full"})
    assert (
        failed.status is ToolStatus.ERROR and failed.error is not None and failed.error.message == "disk full"
    )
    assert normalize_tool_result(ValueError("bad")).error == ToolErrorDetails("ValueError", "bad")
    with pytest.raises(InvalidInput, match="cannot read int as a tool result"):
        normalize_tool_result(5)


def test_a_legacy_result_keeps_what_it_says() -> None:
    listed = normalize_tool_result({"status": "success", "data": [1, 2]})  # data that is not an object
    assert listed == StandardToolResult.success({"value": [1, 2]})
    own = normalize_tool_result({"status": "success", "rows": [1, 2, 3]})  # its own fields are its data
    assert own == StandardToolResult.success({"rows": [1, 2, 3]})
    both = normalize_tool_result({"status": "ok", "rows": 3, "data": {"n": 1}, "message": "m"})
    assert both == StandardToolResult.success({"rows": 3, "n": 1}, "m")
    failed = normalize_tool_result({"status": "error", "error": "e", "retry_after": 30})
    assert failed.status is ToolStatus.ERROR and failed.data == {"retry_after": 30}
    no_status = normalize_tool_result({"error": "quota exceeded"})  # an error without a status
    assert no_status.status is ToolStatus.ERROR and no_status.error is not None
    assert no_status.error.message == "quota exceeded"
    for word, status in (("ok", ToolStatus.SUCCESS), ("completed", ToolStatus.SUCCESS),
                         ("failed", ToolStatus.ERROR), ("FAILURE", ToolStatus.ERROR)):  # fmt: skip
        assert normalize_tool_result({"status": word, "error": "e"}).status is status
    assert ToolStatus.from_string("done") is ToolStatus.SUCCESS
    with pytest.raises(InvalidInput, match="got 'maybe'"):
        normalize_tool_result({"status": "maybe"})


# -- config ------------------------------------------------------------------------------------


def test_a_pipeline_loads_from_toml(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(
        'name = "demo"\nmax_hops = 6\n'
        '[[stages]]\nname = "planner"\nhas_llm = true\noutput_key = "plan"\n'
        'required_output_fields = ["steps"]\ndefault_next = "critic"\n'
        '[[stages]]\nname = "critic"\nstage_order = 2\n'
        '[[stages.routing_rules]]\ncondition = "verdict"\nvalue = "redo"\ntarget = "planner"\n'
    )
    pipeline = load_pipeline(path)
    assert pipeline.first.name == "planner" and pipeline.max_hops == 6
    assert pipeline.stages[1].routing_rules == (RoutingRule("verdict", "redo", "planner"),)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[[stages]]\nname = "Bad Name"\n', "stages[0].name"),
        ('[[stages]]\nname = "a"\ndefault_next = "ghost"\n', "default_next names no stage: 'ghost'"),
        ('[[stages]]\nname = "a"\n[[stages]]\nname = "a"\n', "stage names must be unique"),
        ('[[stages]]\nname = "a"\nhas_tools = true\n', "has_tools needs allowed_tools"),
        ('[[stages]]\nname = "a"\ntemperature = 9\n', "stages[0].temperature"),
        ("stages = [", "is not valid TOML"),
    ],
)
def test_a_bad_pipeline_file_is_refused_naming_the_problem(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "p.toml"
    path.write_text(text)
    with pytest.raises(InvalidInput, match=message.replace("[", "\\[").replace("]", "\\]")):
        load_pipeline(path)


@pytest.mark.parametrize(
    ("build", "field", "value"),
    [
        (lambda: AgentConfig(name="Bad Name!"), "name", "Bad Name!"),
        (lambda: AgentConfig(name="a", stage_order=-5), "stage_order", -5),
        (lambda: AgentConfig(name="a", temperature=9.0), "temperature", 9.0),
        (lambda: AgentConfig(name="a", default_next="Not A Stage"), "default_next", "Not A Stage"),
        (lambda: PipelineConfig(stages=(AgentConfig(name="a"),), max_hops=-3), "max_hops", -3),
        (lambda: PipelineConfig(stages=(AgentConfig(name="a"),), max_hops=0), "max_hops", 0),
        (lambda: RoutingRule("Bad", "x", "a"), "condition", "Bad"),
    ],
)
def test_configs_built_in_python_are_checked_like_files(build: Any, field: str, value: Any) -> None:
    """The README builds pipelines in Python: the constructors refuse what the TOML
    loader refuses, naming the field and the value."""
    with pytest.raises(InvalidInput) as refused:
        build()
    assert (refused.value.field, refused.value.value) == (field, value)


def test_a_stage_may_have_an_llm_and_tools() -> None:
    """Spec 004 ranks the modes (mock, then LLM, then tools): both flags are allowed."""
    both = AgentConfig(name="both", has_llm=True, has_tools=True, allowed_tools=("read",))
    assert both.has_llm and both.has_tools


def test_an_agent_refuses_a_missing_model_or_tool_executor() -> None:
    with pytest.raises(InvalidInput, match="has_llm but no model") as no_model:
        Agent(AgentConfig(name="planner", has_llm=True))
    assert no_model.value.field == "llm"
    with pytest.raises(InvalidInput, match="has_tools but no tool executor") as no_tools:
        Agent(AgentConfig(name="runner", has_tools=True, allowed_tools=("read",)))
    assert no_tools.value.field == "tools"


# -- one stage's lifecycle -----------------------------------------------------------------------

pytestmark = pytest.mark.anyio


class Tools:
    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    async def execute(self, tool_name: str, params: dict[str, Any]) -> Any:
        self.calls.append((tool_name, params))
        if tool_name == "explode":
            raise OSError("device gone")
        return {"status": "success", "data": {"echo": params}}


async def test_llm_mode_parses_json_checks_fields_routes_and_logs(tmp_path: Path) -> None:
    model = ScriptedModel(['{"steps": [{"tool": "read"}], "reasoning": "r", "needs_review": true}'])
    config = AgentConfig(
        name="planner",
        has_llm=True,
        output_key="plan",
        required_output_fields=("steps", "reasoning"),
        default_next="executor",
        routing_rules=(RoutingRule("needs_review", True, "critic"),),
        temperature=0.2,
    )
    async with ActorSystem() as system:
        log = await system.spawn(lambda: file_log(tmp_path))
        agent = Agent(config, llm=model, events=log)
        order: list[str] = []

        async def pre(env: Envelope) -> Envelope:
            order.append("pre")
            env.metadata["enhanced"] = True
            return env

        def post(env: Envelope, output: dict[str, Any]) -> Envelope:
            order.append(f"post:{sorted(output)}")
            return env

        agent.pre_process, agent.post_process = pre, post
        env = await agent.process(Envelope(raw_input="Analyze authentication flow"))
        await log.ask(Flush())
    assert env.get_output("plan") == {"steps": [{"tool": "read"}], "reasoning": "r", "needs_review": True}
    assert (env.outcome, env.next_stage, env.hop_count) == (AgentOutcome.SUCCESS, "critic", 1)
    assert order == ["pre", "post:['needs_review', 'reasoning', 'steps']"] and env.metadata["enhanced"]
    assert model.requests[0].temperature == 0.2
    assert "Analyze authentication flow" in (model.requests[0].messages[0].content or "")
    events = [e for e in read_events(tmp_path / "events.jsonl") if e.type in (AGENT_STARTED, AGENT_COMPLETED)]
    assert [(e.type, e.payload["stage"]) for e in events] == [
        (AGENT_STARTED, "planner"),
        (AGENT_COMPLETED, "planner"),
    ]
    assert events[1].payload["status"] == "success" and events[1].payload["error"] is None


@pytest.mark.parametrize(
    ("reply", "field"),
    [("not json at all", "reply"), ("[1, 2]", "reply"), ('{"reasoning": "r"}', "steps")],
)
async def test_a_bad_model_reply_is_a_clear_stage_error(reply: str, field: str) -> None:
    config = AgentConfig(name="planner", has_llm=True, required_output_fields=("steps", "reasoning"))
    agent = Agent(config, llm=ScriptedModel([reply]))
    env = Envelope(raw_input="x")
    with pytest.raises(StageFailed) as failed:
        await agent.process(env)
    assert failed.value.stage == "planner" and failed.value.field == field
    assert env.outcome is AgentOutcome.ERROR and env.history[-1].error is not None


async def test_the_mock_handler_comes_first() -> None:
    config = AgentConfig(name="planner", has_llm=True)
    agent = Agent(config, llm=ScriptedModel([]))
    agent.use_mock = True
    agent.mock_handler = lambda env: {"steps": [], "reasoning": "mock"}
    env = await agent.process(Envelope())
    assert env.get_output("planner") == {"steps": [], "reasoning": "mock"}


async def test_tool_mode_runs_the_plan_with_access_checks_and_normalized_results() -> None:
    tools = Tools()
    config = AgentConfig(name="executor", has_tools=True, allowed_tools=("read", "explode"))
    env = Envelope(
        outputs={"plan": {"steps": [
            {"tool": "read", "parameters": {"path": "a"}},
            {"tool": "delete_everything", "parameters": {}},
            {"tool": "explode", "parameters": {}},
            "not a step",
        ]}}
    )  # fmt: skip
    env = await Agent(config, tools=tools).process(env)
    results = env.get_output("executor")
    assert results is not None
    statuses = [(r["tool"], r["status"]) for r in results["results"]]
    assert statuses == [
        ("read", "success"),
        ("delete_everything", "error"),
        ("explode", "error"),
        (None, "error"),
    ]
    assert results["results"][1]["error"]["error_type"] == "access_denied"
    assert results["results"][2]["error"]["message"] == "device gone"
    assert [name for name, _ in tools.calls] == ["read", "explode"]  # the refused one never ran
    assert (results["succeeded"], results["failed"]) == (1, 3)


async def test_a_non_idempotent_step_runs_at_most_once_per_envelope() -> None:
    tools = Tools()
    config = AgentConfig(
        name="executor", has_tools=True, allowed_tools=("send",), non_idempotent_tools=("send",)
    )
    agent = Agent(config, tools=tools)
    env = Envelope(outputs={"plan": {"steps": [{"tool": "send", "parameters": {"to": "x"}}]}})
    env = await agent.process(env)
    env = await agent.process(env)  # the stage runs again (a resume, a loop)
    assert tools.calls == [("send", {"to": "x"})]
    assert env.get_output("executor")["results"][0]["status"] == "skipped"  # type: ignore[index]
    assert env.hop_count == 2


async def test_a_service_stage_outputs_nothing_and_follows_default_next() -> None:
    env = await Agent(AgentConfig(name="noop", default_next="done")).process(Envelope())
    assert env.get_output("noop") == {} and env.next_stage == "done"


async def test_an_unknown_outcome_is_refused() -> None:
    agent = Agent(AgentConfig(name="critic"))
    agent.use_mock = True
    agent.mock_handler = lambda env: {"outcome": "maybe"}
    with pytest.raises(StageFailed, match="unknown outcome 'maybe'"):
        await agent.process(Envelope())


async def test_cancellation_passes_through_a_stage() -> None:
    model = ScriptedModel(["{}"], latency=30)
    agent = Agent(AgentConfig(name="slow", has_llm=True), llm=model)
    env = Envelope()
    with anyio.move_on_after(0.05) as scope:
        await agent.process(env)
    assert scope.cancelled_caught and env.outcome is None and model.remaining == 1


def test_pipeline_config_has_a_first_stage() -> None:
    pipeline = PipelineConfig(
        stages=(AgentConfig(name="b", stage_order=2), AgentConfig(name="a", stage_order=1))
    )
    assert pipeline.first.name == "a"


# -- the harness's tools, and a real model --------------------------------------------------------


async def test_stage_tools_are_the_harness_tools_through_its_sandbox() -> None:
    import msgspec

    from greenroom.harness import Sandbox, Tool
    from greenroom.pipeline import HarnessToolExecutor

    class Path_(msgspec.Struct):
        path: str

    sent: list[str] = []

    async def send(args: Path_) -> dict[str, Any]:
        sent.append(args.path)
        return {"sent": args.path}

    def read(args: Path_) -> str:
        return f"contents of {args.path}"

    tools = HarnessToolExecutor(
        [
            Tool("read", read, args=Path_),
            Tool("send", send, args=Path_, risk=RiskLevel.NETWORK),
            Tool("wipe", read, args=Path_, risk=RiskLevel.EXECUTES),
        ],
        Sandbox(max_risk=RiskLevel.NETWORK),
    )
    config = AgentConfig(name="executor", has_tools=True, allowed_tools=("read", "send", "wipe"))
    agent = Agent(config, tools=tools)
    env = Envelope(
        outputs={"plan": {"steps": [
            {"tool": "read", "parameters": {"path": "a"}},
            {"tool": "read", "parameters": {"file": "a"}},
            {"tool": "send", "parameters": {"path": "b"}},
            {"tool": "wipe", "parameters": {"path": "/"}},
        ]}}
    )  # fmt: skip
    env = await agent.process(env)
    first = env.get_output("executor")
    assert first is not None
    assert first["results"][3]["error"]["error_type"] == "refused"  # above the sandbox's risk level
    env = await agent.process(env)  # again: the network tool (non-idempotent by its risk) is not
    output = env.get_output("executor")
    assert output is not None
    results = output["results"]
    assert results[0] == {**results[0], "status": "success", "data": {"result": "contents of a"}}
    assert results[1]["error"]["error_type"] == "invalid_arguments" and results[1]["error"]["details"] == {
        "field": "path"
    }
    assert results[2]["status"] == "skipped"  # it ran in the first pass
    assert results[3]["status"] == "skipped"  # an executing tool is also at most once (even refused)
    assert sent == ["b"]


async def test_an_llm_stage_through_a_real_chat_completions_server() -> None:
    from greenroom.llm import OpenAIChatModel
    from greenroom.testing import ModelServer, Respond, completion

    server = ModelServer()
    server.add(Respond(body=completion(text='{"steps": ["a", "b"], "reasoning": "because"}')))
    with server.running() as running:
        model = OpenAIChatModel("stage-model", base_url=running.url, api_key="sk-test")
        try:
            config = AgentConfig(
                name="planner",
                has_llm=True,
                required_output_fields=("steps",),
                temperature=0.3,
                max_tokens=200,
            )
            env = await Agent(config, llm=model).process(Envelope(raw_input="plan a trip"))
        finally:
            await model.aclose()
    assert env.get_output("planner") == {"steps": ["a", "b"], "reasoning": "because"}
    body = server.seen[0].body
    assert body["temperature"] == 0.3 and body["max_tokens"] == 200
    assert "plan a trip" in body["messages"][0]["content"]


async def test_a_stage_with_policies_refuses_output_that_tries_to_reach_the_user() -> None:
    agent = Agent(AgentConfig(name="writer", has_policies=True))
    agent.use_mock = True
    agent.mock_handler = lambda env: {"text": "hi", "meta": {"show_to_user": True}}
    with pytest.raises(StageFailed, match="tries to reach the user") as refused:
        await agent.process(Envelope())
    assert refused.value.field == "output.meta.show_to_user"
    plain = Agent(AgentConfig(name="writer2"))
    plain.use_mock = True
    plain.mock_handler = lambda env: {"meta": {"show_to_user": True}}
    assert (await plain.process(Envelope())).outcome is AgentOutcome.SUCCESS  # no policies: not checked


async def test_a_harness_tool_past_the_sandbox_timeout_is_a_timeout_result() -> None:
    import msgspec

    from greenroom.harness import Sandbox, Tool
    from greenroom.pipeline import HarnessToolExecutor

    class Nothing(msgspec.Struct):
        pass

    async def slow(args: Nothing) -> str:
        await anyio.sleep(30)
        return "late"

    tools = HarnessToolExecutor([Tool("slow", slow, args=Nothing)], Sandbox(tool_timeout=0.05))
    result = await tools.execute("slow", {})
    assert result.status is ToolStatus.ERROR and result.error is not None
    assert (result.error.error_type, result.error.recoverable) == ("timeout", True)
    assert "timed out after 0.05s" in result.error.message
    missing = await tools.execute("ghost", {})
    assert missing.error == ToolErrorDetails.not_found("tool", "ghost")
