"""Pipeline benchmark: envelopes through three stage actors (planner → executor → critic).

(a) No latency: 1,000 envelopes through the three stages (mock handlers) as stage
    actors, against the same three ``Agent.process`` calls made as plain async calls in
    one loop, in the same run: envelopes/s, ratio (target >= 0.5x).
(a') The same, each submitter handing over ``--batch`` envelopes per call
    (``Pipeline.run_many``) with as many envelopes in flight: the runtime's cost per
    envelope without one asker's wake-up each (target >= 0.7x).
(b) 20 ms of simulated model latency per stage, envelopes in flight at once: each stage
    handles one envelope at a time, so the latency-bound ideal for N envelopes is
    (N + 2) x 20 ms (a three-stage production line); wall time against it (target <= 1.1x).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import anyio

from greenroom.actors import ActorSystem
from greenroom.pipeline import Agent, AgentConfig, Envelope, Pipeline, PipelineConfig

HELP = "pipeline: stage actors vs plain calls, and a latency-bound production line"

STAGES = (
    AgentConfig(name="planner", stage_order=1, output_key="plan", default_next="executor"),
    AgentConfig(name="executor", stage_order=2, default_next="critic"),
    AgentConfig(name="critic", stage_order=3),
)
CONFIG = PipelineConfig(name="bench", stages=STAGES, max_hops=10)


def _agents(latency: float) -> dict[str, Agent]:
    outputs: dict[str, dict[str, Any]] = {
        "planner": {"steps": [1, 2]},
        "executor": {"done": 2},
        "critic": {"verdict": "ok"},
    }
    agents = {}
    for stage in STAGES:
        agent = Agent(stage)
        agent.use_mock = True
        output = outputs[stage.name]

        if latency:

            async def handler(env: Envelope, output: dict[str, Any] = output) -> dict[str, Any]:
                await anyio.sleep(latency)
                return output

            agent.mock_handler = handler
        else:
            agent.mock_handler = lambda env, output=output: output
        agents[stage.name] = agent
    return agents


async def _plain(count: int) -> float:
    agents = _agents(0.0)
    started = time.perf_counter()
    for index in range(count):
        env = Envelope(raw_input=f"job {index}")
        for name in ("planner", "executor", "critic"):
            env = await agents[name].process(env)
    return count / (time.perf_counter() - started)


async def _actors(count: int, latency: float, in_flight: int, batch: int = 1) -> float:
    """``in_flight`` envelopes on their way: ``in_flight`` submitters sending their share
    one after another, or (``batch`` > 1) ``in_flight // batch`` submitters handing over
    ``batch`` at a time with ``run_many``."""
    async with ActorSystem() as system:
        pipeline = await Pipeline.spawn(system, CONFIG, _agents(latency))
        done = 0
        remaining = iter(range(count))
        trail = ["planner", "executor", "critic"]

        async def submitter() -> None:
            nonlocal done
            for index in remaining:
                result = await pipeline.run(f"job {index}")
                assert result.trail == trail
                done += 1

        async def batch_submitter() -> None:
            nonlocal done
            while chunk := [f"job {index}" for _, index in zip(range(batch), remaining, strict=False)]:
                results = await pipeline.run_many(chunk)
                assert all(result.trail == trail for result in results)
                done += len(results)

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            if batch > 1:
                for _ in range(max(1, min(in_flight, count) // batch)):
                    tg.start_soon(batch_submitter)
            else:
                for _ in range(min(in_flight, count)):
                    tg.start_soon(submitter)
        elapsed = time.perf_counter() - started
        await pipeline.aclose()
    assert done == count
    return elapsed


def measure(
    backend: str, count: int, latency_count: int, latency: float, in_flight: int, rounds: int, batch: int = 10
) -> dict[str, Any]:
    plain: list[float] = []
    mine: list[float] = []
    batched: list[float] = []
    for _ in range(rounds):
        plain.append(anyio.run(_plain, count, backend=backend))
        mine.append(count / anyio.run(_actors, count, 0.0, in_flight, backend=backend))
        batched.append(count / anyio.run(_actors, count, 0.0, in_flight, batch, backend=backend))
    wall = anyio.run(_actors, latency_count, latency, in_flight, backend=backend)
    ideal = (latency_count + len(STAGES) - 1) * latency
    return {
        "backend": backend,
        "envelopes": count,
        "plain_per_second": statistics.median(plain),
        "actors_per_second": statistics.median(mine),
        "ratio": statistics.median(m / p for m, p in zip(mine, plain, strict=True)),
        "batch": batch,
        "batched_per_second": statistics.median(batched),
        "batched_ratio": statistics.median(b / p for b, p in zip(batched, plain, strict=True)),
        "latency_envelopes": latency_count,
        "latency": latency,
        "in_flight": in_flight,
        "wall": wall,
        "ideal": ideal,
        "wall_vs_ideal": wall / ideal,
    }


def format_table(f: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"pipeline on {f['backend']}: three stages (planner -> executor -> critic), mock handlers",
            f"  (a) {f['envelopes']} envelopes, no latency: plain calls {f['plain_per_second']:>9.0f}/s   "
            f"stage actors {f['actors_per_second']:>9.0f}/s   ratio {f['ratio']:.2f}x (target >= 0.5x)",
            f"  (a') the same, {f['batch']} per run_many call:                "
            f"stage actors {f['batched_per_second']:>9.0f}/s   "
            f"ratio {f['batched_ratio']:.2f}x (target >= 0.7x)",
            f"  (b) {f['latency_envelopes']} envelopes, {f['latency'] * 1000:.0f} ms per stage, "
            f"{f['in_flight']} in flight: {f['wall']:.3f} s against the ideal {f['ideal']:.3f} s = "
            f"{f['wall_vs_ideal']:.3f}x (target <= 1.1x)",
        ]
    )


def add_arguments(parser: argparse.ArgumentParser, positive_int: Any) -> None:
    parser.add_argument("--envelopes", type=positive_int, default=1000)
    parser.add_argument("--latency-envelopes", type=positive_int, default=100)
    parser.add_argument("--latency-ms", type=positive_int, default=20)
    parser.add_argument("--in-flight", type=positive_int, default=100)
    parser.add_argument("--rounds", type=positive_int, default=3)
    parser.add_argument("--batch", type=positive_int, default=10, help="envelopes per run_many call in (a')")


def main(args: argparse.Namespace) -> int:
    from . import report_per_backend

    return report_per_backend(
        args.backend,
        args.json,
        lambda b: measure(
            b,
            args.envelopes,
            args.latency_envelopes,
            args.latency_ms / 1000,
            args.in_flight,
            args.rounds,
            args.batch,
        ),
        format_table,
    )
