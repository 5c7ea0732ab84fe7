"""``run_load``: sessions of agents against a model server, arriving as told, until a
count or a duration; the report of what was measured."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from typing import Any, Literal

import anyio
import msgspec

from ..llm import ChatModel
from ._arrivals import Pattern, open_starts
from ._measure import LoopWatch, RequestRecord, Slo, process_cpu, summary
from ._session import Sessions
from ._workload import Workload


class LoadPlan(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """How a run goes. Exactly one of ``concurrency`` (a closed loop: that many sessions at
    once, a new one as one ends) and ``rate`` (an open loop: sessions started per second,
    arriving as ``pattern`` says, after ``ramp_up`` seconds of a rising rate). It ends
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

    def check(self) -> LoadPlan:
        """This plan, or ``ValueError`` naming the field that is wrong."""
        if (self.concurrency is None) == (self.rate is None):
            raise ValueError("give one of concurrency (a closed loop) and rate (an open loop)")
        if self.concurrency is not None and not 1 <= self.concurrency <= 1_000_000:
            raise ValueError(f"concurrency must be from 1 to 1000000, got {self.concurrency!r}")
        if self.rate is not None and not (math.isfinite(self.rate) and self.rate > 0):
            raise ValueError(f"rate must be sessions per second > 0, got {self.rate!r}")
        if self.sessions is None and self.duration is None:
            raise ValueError("give sessions or duration (when the run ends)")
        if self.sessions is not None and self.sessions < 1:
            raise ValueError(f"sessions must be at least 1, got {self.sessions!r}")
        if self.duration is not None and not (math.isfinite(self.duration) and self.duration > 0):
            raise ValueError(f"duration must be seconds > 0, got {self.duration!r}")
        return self


Progress = Callable[[dict[str, Any]], None]


async def run_load(
    model: ChatModel,
    workload: Workload,
    plan: LoadPlan,
    *,
    progress: Progress | None = None,
    every: float = 1.0,
    records: list[RequestRecord] | None = None,
) -> dict[str, Any]:
    """Run ``plan`` of ``workload`` sessions against ``model``; the report (``summary``),
    with ``tool_runs`` (each synthetic tool's runs) and the plan. ``progress`` is called
    with a few live figures every ``every`` seconds; ``records`` receives every request's
    :class:`RequestRecord` (the rows of a CSV). Cancelled, the sessions in flight are
    cancelled with it (their requests' connections closed) and nothing is reported."""
    plan.check()
    sessions = Sessions(model, workload, seed=plan.seed)
    watch = LoopWatch()
    started = anyio.current_time()
    cpu = process_cpu()
    deadline = math.inf if plan.duration is None else started + plan.duration
    limit = plan.sessions if plan.sessions is not None else None
    counter = itertools.count()
    begun = 0

    def next_index() -> int | None:
        nonlocal begun
        if (limit is not None and begun >= limit) or anyio.current_time() >= deadline:
            return None
        begun += 1
        return next(counter)

    async with anyio.create_task_group() as watching:
        watching.start_soon(watch.run)
        if progress is not None:
            watching.start_soon(_report_progress, sessions, started, progress, every, lambda: begun)
        async with anyio.create_task_group() as tg:
            if plan.concurrency is not None:

                async def worker() -> None:
                    while (index := next_index()) is not None:
                        await sessions.run(index, anyio.current_time())

                for _ in range(plan.concurrency):
                    tg.start_soon(worker)
            else:
                assert plan.rate is not None
                starts = open_starts(
                    plan.rate, pattern=plan.pattern, ramp_up=plan.ramp_up, rng=random.Random(plan.seed)
                )
                for offset in starts:
                    due = started + offset
                    if due >= deadline:
                        break
                    index = next_index()
                    if index is None:
                        break
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
    report["tool_runs"] = dict(sessions.tool_runs)
    report["workload"] = workload.name
    report["plan"] = msgspec.to_builtins(plan)
    report["bottleneck"] = _bottleneck(report)
    if records is not None:
        records.extend(sessions.requests)
    return report


def _bottleneck(report: dict[str, Any]) -> Literal["client", "none"]:
    """Whether the generator itself is what was measured: its timers ran late (p99 send
    lag or loop lag past 10 ms)."""
    lag = report["send_lag_ms"]["p99"] or 0.0
    loop = report["loop_lag_ms"]["p99"] or 0.0
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
