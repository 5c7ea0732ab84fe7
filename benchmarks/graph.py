"""Task-graph benchmark: claim+complete cycles per second through the supervisor actor.

Baseline (the spec's naive design, in the same run): for every claim and every
completion, lock ``tasks.graph.json``, read and parse it, change one task, rewrite it
(temp file, fsync, rename) and unlock; its agents run in threads, as file-locking
agents would. Both sides are durable before an agent moves on. Then greenroom alone
at several graph sizes: the per-claim cost should not grow with the graph.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import anyio

from greenroom.actors import ActorRef, ActorSystem
from greenroom.embedded import FileTaskStore, GraphFiles
from greenroom.messages import AgentResult, AgentTask, Claim, Complete, Granted
from greenroom.supervisor import SupervisorActor

from . import report_per_backend, time_threads

HELP = "task graph: claim+complete cycles/s vs lock-read-rewrite per claim"
AGENTS = 100
TARGET_RATIO = 20.0
TARGET_SCALING = 2.0


def _seed(data_dir: Path, size: int) -> None:
    tasks = [AgentTask(id=f"t{i:07d}", type="work", order=i + 1) for i in range(size)]
    GraphFiles(data_dir).compact(tasks)


async def _greenroom_cycles(data_dir: Path, cycles: int, agents: int) -> float:
    result_for: dict[str, AgentResult] = {}
    async with ActorSystem() as system:
        supervisor = await system.spawn(
            lambda: SupervisorActor(FileTaskStore(data_dir, recover_orphans=False)), name="sup"
        )
        per_agent = cycles // agents
        done = 0

        async def agent(index: int, sup: ActorRef) -> None:
            nonlocal done
            agent_id = f"a{index}"
            for _ in range(per_agent):
                reply = await sup.ask(Claim(agent_id, "work"), timeout=None)
                assert isinstance(reply, Granted), reply
                task_id = reply.task.id
                result = result_for.get(task_id) or AgentResult(task_id=task_id)
                await sup.ask(Complete(task_id, agent_id, result), timeout=None)
                done += 1

        started = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for index in range(agents):
                tg.start_soon(agent, index, supervisor)
        elapsed = time.perf_counter() - started
        await supervisor.stop()
    assert done == per_agent * agents
    return done / elapsed


def _naive_seed(path: Path, size: int) -> None:
    tasks = [{"id": f"t{i:07d}", "type": "work", "status": "PENDING", "owner": None} for i in range(size)]
    path.write_text(json.dumps({"tasks": tasks}))


def _naive_update(path: Path, lock_path: Path, change: Any) -> Any:
    with lock_path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            graph = json.loads(path.read_text())
            value = change(graph["tasks"])
            tmp = path.with_name(path.name + ".tmp")
            with tmp.open("w") as file:
                file.write(json.dumps(graph))
                file.flush()
                os.fsync(file.fileno())
            os.replace(tmp, path)
            return value
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _naive_cycles(data_dir: Path, size: int, cycles: int, agents: int) -> float:
    path = data_dir / "naive.graph.json"
    lock_path = data_dir / "naive.lock"
    _naive_seed(path, size)
    per_agent = max(1, cycles // agents)
    done = [0]
    guard = threading.Lock()

    def agent(agent_id: str) -> None:
        for _ in range(per_agent):

            def claim(tasks: list[dict[str, Any]]) -> str:
                for task in tasks:
                    if task["status"] == "PENDING" and task["type"] == "work":
                        task["status"], task["owner"] = "IN_PROGRESS", agent_id
                        return str(task["id"])
                raise AssertionError("no pending task left")

            task_id = _naive_update(path, lock_path, claim)

            def complete(tasks: list[dict[str, Any]], task_id: str = task_id) -> None:
                for task in tasks:
                    if task["id"] == task_id:
                        task["status"] = "COMPLETED"
                        return

            _naive_update(path, lock_path, complete)
            with guard:
                done[0] += 1

    elapsed = time_threads(agent, [(f"a{i}",) for i in range(agents)])
    assert done[0] == per_agent * agents
    return done[0] / elapsed


def measure(backend: str, sizes: list[int], cycles: int, naive_cycles: int, agents: int) -> dict[str, Any]:
    figures: dict[str, Any] = {"backend": backend, "agents": agents}
    with tempfile.TemporaryDirectory(prefix="greenroom-bench-") as tmp:
        base = Path(tmp)
        (base / "naive").mkdir()
        figures["naive_10k"] = _naive_cycles(base / "naive", 10_000, naive_cycles, agents)
        scale: dict[int, float] = {}
        for size in sorted({10_000, *sizes}):
            data_dir = base / f"g{size}"
            data_dir.mkdir()
            _seed(data_dir, max(size, cycles))
            scale[size] = anyio.run(_greenroom_cycles, data_dir, cycles, agents, backend=backend)
        figures["greenroom_10k"] = scale[10_000]
        figures["ratio_vs_naive"] = scale[10_000] / figures["naive_10k"]
        figures["per_claim_us"] = {str(size): 1e6 / rate for size, rate in scale.items()}
        costs = [1e6 / scale[size] for size in sizes]
        figures["scaling_ratio"] = max(costs) / min(costs)
    return figures


def format_table(figures: dict[str, Any]) -> str:
    lines = [
        f"task graph on {figures['backend']}, {figures['agents']} concurrent agents, "
        "claim+complete cycles (durable)",
        f"  naive lock-read-rewrite, 10k tasks: {figures['naive_10k']:>10.0f} cycles/s",
        f"  greenroom supervisor,   10k tasks: {figures['greenroom_10k']:>10.0f} cycles/s   "
        f"ratio {figures['ratio_vs_naive']:.1f}x (target >= {TARGET_RATIO:.0f}x)",
        "  greenroom cost per cycle by graph size:",
    ]
    for size, cost in figures["per_claim_us"].items():
        lines.append(f"    {int(size):>9,} tasks: {cost:8.1f} us")
    lines.append(
        f"  largest / smallest cost: {figures['scaling_ratio']:.2f}x (target <= {TARGET_SCALING:.0f}x)"
    )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser, positive_int: Any) -> None:
    """This suite's own options (the CLI adds ``--backend`` and ``--json`` to every suite)."""
    parser.add_argument(
        "--sizes", default="1000,10000,100000,1000000", help="graph sizes to time (comma-separated)"
    )
    parser.add_argument("--cycles", type=positive_int, default=5000, help="greenroom cycles per size")
    parser.add_argument("--naive-cycles", type=positive_int, default=200, help="baseline cycles")
    parser.add_argument("--agents", type=positive_int, default=AGENTS)
    parser.add_argument(
        "--store", metavar="postgresql[://...]",
        help="on PostgreSQL instead: 'postgresql' starts an embedded server; a URL uses yours",
    )  # fmt: skip
    parser.add_argument(
        "--processes", default="1,2,4", help="with --store: daemon processes to time (comma-separated)"
    )
    parser.add_argument(
        "--kills", type=positive_int, default=None, metavar="N",
        help="with --store: also drain the jobs while a daemon process is SIGKILLed N times and "
        "restarted at once; count the tasks run twice and any lost",
    )  # fmt: skip
    parser.add_argument(
        "--kill-processes", type=positive_int, default=2, metavar="P", help="with --kills: daemon processes"
    )
    parser.add_argument(
        "--kill-interval", type=float, default=0.3, metavar="SECONDS",
        help="with --kills: seconds between kills (each after the last restart)",
    )  # fmt: skip
    parser.add_argument(
        "--peers", nargs="?", const="", default=None, metavar="PYTHON",
        help="with --store: drain the same jobs with PgQueuer and Procrastinate too (installed in a venv "
        "of their own on first use, or the given interpreter that has them)",
    )  # fmt: skip


def main(args: argparse.Namespace) -> int:
    from greenroom._errors import InvalidInput as CommandError

    if args.peers is not None and args.store is None:
        raise CommandError("--peers needs --store postgresql (the peers are PostgreSQL job queues)")
    if args.kills is not None and args.store is None:
        raise CommandError("--kills needs --store postgresql (daemon processes share the graph there)")
    if not 0 < args.kill_interval <= 60:
        raise CommandError(f"--kill-interval must be seconds in (0, 60] (got {args.kill_interval!r})")
    if args.store is not None:
        from . import _pg_graph

        if not args.store.startswith("postgres"):
            raise CommandError(
                f"--store must be 'postgresql' or a postgresql:// URL (got {args.store!r:.80})"
            )
        try:
            processes = [int(part) for part in args.processes.split(",")]
            if not processes or min(processes) < 1 or max(processes) > 64:
                raise ValueError
        except ValueError:
            raise CommandError(
                f"--processes must be whole numbers 1-64, comma-separated (got {args.processes!r})"
            ) from None
        return report_per_backend(
            args.backend,
            args.json,
            lambda b: _pg_graph.measure(
                args.store,
                b,
                processes,
                args.agents,
                max(args.cycles, 2000),
                args.peers,
                kills=args.kills or 0,
                kill_processes=args.kill_processes,
                kill_interval=args.kill_interval,
            ),
            _pg_graph.format_table,
        )

    try:
        sizes = [int(part) for part in args.sizes.split(",")]
        if not sizes or min(sizes) < 1:
            raise ValueError
    except ValueError:
        raise CommandError(
            f"--sizes must be whole numbers >= 1, comma-separated (got {args.sizes!r})"
        ) from None
    return report_per_backend(
        args.backend,
        args.json,
        lambda b: measure(b, sizes, args.cycles, args.naive_cycles, args.agents),
        format_table,
    )
