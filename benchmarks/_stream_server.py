"""A chat-completions server that streams, for the streaming benchmark.

Run in its own process (``python -m benchmarks._stream_server TOKENS FIRST_MS
TOKEN_MS``): it prints its port, then answers ``POST /v1/chat/completions`` over HTTP/1.1
keep-alive with a reply of ``TOKENS`` words — whole, or, when asked to ``stream``, as
Server-Sent Events (one chunk a word, the usage chunk, ``[DONE]``), its first word after
``FIRST_MS`` and each next one ``TOKEN_MS`` later (0: at once). Written directly on
asyncio streams (a benchmark baseline may be backend code), so that the server costs
little and the measured process is only the client.
"""

from __future__ import annotations

import asyncio
import json
import sys

from ._chat_server import read_request


def _chunk(delta: dict[str, object], finish: str | None = None) -> bytes:
    data = json.dumps(
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "bench",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
    ).encode()
    event = b"data: " + data + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(event), event)


async def _serve(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, tokens: int, first: float, each: float
) -> None:
    words = [f"w{n} " for n in range(tokens)]
    usage = {"prompt_tokens": 20, "completion_tokens": tokens, "total_tokens": 20 + tokens}
    pieces = [_chunk({"content": word}) for word in words]
    tail = _chunk({}, "stop") + b"%x\r\n%s\r\n" % (
        len(b"data: " + json.dumps({"id": "c", "choices": [], "usage": usage}).encode() + b"\n\n"),
        b"data: " + json.dumps({"id": "c", "choices": [], "usage": usage}).encode() + b"\n\n",
    )
    done = b"data: [DONE]\n\n"
    tail += b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done)
    whole = json.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "bench",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "".join(words)},
                }
            ],
            "usage": usage,
        }
    ).encode()
    try:
        while True:
            body = await read_request(reader)
            if first:
                await asyncio.sleep(first)
            if not body.get("stream"):
                if each:
                    await asyncio.sleep(each * (tokens - 1))
                writer.write(
                    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(whole)}\r\n\r\n".encode()
                    + whole
                )
                await writer.drain()
                continue
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
                + _chunk({"role": "assistant", "content": ""})
            )
            for index, piece in enumerate(pieces):
                if each and index:
                    await asyncio.sleep(each)
                writer.write(piece)
                if each:
                    await writer.drain()
            writer.write(tail)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(tokens: int, first_ms: float, token_ms: float) -> None:
    server = await asyncio.start_server(
        lambda r, w: _serve(r, w, tokens, first_ms / 1000, token_ms / 1000),
        "127.0.0.1", 0, backlog=4096, limit=1 << 20,
    )  # fmt: skip
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])))
