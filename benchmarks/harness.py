"""Harness benchmark: many concurrent harness actors against a model.

Each harness runs one phase of ``iterations`` turns; every turn is a model call that
asks for one tool call. Two measurements, each against a baseline in the same run:

- **CPU per iteration** (the runtime's own cost): the model answers at once, after one
  checkpoint, so no timer or idle-loop wake-up blurs the figure. The baseline is the
  same number of plain tasks calling the same model and the same tool function
  directly, with no actor, no history, no budget and no sandbox. The difference,
  divided by actors x iterations, is what one harness iteration adds to one model call.
- **Wall time at a real latency**: the model sleeps ``latency`` seconds per call. The
  wall time is compared with the ideal (``iterations * latency``: every call overlapped)
  and with tasks doing nothing but ``await anyio.sleep(latency)`` ``iterations`` times.
  The stretch per wave ((wall - baseline) / iterations) grows with the number of
  actors: all of them share one event loop on one core.

- **Durable phases**: the same CPU run with a step journal (the embedded store's SQLite
  file in a temporary data dir, fsync'd by every batch): what recording each model reply
  and tool result costs per iteration, the journal's own thread time included; and the
  same wall-time run with the journal.

- **Recovery**: ``actors`` durable tasks stopped half-way through their phase (as a crash
  leaves them), then resumed from the journal, against running them again from the start
  without one: model requests and wall time at the model's latency.

- **Kills** (``--kills N``, instead of the above): ``N`` times, a process running
  ``--crash-tasks`` durable tasks at once (``--crash-steps`` model calls each, every one
  asking for a write tool that takes no idempotency key) is SIGKILLed at a random instant,
  then a second process resumes them from the journal (``_crash_node.py``). Per kill: the
  questions a person is asked ("it may have run" — only a call running at the kill can
  honestly be one), the model requests asked again, the effects run twice and missing.
  The baseline is the calls running at the kill instant: the steps begun but not
  finished, counted from the tool's own effects.

Each figure is the median of ``rounds`` alternating runs, each after a full collection.
"""

from __future__ import annotations

import argparse
import collections
import gc
import itertools
import json
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio

from greenroom.actors import ActorSystem
from greenroom.cli._args import int_between
from greenroom.embedded import EmbeddedStore
from greenroom.harness import Harness, PhaseResult, RiskLevel, StepJournalActor, Tool
from greenroom.harness._journal import TaskJournal
from greenroom.llm import ClosingModel, ScriptedModel
from greenroom.messages import ChatMessage, ChatReply, ChatRequest, ModelToolCall, Usage

from . import report_per_backend

HELP = "harness actors: wall time vs latency-bound ideal, overhead per iteration"
TARGET_SHARE = 0.01


def _keep_calling(request: ChatRequest) -> ChatReply:
    # the stand-in model's own work is O(1) per call, so that what is measured is the
    # runtime's (the request is: user, then an assistant and a tool message per turn)
    turn = (len(request.messages) - 1) // 2
    return ChatReply(tool_calls=(ModelToolCall(f"t{turn}", "note", {"turn": turn}),), usage=Usage(50, 10))


class _InstantModel(ClosingModel):
    """Answers like ``_keep_calling`` after one checkpoint: no timer, no latency."""

    def __init__(self) -> None:
        self.calls = 0

    async def chat(self, request: ChatRequest, *, timeout: float | None = None) -> ChatReply:
        await anyio.lowlevel.checkpoint()
        self.calls += 1
        return _keep_calling(request)

    async def aclose(self) -> None:
        pass


def _note(turn: int) -> int:
    return turn


_NOTE_RISK = [RiskLevel.READ_ONLY]
"""The benchmark tool's risk (``--writes``: WRITES, so a durable call is begun and released
before it runs, as a call that changes things is)."""


_runs = itertools.count()


async def _harnesses(
    actors: int, iterations: int, latency: float, journal_dir: str | None = None
) -> tuple[float, float]:
    model: ScriptedModel | _InstantModel = (
        ScriptedModel(_keep_calling, latency=latency) if latency else _InstantModel()
    )
    note = Tool("note", _note, risk=_NOTE_RISK[0], inline=True)  # quick: on the loop (no thread hop)
    async with AsyncExitStack() as stack:
        system = await stack.enter_async_context(ActorSystem())
        options: list[dict[str, Any]] = [{} for _ in range(actors)]
        if journal_dir is not None:  # a fresh task id per harness and run: nothing to replay
            store = await stack.enter_async_context(EmbeddedStore(journal_dir))
            writer = await system.spawn(lambda: StepJournalActor(store.step_store()))
            run = next(_runs)
            options = [
                {"journal": await TaskJournal.load(f"bench-{run}-{i}", 1, writer)} for i in range(actors)
            ]
        harnesses = [await Harness.spawn(system, model, tools=[note], **options[i]) for i in range(actors)]
        results: list[PhaseResult] = []

        async def one(harness: Harness) -> None:
            results.append(await harness.run_bounded("work", max_iterations=iterations))

        started, cpu = time.perf_counter(), time.process_time()
        async with anyio.create_task_group() as tg:
            for harness in harnesses:
                tg.start_soon(one, harness)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
        if journal_dir is not None:
            written: Any = options[0]["journal"]
            assert (
                written.recorded >= 2 * iterations
            )  # a reply and a tool result per iteration (and, writing, its begun and released steps)
    assert len(results) == actors and all(r.stop_reason == "max_iterations" for r in results)
    assert all(len(r.tool_calls) == iterations for r in results)
    calls = len(model.requests) if isinstance(model, ScriptedModel) else model.calls
    assert calls == actors * iterations
    return elapsed, cpu


async def _recovery(actors: int, iterations: int, latency: float, journal_dir: str) -> dict[str, float]:
    """Record the first half of every task's phase, then time resuming it from the journal
    (the half recorded is replayed, the rest asked) against a run from the start."""
    half = max(1, iterations // 2)
    note = Tool("note", _note, inline=True)
    run = next(_runs)
    figures: dict[str, float] = {}
    async with EmbeddedStore(journal_dir) as store, ActorSystem() as system:
        writer = await system.spawn(lambda: StepJournalActor(store.step_store()))

        async def phase(model: ScriptedModel, limit: int, journaled: bool) -> float:
            async def one(i: int) -> None:
                options: dict[str, Any] = {}
                if journaled:
                    options["journal"] = await TaskJournal.load(f"recover-{run}-{i}", 1, writer)
                harness = await Harness.spawn(system, model, tools=[note], **options)
                result = await harness.run_bounded("work", max_iterations=limit)
                assert len(result.tool_calls) == limit
                await harness.aclose()

            started = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for i in range(actors):
                    tg.start_soon(one, i)
            return time.perf_counter() - started

        crashed = ScriptedModel(_keep_calling, latency=latency)
        await phase(crashed, half, True)  # the work a crash interrupted half-way
        resumed = ScriptedModel(_keep_calling, latency=latency)
        figures["resumed_wall"] = await phase(resumed, iterations, True)
        figures["resumed_requests"] = len(resumed.requests)
        again = ScriptedModel(_keep_calling, latency=latency)
        figures["rerun_wall"] = await phase(again, iterations, False)
        figures["rerun_requests"] = len(again.requests)
        await writer.stop()
    return figures


async def _plain_calls(actors: int, iterations: int) -> tuple[float, float]:
    """The baseline for CPU: tasks calling the same model and tool function directly."""
    model = _InstantModel()
    request = ChatRequest((ChatMessage("user", "work"),))

    async def one() -> None:
        for _ in range(iterations):
            reply = await model.chat(request)
            for call in reply.tool_calls:
                _note(**call.arguments)

    started, cpu = time.perf_counter(), time.process_time()
    async with anyio.create_task_group() as tg:
        for _ in range(actors):
            tg.start_soon(one)
    return time.perf_counter() - started, time.process_time() - cpu


async def _sleepers(actors: int, iterations: int, latency: float) -> tuple[float, float]:
    async def one() -> None:
        for _ in range(iterations):
            await anyio.sleep(latency)

    started, cpu = time.perf_counter(), time.process_time()
    async with anyio.create_task_group() as tg:
        for _ in range(actors):
            tg.start_soon(one)
    return time.perf_counter() - started, time.process_time() - cpu


def _alternate(rounds: int, *runs: Any) -> list[float]:
    """Run each ``(fn, args, backend)`` once per round, alternating; the median of each
    run's second figure (CPU) and first (wall), flattened as [wall0, cpu0, wall1, ...]."""
    figures: list[list[tuple[float, float]]] = [[] for _ in runs]
    for _ in range(rounds):
        for index, (fn, args, backend) in enumerate(runs):
            gc.collect()
            figures[index].append(anyio.run(fn, *args, backend=backend))
    out: list[float] = []
    for results in figures:
        out.append(statistics.median(wall for wall, _ in results))
        out.append(statistics.median(cpu for _, cpu in results))
    return out


def measure(backend: str, actors: int, iterations: int, latency: float, rounds: int = 3) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="greenroom-bench-") as journal_dir:
        _, plain_cpu, _, instant_cpu, _, durable_cpu = _alternate(
            rounds,
            (_plain_calls, (actors, iterations), backend),
            (_harnesses, (actors, iterations, 0.0), backend),
            (_harnesses, (actors, iterations, 0.0, journal_dir), backend),
        )
    with tempfile.TemporaryDirectory(prefix="greenroom-bench-") as journal_dir:
        baseline, _, wall, _, durable_wall, _ = _alternate(
            rounds,
            (_sleepers, (actors, iterations, latency), backend),
            (_harnesses, (actors, iterations, latency), backend),
            (_harnesses, (actors, iterations, latency, journal_dir), backend),
        )
    with tempfile.TemporaryDirectory(prefix="greenroom-bench-") as journal_dir:
        gc.collect()
        recovery = anyio.run(_recovery, actors, iterations, latency, journal_dir, backend=backend)
    ideal = iterations * latency
    overhead = max(0.0, instant_cpu - plain_cpu) / (actors * iterations)
    durable_overhead = max(0.0, durable_cpu - plain_cpu) / (actors * iterations)
    stretch = max(0.0, wall - baseline) / iterations
    return {
        "backend": backend,
        "actors": actors,
        "iterations": iterations,
        "latency": latency,
        "rounds": rounds,
        "ideal": ideal,
        "baseline": baseline,
        "wall": wall,
        "wall_vs_ideal": wall / ideal,
        "durable_wall": durable_wall,
        "durable_wall_vs_ideal": durable_wall / ideal,
        "plain_cpu_per_iteration": plain_cpu / (actors * iterations),
        "overhead_per_iteration": overhead,
        "overhead_share": overhead / latency,
        "durable_overhead_per_iteration": durable_overhead,
        "durable_vs_plain_overhead": durable_overhead / overhead if overhead else None,
        "stretch_per_wave": stretch,
        "recovery_requests_ratio": recovery["resumed_requests"] / recovery["rerun_requests"],
        "recovery_wall_ratio": recovery["resumed_wall"] / recovery["rerun_wall"],
        "recovery": recovery,
        "stretch_share": stretch / latency,
    }


def _kill_once(
    backend: str,
    data_dir: Path,
    run: str,
    tasks: int,
    steps: int,
    latency: float,
    rng: random.Random,
    store: str | None = None,
) -> dict[str, Any]:
    """One process SIGKILLed at a random instant, then its tasks resumed by another."""
    node = [sys.executable, "-m", "benchmarks._crash_node"]
    args = [
        str(data_dir),
        str(run),
        str(tasks),
        str(steps),
        str(latency),
        backend,
        *([store] if store else []),
    ]
    child = subprocess.Popen([*node, "run", *args], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError("the crash run's process did not start its tasks")
        # somewhere in the middle of the work (at 0 ms a step still takes a few ms)
        time.sleep(rng.uniform(0.2, 0.8) * steps * max(latency, 0.003))
        child.send_signal(signal.SIGKILL)
    finally:
        child.kill()
        child.wait()
    effects_at_kill = _lines(data_dir / "effects")
    recovered = subprocess.run([*node, "recover", *args], capture_output=True, text=True, timeout=600)
    if recovered.returncode != 0:
        raise RuntimeError(f"the recovery process failed: {recovered.stderr[-2000:]}")
    outcome = json.loads(recovered.stdout.strip().splitlines()[-1])
    effects = _lines(data_dir / "effects")
    requests = _lines(data_dir / "requests")
    prefix = f"r{run}-"
    wanted = {f"{prefix}t{i} {turn}" for i in range(tasks) for turn in range(steps)}
    mine = collections.Counter(line for line in effects if line.startswith(prefix))
    asked = collections.Counter(line for line in requests if line.startswith(prefix))
    began = {line for line in effects_at_kill if line.startswith(prefix)}
    return {
        "questions": len(outcome["questions"]),
        "completed": outcome["completed"],
        "effects_twice": sum(1 for n in mine.values() if n > 1),
        "effects_missing": len(wanted - set(mine)),
        "requests_again": sum(n - 1 for n in asked.values() if n > 1),
        "effects_at_kill": len(began),
    }


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def measure_kills(
    backend: str,
    kills: int,
    tasks: int,
    steps: int,
    latency: float,
    seed: int | None = None,
    store: str | None = None,
) -> dict[str, Any]:
    rng = random.Random(seed)
    per_kill: list[dict[str, Any]] = []
    this = f"{random.getrandbits(32):08x}"  # task ids of their own, on a database kept between runs
    with tempfile.TemporaryDirectory(prefix="greenroom-bench-") as data:
        for run in range(kills):
            per_kill.append(
                _kill_once(backend, Path(data), f"{this}.{run}", tasks, steps, latency, rng, store)
            )
    total = {key: sum(kill[key] for kill in per_kill) for key in per_kill[0]}
    return {
        "backend": backend,
        "store": "postgresql" if store else "files",
        "kills": kills,
        "tasks": tasks,
        "steps": steps,
        "latency": latency,
        "per_kill": per_kill,
        "questions_per_kill": total["questions"] / kills,
        "requests_again_per_kill": total["requests_again"] / kills,
        "effects_twice": total["effects_twice"],
        "effects_missing": total["effects_missing"],
        "completed": total["completed"],
    }


def format_kills(f: dict[str, Any]) -> str:
    questions = [kill["questions"] for kill in f["per_kill"]]
    return "\n".join(
        [
            f"durable tasks under kills on {f['backend']} ({f['store']}): {f['kills']} SIGKILLs of a "
            f"process running {f['tasks']} tasks x {f['steps']} steps (an unkeyed write tool each), "
            f"model latency {f['latency'] * 1000:.0f} ms +- 50 %, instant tools",
            f'  questions per kill ("it may have run"): {f["questions_per_kill"]:6.2f}   '
            f"(each kill: {', '.join(map(str, questions))})",
            f"  model requests asked again per kill:    {f['requests_again_per_kill']:6.2f}",
            f"  effects run twice / missing:            {f['effects_twice']} / {f['effects_missing']}   "
            f"({f['completed']} of {f['kills'] * f['tasks']} tasks completed)",
        ]
    )


def format_table(f: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"harness actors on {f['backend']}: {f['actors']} actors x {f['iterations']} iterations, "
            f"model latency {f['latency'] * 1000:.0f} ms (medians of {f['rounds']} rounds)",
            f"  ideal (latency-bound):              {f['ideal']:8.3f} s",
            f"  baseline (tasks sleeping only):     {f['baseline']:8.3f} s",
            f"  greenroom harness actors:           {f['wall']:8.3f} s   {f['wall_vs_ideal']:.3f}x ideal",
            f"  ... durable (a step journal):       {f['durable_wall']:8.3f} s   "
            f"{f['durable_wall_vs_ideal']:.3f}x ideal (target <= 1.1x)",
            f"  runtime CPU per harness iteration:  {f['overhead_per_iteration'] * 1e6:8.1f} us   "
            f"= {f['overhead_share'] * 100:.3f} % of the latency (target < {TARGET_SHARE * 100:.0f} %)",
            f"    (over a plain call of the same model: {f['plain_cpu_per_iteration'] * 1e6:.1f} us each)",
            f"  ... durable (a step journal):       {f['durable_overhead_per_iteration'] * 1e6:8.1f} us   "
            + (
                f"= {f['durable_vs_plain_overhead']:.2f}x the non-durable overhead (target <= 2x)"
                if f["durable_vs_plain_overhead"] is not None
                else ""
            ),
            f"  recovery half-way (journal vs again): {f['recovery_requests_ratio']:.2f}x the model "
            f"requests, {f['recovery_wall_ratio']:.2f}x the wall time",
            f"  wall stretch per wave of {f['actors']}:     {f['stretch_per_wave'] * 1000:8.2f} ms   "
            f"= {f['stretch_share'] * 100:.1f} % of the latency (one core serves every actor)",
        ]
    )


def add_arguments(parser: argparse.ArgumentParser, positive_int: Any) -> None:
    """This suite's own options (the CLI adds ``--backend`` and ``--json`` to every suite)."""
    parser.add_argument("--actors", type=positive_int, default=1000)
    parser.add_argument("--iterations", type=positive_int, default=10)
    parser.add_argument("--latency-ms", type=positive_int, default=100, help="simulated model latency")
    parser.add_argument("--rounds", type=positive_int, default=3, help="alternating rounds (medians)")
    parser.add_argument(
        "--writes", action="store_true", help="the tool writes: durable calls are begun and released"
    )
    parser.add_argument(
        "--kills", type=positive_int, default=None, help="instead: SIGKILL a durable run this many times"
    )
    parser.add_argument(
        "--crash-store", default=None, metavar="URL", help="with --kills: a PostgreSQL URL (default: files)"
    )
    parser.add_argument("--crash-tasks", type=positive_int, default=100, help="with --kills: tasks at once")
    parser.add_argument("--crash-steps", type=positive_int, default=10, help="with --kills: steps per task")
    parser.add_argument(
        "--crash-latency-ms", type=int_between(0, 1_000_000), default=20, help="with --kills: model latency"
    )


def main(args: argparse.Namespace) -> int:
    if args.writes:
        _NOTE_RISK[0] = RiskLevel.WRITES
    if args.kills is not None:
        return report_per_backend(
            args.backend,
            args.json,
            lambda b: measure_kills(
                b,
                args.kills,
                args.crash_tasks,
                args.crash_steps,
                args.crash_latency_ms / 1000,
                store=args.crash_store,
            ),
            format_kills,
        )
    return report_per_backend(
        args.backend,
        args.json,
        lambda b: measure(b, args.actors, args.iterations, args.latency_ms / 1000, args.rounds),
        format_table,
    )
