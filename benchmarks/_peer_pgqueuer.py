"""PgQueuer as a peer of the PostgreSQL graph benchmark, run with the peers' own Python
(``python -m benchmarks graph --store postgresql --peers`` installs it in a venv of its own):

- ``python -m benchmarks._peer_pgqueuer seed URL JOBS``: its schema, then ``JOBS``
  no-op jobs enqueued in batches;
- ``python -m benchmarks._peer_pgqueuer work URL BATCH``: one worker process — prints
  ``ready``, waits for a line on stdin, drains the queue (``mode=drain``) with its own
  defaults but ``batch_size``, prints ``{"started", "finished", "cycles", "cpu"}`` as JSON.

asyncio only (asyncpg): a peer measured in its own process, never imported by greenroom.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any


async def seed(url: str, jobs: int) -> None:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries

    connection = await asyncpg.connect(url)
    try:
        queries = Queries(AsyncpgDriver(connection))
        await queries.install()
        for start in range(0, jobs, 1000):
            count = min(1000, jobs - start)
            await queries.enqueue(["work"] * count, [None] * count, [0] * count)
    finally:
        await connection.close()


async def work(url: str, batch: int) -> dict[str, Any]:
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries, QueueManager
    from pgqueuer.types import QueueExecutionMode

    connection = await asyncpg.connect(url)
    done = 0
    manager = QueueManager(Queries(AsyncpgDriver(connection)))

    @manager.entrypoint("work")
    async def job(_: Any) -> None:
        nonlocal done
        done += 1

    print("ready", flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    started, cpu = time.time(), time.process_time()
    await manager.run(mode=QueueExecutionMode.drain, batch_size=batch)
    finished, cpu = time.time(), time.process_time() - cpu
    await connection.close()
    return {"started": started, "finished": finished, "cycles": done, "cpu": cpu}


if __name__ == "__main__":
    command, url, number = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if command == "seed":
        asyncio.run(seed(url, number))
    else:
        print(json.dumps(asyncio.run(work(url, number))), flush=True)
