"""Event-log benchmark: durable appends per second from concurrent agents.

Baseline (same run): each event opened, appended, fsynced and closed by its agent,
the agents running concurrently in threads. greenroom: the same agents ask the log
actor, which group-commits whatever is waiting (one write, one fsync per batch).
The two alternate for ``repeat`` rounds, each in fresh files; the figures are the
medians, the ratio the median of the rounds' ratios (a disk's mood drifts within
seconds, so pairing neighbouring runs cancels most of it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import msgspec

from ..actors import ActorSystem
from ..log import LogActor, read_events
from ..messages import AGENT_UPDATE, Append
from . import report_per_backend, time_threads

HELP = "event log: durable appends/s vs open-append-fsync-close per event"
TARGET_RATIO = 10.0


async def _greenroom(data_dir: Path, agents: int, each: int) -> float:
    async with ActorSystem() as system:
        log = await system.spawn(lambda: LogActor(data_dir), name="log")

        async def agent(index: int) -> None:
            for i in range(each):
                await log.ask(Append(type=AGENT_UPDATE, agent_id=f"a{index}", payload={"i": i}), timeout=None)

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for index in range(agents):
                tg.start_soon(agent, index)
        elapsed = time.perf_counter() - started
    events = read_events(data_dir / "events.jsonl")
    assert len(events) == agents * each and [e.seq for e in events] == list(range(1, len(events) + 1))
    return len(events) / elapsed


def _naive(data_dir: Path, agents: int, each: int) -> float:
    path = data_dir / "naive.jsonl"

    def agent(index: int) -> None:
        for i in range(each):
            line = (
                msgspec.json.encode({"type": AGENT_UPDATE, "agent_id": f"a{index}", "payload": {"i": i}})
                + b"\n"
            )
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)

    elapsed = time_threads(agent, [(i,) for i in range(agents)])
    assert len(path.read_bytes().splitlines()) == agents * each
    return agents * each / elapsed


def measure(backend: str, agents: int, each: int, naive_each: int, repeat: int = 15) -> dict[str, Any]:
    naive: list[float] = []
    greenroom: list[float] = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="greenroom-bench-") as tmp:
            base = Path(tmp)
            (base / "n").mkdir()
            (base / "g").mkdir()
            naive.append(_naive(base / "n", agents, naive_each))
            greenroom.append(anyio.run(_greenroom, base / "g", agents, each, backend=backend))
    ratios = [g / n for g, n in zip(greenroom, naive, strict=True)]
    return {
        "backend": backend,
        "agents": agents,
        "rounds": repeat,
        "naive": statistics.median(naive),
        "greenroom": statistics.median(greenroom),
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
    }


def format_table(figures: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"event log on {figures['backend']}, {figures['agents']} concurrent agents, durable appends "
            f"(medians of {figures['rounds']} rounds)",
            f"  open-append-fsync-close per event: {figures['naive']:>10.0f} events/s",
            f"  greenroom log actor (group commit): {figures['greenroom']:>10.0f} events/s   "
            f"ratio {figures['ratio']:.1f}x (rounds {figures['ratio_min']:.1f}-{figures['ratio_max']:.1f}x; "
            f"target >= {TARGET_RATIO:.0f}x)",
        ]
    )


def add_arguments(parser: argparse.ArgumentParser, positive_int: Any) -> None:
    """This suite's own options (the CLI adds ``--backend`` and ``--json`` to every suite)."""
    parser.add_argument("--agents", type=positive_int, default=100)
    parser.add_argument("--events", type=positive_int, default=200, help="events per agent (greenroom)")
    parser.add_argument("--naive-events", type=positive_int, default=10, help="events per agent (baseline)")
    parser.add_argument("--repeat", type=positive_int, default=15, help="alternating rounds (medians)")


def main(args: argparse.Namespace) -> int:
    return report_per_backend(
        args.backend,
        args.json,
        lambda b: measure(b, args.agents, args.events, args.naive_events, args.repeat),
        format_table,
    )
