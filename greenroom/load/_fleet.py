"""A load run spread over daemons: its sessions are tasks in the shared graph.

The command that starts the run (``greenroom load --on-daemons``) turns its plan into
tasks of type ``load`` (:func:`fleet_tasks`): in an open loop one task per session, due
at its scheduled instant; in a closed loop one task per virtual user, running its
sessions back to back. Every daemon with a pool of :class:`LoadAgent` s takes them as it
takes any work — the engine that shares tasks between machines shares the load — and its
agents write a record of every request, as it ends, and of every session to the store
(:class:`~greenroom.load.LoadRecordStore`, on the store's records). :func:`fleet_report`
builds one report from all of them.

Times: a task carries the run's start as wall-clock seconds; each agent places it on its
own loop's clock once, and every duration is measured on the machine that made the
request, so no clock sync is needed for latencies (only the timeline of a run spread
over machines is as good as their clocks' agreement). A session run again — its daemon
died, its lease lapsed and another daemon took it — is due at once (its scheduled instant
is long gone), counted once (the store keeps the first record of a session), and the
requests its first attempt made stay counted: the server served them.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Sequence
from typing import Any, Literal

import anyio
import msgspec

from .._errors import InvalidInput
from ..agents import AgentRuntime, BaseAgent, TaskFailed
from ..llm import OpenAIChatModel
from ..messages import AgentResult, AgentTask
from ._arrivals import open_starts
from ._measure import LoadReport, RequestRecord, SessionRecord, model_compatibility, shifted, summary
from ._records import LoadEntry, LoadRecordStore
from ._run import LoadPlan, workload_tools
from ._session import Sessions
from ._workload import Workload

AGENT_TYPE = "load"
"""The agent type of a run's tasks (a daemon's pool: ``[agents.load] agent =
"greenroom.load:LoadAgent"``)."""


class LoadTarget(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The server every daemon of a run loads. The key is never here: each daemon takes
    it from its own environment (``api_key_env``)."""

    base_url: str
    model: str
    client: Literal["greenroom", "openai"] = "greenroom"
    timeout: float = 60.0
    api_key_env: str | None = "OPENAI_API_KEY"


class SessionOrder(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A ``load`` task's input. ``first``: its first session's index. An open loop's task
    is one session, due ``offset`` seconds after ``start`` (seconds since the epoch). A
    closed loop's task is a virtual user (``stride`` > 0): it begins at ``start + ramp``
    and runs sessions ``first``, ``first + stride``, ... below ``sessions``, none begun
    after ``start + until``."""

    run: str
    start: float
    first: int
    workload: Workload
    target: LoadTarget
    seed: int = 0
    offset: float = 0.0
    stride: int = 0
    sessions: int = 1
    until: float | None = None
    ramp: float = 0.0


_order = msgspec.json.Decoder(SessionOrder)
_request = msgspec.json.Decoder(RequestRecord)
_session = msgspec.json.Decoder(SessionRecord)
_encode = msgspec.json.Encoder().encode


def request_key(index: int, attempt: int, number: int) -> str:
    return f"r/{index:09d}/{attempt}/{number:05d}"


def session_key(index: int) -> str:
    return f"s/{index:09d}"


def fleet_tasks(
    run: str, workload: Workload, plan: LoadPlan, target: LoadTarget, *, start: float, max_attempts: int = 3
) -> list[AgentTask]:
    """The tasks of ``plan`` (which needs ``sessions``; ``duration`` also bounds a closed
    loop's users and an open loop's arrivals): ``load-<run>-<n>``, type ``load``."""
    plan.check()
    if plan.sessions is None:
        raise InvalidInput("a run on daemons needs sessions (how many tasks to submit)", field="sessions")

    def order(first: int, **more: Any) -> dict[str, Any]:
        made = SessionOrder(run, start, first, workload, target, seed=plan.seed, **more)
        built: dict[str, Any] = msgspec.to_builtins(made)
        return built

    inputs: list[dict[str, Any]] = []
    if plan.concurrency is not None:
        users = min(plan.concurrency, plan.sessions)
        for user in range(users):
            ramp = plan.ramp_up * user / users
            inputs.append(order(user, stride=users, sessions=plan.sessions, until=plan.duration, ramp=ramp))
    else:
        assert plan.rate is not None
        rng = random.Random(plan.seed)
        starts = open_starts(plan.rate, pattern=plan.pattern, ramp_up=plan.ramp_up, rng=rng)
        for index, offset in zip(range(plan.sessions), starts, strict=False):
            if plan.duration is not None and offset >= plan.duration:
                break
            inputs.append(order(index, offset=offset))
    return [
        AgentTask(f"load-{run}-{n}", AGENT_TYPE, input=body, max_attempts=max_attempts)
        for n, body in enumerate(inputs)
    ]


def order_of(task: AgentTask) -> SessionOrder:
    """The task's order (``TaskFailed``, not retried, naming what is wrong)."""
    try:
        return _order.decode(_encode(task.input))
    except (msgspec.ValidationError, msgspec.DecodeError) as error:
        raise TaskFailed(f"task {task.id}: not a load session order: {error}") from None


class LoadAgent(BaseAgent):
    """Runs a load run's tasks (:func:`fleet_tasks`) against the run's server, writing a
    record of every request as it ends and of every session to the daemon's store.

    Cancelled (the daemon stops, the lease is lost), the session in flight stops with
    its request's connection closed; what it recorded stays, and the task is handed back
    (its next attempt runs the session again, due at once)."""

    agent_type = AGENT_TYPE

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        order = order_of(task)
        if runtime.store is None:
            raise TaskFailed("a load task needs a daemon's store to write its records to")
        target = order.target
        model = OpenAIChatModel(
            target.model,
            base_url=target.base_url,
            client=target.client,
            timeout=target.timeout,
            max_retries=0,
            api_key=_key(target.api_key_env),
            fallbacks=False,  # measured as the server behaves: a cut stream is an error, never a fallback
        )
        records = LoadRecordStore(runtime.store.records())
        try:
            async with model:
                done = await _run_order(order, task, runtime.agent_id, model, records)
        finally:
            with anyio.CancelScope(shield=True):
                await records.aclose()
        return AgentResult(task.id, artifacts={"sessions": done})


def _key(name: str | None) -> str | None:
    import os

    return None if name is None else os.environ.get(name)


async def _run_order(
    order: SessionOrder, task: AgentTask, agent_id: str, model: Any, records: LoadRecordStore
) -> list[int]:
    """The order's sessions (those not already recorded); their indexes. Each request's
    record is written as the request ends, each session's as it ends — under the task
    attempt's fencing token: an attempt that paused past its lease, whose task another
    agent runs now, records nothing more (``Fenced``: it gives up). Requests are keyed by
    the token (it never goes back, as an attempt number may), so no two attempts' share a
    key."""
    attempt = task.attempt
    fence = (task.id, task.token) if task.token else None
    series = task.token or attempt
    # the run's start on this loop's clock: every time below is on it, and records are
    # kept relative to the start
    base = anyio.current_time() - (time.time() - order.start)
    made: dict[int, int] = {}  # requests recorded, per session

    async def recorded(record: RequestRecord) -> None:
        number = made.get(record.session, 0)
        made[record.session] = number + 1
        key = request_key(record.session, series, number)
        await records.add(order.run, [LoadEntry(key, _encode(shifted(record, base)))], fence=fence)

    async with workload_tools(order.workload) as tools:
        sessions = Sessions(model, order.workload, seed=order.seed, tools=tools, recorded=recorded)
        if order.stride:
            indexes: Sequence[int] = range(order.first, order.sessions, order.stride)
            await anyio.sleep_until(base + order.ramp)
        else:
            indexes = [order.first]
        done: list[int] = []
        for index in indexes:
            now = anyio.current_time()
            if order.stride and order.until is not None and now >= base + order.until:
                break
            if await records.count(order.run, session_key(index)):
                continue  # an earlier attempt finished it
            due = base + order.offset if not order.stride and attempt <= 1 else now
            cpu = time.process_time()
            session = await sessions.run(index, due)
            body = msgspec.to_builtins(shifted(session, base))
            body.update(agent=agent_id, attempt=attempt, cpu=[cpu, time.process_time()])
            if compatibility := model_compatibility(model):
                body["compatibility"] = compatibility
            await records.add(order.run, [LoadEntry(session_key(index), _encode(body))], fence=fence)
            done.append(index)
        return done


async def fleet_report(
    records: LoadRecordStore, run: str, *, plan: LoadPlan, workload: Workload, duration: float
) -> tuple[LoadReport, list[RequestRecord]]:
    """One report of everything every daemon recorded of ``run`` (as :func:`run_load`'s,
    with ``daemons``: each agent's process, its sessions and CPU) and the requests'
    records. The client's CPU is each daemon process's CPU between its first session's
    start and its last one's end, summed."""
    requests = [_request.decode(entry.body) for entry in await records.read(run, "r/")]
    sessions: list[SessionRecord] = []
    cpu: dict[str, list[float]] = {}
    daemons: dict[str, int] = {}
    compatibility: list[str] = []
    for entry in await records.read(run, "s/"):
        body = msgspec.json.decode(entry.body)
        agent, used = str(body.pop("agent", "?")), body.pop("cpu", [0.0, 0.0])
        body.pop("attempt", None)
        for said in body.pop("compatibility", ()):
            if said not in compatibility:
                compatibility.append(said)
        sessions.append(msgspec.convert(body, SessionRecord))
        process = agent.rpartition("@")[2] or agent
        daemons[process] = daemons.get(process, 0) + 1
        low, high = cpu.get(process, [math.inf, -math.inf])
        cpu[process] = [min(low, used[0]), max(high, used[1])]
    client_cpu = sum(max(0.0, high - low) for low, high in cpu.values())
    report = summary(
        requests,
        sessions,
        duration=duration,
        offered_rate=plan.rate,
        client_cpu_s=client_cpu,
        loop_lags=[],
        slo=plan.slo,
    )
    report.workload = workload.name
    report.plan = msgspec.to_builtins(plan)
    report.run = run
    report.daemons = daemons
    report.sessions_started = len(sessions)
    report.bottleneck = "client" if (report.send_lag_ms.p99 or 0.0) > 10.0 else "none"
    report.compatibility = compatibility
    return report, requests
