"""``run_load``: sessions of agents against a model server, arriving as told, until a
count or a duration; the report of what was measured."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Literal

import anyio
import msgspec

from .._errors import InvalidInput
from ..harness import Tool
from ..llm import ChatModel
from ._arrivals import Pattern, open_starts
from ._measure import (
    LoadReport,
    LoopWatch,
    RequestRecord,
    SessionRecord,
    Slo,
    model_compatibility,
    process_cpu,
    summary,
)
from ._session import Sessions
from ._tools import LoadTool, mcp_tools, python_tool
from ._workload import Workload


class LoadPlan(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How a run goes. Exactly one of ``concurrency`` (a closed loop: that many sessions at
    once, a new one as one ends; its users join evenly over ``ramp_up`` seconds) and
    ``rate`` (an open loop: sessions started per second, arriving as ``pattern`` says,
    after ``ramp_up`` seconds of a rising rate). It ends
    after ``sessions`` sessions or ``duration`` seconds (the first reached; sessions in
    flight then finish). ``seed``: the same seed, the same sessions and schedule."""

    concurrency: int | None = None
    rate: float | None = None
    pattern: Pattern = "poisson"
    ramp_up: float = 0.0
    sessions: int | None = None
    duration: float | None = None
    seed: int = 0
    slo: Slo = Slo()
    stop_when_saturated: bool = True
    """Open loop: stop early (saying so) when the sessions in flight grow window after
    window — the server cannot keep up and waiting grows without bound."""
    saturation_window: float = 2.5
    """Seconds between two looks at the sessions in flight (four rises in a row, ending at
    least twice as high and above a window's worth of arrivals, is saturation)."""

    def check(self) -> LoadPlan:
        """This plan, or ``InvalidInput`` naming the field that is wrong (and its value)."""
        if (self.concurrency is None) == (self.rate is None):
            raise InvalidInput(
                "give one of concurrency (a closed loop) and rate (an open loop)", field="concurrency"
            )
        if self.concurrency is not None and not 1 <= self.concurrency <= 1_000_000:
            raise InvalidInput(
                f"concurrency must be from 1 to 1000000, got {self.concurrency!r}",
                field="concurrency",
                value=self.concurrency,
            )
        if self.rate is not None and not (math.isfinite(self.rate) and self.rate > 0):
            raise InvalidInput(
                f"rate must be sessions per second > 0, got {self.rate!r}", field="rate", value=self.rate
            )
        if self.sessions is None and self.duration is None:
            raise InvalidInput("give sessions or duration (when the run ends)", field="sessions")
        if self.sessions is not None and self.sessions < 1:
            raise InvalidInput(
                f"sessions must be at least 1, got {self.sessions!r}", field="sessions", value=self.sessions
            )
        if self.duration is not None and not (math.isfinite(self.duration) and self.duration > 0):
            raise InvalidInput(
                f"duration must be seconds > 0, got {self.duration!r}", field="duration", value=self.duration
            )
        return self


Progress = Callable[[dict[str, Any]], None]


class Share(msgspec.Struct, frozen=True):
    """The part of a run's schedule one of several generator processes sends (part
    ``part`` of ``parts``): a closed loop's users ``part``, ``part + parts``, ... with the
    session numbers ``part``, ``part + parts``, ...; an open loop's (or a replay's)
    arrivals ``k`` with ``k % parts == part``. The schedule is a function of the plan and
    its seed, the same in every process: the same seed, the same sessions, whatever the
    number of processes."""

    part: int = 0
    parts: int = 1

    def check(self) -> Share:
        if not (isinstance(self.parts, int) and self.parts >= 1 and 0 <= self.part < self.parts):
            raise InvalidInput(
                f"a share must be PART/PARTS with 0 <= PART < PARTS, got {self!r}", field="share"
            )
        return self


WHOLE = Share()


class RunRaw:
    """A run's raw figures beyond its report, filled as it ends: its sessions' records and
    its loop's lags (what several processes' reports are merged from)."""

    def __init__(self) -> None:
        self.sessions: list[SessionRecord] = []
        self.lags: list[float] = []


StepRunner = Callable[[LoadPlan], Awaitable[tuple[LoadReport, list[RequestRecord]]]]
"""How a sweep runs one step's plan: its report and its requests' records."""

Ready = Callable[[], Awaitable[float]]
"""Awaited once a run prepared what it prepares once; gives the loop's time to start at."""


async def run_load(
    model: ChatModel,
    workload: Workload,
    plan: LoadPlan,
    *,
    progress: Progress | None = None,
    every: float = 1.0,
    records: list[RequestRecord] | None = None,
    tools: Sequence[Tool] = (),
    share: Share = WHOLE,
    ready: Ready | None = None,
    recorded: Callable[[RequestRecord], Awaitable[None]] | None = None,
    raw: RunRaw | None = None,
) -> LoadReport:
    """Run ``plan`` of ``workload`` sessions against ``model`` (``tools``: your own
    :class:`~greenroom.harness.Tool` s, offered beside the workload's — its synthetic
    tools, its ``python_tools`` and the tools of its ``mcp`` servers, connected for the
    run — and run when the model calls them: their failures are told to the model, the
    load goes on); the report (``summary``), with ``tool_runs`` (each tool's runs) and the
    plan (a :class:`LoadReport`). ``progress`` is called with a few live figures every ``every`` seconds;
    ``records`` receives every request's :class:`RequestRecord` (the rows of a CSV).
    Cancelled, the sessions in flight are cancelled with it (their requests' connections
    closed, the MCP servers' connections closed) and nothing is reported.

    ``share``: only this part of the schedule (:class:`Share`; one of several processes);
    ``ready``: awaited once the run's tools and sessions are prepared, giving the loop's
    time its clock starts at (every process at one instant; default: at once);
    ``recorded``: awaited with each request's record as it is made; ``raw``: filled with
    the sessions' records and the loop's lags."""
    plan.check()
    share.check()
    async with workload_tools(workload, tools) as offered:
        sessions = Sessions(model, workload, seed=plan.seed, tools=offered, recorded=recorded)
        if ready is not None:
            await anyio.sleep_until(await ready())
        return await _run(sessions, workload, plan, progress, every, records, share, raw)


async def _run(
    sessions: Sessions,
    workload: Workload,
    plan: LoadPlan,
    progress: Progress | None,
    every: float,
    records: list[RequestRecord] | None,
    share: Share = WHOLE,
    raw: RunRaw | None = None,
) -> LoadReport:
    watch = LoopWatch()
    started = anyio.current_time()
    cpu = process_cpu()
    deadline = math.inf if plan.duration is None else started + plan.duration
    limit = plan.sessions if plan.sessions is not None else None  # of the whole run's
    part, parts = share.part, share.parts
    counter = itertools.count(part, parts)
    begun = 0
    saturation: _Saturation | None = None  # an open loop's: ends the run early, saying why

    def next_index() -> int | None:
        nonlocal begun
        if anyio.current_time() >= deadline:
            return None
        index = next(counter)
        if limit is not None and index >= limit:
            return None
        begun += 1
        return index

    async with anyio.create_task_group() as watching:
        watching.start_soon(watch.run)
        if progress is not None:
            watching.start_soon(_report_progress, sessions, started, progress, every, lambda: begun)
        async with anyio.create_task_group() as tg:
            if plan.concurrency is not None:

                async def worker(first: float) -> None:
                    await anyio.sleep_until(first)  # the closed loop's ramp: its users join one by one
                    due = first  # a user's first session is due when it joins, the next as one ends
                    while (index := next_index()) is not None:
                        await sessions.run(index, due)
                        due = anyio.current_time()

                for number in range(part, plan.concurrency, parts):  # this process's users
                    tg.start_soon(worker, started + plan.ramp_up * number / plan.concurrency)
            else:
                assert plan.rate is not None
                if plan.stop_when_saturated:
                    saturation = _Saturation(plan, sessions, lambda: begun, parts)
                    watching.start_soon(saturation.watch, tg.cancel_scope)
                starts = open_starts(
                    plan.rate, pattern=plan.pattern, ramp_up=plan.ramp_up, rng=random.Random(plan.seed)
                )
                for index, offset in enumerate(starts):
                    due = started + offset
                    if due >= deadline or (limit is not None and index >= limit):
                        break
                    if index % parts != part:  # another process's arrival
                        continue
                    begun += 1
                    await anyio.sleep_until(due)
                    tg.start_soon(sessions.run, index, due)
        watching.cancel_scope.cancel()
    duration = anyio.current_time() - started
    report = summary(
        sessions.requests,
        sessions.sessions,
        duration=duration,
        offered_rate=plan.rate,
        client_cpu_s=process_cpu() - cpu,
        loop_lags=watch.lags,
        slo=plan.slo,
    )
    report.tool_runs = dict(sessions.tool_runs)
    report.workload = workload.name
    report.plan = msgspec.to_builtins(plan)
    report.bottleneck = _bottleneck(report)
    report.stopped = None if saturation is None else saturation.reason
    report.sessions_started = begun
    report.compatibility = model_compatibility(sessions.model)
    if records is not None:
        records.extend(sessions.requests)
    if raw is not None:
        raw.sessions, raw.lags = sessions.sessions, watch.lags
    return report


@asynccontextmanager
async def workload_tools(workload: Workload, tools: Sequence[LoadTool] = ()) -> AsyncIterator[list[LoadTool]]:
    """``tools``, the workload's ``python_tools`` and its MCP servers' tools (their
    connections open until the block ends)."""
    own: list[LoadTool] = [*tools]
    for index, spec in enumerate(workload.python_tools):
        own.append(python_tool(spec, f"workload.python_tools[{index}]"))
    async with mcp_tools(workload.mcp) as served:
        yield [*own, *served]


class _Saturation:
    """Watches an open loop's sessions in flight; :attr:`reason` says why it ended the
    run early, if it did."""

    def __init__(self, plan: LoadPlan, sessions: Sessions, begun: Callable[[], int], parts: int = 1) -> None:
        assert plan.rate is not None
        self.rate, self.window, self.parts = plan.rate, plan.saturation_window, parts
        self.sessions, self.begun = sessions, begun
        self.reason: str | None = None

    async def watch(self, run: anyio.CancelScope) -> None:
        """Cancel ``run`` (the sessions and their arrivals) once the sessions in flight
        have risen for four windows in a row to at least twice what they were and above a
        window's worth of arrivals: the server is saturated and waiting grows without bound."""
        window, backlog = self.window, []
        while True:
            await anyio.sleep(window)
            backlog.append(self.begun() - len(self.sessions.sessions))
            last = backlog[-5:]
            if (
                len(last) == 5
                and all(a < b for a, b in itertools.pairwise(last))
                and last[-1] >= 2 * max(1, last[0])
                and last[-1] >= self.rate / self.parts * window  # this process's share of the arrivals
            ):
                self.reason = (
                    f"saturated: the sessions in flight grew from {last[0]} to {last[-1]} over "
                    f"{4 * window:g}s at {self.rate:g} sessions/s offered; the run stopped early"
                )
                run.cancel()
                return


def _bottleneck(report: LoadReport) -> Literal["client", "none"]:
    """Whether the generator itself is what was measured: its timers ran late (p99 send
    lag or loop lag past 10 ms)."""
    lag = report.send_lag_ms.p99 or 0.0
    loop = report.loop_lag_ms.p99 or 0.0
    return "client" if max(lag, loop) > 10.0 else "none"


async def _report_progress(
    sessions: Sessions, started: float, progress: Progress, every: float, begun: Callable[[], int]
) -> None:
    while True:
        await anyio.sleep(every)
        done = sessions.requests
        ttfts = sorted(t for r in done[-500:] if (t := r.ttft) is not None)
        progress(
            {
                "elapsed_s": round(anyio.current_time() - started, 1),
                "sessions_started": begun(),
                "sessions_done": len(sessions.sessions),
                "requests": len(done),
                "in_flight": sessions.in_flight,
                "errors": sum(1 for r in done if r.error is not None),
                "ttft_p50_ms": round(ttfts[len(ttfts) // 2] * 1000, 1) if ttfts else None,
            }
        )


async def sweep_rate(
    model: ChatModel,
    workload: Workload,
    slo: Slo,
    *,
    low: float,
    high: float,
    step_duration: float = 60.0,
    attainment: float = 0.99,
    tolerance: float = 0.1,
    seed: int = 0,
    run_step: StepRunner | None = None,
) -> dict[str, Any]:
    """The highest session rate (between ``low`` and ``high``) at which the server meets
    ``slo``: an open-loop run of ``step_duration`` seconds per rate tried, a rate passing
    when at least ``attainment`` of its requests met the SLO, none failed, and it did not
    saturate; a bisection (on a log scale) until the bounds are within ``tolerance`` of
    each other. Returns ``{"rate": best passing rate or None, "steps": [...]}``, with the
    last step's report (``last``) and its requests' records (``records``). ``run_step``:
    how a step's plan is run (default: :func:`run_load` in this process; ``greenroom load
    --processes`` splits each step over its generator processes)."""
    if not (0 < low < high):
        raise InvalidInput(f"a sweep needs 0 < low < high, got {low!r}..{high!r}", field="low", value=low)
    if not 0 < attainment <= 1:
        raise InvalidInput(
            f"attainment must be in (0, 1], got {attainment!r}", field="attainment", value=attainment
        )
    steps: list[dict[str, Any]] = []
    best: float | None = None
    kept: dict[str, Any] = {}

    async def passes(rate: float) -> bool:
        plan = LoadPlan(rate=rate, duration=step_duration, seed=seed, slo=slo)
        records: list[RequestRecord] = []
        if run_step is not None:
            report, records = await run_step(plan)
        else:
            report = await run_load(model, workload, plan, records=records)
        kept["last"], kept["records"] = report, records
        requests = report.requests
        met = report.goodput_requests / max(1, requests)
        # nothing measured (no request in the step) proves nothing: not a pass
        ok = requests > 0 and report.stopped is None and report.errors == 0 and met >= attainment
        steps.append({"rate": round(rate, 4), "passed": ok, "attainment": round(met, 4),
                      "ttft_ms": msgspec.to_builtins(report.ttft_ms), "stopped": report.stopped})  # fmt: skip
        return ok

    if not await passes(low):
        return {"rate": None, "steps": steps, **kept}
    best = low
    if await passes(high):
        return {"rate": high, "steps": steps, **kept}
    while high / low > 1 + tolerance:
        middle = math.sqrt(low * high)
        if await passes(middle):
            low = best = middle
        else:
            high = middle
    return {"rate": round(best, 4), "steps": steps, **kept}
