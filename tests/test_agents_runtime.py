"""Spec 000 (S34-S36): the task contract, BaseAgent's hooks, AgentRuntime, the narrator-only policy."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import pytest
from _support import open_node, wait_for_status

from greenroom import ActorRef
from greenroom.agents import AgentActor, AgentRuntime, BaseAgent, TaskFailed
from greenroom.embedded import read_events
from greenroom.log import PolicyError
from greenroom.messages import (
    AGENT_RESULT,
    AGENT_UPDATE,
    AgentError,
    AgentResult,
    AgentTask,
    GetTask,
    Stats,
    StopGranting,
    Submit,
    TaskStatus,
)
from greenroom.supervisor import NotOwner

pytestmark = pytest.mark.anyio


class Summarizer(BaseAgent):
    agent_type = "summarize"

    def __init__(self) -> None:
        super().__init__()
        self.hooks: list[str] = []

    async def on_assign(self, task: AgentTask, runtime: AgentRuntime) -> None:
        self.hooks.append("assign")
        await super().on_assign(task, runtime)

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        await self.on_progress(task, runtime, "reading", 0.5)
        if task.input.get("explode"):
            raise TaskFailed("the document is empty", retryable=False)
        return AgentResult(
            task_id=task.id, outcome="summarized", artifacts={"words": len(task.input["text"].split())}
        )

    async def on_complete(self, task: AgentTask, result: AgentResult, runtime: AgentRuntime) -> None:
        self.hooks.append("complete")
        await super().on_complete(task, result, runtime)

    async def on_error(self, task: AgentTask, error: AgentError, runtime: AgentRuntime) -> None:
        self.hooks.append("error")
        await super().on_error(task, error, runtime)


async def test_base_agent_handles_lifecycle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STREAMING_LLM_DATA_DIR", str(tmp_path))  # the spec's variable places every file
    async with open_node() as node:
        await node.supervisor.ask(
            Submit(
                [
                    AgentTask(id="s1", type="summarize", input={"text": "one two three"}),
                    AgentTask(id="s2", type="summarize", input={"explode": True}),
                ]
            )
        )
        agent = Summarizer()
        runtime = AgentRuntime("agent-1", "summarize", supervisor=node.supervisor, log=node.log)
        result = await agent.execute_once(runtime)
        assert result == AgentResult(task_id="s1", outcome="summarized", artifacts={"words": 3})
        assert agent.hooks == ["assign", "complete"]
        error = await agent.execute_once(runtime)
        assert error == AgentError(reason="the document is empty", retryable=False)
        assert agent.hooks == ["assign", "complete", "assign", "error"]
        assert await agent.execute_once(runtime) is None  # no work: None, not an exception
        s1 = await node.supervisor.ask(GetTask("s1"))
        s2 = await node.supervisor.ask(GetTask("s2"))
    assert (s1.status, s1.owner, s1.attempt, s1.result) == (TaskStatus.COMPLETED, "agent-1", 1, result)
    assert (s2.status, s2.error) == (TaskStatus.FAILED, error)
    events = read_events(tmp_path / "events.jsonl")
    mine = [
        (e.type, e.task_id, e.payload.get("message") or e.payload.get("outcome"))
        for e in events
        if e.agent_id == "agent-1" and e.type in (AGENT_UPDATE, AGENT_RESULT)
    ]
    assert mine == [
        (AGENT_UPDATE, "s1", "assigned"),
        (AGENT_UPDATE, "s1", "reading"),
        (AGENT_RESULT, "s1", "summarized"),
        (AGENT_UPDATE, "s2", "assigned"),
        (AGENT_UPDATE, "s2", "reading"),
        (AGENT_RESULT, "s2", "failed"),
    ]
    assert all(e.visibility == "internal" for e in events)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


async def test_agent_runtime_claims_and_updates_tasks(tmp_path: Path) -> None:
    clock = [1000.0]
    async with open_node(tmp_path, clock=lambda: clock[0], lease_seconds=30) as node:
        await node.supervisor.ask(
            Submit([AgentTask(id="low", type="t", priority=0), AgentTask(id="high", type="t", priority=5)])
        )
        runtime = AgentRuntime("a1", "t", heartbeat_interval=10, supervisor=node.supervisor, log=node.log)
        other = AgentRuntime("a2", "t", supervisor=node.supervisor, log=node.log)
        task = await runtime.poll_next_task()
        assert task is not None
        assert (task.id, task.status, task.owner, task.attempt) == ("high", TaskStatus.IN_PROGRESS, "a1", 1)
        assert task.lease_expires_at == 1030.0 and task.last_heartbeat_at == 1000.0
        # heartbeat bookkeeping
        assert runtime.heartbeat_due(1000.0, now=1005.0) is False
        assert runtime.heartbeat_due(1000.0, now=1010.0) is True
        assert other.heartbeat_due(0.0) is False  # no interval, never due
        clock[0] = 1012.0
        event = await runtime.emit_update("high", "halfway", progress=0.5)
        assert event.type == AGENT_UPDATE and event.payload == {"message": "halfway", "progress": 0.5}
        stored = await node.supervisor.ask(GetTask("high"))
        assert stored.last_heartbeat_at == 1012.0 and stored.lease_expires_at == 1042.0
        # only the owner may report on it
        with pytest.raises(NotOwner, match="'a2' does not own task 'high'"):
            await other.complete_task("high", AgentResult(task_id="high"))
        done = await runtime.complete_task("high", AgentResult(task_id="high", notes="ok"))
        assert done.status is TaskStatus.COMPLETED and done.result is not None and done.result.notes == "ok"
        assert done == await node.supervisor.ask(GetTask("high"))  # the persisted node
        second = await other.claim_task()
        assert second is not None and second.id == "low"
        failed = await other.fail_task("low", AgentError(reason="model refused", retryable=False))
        assert failed.status is TaskStatus.FAILED
        assert await runtime.poll_next_task() is None
    events = read_events(tmp_path / "events.jsonl")
    results = [(e.task_id, e.payload["outcome"]) for e in events if e.type == AGENT_RESULT]
    assert results == [("high", "completed"), ("low", "failed")]
    # durable: a fresh node on the same dir sees the same graph
    async with open_node(tmp_path) as node:
        assert (await node.supervisor.ask(GetTask("high"))).status is TaskStatus.COMPLETED
        assert (await node.supervisor.ask(GetTask("low"))).status is TaskStatus.FAILED


@pytest.mark.parametrize(
    "payload",
    [
        {"render_to_user": True},
        {"message": "hi", "details": {"show_to_user": 1}},
        {"items": [{"display_to_user": "yes"}]},
        {"visibility": "user"},
    ],
)
async def test_runtime_rejects_user_visible_payloads(tmp_path: Path, payload: dict[str, object]) -> None:
    async with open_node(tmp_path) as node:
        await node.supervisor.ask(Submit([AgentTask(id="t1", type="t")]))
        runtime = AgentRuntime("a1", "t", supervisor=node.supervisor, log=node.log)
        await runtime.claim_task()
        before = read_events(tmp_path / "events.jsonl")
        with pytest.raises(ValueError) as refused:
            await runtime.emit(AGENT_UPDATE, "t1", payload)
        assert isinstance(refused.value, PolicyError)
        assert refused.value.policy_error == "user_visible_payload"
        # a result that tries to reach the user is refused before the task changes
        with pytest.raises(PolicyError):
            await runtime.complete_task("t1", AgentResult(task_id="t1", artifacts=payload))
        assert (await node.supervisor.ask(GetTask("t1"))).status is TaskStatus.IN_PROGRESS
        # a falsy flag is fine, and an agent's event is forced to internal
        event = await runtime.emit(AGENT_UPDATE, "t1", {"render_to_user": False})
        assert event.visibility == "internal"
        after = read_events(tmp_path / "events.jsonl")
    # the one accepted agent event is all that agents added (the supervisor's TASK_* events aside)
    added = [e for e in after[len(before) :] if e.type in (AGENT_UPDATE, AGENT_RESULT)]
    assert added == [event]


class Slow(BaseAgent):
    agent_type = "slow"

    def __init__(self) -> None:
        super().__init__()
        self.started = anyio.Event()

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        self.started.set()
        await anyio.sleep(0.3)
        return AgentResult(task_id=task.id)


async def test_agent_actor_heartbeats_while_a_long_task_runs(tmp_path: Path) -> None:
    async with open_node(tmp_path, lease_seconds=0.2, lease_check_interval=0.02) as node:
        await node.supervisor.ask(Submit([AgentTask(id="long", type="slow", max_attempts=1)]))
        runtime = AgentRuntime(
            "a1", "slow", heartbeat_interval=0.05, supervisor=node.supervisor, log=node.log
        )
        agent = Slow()
        ref = await node.system.spawn(lambda: AgentActor(agent, runtime))
        task = await wait_for_status(node.supervisor, "long", TaskStatus.COMPLETED)
        await node.supervisor.ask(StopGranting())  # the parked claim returns, and the actor stops itself
        await ref.stop()
        assert not ref.is_alive
    # the task ran longer than its lease, on one attempt: the heartbeats kept it
    assert task.attempt == 1 and task.owner == "a1"


async def test_an_exception_fails_the_task_as_retryable_by_default(tmp_path: Path) -> None:
    class Flaky(BaseAgent):
        agent_type = "flaky"
        calls = 0

        async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
            Flaky.calls += 1
            if Flaky.calls == 1:
                raise ConnectionError("model endpoint reset")
            return AgentResult(task_id=task.id)

    async with open_node(tmp_path) as node:
        await node.supervisor.ask(Submit([AgentTask(id="f", type="flaky")]))
        runtime = AgentRuntime("a1", "flaky", supervisor=node.supervisor, log=node.log)
        error = await Flaky().execute_once(runtime)
        assert error == AgentError(reason="ConnectionError: model endpoint reset", retryable=True)
        assert (await node.supervisor.ask(GetTask("f"))).status is TaskStatus.PENDING
        assert isinstance(await Flaky().execute_once(runtime), AgentResult)
        task = await node.supervisor.ask(GetTask("f"))
    assert (task.status, task.attempt) == (TaskStatus.COMPLETED, 2)


@pytest.mark.parametrize(
    ("args", "options", "message"),
    [
        (("", "t"), {}, "AgentRuntime agent_id must be a non-empty string without padding, got ''"),
        (("a1", " t"), {}, "AgentRuntime agent_type must be a non-empty string without padding, got ' t'"),
        (("a1", "t", 0), {}, "AgentRuntime heartbeat_interval must be a positive number of seconds, got 0"),
        (
            ("a1", "t"),
            {"request_timeout": -5},
            "request_timeout must be a positive number of seconds, got -5",
        ),
    ],
)
async def test_bad_runtime_arguments_are_named(
    tmp_path: Path, args: tuple[object, ...], options: dict[str, object], message: str
) -> None:
    async with open_node(tmp_path) as node:
        with pytest.raises(ValueError, match=message):
            AgentRuntime(*args, supervisor=node.supervisor, log=node.log, **options)  # type: ignore[arg-type]


async def test_agent_actor_refuses_a_non_agent(tmp_path: Path) -> None:
    async with open_node(tmp_path) as node:
        runtime = AgentRuntime("a1", "t", supervisor=node.supervisor, log=node.log)
        with pytest.raises(TypeError, match="AgentActor agent must be a BaseAgent, got 'summarize'"):
            AgentActor("summarize", runtime)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="AgentActor retry_delay must be a positive number of seconds"):
            AgentActor(Summarizer(), runtime, retry_delay=0)


class ObservedRuntime(AgentRuntime):
    """Sets ``claiming`` when a waiting claim is sent; ``after_grant`` runs once a claim
    returns a task (inside the claim, as a stop arriving at that instant would)."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.claiming = anyio.Event()
        self.after_grant: Callable[[], Awaitable[None]] | None = None

    async def claim_task(self, *, wait: bool = False) -> AgentTask | None:
        self.claiming.set()
        task = await super().claim_task(wait=wait)
        if task is not None and self.after_grant is not None:
            await self.after_grant()
        return task


class Gated(BaseAgent):
    agent_type = "gated"

    def __init__(self) -> None:
        super().__init__()
        self.started = anyio.Event()
        self.release = anyio.Event()

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        self.started.set()
        await self.release.wait()
        return AgentResult(task_id=task.id, outcome="done")


async def test_stopping_an_agent_actor_ends_its_parked_claim(tmp_path: Path) -> None:
    async with open_node(tmp_path) as node:
        runtime = ObservedRuntime("g1", "gated", supervisor=node.supervisor, log=node.log)
        ref = await node.system.spawn(lambda: AgentActor(Gated(), runtime))
        await runtime.claiming.wait()
        await node.supervisor.ask(Stats())
        # the Stats ask was queued behind the claim: the claim is parked now
        with anyio.fail_after(10):  # a hang guard: a parked claim used to hold the stop forever
            await ref.stop()
        assert not ref.is_alive
        await node.supervisor.ask(Submit([AgentTask(id="later", type="gated")]))
        later = await node.supervisor.ask(GetTask("later"))
        assert later.status == TaskStatus.PENDING and later.attempt == 0  # the dropped claim took nothing


async def test_stopping_an_agent_actor_lets_its_running_task_finish(tmp_path: Path) -> None:
    async with open_node(tmp_path) as node:
        await node.supervisor.ask(
            Submit([AgentTask(id="first", type="gated"), AgentTask(id="second", type="gated")])
        )
        runtime = AgentRuntime("g1", "gated", supervisor=node.supervisor, log=node.log)
        agent = Gated()
        ref = await node.system.spawn(lambda: AgentActor(agent, runtime))
        await agent.started.wait()
        async with anyio.create_task_group() as tg:
            tg.start_soon(ref.stop)
            for _ in range(10):
                await anyio.sleep(0.005)
            assert ref.is_alive  # the stop waits for the running task
            agent.release.set()
        assert not ref.is_alive
        first = await node.supervisor.ask(GetTask("first"))
        second = await node.supervisor.ask(GetTask("second"))
    assert first.status == TaskStatus.COMPLETED and first.attempt == 1
    assert second.status == TaskStatus.PENDING and second.attempt == 0  # no claim after the stop


async def test_a_task_granted_as_the_agent_actor_stops_is_handed_back(tmp_path: Path) -> None:
    async with open_node(tmp_path) as node, anyio.create_task_group() as tg:
        await node.supervisor.ask(Submit([AgentTask(id="t", type="gated")]))
        runtime = ObservedRuntime("g1", "gated", supervisor=node.supervisor, log=node.log)
        agent = Gated()
        refs: list[ActorRef] = []
        granted = anyio.Event()

        async def stop_now() -> None:  # the stop lands between the grant and the task's start
            granted.set()
            tg.start_soon(refs[0].stop)
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.01)

        runtime.after_grant = stop_now
        refs.append(await node.system.spawn(lambda: AgentActor(agent, runtime)))
        await granted.wait()
        with anyio.fail_after(10):
            await refs[0].stop()
        task = await node.supervisor.ask(GetTask("t"))
    assert not agent.started.is_set()
    assert task.status == TaskStatus.PENDING and task.attempt == 0 and task.owner is None
