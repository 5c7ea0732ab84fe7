"""A load generator in its own process (so its CPU is not charged to the server):
``python -m benchmarks._http_load JOB.json`` posts each job item to the API with
keep-alive connections, all at once or one after another, and prints the figures as JSON.

``JOB.json``: ``{"url", "sequential": bool, "items": [{"token", "path", "body"}]}``.
Each answer must be 2xx; the first that is not stops the run with its text.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import anyio
import httpx2


async def run(job: dict[str, Any]) -> dict[str, Any]:
    items = job["items"]
    size = 1 if job["sequential"] else len(items)
    limits = httpx2.Limits(max_connections=size, max_keepalive_connections=size)
    latencies: list[float] = []
    async with httpx2.AsyncClient(base_url=job["url"], limits=limits, timeout=600) as client:

        async def one(item: dict[str, Any]) -> None:
            started = time.perf_counter()
            response = await client.post(
                item["path"],
                content=json.dumps(item["body"]).encode(),
                headers={"Authorization": f"Bearer {item['token']}", "Content-Type": "application/json"},
            )
            if response.status_code >= 300 or not response.json().get("success", True):
                raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")
            latencies.append(time.perf_counter() - started)

        wall = time.perf_counter()
        if job["sequential"]:
            for item in items:
                await one(item)
        else:
            async with anyio.create_task_group() as tg:
                for item in items:
                    tg.start_soon(one, item)
        wall = time.perf_counter() - wall
    latencies.sort()
    return {
        "per_second": len(items) / wall,
        "p50": latencies[len(latencies) // 2],
        "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
    }


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as file:
        figures = anyio.run(run, json.load(file))
    print(json.dumps(figures))
