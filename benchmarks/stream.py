"""Streaming benchmark: ``python -m benchmarks stream``.

Against a chat-completions server in its own process (``_stream_server``), in this one:

1. **Client CPU per streamed token**: the same replies of ``--tokens`` words read by
   greenroom's client streamed, by greenroom's client whole, and by the ``openai`` SDK's
   own stream (``chat.completions.create(stream=True)``, the reference), at each
   ``--concurrency``; the server answers at once, so the process's CPU is the client's.
   Ratios: greenroom streamed / SDK streamed, greenroom streamed / greenroom whole. And
   the network's floor (``_read_floor``): a bare asyncio protocol that only reads the same
   answers — the server writes a segment per token, so a streamed reply costs even it
   many reads where a whole one costs one; greenroom's own cost per token is its CPU
   over that floor.
2. **Chat time to first token**: ``--conversations`` users at once, each sending
   ``--rounds`` messages ``--think`` seconds apart through the assistant
   (``Assistant.say_streamed``: the runner, its request actors, the engine, the store)
   against a model whose first token takes 50 ms and each next one 20 ms: how long after
   the request the first piece of the reply reached the caller, less the model's own 50 ms.
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio

from .chat import server_process

HELP = "streamed model calls: client CPU per token vs the openai SDK, chat time to first token"


@contextmanager
def stream_server(tokens: int, first_ms: float, token_ms: float) -> Iterator[str]:
    """The streaming chat-completions server in its own process; yields its base URL."""
    with server_process("benchmarks._stream_server", str(tokens), str(first_ms), str(token_ms)) as url:
        yield url


async def _cpu_of(calls: int, concurrency: int, one: Callable[[], Awaitable[int]]) -> tuple[float, int]:
    """CPU seconds of ``calls`` calls of ``one``, ``concurrency`` at a time; tokens read."""
    tokens = 0
    left = calls

    async def worker() -> None:
        nonlocal tokens, left
        while left > 0:
            left -= 1
            got = await one()
            tokens += got

    for _ in range(min(concurrency, 20)):  # warm: connections open, code paths taken
        await one()
    gc.collect()
    started = time.process_time()
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)
    return time.process_time() - started, tokens


async def client_cpu(url: str, concurrency: int, calls: int) -> dict[str, Any]:
    import openai

    from greenroom.llm import OpenAIChatModel
    from greenroom.messages import ChatMessage, ChatRequest

    request = ChatRequest((ChatMessage("user", "tell me"),))
    figures: dict[str, Any] = {"concurrency": concurrency, "calls": calls}
    async with OpenAIChatModel(
        "bench", base_url=url, max_in_flight=max(concurrency, 1), max_retries=0
    ) as model:

        async def streamed() -> int:
            count = 0
            async with model.stream(request) as stream:
                async for delta in stream:
                    count += bool(delta.text)
            return count

        async def whole() -> int:
            reply = await model.chat(request)
            return reply.usage.completion_tokens

        for name, one in (("greenroom_stream", streamed), ("greenroom_whole", whole)):
            cpu, tokens = await _cpu_of(calls, concurrency, one)
            figures[name] = {
                "cpu_s": round(cpu, 4),
                "tokens": tokens,
                "us_per_token": round(cpu / tokens * 1e6, 3),
            }
    sdk = openai.AsyncOpenAI(base_url=url, api_key="none", max_retries=0)
    try:

        async def sdk_stream() -> int:
            count = 0
            stream = await sdk.chat.completions.create(
                model="bench", messages=[{"role": "user", "content": "tell me"}], stream=True,
                stream_options={"include_usage": True},
            )  # fmt: skip
            async with stream:
                async for chunk in stream:
                    count += bool(chunk.choices and chunk.choices[0].delta.content)
            return count

        cpu, tokens = await _cpu_of(calls, concurrency, sdk_stream)
        figures["sdk_stream"] = {
            "cpu_s": round(cpu, 4),
            "tokens": tokens,
            "us_per_token": round(cpu / tokens * 1e6, 3),
        }
    finally:
        await sdk.close()
    ours, theirs = figures["greenroom_stream"]["us_per_token"], figures["sdk_stream"]["us_per_token"]
    figures["stream_vs_sdk"] = round(ours / theirs, 3)
    figures["stream_vs_whole"] = round(ours / figures["greenroom_whole"]["us_per_token"], 3)
    return figures


async def chat_first_token(
    url: str, conversations: int, first_ms: float, think: float, rounds: int
) -> dict[str, Any]:
    """Time to the first piece of each streamed chat reply, less the model's own first
    token: ``conversations`` users at once, each sending ``rounds`` messages with
    ``think`` seconds between a reply and its next message (starts spread over the first
    ``think`` seconds), after one served message each (their conversations open)."""
    from greenroom.chat import AgentEngineConfig, ReplyDelta, open_assistant
    from greenroom.llm import OpenAIChatModel

    waits: list[float] = []
    async with OpenAIChatModel("bench", base_url=url, max_in_flight=conversations, max_retries=0) as model:
        with tempfile.TemporaryDirectory() as data_dir:
            config = AgentEngineConfig(timeout_seconds=300, include_history_messages=4)
            async with open_assistant(data_dir, model=model, config=config, timeout=300) as assistant:
                ids = [await assistant.runner.new_conversation(f"u{n}") for n in range(conversations)]

                async def say(n: int) -> float:
                    started = anyio.current_time()
                    first: float | None = None
                    async with assistant.say_streamed(f"u{n}", ids[n], "hello there") as events:
                        async for event in events:
                            if first is None and isinstance(event, ReplyDelta):
                                first = anyio.current_time() - started
                    assert first is not None
                    return first

                async with anyio.create_task_group() as tg:  # each served once
                    for n in range(conversations):
                        tg.start_soon(say, n)

                async def user(n: int) -> None:
                    await anyio.sleep(think * n / conversations)
                    for _ in range(rounds):
                        waits.append(await say(n))
                        await anyio.sleep(think)

                started = time.process_time()
                async with anyio.create_task_group() as tg:
                    for n in range(conversations):
                        tg.start_soon(user, n)
                cpu = time.process_time() - started
    over = sorted((wait - first_ms / 1000) * 1000 for wait in waits)
    return {
        "conversations": conversations,
        "requests": len(waits),
        "think_s": think,
        "model_first_token_ms": first_ms,
        "over_p50_ms": round(over[len(over) // 2], 2),
        "over_p99_ms": round(over[min(len(over) - 1, int(len(over) * 0.99))], 2),
        "over_max_ms": round(over[-1], 2),
        "cpu_ms_per_request": round(cpu / len(waits) * 1000, 3),
    }


def measure(
    backend: str,
    concurrency: list[int],
    calls: int,
    tokens: int,
    conversations: int,
    think: float = 2.0,
    rounds: int = 3,
) -> dict[str, Any]:
    results: dict[str, Any] = {"backend": backend, "tokens": tokens, "cpu": []}
    from ._read_floor import floor

    with stream_server(tokens, 0, 0) as url:
        for level in concurrency:
            row = anyio.run(client_cpu, url, level, max(calls, level * 2), backend=backend)
            row["floor"] = bare = floor(url, level, max(calls, level * 2))
            ours = row["greenroom_stream"]["us_per_token"] * tokens
            row["over_floor_us_per_token"] = round((ours - bare["stream_us_per_reply"]) / tokens, 3)
            results["cpu"].append(row)
    with stream_server(20, 50, 20) as url:
        results["chat"] = anyio.run(
            chat_first_token, url, conversations, 50.0, think, rounds, backend=backend
        )
    return results


def format_table(results: dict[str, Any]) -> str:
    lines = [f"stream [{results['backend']}] replies of {results['tokens']} tokens; CPU µs per token:"]
    for row in results["cpu"]:
        lines.append(
            f"  C={row['concurrency']:>5}: greenroom streamed {row['greenroom_stream']['us_per_token']:8.2f}"
            f" · whole {row['greenroom_whole']['us_per_token']:8.2f} · openai SDK stream "
            f"{row['sdk_stream']['us_per_token']:8.2f} · streamed/SDK {row['stream_vs_sdk']:.3f}"
            f" · streamed/whole {row['stream_vs_whole']:.3f}"
        )
        bare = row["floor"]
        lines.append(
            f"          network floor (a bare protocol only reading): streamed "
            f"{bare['stream_us_per_reply']:.1f} µs/reply in {bare['stream_reads_per_reply']:.1f} reads, "
            f"whole {bare['whole_us_per_reply']:.1f} in {bare['whole_reads_per_reply']:.1f} "
            f"(streamed/whole {bare['stream_vs_whole']:.2f}); greenroom streamed over the floor "
            f"{row['over_floor_us_per_token']:.2f} µs/token"
        )
    chat = results["chat"]
    lines.append(
        f"  chat, {chat['conversations']} streamed conversations ({chat['requests']} requests, "
        f"{chat['think_s']:g} s between a reply and the next message), model first token "
        f"{chat['model_first_token_ms']:.0f} ms: first piece at +{chat['over_p50_ms']:.2f} ms p50, "
        f"+{chat['over_p99_ms']:.2f} ms p99 (max +{chat['over_max_ms']:.2f}); "
        f"{chat['cpu_ms_per_request']:.2f} ms CPU per request"
    )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser, positive_int: Any) -> None:
    parser.add_argument("--concurrency", type=positive_int, action="append", help="default 1 and 1000")
    parser.add_argument("--calls", type=positive_int, default=400, help="replies per client and level")
    parser.add_argument("--tokens", type=positive_int, default=64, help="words per reply")
    parser.add_argument("--conversations", type=positive_int, default=1000, help="chat users at once")
    parser.add_argument(
        "--think", type=float, default=2.0, help="seconds between a reply and the next message"
    )
    parser.add_argument("--rounds", type=positive_int, default=3, help="messages per user measured")


def main(args: argparse.Namespace) -> int:
    from . import report_per_backend

    concurrency = args.concurrency or [1, 1000]
    return report_per_backend(
        args.backend,
        args.json,
        lambda b: measure(
            b, concurrency, args.calls, args.tokens, args.conversations, args.think, args.rounds
        ),
        format_table,
    )
