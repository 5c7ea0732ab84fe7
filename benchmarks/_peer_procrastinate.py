"""Procrastinate as a peer of the PostgreSQL graph benchmark, run with the peers' own
Python (``python -m benchmarks graph --store postgresql --peers`` installs it in a venv of its
own):

- ``python -m benchmarks._peer_procrastinate seed URL JOBS``: its schema, then
  ``JOBS`` no-op jobs deferred in batches;
- ``python -m benchmarks._peer_procrastinate work URL CONCURRENCY``: one worker
  process — prints ``ready``, waits for a line on stdin, runs a worker with
  ``concurrency`` until it has caught up with the queue (``wait=False``), prints
  ``{"started", "finished", "cycles", "cpu"}`` as JSON.

asyncio only (its async connector): a peer measured in its own process, never imported by
greenroom.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any


def _app(url: str) -> Any:
    import procrastinate

    return procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))


async def seed(url: str, jobs: int) -> None:
    app = _app(url)

    @app.task(name="work")
    async def work() -> None:
        pass

    async with app.open_async():
        await app.schema_manager.apply_schema_async()
        for start in range(0, jobs, 1000):
            await work.batch_defer_async(*({} for _ in range(min(1000, jobs - start))))


async def work(url: str, concurrency: int) -> dict[str, Any]:
    app = _app(url)
    done = 0

    @app.task(name="work")
    async def job() -> None:
        nonlocal done
        done += 1

    async with app.open_async():
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        started, cpu = time.time(), time.process_time()
        await app.run_worker_async(concurrency=concurrency, wait=False, install_signal_handlers=False)
        finished, cpu = time.time(), time.process_time() - cpu
    return {"started": started, "finished": finished, "cycles": done, "cpu": cpu}


if __name__ == "__main__":
    command, url, number = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if command == "seed":
        asyncio.run(seed(url, number))
    else:
        print(json.dumps(asyncio.run(work(url, number))), flush=True)
