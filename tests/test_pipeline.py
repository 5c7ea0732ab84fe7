"""Stage actors passing envelopes (spec 004): routing, loops bounded by hops, pauses that
resume without re-running effects, crashes that fail the envelope, many in flight."""

from __future__ import annotations

from functools import partial
from typing import Any

import anyio
import pytest
from _support import eventually

from greenroom import ActorSystem
from greenroom._errors import InvalidInput
from greenroom.actors import ActorStopped
from greenroom.pipeline import (
    Agent,
    AgentConfig,
    AgentOutcome,
    Envelope,
    Pipeline,
    PipelineConfig,
    PipelineError,
    RoutingRule,
)

pytestmark = pytest.mark.anyio

PLANNER = AgentConfig(name="planner", stage_order=1, output_key="plan", default_next="executor")
EXECUTOR = AgentConfig(
    name="executor", stage_order=2, has_tools=True, allowed_tools=("send",), non_idempotent_tools=("send",),
    default_next="critic",
)  # fmt: skip
CRITIC = AgentConfig(name="critic", stage_order=3, routing_rules=(RoutingRule("verdict", "redo", "planner"),))
CONFIG = PipelineConfig(name="demo", max_hops=9, stages=(PLANNER, EXECUTOR, CRITIC))


class Tools:
    def __init__(self) -> None:
        self.sent: list[Any] = []

    async def execute(self, tool_name: str, params: dict[str, Any]) -> Any:
        self.sent.append(params)
        return {"sent": params}


def mocked(config: AgentConfig, handler: Any, tools: Any = None) -> Agent:
    agent = Agent(config, tools=tools)
    agent.use_mock = True
    agent.mock_handler = handler
    return agent


def agents(critic: Any, tools: Tools | None = None, planner: Any = None) -> dict[str, Agent]:
    tools = tools or Tools()
    executor = Agent(EXECUTOR, tools=tools)
    return {
        "planner": mocked(
            PLANNER, planner or (lambda env: {"steps": [{"tool": "send", "parameters": {"n": 1}}]})
        ),
        "executor": executor,
        "critic": mocked(CRITIC, critic),
    }


async def test_an_envelope_loops_back_once_then_finishes() -> None:
    verdicts = iter(["redo", "ok"])
    async with ActorSystem() as system:
        pipeline = await Pipeline.spawn(system, CONFIG, agents(lambda env: {"verdict": next(verdicts)}))
        result = await pipeline.run("write a haiku")
    assert result.outcome is AgentOutcome.SUCCESS and result.stage == "critic"
    assert result.trail == ["planner", "executor", "critic", "planner", "executor", "critic"]
    assert result.envelope.hop_count == 6 and result.envelope.get_output("critic") == {"verdict": "ok"}


async def test_a_loop_that_never_ends_is_terminated_at_the_hop_limit() -> None:
    async with ActorSystem() as system:
        pipeline = await Pipeline.spawn(system, CONFIG, agents(lambda env: {"verdict": "redo"}))
        with anyio.fail_after(10):
            result = await pipeline.run("never good enough")
    assert result.outcome is AgentOutcome.TERMINATE
    assert result.envelope.hop_count == CONFIG.max_hops and "max_hops 9" in (result.error or "")


async def test_a_pause_returns_the_question_and_resume_never_reruns_effects() -> None:
    tools = Tools()
    asked = {"n": 0}

    def critic(env: Envelope) -> dict[str, Any]:
        if env.metadata.get("answer") is None:
            asked["n"] += 1
            return {"outcome": "confirm", "question": "Send it?"}
        return {"verdict": "ok"}

    async with ActorSystem() as system:
        pipeline = await Pipeline.spawn(system, CONFIG, agents(critic, tools))
        paused = await pipeline.run("notify the team")
        assert paused.paused and paused.outcome is AgentOutcome.CONFIRM and paused.question == "Send it?"
        result = await pipeline.resume(paused.envelope, "yes")
        with pytest.raises(InvalidInput, match="not paused"):
            await pipeline.resume(result.envelope, "again")
    assert result.outcome is AgentOutcome.SUCCESS and result.trail[-1] == "critic"
    assert tools.sent == [{"n": 1}]  # the send ran once, before the pause, never again
    assert asked["n"] == 1


async def test_a_stage_error_ends_the_envelope_with_the_reason() -> None:
    async with ActorSystem() as system:
        pipeline = await Pipeline.spawn(system, CONFIG, agents(lambda env: {"outcome": "maybe"}))
        result = await pipeline.run("x")
    assert result.outcome is AgentOutcome.ERROR and result.stage == "critic"
    assert "unknown outcome 'maybe'" in (result.error or "")


class HeldCritic:
    """A critic stage's handler that holds each envelope until ``release`` is set."""

    def __init__(self) -> None:
        self.holding = anyio.Event()
        self.release = anyio.Event()

    async def __call__(self, env: Envelope) -> dict[str, Any]:
        self.holding.set()
        await self.release.wait()
        return {"verdict": "ok"}


def bug_in_hand_on(pipeline: Pipeline, *, at: int) -> dict[str, int]:
    """The ``at``-th hand-on to the critic meets a bug (``RuntimeError``); the count."""
    calls = {"n": 0}

    class Stages(dict[str, Any]):
        def __getitem__(self, name: str) -> Any:
            if name == "critic":
                calls["n"] += 1
                if calls["n"] == at:
                    raise RuntimeError("a bug in a hook")
            return super().__getitem__(name)

    pipeline.stages = Stages(pipeline.stages)
    return calls


async def test_a_stage_that_raises_fails_that_envelope_and_keeps_serving() -> None:

    async with ActorSystem() as system:
        pipeline = await Pipeline.spawn(system, CONFIG, agents(lambda env: {"verdict": "ok"}))
        original = pipeline.stages["executor"]._cell.actor
        assert original is not None
        # a bug inside the stage actor but outside the agent's own handling
        crashes = bug_in_hand_on(pipeline, at=1)
        with pytest.raises(PipelineError, match="stage 'executor' failed: RuntimeError: a bug in a hook"):
            await pipeline.run("first")
        result = await pipeline.run("second")  # the same stage takes the next envelope
        assert crashes["n"] == 2
        assert pipeline.stages["executor"]._cell.actor is original  # not even restarted
    assert result.outcome is AgentOutcome.SUCCESS


async def test_hooks_that_raise_or_return_none_fail_only_their_envelopes() -> None:
    """A hook raising, a hook returning ``None`` after changing the envelope (natural in
    Python): many envelopes within seconds fail or pass one by one, every ``run`` ends,
    and the stages keep serving (once, four such within 5 s stopped the stage for good
    and one caller waited forever)."""
    seen: list[int] = []

    def critic_hook(env: Envelope) -> None:  # changes the envelope in place, returns None
        env.metadata["checked"] = True

    def planner_hook(env: Envelope) -> Envelope:
        n = int(env.raw_input)
        seen.append(n)
        if n % 2:
            raise ValueError(f"odd input {n}")
        return env

    async with ActorSystem() as system:
        stages = agents(lambda env: {"verdict": "ok"})
        stages["planner"].pre_process = planner_hook
        stages["critic"].pre_process = critic_hook
        pipeline = await Pipeline.spawn(system, CONFIG, stages)
        results: dict[int, Any] = {}

        async def run(n: int) -> None:
            results[n] = await pipeline.run(str(n))

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for n in range(12):
                    tg.start_soon(run, n)
        assert all(ref.is_alive for ref in pipeline.stages.values())
        later = await pipeline.run("100")
    for n, result in results.items():
        if n % 2:
            assert result.outcome is AgentOutcome.ERROR and f"ValueError: odd input {n}" in (
                result.error or ""
            )
        else:
            assert result.outcome is AgentOutcome.SUCCESS and result.envelope.metadata["checked"] is True
    assert later.outcome is AgentOutcome.SUCCESS and sorted(seen) == [*range(12), 100]


async def test_no_envelope_waits_forever_for_a_stopped_stage() -> None:
    """An envelope passed to a stopped stage fails at once; envelopes a stage dropped
    (``stop(now=True)`` drops what waits in its mailbox) fail when the pipeline closes."""
    critic = HeldCritic()

    async with ActorSystem() as system:
        pipeline = await Pipeline.spawn(system, CONFIG, agents(lambda env: {"verdict": "ok"}))
        await pipeline.stages["critic"].stop()
        with anyio.fail_after(10), pytest.raises(PipelineError, match="stage 'critic' is stopped"):
            await pipeline.run("x")
        await pipeline.aclose()

        pipeline = await Pipeline.spawn(system, CONFIG, agents(critic))
        critic_ref = pipeline.stages["critic"]
        outcomes: list[Any] = []

        async def run(text: str) -> None:
            try:
                outcomes.append(await pipeline.run(text))
            except ActorStopped as stopped:
                outcomes.append(stopped)

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for text in ("a", "b", "c"):
                    tg.start_soon(run, text)
                await critic.holding.wait()  # the critic holds one envelope ...
                await eventually(lambda: critic_ref.queued == 2)  # ... and two wait for it
                tg.start_soon(partial(critic_ref.stop, now=True))  # they are dropped
                await eventually(lambda: not critic_ref._cell.accepting)  # the stop is requested
                critic.release.set()  # the held one finishes; the stage stops
                await pipeline.aclose()
    assert sorted(type(o).__name__ for o in outcomes) == ["ActorStopped", "ActorStopped", "PipelineResult"]


async def test_many_envelopes_are_in_flight_and_the_stages_overlap() -> None:
    gate = anyio.Event()
    busy: set[str] = set()
    overlap = anyio.Event()

    def watched(name: str, output: dict[str, Any]) -> Any:
        async def handler(env: Envelope) -> dict[str, Any]:
            busy.add(name)
            if len(busy) >= 2:
                overlap.set()
            if name == "critic":
                await gate.wait()
            await anyio.lowlevel.checkpoint()
            busy.discard(name)
            return output

        return handler

    plan = {"steps": []}
    stages = {
        "planner": mocked(PLANNER, watched("planner", plan)),
        "executor": Agent(EXECUTOR, tools=Tools()),
        "critic": mocked(CRITIC, watched("critic", {"verdict": "ok"})),
    }
    results: list[Any] = []
    async with ActorSystem() as system:
        pipeline = await Pipeline.spawn(system, CONFIG, stages)
        async with anyio.create_task_group() as tg:
            for i in range(100):

                async def one(i: int = i) -> None:
                    results.append(await pipeline.run(f"job {i}"))

                tg.start_soon(one)
            with anyio.fail_after(10):
                await overlap.wait()  # the critic holds one envelope while the planner works on another
            gate.set()
    assert len(results) == 100 and all(r.outcome is AgentOutcome.SUCCESS for r in results)
    assert sorted(r.envelope.raw_input for r in results) == sorted(f"job {i}" for i in range(100))


async def test_the_agents_must_match_the_stages() -> None:
    async with ActorSystem() as system:
        with pytest.raises(InvalidInput, match="missing \\['critic'\\]"):
            await Pipeline.spawn(
                system, CONFIG, {k: v for k, v in agents(lambda env: {}).items() if k != "critic"}
            )
        wrong = agents(lambda env: {})
        wrong["critic"] = Agent(AgentConfig(name="critic"))
        with pytest.raises(InvalidInput, match="has another config"):
            await Pipeline.spawn(system, CONFIG, wrong)


# -- many envelopes per call -------------------------------------------------------------------


async def test_run_many_returns_each_envelopes_result_in_order() -> None:
    """Every outcome ``run`` gives, per envelope, in the input's order: success, a stage's
    error, a pause (which ``resume`` continues), with the metadata given to each."""

    def critic(env: Envelope) -> dict[str, Any]:
        kind = env.raw_input.split()[0]
        return {
            "ok": {"verdict": "ok"},
            "bad": {"outcome": "maybe"},
            "ask": {"outcome": "clarify", "question": "which?"},
        }[kind]

    inputs = [f"{kind} {n}" for n in range(30) for kind in ("ok", "bad", "ask")]
    async with ActorSystem() as system:
        pipeline = await Pipeline.spawn(system, CONFIG, agents(critic))
        with anyio.fail_after(20):
            results = await pipeline.run_many(inputs, metadata={"user": "u1"})
        assert [r.envelope.raw_input for r in results] == inputs
        for result in results:
            kind = result.envelope.raw_input.split()[0]
            assert result.envelope.metadata["user"] == "u1"
            if kind == "ok":
                assert result.outcome is AgentOutcome.SUCCESS
                assert result.trail == ["planner", "executor", "critic"]
            elif kind == "bad":
                assert result.outcome is AgentOutcome.ERROR and "unknown outcome 'maybe'" in (
                    result.error or ""
                )
            else:
                assert result.paused and result.question == "which?"
        assert results[0].envelope is not results[3].envelope  # each its own metadata dict
        assert await pipeline.run_many([]) == []
        assert not pipeline._in_flight  # every answered envelope left the books


async def test_run_many_turns_a_bug_into_that_envelopes_error_result() -> None:
    """A bug that makes ``run`` raise ``PipelineError`` fails only its envelope in
    ``run_many``: an ``ERROR`` result naming the stage, the others succeed."""
    async with ActorSystem() as system:
        pipeline = await Pipeline.spawn(system, CONFIG, agents(lambda env: {"verdict": "ok"}))
        bug_in_hand_on(pipeline, at=3)
        with anyio.fail_after(20):
            results = await pipeline.run_many([f"job {n}" for n in range(5)])
    outcomes = [r.outcome for r in results]
    assert outcomes.count(AgentOutcome.ERROR) == 1 and outcomes.count(AgentOutcome.SUCCESS) == 4
    failed = next(r for r in results if r.outcome is AgentOutcome.ERROR)
    assert failed.stage == "executor"
    assert failed.error == "stage 'executor' failed: RuntimeError: a bug in a hook"
    assert failed.trail == ["planner", "executor"]


async def test_run_many_refuses_inputs_that_are_not_texts_and_sends_none() -> None:
    seen: list[str] = []

    def planner(env: Envelope) -> dict[str, Any]:
        seen.append(env.raw_input)
        return {"steps": []}

    async with ActorSystem() as system:
        pipeline = await Pipeline.spawn(
            system, CONFIG, agents(lambda env: {"verdict": "ok"}, planner=planner)
        )
        with pytest.raises(InvalidInput, match=r"raw_inputs\[2\] must be text \(got int\)") as refused:
            await pipeline.run_many(["a", "b", 3, "d"])  # type: ignore[list-item]
        assert refused.value.field == "raw_inputs[2]" and refused.value.value == 3
        with pytest.raises(InvalidInput, match="raw_inputs must be a sequence of texts \\(got str\\)"):
            await pipeline.run_many("abc")
        assert seen == []  # nothing was sent
        assert [r.envelope.raw_input for r in await pipeline.run_many(["e"])] == ["e"]
    assert seen == ["e"]


async def test_run_many_waits_for_room_in_the_first_stage() -> None:
    """More envelopes than the first stage's mailbox holds: the call waits for room
    (backpressure) and every envelope comes back."""
    async with ActorSystem() as system:
        pipeline = await Pipeline.spawn(system, CONFIG, agents(lambda env: {"verdict": "ok"}), mailbox_size=2)
        with anyio.fail_after(20):
            results = await pipeline.run_many([str(n) for n in range(50)])
    assert [r.envelope.raw_input for r in results] == [str(n) for n in range(50)]
    assert all(r.outcome is AgentOutcome.SUCCESS for r in results)


async def test_run_many_fails_when_the_pipeline_closes_and_a_cancelled_call_leaves_no_books() -> None:
    critic = HeldCritic()

    async with ActorSystem() as system:
        pipeline = await Pipeline.spawn(system, CONFIG, agents(critic))
        outcome: list[BaseException] = []

        async def run_many() -> None:
            try:
                await pipeline.run_many(["a", "b", "c"])
            except ActorStopped as stopped:
                outcome.append(stopped)

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_many)
                await critic.holding.wait()
                tg.start_soon(partial(pipeline.stages["critic"].stop, now=True))
                await eventually(lambda: not pipeline.stages["critic"]._cell.accepting)
                critic.release.set()
                await pipeline.aclose()
        assert len(outcome) == 1 and "the pipeline was closed" in str(outcome[0])
        with pytest.raises(ActorStopped):
            await pipeline.run_many(["late"])
        assert not pipeline._in_flight

        critic = HeldCritic()
        pipeline = await Pipeline.spawn(system, CONFIG, agents(critic))
        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(pipeline.run_many, ["x", "y"])
                await critic.holding.wait()
                tg.cancel_scope.cancel()  # the caller gives up while the critic holds one
            critic.release.set()
            # the envelopes handed over finish their routes; none stays on the books
            await eventually(lambda: not pipeline._in_flight and pipeline.stages["critic"].queued == 0)
            assert pipeline.stages["critic"].is_alive
            assert (await pipeline.run("after")).outcome is AgentOutcome.SUCCESS
        await pipeline.aclose()


# -- the command and the example --------------------------------------------------------------


def run_greenroom(*args: str) -> Any:
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "greenroom", *args], capture_output=True, text=True, timeout=100
    )


def test_the_example_pipeline_runs_offline_and_shows_each_stage(tmp_path: Any) -> None:
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("Plan the offsite\n\nShip 0.2\n")
    done = run_greenroom(
        "pipeline", "run", "--example", "--input", "Write release notes", "--inputs", str(inputs),
        "--data-dir", str(tmp_path),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for index, text in enumerate(["Write release notes", "Plan the offsite", "Ship 0.2"], 1):
        assert f"[{index}] {text!r} -> success at critic after 6 hop(s)" in done.stdout
    assert done.stdout.count('{"verdict":"redo"') == 3 and done.stdout.count('{"verdict":"ok"') == 3
    as_json = run_greenroom(
        "pipeline", "run", "--example", "--input", "x", "--json", "--data-dir", str(tmp_path)
    )
    import json

    record = json.loads(as_json.stdout)
    assert record["trail"] == ["planner", "executor", "critic"] * 2 and record["outcome"] == "success"


def test_a_bad_pipeline_file_or_no_input_is_one_line(tmp_path: Any) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('[[stages]]\nname = "a"\ndefault_next = "ghost"\n')
    done = run_greenroom("pipeline", "run", str(bad), "--input", "x", "--data-dir", str(tmp_path))
    assert done.returncode == 1 and "default_next names no stage: 'ghost'" in done.stderr
    assert "Traceback" not in done.stderr
    empty = run_greenroom("pipeline", "run", "--example", "--data-dir", str(tmp_path))
    assert empty.returncode == 1 and "give --input TEXT" in empty.stderr
    inputs = tmp_path / "inputs.txt"
    inputs.write_bytes(b"fine\ncaf\xe9 \xff\n")  # line 2 is not UTF-8: bad input, not a bug
    garbled = run_greenroom(
        "pipeline", "run", "--example", "--inputs", str(inputs), "--data-dir", str(tmp_path)
    )
    assert garbled.returncode == 1, garbled.stderr
    assert f"--inputs {str(inputs)!r}, line 2: not valid UTF-8 (byte 4)" in garbled.stderr
    assert "Traceback" not in garbled.stderr and "bug" not in garbled.stderr


async def test_an_llm_stage_without_a_model_or_mock_is_refused(tmp_path: Any) -> None:
    from greenroom.pipeline._build import build_agents

    config = PipelineConfig(stages=(AgentConfig(name="thinker", has_llm=True),))
    with pytest.raises(InvalidInput, match="give the pipeline a \\[model\\] or a mock handler"):
        build_agents(config)


def test_a_pipeline_is_only_made_by_spawn() -> None:
    """``Pipeline(config)`` used to build a pipeline with no stages that nothing could run."""
    with pytest.raises(TypeError, match=r"Pipeline\.spawn"):
        Pipeline(CONFIG)
