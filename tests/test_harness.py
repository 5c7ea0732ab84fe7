"""Spec 003, 2.2: ``run_bounded`` on a harness actor, with the scripted model."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from _support import eventually

from greenroom import ActorSystem, InvalidInput
from greenroom.harness import Harness, RiskLevel, Sandbox, StopSignal, TokenBudget, Tool
from greenroom.llm import ScriptedModel, Unavailable
from greenroom.messages import ChatReply, ChatRequest, ModelToolCall, Usage

pytestmark = pytest.mark.anyio

USAGE = Usage(prompt_tokens=30, completion_tokens=10)


def text(value: str) -> ChatReply:
    return ChatReply(text=value, usage=USAGE)


def calls(*wanted: tuple[str, dict[str, Any]]) -> ChatReply:
    return ChatReply(
        tool_calls=tuple(ModelToolCall(f"c{i}-{name}", name, args) for i, (name, args) in enumerate(wanted)),
        usage=USAGE,
    )


class Query(msgspec.Struct):
    q: str


class Tools:
    """Three tools that record their calls: tool_a, tool_b (read-only), danger (executes)."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, str]] = []

    def make(self) -> list[Tool]:
        def tool_a(args: Query) -> str:
            self.ran.append(("tool_a", args.q))
            return f"a:{args.q}"

        async def tool_b(args: Query) -> str:
            await anyio.lowlevel.checkpoint()
            self.ran.append(("tool_b", args.q))
            return f"b:{args.q}"

        def danger(args: Query) -> str:
            self.ran.append(("danger", args.q))
            return "boom"

        return [
            Tool("tool_a", tool_a, args=Query),
            Tool("tool_b", tool_b, args=Query),
            Tool("danger", danger, args=Query, risk=RiskLevel.EXECUTES),
        ]


@pytest.fixture
async def system() -> AsyncIterator[ActorSystem]:
    async with ActorSystem() as running:
        yield running


async def spawn(
    system: ActorSystem, model: ScriptedModel, tools: Tools | None = None, **options: Any
) -> Harness:
    return await Harness.spawn(system, model, tools=(tools or Tools()).make(), **options)


def user_texts(request: ChatRequest) -> list[str | None]:
    return [m.content for m in request.messages if m.role == "user"]


# -- stop reasons ------------------------------------------------------------------------


async def test_run_bounded_returns_done_when_the_llm_signals_done_before_the_limit(
    system: ActorSystem,
) -> None:
    model = ScriptedModel([calls(("tool_a", {"q": "x"})), text("all done")])
    harness = await spawn(system, model)
    result = await harness.run_bounded("go", max_iterations=5)
    assert (result.stop_reason, result.final_text) == ("done", "all done")
    assert len(model.requests) == 2


async def test_run_bounded_returns_max_iterations_at_the_limit(system: ActorSystem) -> None:
    model = ScriptedModel([calls(("tool_a", {"q": str(i)})) for i in range(5)])
    tools = Tools()
    harness = await spawn(system, model, tools)
    result = await harness.run_bounded("go", max_iterations=3)
    assert result.stop_reason == "max_iterations"
    assert len(model.requests) == 3 and model.remaining == 2
    assert tools.ran == [("tool_a", "0"), ("tool_a", "1"), ("tool_a", "2")]


async def test_run_bounded_returns_budget_exhausted_on_entry_with_no_llm_call(system: ActorSystem) -> None:
    budget = TokenBudget(100)
    budget.try_admit().spend(100)  # type: ignore[union-attr]
    model = ScriptedModel([text("never")])
    harness = await spawn(system, model, budget=budget)
    result = await harness.run_bounded("go", max_iterations=5)
    assert result == type(result)("", [], "budget_exhausted")
    assert model.requests == []


async def test_after_budget_exhaustion_a_later_run_bounded_also_returns_at_once(system: ActorSystem) -> None:
    model = ScriptedModel([calls(("tool_a", {"q": "1"})), text("never")])
    harness = await spawn(system, model, budget=TokenBudget(40))  # one call uses exactly 40
    first = await harness.run_bounded("go", max_iterations=5)
    second = await harness.run_bounded("again", max_iterations=5, context_label="other")
    assert first.stop_reason == "budget_exhausted" and len(first.tool_calls) == 1
    assert second.stop_reason == "budget_exhausted" and second.tool_calls == []
    assert len(model.requests) == 1


async def test_run_bounded_returns_stop_requested_when_stop_is_signaled(system: ActorSystem) -> None:
    model = ScriptedModel([text("never")])
    harness = await spawn(system, model)
    harness.request_stop()
    result = await harness.run_bounded("go")
    assert result.stop_reason == "stop_requested"
    assert model.requests == []


async def test_phase_result_from_run_bounded_has_no_tokens_used_or_cost_usd(system: ActorSystem) -> None:
    harness = await spawn(system, ScriptedModel([text("hi")]))
    result = await harness.run_bounded("go")
    assert result.stop_reason == "done"
    for name in ("tokens_used", "cost_usd"):
        with pytest.raises(AttributeError):
            getattr(result, name)


# -- contexts ----------------------------------------------------------------------------


async def test_continue_context_true_includes_the_prior_phase_history(system: ActorSystem) -> None:
    model = ScriptedModel([text("first answer"), text("second answer")])
    harness = await spawn(system, model)
    await harness.run_bounded("first question")
    await harness.run_bounded("second question", continue_context=True)
    second = model.requests[1]
    assert [(m.role, m.content) for m in second.messages] == [
        ("user", "first question"),
        ("assistant", "first answer"),
        ("user", "second question"),
    ]


async def test_continue_context_false_resets_that_label_only(system: ActorSystem) -> None:
    model = ScriptedModel([text("a1"), text("p1"), text("a2"), text("p2")])
    harness = await spawn(system, model)
    await harness.run_bounded("in a", context_label="a")
    await harness.run_bounded("in primary")
    await harness.run_bounded("fresh a", context_label="a", continue_context=False)
    await harness.run_bounded("primary again")
    assert [m.content for m in model.requests[2].messages] == ["fresh a"]  # no prior context
    assert [m.content for m in model.requests[3].messages] == ["in primary", "p1", "primary again"]


async def test_named_contexts_keep_independent_histories(system: ActorSystem) -> None:
    model = ScriptedModel([text("A1"), text("B1"), text("A2"), text("B2")])
    harness = await spawn(system, model)
    await harness.run_bounded("about A", context_label="label_a")
    await harness.run_bounded("about B", context_label="label_b")
    await harness.run_bounded("more A", context_label="label_a")
    await harness.run_bounded("more B", context_label="label_b")
    assert user_texts(model.requests[2]) == ["about A", "more A"]
    assert user_texts(model.requests[3]) == ["about B", "more B"]
    assert "A1" not in [m.content for m in model.requests[3].messages]
    assert [m.content for m in await harness.history("label_a")] == ["about A", "A1", "more A", "A2"]


async def test_the_primary_context_is_separate_from_every_named_context(system: ActorSystem) -> None:
    model = ScriptedModel([text("named"), text("primary")])
    harness = await spawn(system, model, system_prompt="be brief")
    await harness.run_bounded("named question", context_label="subtopic:x")
    await harness.run_bounded("primary question", context_label=None)
    primary = model.requests[1]
    assert [(m.role, m.content) for m in primary.messages] == [
        ("system", "be brief"),
        ("user", "primary question"),
    ]
    assert [m.content for m in await harness.history()] == ["primary question", "primary"]


# -- tool allowlists ---------------------------------------------------------------------


async def test_tool_names_restricts_the_llm_to_the_listed_tools(system: ActorSystem) -> None:
    model = ScriptedModel([calls(("tool_a", {"q": "1"}), ("tool_b", {"q": "2"})), text("ok")])
    tools = Tools()
    harness = await spawn(system, model, tools, tool_allowlist=["tool_a", "tool_b"])
    result = await harness.run_bounded("go", tool_names=["tool_a"])
    assert [t.name for t in model.requests[0].tools] == ["tool_a"]
    assert tools.ran == [("tool_a", "1")]
    refused = result.tool_calls[1]
    assert refused["ok"] is False and "not allowed in this phase" in refused["error"]


async def test_tool_names_empty_runs_the_llm_but_rejects_every_tool_call(system: ActorSystem) -> None:
    model = ScriptedModel([calls(("tool_a", {"q": "1"})), text("fine")])
    tools = Tools()
    harness = await spawn(system, model, tools)
    result = await harness.run_bounded("go", tool_names=[])
    assert model.requests[0].tools == ()
    assert tools.ran == []
    assert result.stop_reason == "done" and result.tool_calls[0]["ok"] is False
    # the model was told, in the tool message, why
    assert model.requests[1].messages[-1].content.startswith("error: tool 'tool_a' is not allowed")  # type: ignore[union-attr]


async def test_tool_names_none_offers_every_allowlisted_tool(system: ActorSystem) -> None:
    model = ScriptedModel([calls(("tool_a", {"q": "1"}), ("tool_b", {"q": "2"})), text("ok")])
    tools = Tools()
    harness = await spawn(system, model, tools, tool_allowlist=["tool_a", "tool_b"])
    await harness.run_bounded("go", tool_names=None)
    assert [t.name for t in model.requests[0].tools] == ["tool_a", "tool_b"]  # not danger
    assert tools.ran == [("tool_a", "1"), ("tool_b", "2")]


async def test_a_tool_call_with_bad_arguments_is_an_error_result_naming_the_field(
    system: ActorSystem,
) -> None:
    model = ScriptedModel([calls(("tool_a", {"q": 5}), ("tool_a", {})), text("ok")])
    tools = Tools()
    harness = await spawn(system, model, tools)
    result = await harness.run_bounded("go")
    wrong_type, missing = result.tool_calls
    assert wrong_type["error"] == "bad tool 'tool_a' arguments: field 'q' expected `str`, got `int` (got 5)"
    assert "field 'q' is required" in missing["error"]
    assert tools.ran == []


def test_a_plain_function_tool_offers_its_signature_as_the_schema() -> None:
    """A tool declared without ``args`` is offered its parameters (a real model shown an
    empty schema guesses, and every call fails) and its arguments are checked by them."""

    def lookup(query: str, limit: int = 3, exact: bool = False) -> list[str]:
        return [query] * limit

    tool = Tool("lookup", lookup, description="Look a query up.")
    schema = tool.spec().parameters
    assert schema["required"] == ["query"]
    assert schema["properties"]["query"] == {"type": "string"}
    assert schema["properties"]["limit"] == {"type": "integer", "default": 3}
    assert tool.validate({"query": "leases"}) == {"query": "leases", "limit": 3, "exact": False}
    with pytest.raises(Exception, match="field 'limit' expected `int`, got `str`"):
        tool.validate({"query": "x", "limit": "many"})
    with pytest.raises(Exception, match="'nope' is not a known field"):
        tool.validate({"query": "x", "nope": 1})

    def anything(**kwargs: object) -> str:  # only **kwargs: an open object, as before
        return "ok"

    assert Tool("anything", anything).spec().parameters == {"type": "object", "properties": {}}
    assert Tool("anything", anything).validate({"a": 1}) == {"a": 1}


def test_the_example_knowledge_base_tool_declares_its_query() -> None:
    from greenroom.agents.examples import research_setup

    (tool,) = research_setup().tools
    parameters = tool.spec().parameters
    assert parameters["required"] == ["query"] and parameters["properties"]["query"]["type"] == "string"
    assert tool.description


# -- tool-only mode ----------------------------------------------------------------------


async def test_direct_tool_calls_execute_with_no_llm_call(system: ActorSystem) -> None:
    model = ScriptedModel([])
    tools = Tools()
    harness = await spawn(system, model, tools)
    result = await harness.run_bounded(
        direct_tool_calls=[
            {"name": "tool_a", "arguments": {"q": "x"}},
            {"id": "mine", "name": "tool_b", "arguments": {"q": "y"}},
        ]
    )
    assert result.stop_reason == "done" and result.final_text == ""
    assert [(c["id"], c["ok"], c["result"]) for c in result.tool_calls] == [
        ("direct-0", True, "a:x"),
        ("mine", True, "b:y"),
    ]
    assert tools.ran == [("tool_a", "x"), ("tool_b", "y")]
    assert model.requests == []


async def test_an_mcp_servers_tools_run_in_a_harness_through_the_one_client(system: ActorSystem) -> None:
    """Issue 50: ``MCPClient.harness_tools()`` offers a server's tools to a harness with
    the server's schema and its risk; a call answers the server's structured content, and
    a tool the server says failed is a failed call the model is told of."""
    import logging

    from mcp.server.mcpserver import MCPServer
    from mcp.types import ToolAnnotations

    from greenroom.harness import MCPClient

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    server = MCPServer("sums", log_level="WARNING")
    root.handlers[:] = handlers
    root.setLevel(level)

    @server.tool(annotations=ToolAnnotations(read_only_hint=True))
    def add(a: int, b: int) -> dict[str, int]:
        """Add two numbers."""
        return {"sum": a + b}

    @server.tool()
    def boom() -> str:
        """Always fails."""
        raise ValueError("the tool broke")

    async with MCPClient(server, call_timeout=5.0) as client:
        tools = client.harness_tools()
        offered = {tool.name: tool for tool in tools}
        assert set(offered["add"].spec().parameters["properties"]) == {"a", "b"}
        assert (offered["add"].risk, offered["boom"].risk) == (RiskLevel.READ_ONLY, RiskLevel.WRITES)
        harness = await Harness.spawn(
            system, ScriptedModel([]), tools=tools, sandbox=Sandbox(max_risk=RiskLevel.WRITES)
        )
        result = await harness.run_bounded(
            direct_tool_calls=[
                {"name": "add", "arguments": {"a": 2, "b": 3}},
                {"name": "boom", "arguments": {}},
            ]
        )
        await harness.aclose()
    (added, broke) = result.tool_calls
    assert added["ok"] and added["result"] == {"sum": 5}, added
    assert not broke["ok"] and broke["error"] == "MCPToolFailed: Error executing tool boom", broke


async def test_direct_tool_calls_empty_makes_no_llm_call(system: ActorSystem) -> None:
    model = ScriptedModel([])
    harness = await spawn(system, model)
    result = await harness.run_bounded("ignored", direct_tool_calls=[])
    assert result == type(result)("", [], "done")
    assert model.requests == []


async def test_direct_tool_calls_with_stop_requested_return_without_executing(system: ActorSystem) -> None:
    tools = Tools()
    harness = await spawn(system, ScriptedModel([]), tools)
    harness.request_stop()
    result = await harness.run_bounded(direct_tool_calls=[{"name": "tool_a", "arguments": {"q": "x"}}])
    assert result == type(result)("", [], "stop_requested")
    assert tools.ran == []


async def test_direct_tool_calls_are_not_gated_by_an_exhausted_budget(system: ActorSystem) -> None:
    budget = TokenBudget(10)
    budget.try_admit().spend(10)  # type: ignore[union-attr]
    tools = Tools()
    harness = await spawn(system, ScriptedModel([]), tools, budget=budget)
    result = await harness.run_bounded(direct_tool_calls=[{"name": "tool_a", "arguments": {"q": "x"}}])
    assert budget.exhausted
    assert result.stop_reason == "done" and tools.ran == [("tool_a", "x")]


async def test_direct_tool_calls_outside_the_allowlist_give_an_error_result_and_the_rest_run(
    system: ActorSystem,
) -> None:
    tools = Tools()
    harness = await spawn(system, ScriptedModel([]), tools, tool_allowlist=["tool_a"])
    result = await harness.run_bounded(
        direct_tool_calls=[
            {"name": "tool_b", "arguments": {"q": "no"}},
            {"name": "tool_a", "arguments": {"q": "yes"}},
            {"name": "nope", "arguments": {}},
            {"arguments": {}},
            "not a dict",
        ]
    )
    ok = [c["ok"] for c in result.tool_calls]
    assert ok == [False, True, False, False, False]
    assert "not allowed" in result.tool_calls[0]["error"]
    assert "unknown tool 'nope'" in result.tool_calls[2]["error"]
    assert "direct_tool_calls[3].name" in result.tool_calls[3]["error"]
    assert "direct_tool_calls[4] must be an object" in result.tool_calls[4]["error"]
    assert tools.ran == [("tool_a", "yes")]


async def test_direct_tool_calls_pass_the_sandbox_risk_and_rate_limit_checks(system: ActorSystem) -> None:
    tools = Tools()
    sandbox = Sandbox(max_risk=RiskLevel.WRITES, tool_rate_limits={"tool_a": (2, 3600)})
    harness = await spawn(system, ScriptedModel([]), tools, sandbox=sandbox)
    result = await harness.run_bounded(
        direct_tool_calls=[{"name": "danger", "arguments": {"q": "rm"}}]
        + [{"name": "tool_a", "arguments": {"q": str(i)}} for i in range(3)]
    )
    danger, first, second, third = result.tool_calls
    assert not danger["ok"] and "risk level EXECUTES" in danger["error"]
    assert first["ok"] and second["ok"]
    assert not third["ok"] and "rate limit" in third["error"]
    assert tools.ran == [("tool_a", "0"), ("tool_a", "1")]


async def test_llm_driven_tool_calls_pass_the_same_sandbox_checks(system: ActorSystem) -> None:
    tools = Tools()
    model = ScriptedModel([calls(("danger", {"q": "rm"})), text("ok")])
    harness = await spawn(system, model, tools)  # default sandbox: up to WRITES
    result = await harness.run_bounded("go")
    assert "risk level EXECUTES" in result.tool_calls[0]["error"] and tools.ran == []


async def test_a_failing_or_slow_tool_becomes_an_error_result(system: ActorSystem) -> None:
    async def slow(args: Query) -> str:
        await anyio.sleep(30)
        return "late"

    def broken(args: Query) -> str:
        raise OSError("disk on fire")

    harness = await Harness.spawn(
        system,
        ScriptedModel([]),
        tools=[
            Tool("slow", slow, args=Query),
            Tool("broken", broken, args=Query),
            Tool("odd", lambda: object()),
        ],
        sandbox=Sandbox(tool_timeout=0.05),
    )
    result = await harness.run_bounded(
        direct_tool_calls=[
            {"name": "slow", "arguments": {"q": ""}},
            {"name": "broken", "arguments": {"q": ""}},
            {"name": "odd"},
        ]
    )
    slow_call, broken_call, odd_call = result.tool_calls
    assert "timed out after 0.05s" in slow_call["error"]
    assert broken_call["error"] == "OSError: disk on fire"
    assert "not JSON" in odd_call["error"]


# -- accounting and run() ----------------------------------------------------------------


async def test_token_totals_in_run_summary_json_sum_every_run_bounded_call(
    system: ActorSystem, tmp_path: Path
) -> None:
    model = ScriptedModel([text("one"), calls(("tool_a", {"q": "z"})), text("two"), text("three")])
    summary = tmp_path / "logs" / "run_summary.json"
    harness = await spawn(system, model, summary_path=summary)
    await harness.run_bounded("a", context_label="x")
    await harness.run_bounded("b", context_label="y")
    await harness.run_bounded("c")
    written = json.loads(summary.read_text())
    assert written["llm_calls"] == 4 and written["phases"] == 3
    assert written["prompt_tokens"] == 4 * 30 and written["completion_tokens"] == 4 * 10
    assert written["total_tokens"] == 160
    assert written["contexts"] == ["x", "y"] and written["last_stop_reason"] == "done"
    assert list(summary.parent.iterdir()) == [summary]  # written by rename: no temp file left


async def test_run_is_identical_to_run_bounded_for_a_single_phase_agent(
    system: ActorSystem, tmp_path: Path
) -> None:
    script = [calls(("tool_a", {"q": "x"})), text("answer")]
    outcomes = []
    for way in ("run", "run_bounded"):
        model = ScriptedModel(script)
        summary = tmp_path / way / "run_summary.json"
        harness = await spawn(system, model, system_prompt="sys", summary_path=summary)
        if way == "run":
            result = await harness.run("question", max_iterations=5)
        else:
            result = await harness.run_bounded("question", max_iterations=5)
        written = json.loads(summary.read_text())
        del written["updated_at"]
        outcomes.append((result, model.requests, await harness.history(), written))
    assert outcomes[0] == outcomes[1]
    assert outcomes[0][0].stop_reason == "done"


async def test_run_continues_phase_after_phase_until_done(system: ActorSystem) -> None:
    model = ScriptedModel([calls(("tool_a", {"q": str(i)})) for i in range(5)] + [text("finished")])
    harness = await spawn(system, model)
    result = await harness.run("long job", max_iterations=2, max_phases=10)
    assert result.stop_reason == "done" and result.final_text == "finished"
    assert len(model.requests) == 6
    assert user_texts(model.requests[-1]) == ["long job"]  # later phases continue, adding no user text


# -- stop signals, errors, cancellation --------------------------------------------------


async def test_a_stop_after_the_current_turn_keeps_that_turn(system: ActorSystem) -> None:
    stop = StopSignal()
    tools = Tools()

    def stop_now(args: Query) -> str:
        stop.request()  # arrives while the turn's tool call runs
        tools.ran.append(("stopper", args.q))
        return "noted"

    model = ScriptedModel([calls(("stopper", {"q": "1"})), text("never")])
    harness = await Harness.spawn(system, model, stop=stop, tools=[Tool("stopper", stop_now, args=Query)])
    result = await harness.run_bounded("go", max_iterations=5)
    assert result.stop_reason == "stop_requested"
    assert tools.ran == [("stopper", "1")] and len(model.requests) == 1
    assert [m.role for m in await harness.history()] == ["user", "assistant", "tool"]  # the whole turn


async def test_an_immediate_stop_cancels_the_tool_call_in_flight_and_discards_the_turn(
    system: ActorSystem,
) -> None:
    started = anyio.Event()
    finished: list[str] = []

    async def slow(args: Query) -> str:
        started.set()
        await anyio.sleep(30)
        finished.append(args.q)
        return "late"

    model = ScriptedModel([text("earlier"), calls(("slow", {"q": "1"}))])
    harness = await Harness.spawn(system, model, tools=[Tool("slow", slow, args=Query)])
    await harness.run_bounded("warm up")
    results = []
    async with anyio.create_task_group() as tg:

        async def phase() -> None:
            results.append(await harness.run_bounded("now the slow one"))

        tg.start_soon(phase)
        await started.wait()
        harness.request_stop(immediate=True)
    assert results[0].stop_reason == "stop_requested" and finished == []
    assert [m.content for m in await harness.history()] == ["warm up", "earlier"]  # nothing half-written


async def test_an_immediate_stop_cancels_a_slow_model_call(system: ActorSystem) -> None:
    model = ScriptedModel([text("too slow")], latency=30)
    budget = TokenBudget()
    harness = await spawn(system, model, budget=budget)
    async with anyio.create_task_group() as tg:
        results = []

        async def phase() -> None:
            results.append(await harness.run_bounded("go"))

        tg.start_soon(phase)
        await eventually(lambda: budget._in_flight == 1)  # admitted: the model call is in flight
        harness.request_stop(immediate=True)
    assert results[0].stop_reason == "stop_requested"
    assert model.remaining == 1 and await harness.history() == ()


async def test_cancelling_the_caller_aborts_its_phase_and_the_harness_stays_usable(
    system: ActorSystem,
) -> None:
    model = ScriptedModel(
        lambda request: text("quick") if user_texts(request)[-1] == "fast" else text("slow"), latency=0
    )
    slow_model = ScriptedModel([text("slow")], latency=30)
    harness = await spawn(system, slow_model)
    with anyio.move_on_after(0.05):
        await harness.run_bounded("never finishes")
    assert await harness.history() == ()  # the aborted phase left nothing, and the actor answers
    other = await spawn(system, model)
    assert (await other.run_bounded("fast")).final_text == "quick"


async def test_a_model_error_fails_the_phase_and_keeps_completed_turns(system: ActorSystem) -> None:
    replies = iter([calls(("tool_a", {"q": "1"}))])

    def flaky(request: ChatRequest) -> ChatReply:
        try:
            return next(replies)
        except StopIteration:
            raise Unavailable("provider down") from None

    harness = await spawn(system, ScriptedModel(flaky))
    with pytest.raises(Unavailable, match="provider down"):
        await harness.run_bounded("go")
    assert [m.role for m in await harness.history()] == ["user", "assistant", "tool"]
    assert (await harness.run_bounded(direct_tool_calls=[])).stop_reason == "done"  # still alive


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"max_iterations": -1}, "max_iterations must be an int >= 0, got -1"),
        ({"max_iterations": True}, "max_iterations must be an int >= 0, got True"),
        ({"context_label": ""}, "context_label must be a non-empty string without padding, got ''"),
        ({"tool_names": ["tool_a", "ghost"]}, "tool_names names unknown tools: \\['ghost'\\]"),
    ],
)
async def test_bad_run_bounded_arguments_are_refused_naming_the_field(
    system: ActorSystem, options: dict[str, Any], match: str
) -> None:
    model = ScriptedModel([text("unused")])
    harness = await spawn(system, model)
    with pytest.raises(ValueError, match=match):
        await harness.run_bounded("go", **options)
    assert model.requests == []


def test_bad_harness_settings_are_refused() -> None:
    from greenroom.harness import HarnessActor

    model = ScriptedModel([])
    with pytest.raises(ValueError, match="tool_allowlist names tools it was not given: \\['ghost'\\]"):
        HarnessActor(model, tool_allowlist=["ghost"])
    with pytest.raises(ValueError, match="two tools are named 'x'"):
        HarnessActor(model, tools=[Tool("x", print), Tool("x", print)])
    with pytest.raises(TypeError, match="model must be a ChatModel"):
        HarnessActor("gpt")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"Tool name must be 1-64 letters.*'\.\./x'"):
        Tool("../x", print)
    with pytest.raises(ValueError, match="Sandbox rate_limit calls must be an int >= 1, got 0"):
        Sandbox(rate_limit=(0, 1.0))


async def test_history_waits_for_the_running_phase_with_no_deadline(system: ActorSystem) -> None:
    """It used to give up with ``AskTimeout`` after 5 s while a phase ran."""
    gate = anyio.Event()

    async def slow(args: Query) -> str:
        await gate.wait()
        return "ok"

    model = ScriptedModel([calls(("slow", {"q": "1"})), text("done")])
    harness = await Harness.spawn(system, model, tools=[Tool("slow", slow, args=Query)])
    timers = system._timers
    live = sum(1 for entry in timers._heap if not entry[2].done)
    histories: list[Any] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(harness.run_bounded, "go")
        await eventually(lambda: harness.ref._cell.activation is not None)

        async def read() -> None:
            histories.append(await harness.history())

        tg.start_soon(read)
        await eventually(lambda: len(harness.ref._cell.mailbox) == 1)  # queued behind the phase
        assert sum(1 for entry in timers._heap if not entry[2].done) == live  # no deadline armed
        assert histories == []
        gate.set()
    assert [m.role for m in histories[0]] == ["user", "assistant", "tool", "assistant"]


async def test_an_ask_that_times_out_interrupts_its_phase(system: ActorSystem) -> None:
    from greenroom.actors import AskTimeout
    from greenroom.messages import RunBounded

    model = ScriptedModel([text("too slow"), text("second")], latency=30)
    harness = await spawn(system, model)
    with pytest.raises(AskTimeout):
        await harness.ref.ask(RunBounded(user_message="go"), timeout=0.05)
    await eventually(lambda: harness.ref._cell.activation is None)
    assert model.remaining == 2  # the model call was cancelled, not answered
    assert await harness.history() == ()  # and nothing of the turn was kept


async def test_an_immediate_stop_reaches_every_harness_sharing_the_signal(system: ActorSystem) -> None:
    stop = StopSignal()
    budget = TokenBudget(reserve_per_call=1)
    models = [ScriptedModel([text("slow")], latency=30) for _ in range(3)]
    harnesses = [await spawn(system, model, stop=stop, budget=budget) for model in models]
    results: list[Any] = []
    async with anyio.create_task_group() as tg:
        for harness in harnesses:

            async def phase(harness: Harness = harness) -> None:
                results.append(await harness.run_bounded("go"))

            tg.start_soon(phase)
        await eventually(lambda: budget._in_flight == 3)
        harnesses[0].request_stop(immediate=True)
    assert [r.stop_reason for r in results] == ["stop_requested"] * 3
    assert all(model.remaining == 1 for model in models)
    for harness in harnesses:
        await harness.aclose()
    assert stop._harnesses == set()  # each left the signal when it stopped


async def test_phase_events_wait_for_room_in_a_full_log_and_are_never_dropped(system: ActorSystem) -> None:
    from greenroom import Actor
    from greenroom.messages import HARNESS_PHASE, Append

    gate = anyio.Event()
    seen: list[Any] = []

    class SlowLog(Actor):
        async def receive(self, message: Any) -> None:
            await gate.wait()
            seen.append(message)

    log = await system.spawn(SlowLog, mailbox_size=1)
    harness = await spawn(system, ScriptedModel([text(f"r{i}") for i in range(5)]), log=log)

    async def phases() -> None:
        for i in range(5):
            await harness.run_bounded(f"phase {i}", context_label=f"c{i}")
        await harness.aclose()  # on_stop sends what is left, waiting for room

    async with anyio.create_task_group() as tg:
        tg.start_soon(phases)
        # the log holds one event and takes none: the harness waits for room (backpressure)
        await eventually(lambda: bool(log._cell.send_waiters))
        gate.set()
    events = [m for m in seen if isinstance(m, Append) and m.type == HARNESS_PHASE]
    assert [e.payload["context_label"] for e in events] == [f"c{i}" for i in range(5)]


# -- cost --------------------------------------------------------------------------------


async def test_cost_by_the_models_price_is_in_run_summary_json_and_the_phase_events(
    system: ActorSystem, tmp_path: Path
) -> None:
    from greenroom import Actor
    from greenroom.llm import Price
    from greenroom.messages import HARNESS_PHASE, Append

    seen: list[Any] = []

    class Recorder(Actor):
        async def receive(self, message: Any) -> None:
            seen.append(message)

    log = await system.spawn(Recorder)
    # USAGE is 30 prompt + 10 completion tokens: 30 * 2 + 10 * 4 = 100 per million each call
    model = ScriptedModel([calls(("tool_a", {"q": "z"})), text("done")], price=Price(input=2.0, output=4.0))
    summary = tmp_path / "run_summary.json"
    harness = await spawn(system, model, summary_path=summary, log=log)
    await harness.run_bounded("go")
    await harness.aclose()
    written = json.loads(summary.read_text())
    assert written["llm_calls"] == 2 and written["cost"] == pytest.approx(0.0002)
    phases = [m for m in seen if isinstance(m, Append) and m.type == HARNESS_PHASE]
    assert len(phases) == 1 and phases[0].payload["cost"] == pytest.approx(0.0002)


async def test_a_budget_in_money_ends_the_phase_once_spent(system: ActorSystem) -> None:
    from greenroom.llm import Price

    def keep_working(request: ChatRequest) -> ChatReply:
        return calls(("tool_a", {"q": "again"}))

    budget = TokenBudget(cost_limit=0.00015)  # each call costs 0.0001
    model = ScriptedModel(keep_working, price=Price(input=2.0, output=4.0))
    harness = await spawn(system, model, budget=budget)
    result = await harness.run_bounded("go", max_iterations=50)
    assert result.stop_reason == "budget_exhausted"
    assert len(model.requests) == 2  # the second was admitted alone: the one that may overshoot
    assert budget.cost == pytest.approx(0.0002) and budget.remaining_cost == 0.0


async def test_a_harness_given_a_price_counts_by_it_rather_than_the_models(
    system: ActorSystem, tmp_path: Path
) -> None:
    from greenroom.llm import Price

    model = ScriptedModel([text("one")], price=Price(input=1000.0, output=1000.0))
    summary = tmp_path / "run_summary.json"
    harness = await spawn(system, model, summary_path=summary, price=Price(input=0.0, output=100.0))
    await harness.run_bounded("go")
    assert json.loads(summary.read_text())["cost"] == pytest.approx(0.001)  # 10 completion tokens


async def test_a_blocking_plain_tool_runs_in_a_thread_and_the_loop_goes_on(system: ActorSystem) -> None:
    """Issue 49: a plain function tool runs in a worker thread by default, so one that
    blocks (here: until the event loop itself releases it) stops nothing else — the
    heartbeats of every lease go on; ``inline=True`` keeps a quick one on the loop."""
    import threading

    started, released = threading.Event(), threading.Event()
    threads: list[str] = []

    def blocking() -> str:
        threads.append(threading.current_thread().name)
        started.set()
        return "released" if released.wait(10) else "the loop never got to run"

    def quick() -> str:
        threads.append(threading.current_thread().name)
        return "quick"

    calls = (ModelToolCall("c1", "blocking", {}), ModelToolCall("c2", "quick", {}))
    model = ScriptedModel([ChatReply(tool_calls=calls, usage=USAGE), text("done")])
    tools = [Tool("blocking", blocking), Tool("quick", quick, inline=True)]
    harness = await Harness.spawn(system, model, tools=tools)

    async def release_from_the_loop() -> None:
        await anyio.to_thread.run_sync(started.wait)
        released.set()  # the loop runs while the tool blocks

    async with anyio.create_task_group() as tg:
        tg.start_soon(release_from_the_loop)
        result = await harness.run_bounded("go", max_iterations=3)
    await harness.aclose()
    contents = [m.content for m in model.requests[1].messages if m.role == "tool"]
    assert result.stop_reason == "done" and contents[0] == "released"  # a text result is shown as text
    assert threads[0] != threading.main_thread().name and threads[1] == threading.main_thread().name
    with pytest.raises(InvalidInput, match="inline must be true or false"):
        Tool("bad", quick, inline="yes")  # type: ignore[arg-type]


def test_a_tools_own_schema_is_a_dict_and_never_beside_args() -> None:
    """``Tool(parameters=...)`` (a schema something else checks, as an MCP server does):
    a schema that is not a dict, or one given beside ``args``, is refused by name; given,
    it is what the model is offered and the arguments pass to ``fn`` as sent."""

    async def echo(**arguments: object) -> object:
        return arguments

    schema = {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}
    with pytest.raises(TypeError, match="'echo' parameters must be a JSON Schema"):
        Tool("echo", echo, parameters="q: string")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="'echo' parameters must be a JSON Schema"):
        Tool("echo", echo, parameters=schema, args=Query)
    tool = Tool("echo", echo, parameters=schema)
    assert tool.spec().parameters == schema
    assert tool.validate({"q": "x", "extra": 1}) == {"q": "x", "extra": 1}  # the server checks them
