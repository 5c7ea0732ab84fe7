"""Event-log benchmark: durable appends per second from concurrent agents.

greenroom: the agents (tasks) ask the log actor, which group-commits whatever is waiting
(one write, one flush per batch). Two baselines in the same run:

- **naive**: each event opened, appended, fsynced and closed by its agent, the agents
  running concurrently in threads (what code without a log writer does);
- **physical limit**: one thread writing the very batches the log actor wrote (the same
  bytes, the same boundaries) with one ``write`` + ``fdatasync`` per batch, back to back,
  no actors, no agents, no encoding: what this disk allows for those batches.

And the same agents **batching at the source**: ``per_message`` events per
``AppendMany`` (an agent's lifecycle events in one message), against its own physical
limit (its batches are larger, so the disk's cost per event is smaller) and against one
event per ask (events/s).

The runs alternate for ``repeat`` rounds, each in fresh files; the figures are the
medians, each ratio the median of the rounds' ratios (a disk's mood drifts within
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

from greenroom.actors import ActorSystem
from greenroom.embedded import FileEventStore, read_events
from greenroom.log import LogActor
from greenroom.messages import AGENT_UPDATE, Append, AppendMany

from . import report_per_backend, time_threads

HELP = "event log: durable appends/s vs the physical limit and open-append-fsync-close per event"
TARGET_LIMIT_SHARE = 0.7


class _MeasuredLog(LogActor):
    """The log actor, noting the size of each batch it writes (for the limit's replay)."""

    batches: list[int]

    async def _flush(self) -> None:
        self.batches.append(len(self._commits))
        await super()._flush()


async def _greenroom(
    data_dir: Path, agents: int, each: int, batches: list[int], per_message: int = 1
) -> float:
    """``agents`` tasks appending ``each`` events, waiting for each to be durable: one
    ``Append`` per ask, or (``per_message`` > 1) that many per ``AppendMany`` — an agent
    batching its events at the source."""

    def make() -> LogActor:
        log = _MeasuredLog(FileEventStore(data_dir))
        log.batches = batches
        return log

    async with ActorSystem() as system:
        log = await system.spawn(make, name="log")

        async def agent(index: int) -> None:
            agent_id = f"a{index}"
            if per_message == 1:
                for i in range(each):
                    await log.ask(
                        Append(type=AGENT_UPDATE, agent_id=agent_id, payload={"i": i}), timeout=None
                    )
                return
            for first in range(0, each, per_message):
                appends = [
                    Append(type=AGENT_UPDATE, agent_id=agent_id, payload={"i": i})
                    for i in range(first, min(first + per_message, each))
                ]
                await log.ask(AppendMany(appends), timeout=None)

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


def _limit(data_dir: Path, source: Path, batches: list[int]) -> float:
    """One thread writing ``source``'s lines in the given batches: write + fdatasync each."""
    lines = source.read_bytes().splitlines(keepends=True)
    chunks: list[bytes] = []
    start = 0
    for size in batches:
        if size:
            chunks.append(b"".join(lines[start : start + size]))
            start += size
    assert start == len(lines)
    fd = os.open(data_dir / "limit.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        started = time.perf_counter()
        for chunk in chunks:
            os.write(fd, chunk)
            os.fdatasync(fd)
        elapsed = time.perf_counter() - started
    finally:
        os.close(fd)
    return len(lines) / elapsed


def measure(
    backend: str, agents: int, each: int, naive_each: int, repeat: int = 15, per_message: int = 10
) -> dict[str, Any]:
    naive: list[float] = []
    limit: list[float] = []
    greenroom: list[float] = []
    sizes: list[float] = []
    batched: list[float] = []
    batched_limit: list[float] = []
    batched_sizes: list[float] = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="greenroom-bench-") as tmp:
            base = Path(tmp)
            for sub in ("n", "g", "l", "m", "ml"):
                (base / sub).mkdir()
            naive.append(_naive(base / "n", agents, naive_each))
            batches: list[int] = []
            greenroom.append(anyio.run(_greenroom, base / "g", agents, each, batches, backend=backend))
            limit.append(_limit(base / "l", base / "g" / "events.jsonl", batches))
            sizes.append(statistics.mean(size for size in batches if size))
            batches = []
            batched.append(
                anyio.run(_greenroom, base / "m", agents, each, batches, per_message, backend=backend)
            )
            batched_limit.append(_limit(base / "ml", base / "m" / "events.jsonl", batches))
            batched_sizes.append(statistics.mean(size for size in batches if size))
    ratios = [g / n for g, n in zip(greenroom, naive, strict=True)]
    shares = [g / lim for g, lim in zip(greenroom, limit, strict=True)]
    batched_shares = [g / lim for g, lim in zip(batched, batched_limit, strict=True)]
    return {
        "backend": backend,
        "agents": agents,
        "rounds": repeat,
        "naive": statistics.median(naive),
        "limit": statistics.median(limit),
        "greenroom": statistics.median(greenroom),
        "batch_size": statistics.median(sizes),
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "limit_share": statistics.median(shares),
        "limit_share_min": min(shares),
        "limit_share_max": max(shares),
        "per_message": per_message,
        "batched": statistics.median(batched),
        "batched_limit": statistics.median(batched_limit),
        "batched_batch_size": statistics.median(batched_sizes),
        "batched_vs_single": statistics.median(b / g for b, g in zip(batched, greenroom, strict=True)),
        "batched_limit_share": statistics.median(batched_shares),
    }


def format_table(figures: dict[str, Any]) -> str:
    return "\n".join(
        [
            f"event log on {figures['backend']}, {figures['agents']} concurrent agents, durable appends "
            f"(medians of {figures['rounds']} rounds; the log's batches held {figures['batch_size']:.0f} "
            "events on average)",
            f"  physical limit (those batches, one thread): {figures['limit']:>10.0f} events/s",
            f"  open-append-fsync-close per event:         {figures['naive']:>10.0f} events/s",
            f"  greenroom log actor (group commit):        {figures['greenroom']:>10.0f} events/s",
            f"    = {figures['limit_share']:.2f}x the physical limit "
            f"(rounds {figures['limit_share_min']:.2f}-{figures['limit_share_max']:.2f}x; "
            f"target >= {TARGET_LIMIT_SHARE:.1f}x)",
            f"    = {figures['ratio']:.1f}x open-append-fsync-close (rounds {figures['ratio_min']:.1f}-"
            f"{figures['ratio_max']:.1f}x)",
            f"  batched at the source ({figures['per_message']} events per AppendMany; the log's batches "
            f"held {figures['batched_batch_size']:.0f}):",
            f"  physical limit (those batches, one thread): {figures['batched_limit']:>10.0f} events/s",
            f"  greenroom log actor:                       {figures['batched']:>10.0f} events/s "
            f"= {figures['batched_vs_single']:.2f}x one event per ask, "
            f"{figures['batched_limit_share']:.2f}x its physical limit",
        ]
    )


def add_arguments(parser: argparse.ArgumentParser, positive_int: Any) -> None:
    """This suite's own options (the CLI adds ``--backend`` and ``--json`` to every suite)."""
    parser.add_argument("--agents", type=positive_int, default=100)
    parser.add_argument("--events", type=positive_int, default=200, help="events per agent (greenroom)")
    parser.add_argument("--naive-events", type=positive_int, default=10, help="events per agent (baseline)")
    parser.add_argument("--repeat", type=positive_int, default=15, help="alternating rounds (medians)")
    parser.add_argument(
        "--per-message", type=positive_int, default=10, help="events per AppendMany (the batched run)"
    )


def main(args: argparse.Namespace) -> int:
    return report_per_backend(
        args.backend,
        args.json,
        lambda b: measure(b, args.agents, args.events, args.naive_events, args.repeat, args.per_message),
        format_table,
    )
