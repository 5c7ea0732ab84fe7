"""A fake streaming chat-completions server that keeps the truth: when it sent each reply.

``python benchmarks/_fake_llm.py --records DIR [--workers N] [--pieces 20] [--first-ms 100]
[--each-ms 20]`` prints its port, then answers ``POST .../chat/completions`` (HTTP/1.1
keep-alive) with ``--pieces`` words as Server-Sent Events: the first after ``--first-ms``
(sent with the response's head, so every client's "first token" is the same instant), each
next one ``--each-ms`` later, then the usage chunk and ``[DONE]``; a request that does not
ask to stream gets the whole reply after the same time. A request that offers tools and
ends with the user's message is answered (after ``--first-ms``) by a call of its first
tool, so an agent's session runs its tools and asks again. ``GET`` answers a model list (the
readiness probes of some tools).

``--workers`` processes share one listening socket (the kernel spreads connections), so
the server is never what is measured; on SIGTERM each writes ``DIR/worker-<pid>.json``:
``requests`` as ``[received, first_sent, last_sent]`` (``time.monotonic()``, one clock for
every process of the machine: received when the request's body had arrived, sent when the
bytes went to the socket) and ``cpu_s``, the worker's own CPU.

asyncio directly: this is a benchmark's instrument, not greenroom code, and runs beside
whatever client is measured (AIPerf, GuideLLM, greenroom, a bare aiohttp loop).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any


def _chunk(payload: dict[str, object]) -> bytes:
    event = b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


def _delta(delta: dict[str, object], finish: str | None = None) -> dict[str, object]:
    return {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "bench",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}  # fmt: skip


class Replies:
    def __init__(self, pieces: int, first: float, each: float) -> None:
        self.first, self.each = first, each
        words = [f"w{n} " for n in range(pieces)]
        self.usage = {"prompt_tokens": 100, "completion_tokens": pieces, "total_tokens": 100 + pieces}
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        self.pieces = [head + _chunk(_delta({"role": "assistant", "content": words[0]}))]
        self.pieces += [_chunk(_delta({"content": word})) for word in words[1:]]
        done = b"data: [DONE]\n\n"
        self.tail = (
            _chunk(_delta({}, "stop"))
            + _chunk({"id": "c", "object": "chat.completion.chunk", "choices": [], "usage": self.usage})
            + b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done)
        )
        body = json.dumps({
            "id": "c", "object": "chat.completion", "created": 0, "model": "bench", "usage": self.usage,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "".join(words)}}],
        }).encode()  # fmt: skip
        self.whole = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
            len(body),
            body,
        )
        call: dict[str, Any] = {"index": 0, "id": "call-1", "type": "function",
                "function": {"name": "", "arguments": '{"query": "w1 w2 w3"}'}}  # fmt: skip
        self.call_head, self.call = head, call
        self.call_tail = _chunk(_delta({}, "tool_calls")) + self.tail[len(_chunk(_delta({}, "stop"))) :]
        models = json.dumps({"object": "list", "data": [{"id": "bench", "object": "model"}]}).encode()
        self.models = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
            len(models),
            models,
        )


async def _serve(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, replies: Replies, records: list[list[float]]
) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            body = json.loads(await reader.readexactly(length)) if length else {}
            if head.startswith(b"GET"):
                writer.write(replies.models)
                await writer.drain()
                continue
            received = time.monotonic()
            await asyncio.sleep(replies.first)
            if not body.get("stream"):
                await asyncio.sleep(replies.each * (len(replies.pieces) - 1))
                writer.write(replies.whole)
                sent = time.monotonic()
                records.append([received, sent, sent])
                await writer.drain()
                continue
            messages = body.get("messages") or [{}]
            if body.get("tools") and messages[-1].get("role") == "user":  # an agent: call a tool first
                call = dict(
                    replies.call,
                    function={**replies.call["function"], "name": body["tools"][0]["function"]["name"]},
                )
                writer.write(replies.call_head + _chunk(_delta({"role": "assistant", "tool_calls": [call]})))
                first = time.monotonic()
                writer.write(replies.call_tail)
                records.append([received, first, first])
                await writer.drain()
                continue
            first = 0.0
            for index, piece in enumerate(replies.pieces):
                if index:
                    await asyncio.sleep(replies.each)
                writer.write(piece)
                if not index:
                    first = time.monotonic()
            writer.write(replies.tail)
            records.append([received, first, time.monotonic()])
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass
    finally:
        writer.close()


def _worker(sock: socket.socket, replies: Replies, out: Path) -> None:
    records: list[list[float]] = []

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        server = await asyncio.start_server(
            lambda r, w: _serve(r, w, replies, records), sock=sock, backlog=4096, limit=1 << 20
        )
        async with server:
            await stop.wait()
            # what was in flight when told to stop is cut: nothing to report about it
            asyncio.get_running_loop().set_exception_handler(lambda loop, context: None)

    asyncio.run(main())
    used = resource.getrusage(resource.RUSAGE_SELF)
    text = json.dumps({"requests": records, "cpu_s": used.ru_utime + used.ru_stime})
    (out / f"worker-{os.getpid()}.json").write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pieces", type=int, default=20)
    parser.add_argument("--first-ms", type=float, default=100.0)
    parser.add_argument("--each-ms", type=float, default=20.0)
    args = parser.parse_args()
    args.records.mkdir(parents=True, exist_ok=True)
    replies = Replies(args.pieces, args.first_ms / 1000, args.each_ms / 1000)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(4096)
    sock.setblocking(False)
    children = []
    for _ in range(args.workers):
        pid = os.fork()
        if pid == 0:
            try:
                _worker(sock, replies, args.records)
            finally:
                os._exit(0)
        children.append(pid)
    print(sock.getsockname()[1], flush=True)

    def stop(*_: object) -> None:
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:  # already gone
                pass

    signal.signal(signal.SIGTERM, stop)
    for pid in children:
        while True:
            try:
                os.waitpid(pid, 0)
                break
            except InterruptedError:
                continue
    sys.exit(0)


if __name__ == "__main__":
    main()
