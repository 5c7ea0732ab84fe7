"""Harness benchmark: many concurrent harness actors against a model with fixed latency.

Each harness runs one phase of ``iterations`` turns; every turn is a model call that
sleeps ``latency`` seconds (the scripted model) and asks for one tool call. The wall
time is compared with the ideal (``iterations * latency``: every call overlapped) and
with a baseline measured in the same run: the same number of tasks doing nothing but
``await anyio.sleep(latency)`` ``iterations`` times, which is what the event loop's
timers alone cost.

Two overhead figures, both against that baseline:
- per iteration: the CPU time the runtime spends on one harness iteration (process
  time of the harness run minus the baseline's, divided by actors x iterations) —
  what one iteration adds to one model call; the target is < 1 % of the latency;
- per wave: the wall time each round of iterations is stretched by
  ((wall - baseline) / iterations). All actors share one event loop on one core, so
  this grows with the number of actors (about actors x the per-iteration CPU time).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import anyio

from ..actors import ActorSystem
from ..harness import Harness, PhaseResult, Tool
from ..llm import ScriptedModel
from ..messages import ChatReply, ChatRequest, ToolCall, Usage
from . import report_per_backend

HELP = "harness actors: wall time vs latency-bound ideal, overhead per iteration"
TARGET_SHARE = 0.01


def _keep_calling(request: ChatRequest) -> ChatReply:
    turn = sum(1 for m in request.messages if m.role == "assistant")
    return ChatReply(tool_calls=(ToolCall(f"t{turn}", "note", {"turn": turn}),), usage=Usage(50, 10))


async def _harnesses(actors: int, iterations: int, latency: float) -> tuple[float, float]:
    model = ScriptedModel(_keep_calling, latency=latency)
    note = Tool("note", lambda turn: turn)
    async with ActorSystem() as system:
        harnesses = [await Harness.spawn(system, model, tools=[note]) for _ in range(actors)]
        results: list[PhaseResult] = []

        async def one(harness: Harness) -> None:
            results.append(await harness.run_bounded("work", max_iterations=iterations))

        started, cpu = time.perf_counter(), time.process_time()
        async with anyio.create_task_group() as tg:
            for harness in harnesses:
                tg.start_soon(one, harness)
        elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    assert len(results) == actors and all(r.stop_reason == "max_iterations" for r in results)
    assert all(len(r.tool_calls) == iterations for r in results)
    assert len(model.requests) == actors * iterations
    return elapsed, cpu


async def _sleepers(actors: int, iterations: int, latency: float) -> tuple[float, float]:
    async def one() -> None:
        for _ in range(iterations):
            await anyio.sleep(latency)

    started, cpu = time.perf_counter(), time.process_time()
    async with anyio.create_task_group() as tg:
        for _ in range(actors):
            tg.start_soon(one)
    return time.perf_counter() - started, time.process_time() - cpu


def measure(backend: str, actors: int, iterations: int, latency: float) -> dict[str, Any]:
    baseline, baseline_cpu = anyio.run(_sleepers, actors, iterations, latency, backend=backend)
    wall, cpu = anyio.run(_harnesses, actors, iterations, latency, backend=backend)
    ideal = iterations * latency
    overhead = max(0.0, cpu - baseline_cpu) / (actors * iterations)
    stretch = max(0.0, wall - baseline) / iterations
    return {
        "backend": backend,
        "actors": actors,
        "iterations": iterations,
        "latency": latency,
        "ideal": ideal,
        "baseline": baseline,
        "wall": wall,
        "wall_vs_ideal": wall / ideal,
        "overhead_per_iteration": overhead,
        "overhead_share": overhead / latency,
        "stretch_per_wave": stretch,
        "stretch_share": stretch / latency,
    }


def format_table(f: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"harness actors on {f['backend']}: {f['actors']} actors x {f['iterations']} iterations, "
            f"model latency {f['latency'] * 1000:.0f} ms",
            f"  ideal (latency-bound):              {f['ideal']:8.3f} s",
            f"  baseline (tasks sleeping only):     {f['baseline']:8.3f} s",
            f"  greenroom harness actors:           {f['wall']:8.3f} s   {f['wall_vs_ideal']:.3f}x ideal",
            f"  runtime CPU per harness iteration:  {f['overhead_per_iteration'] * 1e6:8.1f} us   "
            f"= {f['overhead_share'] * 100:.3f} % of the latency (target < {TARGET_SHARE * 100:.0f} %)",
            f"  wall stretch per wave of {f['actors']}:     {f['stretch_per_wave'] * 1000:8.2f} ms   "
            f"= {f['stretch_share'] * 100:.1f} % of the latency (one core serves every actor)",
        ]
    )


def add_arguments(parser: argparse.ArgumentParser, positive_int: Any) -> None:
    """This suite's own options (the CLI adds ``--backend`` and ``--json`` to every suite)."""
    parser.add_argument("--actors", type=positive_int, default=1000)
    parser.add_argument("--iterations", type=positive_int, default=10)
    parser.add_argument("--latency-ms", type=positive_int, default=100, help="simulated model latency")


def main(args: argparse.Namespace) -> int:
    return report_per_backend(
        args.backend,
        args.json,
        lambda b: measure(b, args.actors, args.iterations, args.latency_ms / 1000),
        format_table,
    )
