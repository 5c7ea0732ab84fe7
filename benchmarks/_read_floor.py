"""The network's floor for the streaming benchmark: what it costs a process only to read
the server's answers — a bare ``asyncio.Protocol`` per connection that sends each request
and counts the answer's bytes to its end, nothing parsed, no task woken per read. A
baseline may be backend code; it runs in its own ``asyncio.run``.

The streaming server writes a segment per token (as a model server does), so a streamed
reply costs this floor a network read per few tokens, and a whole reply one read: the
ratio of the two floors bounds how close any client's streamed/whole ratio can come.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
import urllib.parse

_BODY = json.dumps({"model": "bench", "messages": [{"role": "user", "content": "tell me"}]})


class _Reader(asyncio.Protocol):
    def __init__(self) -> None:
        self.done: asyncio.Future[None] | None = None
        self.ends = (b"0\r\n\r\n", b"}")  # a chunked body's end, a whole JSON body's end
        self.reads = 0

    def data_received(self, data: bytes) -> None:
        self.reads += 1
        if data.endswith(self.ends) and self.done is not None and not self.done.done():
            self.done.set_result(None)


async def _measure(url: str, concurrency: int, calls: int, stream: bool) -> tuple[float, float]:
    parts = urllib.parse.urlsplit(url)
    body = json.dumps(dict(json.loads(_BODY), stream=stream)).encode()
    request = b"POST %s/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n" % (
        parts.path.encode()
    ) + b"content-length: %d\r\n\r\n%s" % (len(body), body)
    loop = asyncio.get_running_loop()
    readers = []
    for _ in range(concurrency):
        transport, reader = await loop.create_connection(_Reader, parts.hostname or "", parts.port or 80)
        readers.append((transport, reader))
    left = calls

    async def worker(transport: asyncio.Transport, reader: _Reader) -> None:
        nonlocal left
        while left > 0:
            left -= 1
            reader.done = loop.create_future()
            transport.write(request)
            await reader.done

    for transport, reader in readers:  # warm
        reader.done = loop.create_future()
        transport.write(request)
        await reader.done
    gc.collect()
    left = calls
    for _, reader in readers:
        reader.reads = 0
    started = time.process_time()
    await asyncio.gather(*(worker(t, r) for t, r in readers))
    cpu = time.process_time() - started
    reads = sum(reader.reads for _, reader in readers)
    for transport, _ in readers:
        transport.close()
    return cpu / calls, reads / calls


def floor(url: str, concurrency: int, calls: int) -> dict[str, float]:
    """CPU µs per reply and network reads per reply, streamed and whole, at ``concurrency``."""
    figures: dict[str, float] = {}
    for name, stream in (("stream", True), ("whole", False)):
        cpu, reads = asyncio.run(_measure(url, concurrency, calls, stream))
        figures[f"{name}_us_per_reply"] = round(cpu * 1e6, 2)
        figures[f"{name}_reads_per_reply"] = round(reads, 2)
    figures["stream_vs_whole"] = round(figures["stream_us_per_reply"] / figures["whole_us_per_reply"], 3)
    return figures
