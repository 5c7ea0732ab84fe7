"""``greenroom load --processes N``: one run's schedule split over N generator processes
on this machine — one Python process is one core, and a load generator that runs out of
its core reports its own lateness as the server's.

The parent (:func:`run_in_processes`) starts N children (``python -m
greenroom.load._generator``), gives each a :class:`Job` (the plan, the workload, the
server, its :class:`Share` of the schedule), waits until every child has prepared what a
run prepares once (its model client, its tools, its prompts) and said so, then tells them
all one instant to start. Each child streams its requests' records as they end (times
counted from that instant), then its sessions, CPU and loop lags; the parent makes one
report of them all — the percentiles from every request, not averaged — with each
process's own figures. A child that dies is said so in the report, with the requests it
had sent (each one it reported is counted).

Cancelled (Ctrl-C), the parent kills its children and waits for them.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence

import anyio
import anyio.abc
import msgspec

from .._errors import GreenroomError
from ._measure import LoadReport, RequestRecord, SessionRecord, Slo, quantiles, shifted, summary
from ._replay import RecordedRequest
from ._run import LoadPlan, Share, _bottleneck
from ._workload import Workload


class Target(msgspec.Struct, frozen=True):
    """The server: the key each child takes from its environment (``OPENAI_API_KEY``)."""

    base_url: str
    model: str
    client: str = "greenroom"
    timeout: float = 300.0
    keep_alive: int = 10_000


class Job(msgspec.Struct, frozen=True):
    """What one child runs: a workload's ``plan`` or a ``recording``'s replay, its share."""

    target: Target
    share: Share
    backend: str = "asyncio"
    plan: LoadPlan | None = None
    workload: Workload | None = None
    recording: dict[str, list[RecordedRequest]] | None = None
    speed: float = 1.0
    slo: Slo = Slo()


class ProcessFigures(msgspec.Struct, kw_only=True):
    """One generator process of a run: its requests and sessions, its CPU, how late its
    requests went out (``send_lag_p99_ms``) and its loop woke (``loop_lag_p99_ms``);
    ``died``: what ended it before it finished, or ``None``."""

    part: int
    pid: int | None = None
    requests: int = 0
    sessions: int = 0
    cpu_s: float | None = None
    cpu_per_request_ms: float | None = None
    send_lag_p99_ms: float | None = None
    loop_lag_p99_ms: float | None = None
    died: str | None = None


class ChildFailed(GreenroomError):
    """A generator process could not start its share (it said why on stderr)."""


class _Done(msgspec.Struct):
    duration: float
    cpu_s: float
    lags: list[float]
    sessions: list[SessionRecord]
    sessions_started: int = 0
    tool_runs: dict[str, int] = {}
    compatibility: list[str] = []
    stopped: str | None = None


class _Line(msgspec.Struct, omit_defaults=True):
    ready: int | None = None
    requests: list[RequestRecord] | None = None
    done: _Done | None = None


_encode = msgspec.json.Encoder().encode
_decode_line = msgspec.json.Decoder(_Line).decode


# -- the parent ---------------------------------------------------------------------------


class _Child:
    def __init__(self, part: int, process: anyio.abc.Process) -> None:
        self.part = part
        self.process = process
        self.requests: list[RequestRecord] = []
        self.done: _Done | None = None
        self.ready = anyio.Event()
        self.ended = anyio.Event()

    async def read(self) -> None:
        """Every line the child writes, until it closes its output."""
        assert self.process.stdout is not None
        buffer = b""
        try:
            async for data in self.process.stdout:
                buffer += data
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    self._take(line)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            self.ended.set()
            self.ready.set()  # a child that dies before it is ready wakes the wait for it

    def _take(self, line: bytes) -> None:
        if not line.strip():
            return
        said = _decode_line(line)
        if said.ready is not None:
            self.ready.set()
        if said.requests:
            self.requests.extend(said.requests)
        if said.done is not None:
            self.done = said.done


async def run_in_processes(
    jobs: Sequence[Job],
    *,
    ready_timeout: float = 120.0,
    progress: Callable[[int], None] | None = None,
) -> tuple[LoadReport, list[RequestRecord], list[ProcessFigures]]:
    """Run each of ``jobs`` (one per share) in its own process, all starting at one
    instant once every one is ready; the merged report, every request's record, and each
    process's figures. Raises :class:`ChildFailed` if a child ends before it is ready
    (nothing was sent). ``progress`` is called with the requests done so far, every second."""
    children: list[_Child] = []
    env = dict(os.environ)
    async with anyio.create_task_group() as group:
        try:
            for job in jobs:
                process = await anyio.open_process(
                    [sys.executable, "-m", "greenroom.load._generator"], stderr=None, env=env
                )
                child = _Child(job.share.part, process)
                children.append(child)
                group.start_soon(child.read)
                assert process.stdin is not None
                await process.stdin.send(_encode(job) + b"\n")
            with anyio.fail_after(ready_timeout):
                for child in children:
                    await child.ready.wait()
            early = [child for child in children if child.ended.is_set() and child.done is None]
            if early:
                codes = [await child.process.wait() for child in early]
                raise ChildFailed(
                    f"generator process {early[0].part} ended before it was ready ({_ended(codes[0])}); "
                    "nothing was sent"
                )
            start = time.time() + 0.05 + 0.01 * len(children)
            for child in children:
                assert child.process.stdin is not None
                await child.process.stdin.send(_encode({"start": start}) + b"\n")
            if progress is not None:
                group.start_soon(_progress, children, progress)
            for child in children:
                await child.ended.wait()
                await child.process.wait()
            group.cancel_scope.cancel()
        except BaseException:
            with anyio.CancelScope(shield=True):
                for child in children:
                    if child.process.returncode is None:
                        child.process.kill()
                        await child.process.wait()
            raise
    return _merge(jobs[0], children)


async def _progress(children: list[_Child], progress: Callable[[int], None]) -> None:
    while True:
        await anyio.sleep(1.0)
        progress(sum(len(child.requests) for child in children))


def _ended(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def _merge(job: Job, children: list[_Child]) -> tuple[LoadReport, list[RequestRecord], list[ProcessFigures]]:
    requests = [record for child in children for record in child.requests]
    finished = [child.done for child in children if child.done is not None]
    sessions = [session for done in finished for session in done.sessions]
    lags = [lag for done in finished for lag in done.lags]
    duration = max((done.duration for done in finished), default=0.0)
    if not finished:  # every child died: the run lasted as long as its last record
        duration = max((record.end for record in requests), default=0.0)
    plan = job.plan
    report = summary(
        requests,
        sessions,
        duration=duration,
        offered_rate=plan.rate if plan is not None else None,
        client_cpu_s=sum(done.cpu_s for done in finished),
        loop_lags=lags,
        slo=plan.slo if plan is not None else job.slo,
    )
    tool_runs: dict[str, int] = {}
    compatibility: list[str] = []
    for done in finished:
        for name, count in done.tool_runs.items():
            tool_runs[name] = tool_runs.get(name, 0) + count
        compatibility.extend(line for line in done.compatibility if line not in compatibility)
    report.tool_runs = tool_runs
    report.compatibility = compatibility
    report.stopped = next((done.stopped for done in finished if done.stopped), None)
    report.sessions_started = sum(done.sessions_started for done in finished)
    if plan is not None:
        report.workload = job.workload.name if job.workload is not None else None
        report.plan = msgspec.to_builtins(plan)
    else:
        report.workload = "replay"
        report.recorded_requests = sum(len(r) for r in (job.recording or {}).values())
    report.bottleneck = _bottleneck(report)
    figures = []
    for child in children:
        outcome = child.done
        sent = child.requests
        figure = ProcessFigures(part=child.part, pid=child.process.pid, requests=len(sent))
        figure.send_lag_p99_ms = quantiles([r.sent - r.scheduled for r in sent])["p99"]
        if outcome is not None:
            figure.sessions = len(outcome.sessions)
            figure.cpu_s = round(outcome.cpu_s, 3)
            figure.cpu_per_request_ms = round(outcome.cpu_s / max(1, len(sent)) * 1000, 3)
            figure.loop_lag_p99_ms = quantiles(outcome.lags)["p99"]
        else:
            figure.died = (
                f"{_ended(child.process.returncode)} after {len(sent)} request(s) reported; "
                "its requests are counted, its sessions and CPU are not"
            )
        figures.append(figure)
    report.generator_processes = len(children)
    report.processes = [msgspec.to_builtins(figure) for figure in figures]
    return report, requests, figures


# -- a child ------------------------------------------------------------------------------


async def _child(job: Job) -> None:
    from ..llm import OpenAIChatModel
    from ._replay import replay
    from ._run import RunRaw, run_load

    out = sys.stdout.buffer
    target = job.target
    model = OpenAIChatModel(
        target.model, base_url=target.base_url, client=target.client, timeout=target.timeout,
        max_retries=0, keep_alive=target.keep_alive, fallbacks=False,
    )  # fmt: skip
    pending: list[RequestRecord] = []
    origin = 0.0
    raw = RunRaw()

    def flush() -> None:
        if pending:
            out.write(_encode(_Line(requests=[shifted(r, origin) for r in pending])) + b"\n")
            out.flush()
            pending.clear()

    async def recorded(record: RequestRecord) -> None:
        pending.append(record)

    async def flusher() -> None:
        while True:
            await anyio.sleep(0.25)
            flush()

    async def started() -> float:
        """Ready: say so, then the shared start as this loop's time."""
        nonlocal origin
        out.write(_encode(_Line(ready=os.getpid())) + b"\n")
        out.flush()
        line = await anyio.to_thread.run_sync(sys.stdin.buffer.readline)
        if not line:
            raise SystemExit(0)  # the parent went away before the start
        wall = float(json.loads(line)["start"])
        origin = anyio.current_time() + max(0.0, wall - time.time())
        return origin

    async with model, anyio.create_task_group() as group:
        group.start_soon(flusher)
        if job.recording is not None:
            report = await replay(
                model, job.recording, speed=job.speed, slo=job.slo, share=job.share,
                ready=started, recorded=recorded, raw=raw,
            )  # fmt: skip
        else:
            assert job.plan is not None and job.workload is not None
            report = await run_load(
                model, job.workload, job.plan, share=job.share, recorded=recorded, raw=raw,
                ready=started,
            )  # fmt: skip
        group.cancel_scope.cancel()
    flush()
    done = _Done(
        duration=report.duration_s,
        cpu_s=report.client_cpu_s,
        lags=raw.lags,
        sessions=[shifted(s, origin) for s in raw.sessions],
        sessions_started=report.sessions_started,
        tool_runs=report.tool_runs,
        compatibility=report.compatibility,
        stopped=report.stopped,
    )
    out.write(_encode(_Line(done=done)) + b"\n")
    out.flush()


def main() -> None:
    job = msgspec.json.decode(sys.stdin.buffer.readline(), type=Job)
    anyio.run(_child, job, backend=job.backend)
