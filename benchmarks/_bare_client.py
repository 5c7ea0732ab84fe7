"""The baseline client of the load benchmark: a bare asyncio + aiohttp loop, the least a
load generator can do. ``python _bare_client.py URL CONCURRENCY REQUESTS`` (in a venv with
aiohttp) runs a closed loop of streamed chat requests and prints, as JSON, the TTFT of
each (ms, from just before the request to its first content event)."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import aiohttp


async def main(url: str, concurrency: int, requests: int) -> None:
    body = {"model": "bench", "stream": True, "max_tokens": 100,
            "messages": [{"role": "user", "content": "w " * 100}]}  # fmt: skip
    left = requests
    ttfts: list[float] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def user() -> None:
            nonlocal left
            while left > 0:
                left -= 1
                start = time.perf_counter()
                first = None
                async with session.post(url + "/v1/chat/completions", json=body) as response:
                    async for line in response.content:
                        if first is None and line.startswith(b"data: {") and b'"content"' in line:
                            first = time.perf_counter()
                if first is not None:
                    ttfts.append((first - start) * 1000)

        await asyncio.gather(*(user() for _ in range(concurrency)))
    print(json.dumps({"ttft_ms": ttfts}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))
