"""A minimal OpenAI-compatible chat-completions server for the chat benchmark.

Run in its own process (``python -m benchmarks._chat_server LATENCY_MS``): it prints
its port, then answers ``POST /v1/chat/completions`` over HTTP/1.1 keep-alive. A request
whose last message is a tool result gets a text answer; any other gets one ``add_task``
tool call. Every answer waits ``LATENCY_MS`` first (a model's latency). Written directly
on asyncio streams (a benchmark baseline may be backend code), so that the server costs
little and the measured process is only the client.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sys

_ids = itertools.count(1)


def _answer(body: dict[str, object]) -> bytes:
    messages = body.get("messages")
    last = messages[-1] if isinstance(messages, list) and messages else {}
    n = next(_ids)
    if isinstance(last, dict) and last.get("role") == "tool":
        message: dict[str, object] = {"role": "assistant", "content": "Added it."}
        finish = "stop"
    else:
        text = last.get("content", "") if isinstance(last, dict) else ""
        title = str(text).removeprefix("add ").strip() or "something"
        arguments = json.dumps({"title": title})
        call = {
            "id": f"call_{n}",
            "type": "function",
            "function": {"name": "add_task", "arguments": arguments},
        }
        message = {"role": "assistant", "content": None, "tool_calls": [call]}
        finish = "tool_calls"
    return json.dumps(
        {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 0,
            "model": "bench",
            "choices": [{"index": 0, "finish_reason": finish, "message": message}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 5, "total_tokens": 25},
        }
    ).encode()


async def read_request(reader: asyncio.StreamReader) -> dict[str, object]:
    """The JSON body of the next request on a keep-alive connection (its head skipped)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    body: dict[str, object] = json.loads(await reader.readexactly(length)) if length else {}
    return body


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, latency: float) -> None:
    try:
        while True:
            body = await read_request(reader)
            if latency:
                await asyncio.sleep(latency)
            payload = _answer(body)
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: keep-alive\r\n"
                + f"Content-Length: {len(payload)}\r\n\r\n".encode()
                + payload
            )
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main(latency_ms: float) -> None:
    server = await asyncio.start_server(
        lambda r, w: _serve(r, w, latency_ms / 1000), "127.0.0.1", 0, backlog=4096, limit=1 << 20
    )
    port = server.sockets[0].getsockname()[1]
    print(port, flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(float(sys.argv[1]) if len(sys.argv) > 1 else 0.0))
