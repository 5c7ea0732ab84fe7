"""Agents for the daemon subprocess tests (imported by the daemon through its config).

Each records what the log actor and the supervisor acknowledged into
``$GREENROOM_TEST_ACKS``, one line per acknowledgement, so the test can check that
nothing acknowledged was lost when the daemon was killed with SIGKILL.
"""

from __future__ import annotations

import os
import random
import signal

import anyio

from greenroom.agents import AgentRuntime, BaseAgent
from greenroom.messages import AgentResult, AgentTask


def _record(line: str) -> None:
    fd = os.open(os.environ["GREENROOM_TEST_ACKS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode() + b"\n")  # one write per line: whole lines even under SIGKILL
    finally:
        os.close(fd)


class StepAgent(BaseAgent):
    agent_type = "step"

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        await anyio.sleep(random.uniform(0.02, 0.08))
        event = await runtime.emit_update(task.id, "working", progress=0.5)
        _record(f"event {event.seq} {task.id}")
        await anyio.sleep(random.uniform(0.0, 0.03))
        return AgentResult(task_id=task.id, outcome="done", artifacts={"attempt": task.attempt})

    async def on_complete(self, task: AgentTask, result: AgentResult, runtime: AgentRuntime) -> None:
        stored = await runtime.complete_task(task.id, result)
        _record(f"completed {stored.id} {stored.attempt}")


class PoisonAgent(StepAgent):
    """A step agent whose task ``poison`` takes the whole process down (as a segfaulting
    native library would): SIGKILL to itself, every time it runs."""

    agent_type = "step"

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        if task.id == "poison":
            await anyio.sleep(0.05)  # the innocent tasks beside it are part-way through
            os.kill(os.getpid(), signal.SIGKILL)
        return await super().handle_task(task, runtime)


def _note(text: str, idempotency_key: str = "") -> str:
    """A tool with a side effect: every invocation is logged to ``$GREENROOM_TEST_CALLS``;
    the effect itself (a line in ``$GREENROOM_TEST_EFFECTS``) happens once per key."""
    _append(os.environ["GREENROOM_TEST_CALLS"], f"{idempotency_key} {text}")
    effects = os.environ["GREENROOM_TEST_EFFECTS"]
    try:
        with open(effects) as seen:
            if any(line.split(" ", 1)[0] == idempotency_key for line in seen):
                return "already noted"
    except FileNotFoundError:
        pass
    _append(effects, f"{idempotency_key} {text}")
    return "noted"


def _append(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode() + b"\n")
    finally:
        os.close(fd)


def _ship(order: str) -> str:
    """Not idempotent, no key: each run is one line in ``$GREENROOM_TEST_ACKS``."""
    _record(f"shipped {order}")
    return f"shipped {order}"


class ShipAgent(BaseAgent):
    """One phase whose ``ship`` call needs a person's approval (offline scripted model)."""

    agent_type = "ship"

    def __init__(self, name: str | None = None, **options: object) -> None:
        from greenroom.harness import HarnessSetup, RiskLevel, Sandbox, Tool
        from greenroom.llm import ScriptedModel
        from greenroom.messages import ChatReply, ChatRequest, ModelToolCall

        def respond(request: ChatRequest) -> ChatReply:
            last = request.messages[-1]
            if last.role == "tool":
                return ChatReply(text=f"done: {last.content}")
            order = (request.messages[-1].content or "").split()[-1]
            return ChatReply(tool_calls=(ModelToolCall("s1", "ship", {"order": order}),))

        setup = HarnessSetup(
            ScriptedModel(respond, latency=0.01),
            tools=[Tool("ship", _ship, risk=RiskLevel.NETWORK, requires_approval=True)],
            sandbox=Sandbox(max_risk=RiskLevel.NETWORK),
        )
        super().__init__(name, llm=setup, **options)  # type: ignore[arg-type]

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        result = await self._run_phase(user_message=f"ship order {task.id}", tool_names=["ship"])
        return AgentResult(task_id=task.id, outcome="done", notes=result.final_text)


class TeamAgent(BaseAgent):
    """One phase on a team budget named ``research-team`` (each agent object has its own,
    kept in step by the daemon's ledger through the stored total)."""

    agent_type = "team"

    def __init__(self, name: str | None = None, **options: object) -> None:
        from greenroom.harness import HarnessSetup, TokenBudget
        from greenroom.llm import ScriptedModel
        from greenroom.messages import ChatReply, Usage

        setup = HarnessSetup(
            ScriptedModel(lambda request: ChatReply(text="found it", usage=Usage(40, 10))),
            budget=TokenBudget(120, name="research-team"),
        )
        super().__init__(name, llm=setup, **options)  # type: ignore[arg-type]

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        result = await self._run_phase(user_message=f"look into {task.id}")
        return AgentResult(task_id=task.id, outcome="done", notes=result.stop_reason)


def _append_line(line: str) -> str:
    """Not idempotent, no key: each run appends ``line`` to ``$GREENROOM_TEST_EFFECTS``."""
    _append(os.environ["GREENROOM_TEST_EFFECTS"], line)
    return "appended"


class StormAgent(BaseAgent):
    """Three phases on the daemon's ``[llm]`` model, each a reply asking two tool calls
    (``append``: no idempotency key; ``note``: takes one) and an answer."""

    agent_type = "storm"

    def __init__(self, name: str | None = None, **options: object) -> None:
        from greenroom.harness import HarnessSetup, RiskLevel, Sandbox, Tool
        from greenroom.llm import ScriptedModel

        setup = HarnessSetup(
            ScriptedModel(["unused: the daemon's [llm] model replaces it"]),
            tools=[
                Tool("append", _append_line, risk=RiskLevel.WRITES),
                Tool("note", _note, risk=RiskLevel.WRITES),
            ],
            sandbox=Sandbox(max_risk=RiskLevel.WRITES),
        )
        super().__init__(name, llm=setup, **options)  # type: ignore[arg-type]

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        answers = []
        for phase in range(3):
            result = await self._run_phase(
                user_message=f"task {task.id} phase {phase}",
                max_iterations=4,
                context_label=f"phase{phase}",
            )
            answers.append(result.final_text)
        return AgentResult(task_id=task.id, outcome="done", artifacts={"answers": answers})


class HeldAgent(BaseAgent):
    """Runs until the test opens ``gate`` (set ``started`` when a task began): a task in
    flight for as long as a test needs (the events are the test's, made on its loop)."""

    agent_type = "held"
    started: anyio.Event
    gate: anyio.Event

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        HeldAgent.started.set()
        await HeldAgent.gate.wait()
        return AgentResult(task_id=task.id, outcome="done")


def _fenced_record(line: str, idempotency_key: str = "") -> str:
    """A tool that honours its call's fencing token and idempotency key, as an outside
    system should: under a lock (``$GREENROOM_TEST_LEDGER``) it keeps the greatest token it
    has seen per task and the keys it applied; a call under a smaller token is refused
    (``stale``), a key applied already is not applied again. Each applied effect is a line
    ``applied <key> <token> <pid>`` in ``$GREENROOM_TEST_EFFECTS``."""
    import fcntl
    import json

    from greenroom.harness import current_call

    call = current_call()
    assert call is not None and call.task_id is not None and call.fencing_token is not None
    with open(os.environ["GREENROOM_TEST_LEDGER"], "a+") as ledger:
        fcntl.flock(ledger, fcntl.LOCK_EX)
        ledger.seek(0)
        seen = json.loads(ledger.read() or '{"tokens": {}, "applied": []}')
        newest = seen["tokens"].get(call.task_id, 0)
        if call.fencing_token < newest:
            _append(
                os.environ["GREENROOM_TEST_EFFECTS"],
                f"stale {idempotency_key} {call.fencing_token} {os.getpid()}",
            )
            return f"refused: token {call.fencing_token} < {newest}"
        seen["tokens"][call.task_id] = call.fencing_token
        if idempotency_key in seen["applied"]:
            return "applied already"
        seen["applied"].append(idempotency_key)
        ledger.seek(0)
        ledger.truncate()
        ledger.write(json.dumps(seen))
        ledger.flush()
        _append(
            os.environ["GREENROOM_TEST_EFFECTS"],
            f"applied {idempotency_key} {call.fencing_token} {os.getpid()}",
        )
    return f"recorded {line}"


class PausedAgent(BaseAgent):
    """Four phases, each a model reply (0.1-0.3 s) asking one call of ``record`` (a writing
    tool that honours the fencing token and the idempotency key), then an answer."""

    agent_type = "pause"

    def __init__(self, name: str | None = None, **options: object) -> None:
        from greenroom.harness import HarnessSetup, RiskLevel, Sandbox, Tool
        from greenroom.llm import ScriptedModel
        from greenroom.messages import ChatReply, ChatRequest, ModelToolCall

        def respond(request: ChatRequest) -> ChatReply:
            last = request.messages[-1]
            if last.role == "tool":
                return ChatReply(text=f"done: {last.content}")
            return ChatReply(tool_calls=(ModelToolCall("r1", "record", {"line": last.content or ""}),))

        setup = HarnessSetup(
            ScriptedModel(respond, latency=0.2),
            tools=[Tool("record", _fenced_record, risk=RiskLevel.WRITES)],
            sandbox=Sandbox(max_risk=RiskLevel.WRITES),
        )
        super().__init__(name, llm=setup, **options)  # type: ignore[arg-type]

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        for phase in range(4):
            await self._run_phase(
                user_message=f"{task.id} {phase}", tool_names=["record"], context_label=f"p{phase}"
            )
        return AgentResult(task_id=task.id, outcome="done")


class SlowStepAgent(BaseAgent):
    """A step that records each attempt's start (``start <task> <attempt> <pid>``), then
    takes ``$GREENROOM_TEST_SLOW`` seconds (default 1.5): long enough to kill its process
    in the middle of it."""

    agent_type = "slow"

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        _record(f"start {task.id} {task.attempt} {os.getpid()}")
        await anyio.sleep(float(os.environ.get("GREENROOM_TEST_SLOW", "1.5")))
        return AgentResult(task_id=task.id, outcome="done", artifacts={"attempt": task.attempt})
