"""Chat benchmark: C concurrent conversations against an OpenAI-compatible server.

Each conversation is one user message → one ``add_task`` tool call → a final text, two
model calls in all, against a chat-completions server on 127.0.0.1 in a separate process
(``_chat_server``) answering after ``latency`` ms. Two clients in this process, measured
in the same run, alternating:

- **plain**: the same conversation as a plain ``openai.AsyncOpenAI`` loop with an
  in-memory tool (one shared client: no actors, no MCP, no store, no logs);
- **greenroom**: ``AgentRunner.run`` — a request actor per conversation, the engine, the
  tool over MCP, the conversation and the task in SQLite (fsynced), the decision and tool
  logs through the log actor — through ``OpenAIChatModel(max_in_flight=...)``.

Figures per client, concurrency and latency: conversations/s, p50 and p99 latency of a
conversation, and this process's CPU time per conversation (``time.process_time``: the
server's CPU is not in it). Both clients are warmed up first and the heap then frozen
and the collector's thresholds raised (``freeze_startup_heap``, as ``greenroom run`` does
once it serves), and garbage is collected
before each measured run: a full collection of the libraries' ~150,000 objects (~100 ms)
landing in a 50-conversation window at C=1 decided that figure otherwise.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

import anyio

from greenroom._malloc import freeze_startup_heap

HELP = "chat runner: conversations/s, latency and CPU per conversation vs a plain openai loop"

_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add_task",
            "description": "Create a new task for the user.",
            "parameters": {
                "type": "object",
                "properties": {"title": {"type": "string"}},
                "required": ["title"],
            },
        },
    }
]


@contextmanager
def model_server(latency_ms: float) -> Iterator[str]:
    """The chat-completions server in its own process; yields its base URL."""
    with server_process("benchmarks._chat_server", str(latency_ms)) as url:
        yield url


@contextmanager
def server_process(module: str, *args: str) -> Iterator[str]:
    """A benchmark's model server (``python -m MODULE ARGS...``, which prints its port) in
    its own process; yields its base URL, kills it at the end."""
    process = subprocess.Popen([sys.executable, "-m", module, *args], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.kill()
        process.wait(10)
        if process.stdout is not None:
            process.stdout.close()


async def _timed(
    conversations: int, one: Callable[[int], Awaitable[None]], sequential: bool
) -> dict[str, Any]:
    latencies: list[float] = []

    async def run(index: int) -> None:
        started = time.perf_counter()
        await one(index)
        latencies.append(time.perf_counter() - started)

    # The garbage of whatever ran before is collected first, for either client: a full
    # collection (~100 ms with both clients' libraries imported) landing in a window of 50
    # conversations at C=1 would otherwise decide its figure.
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    if sequential:
        for index in range(conversations):
            await run(index)
    else:
        async with anyio.create_task_group() as tg:
            for index in range(conversations):
                tg.start_soon(run, index)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    latencies.sort()
    return {
        "per_second": conversations / wall,
        "p50": latencies[len(latencies) // 2],
        "p99": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))],
        "cpu_per_conversation": cpu / conversations,
    }


async def _plain(base_url: str, conversations: int, sequential: bool) -> dict[str, Any]:
    import openai

    client = openai.AsyncOpenAI(api_key="bench", base_url=base_url, max_retries=0)
    tasks: dict[int, list[str]] = {}

    async def one(index: int) -> None:
        messages: list[dict[str, Any]] = [{"role": "user", "content": f"add errand {index}"}]
        first = await client.chat.completions.create(model="bench", messages=messages, tools=_TOOLS)  # type: ignore[arg-type]
        message = first.choices[0].message
        calls = message.tool_calls or []
        messages.append({"role": "assistant", "content": None, "tool_calls": [c.model_dump() for c in calls]})
        for call in calls:
            arguments = json.loads(call.function.arguments)  # type: ignore[union-attr]
            tasks.setdefault(index, []).append(arguments["title"])
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps({"ok": True})})
        await client.chat.completions.create(model="bench", messages=messages, tools=_TOOLS)  # type: ignore[arg-type]

    try:
        figures = await _timed(conversations, one, sequential)
    finally:
        await client.close()
    assert len(tasks) == conversations
    return figures


async def _greenroom(
    base_url: str, conversations: int, sequential: bool, max_in_flight: int, pools: int = 1
) -> dict[str, Any]:
    from greenroom.chat import AgentContext, open_assistant
    from greenroom.llm import OpenAIChatModel

    model = OpenAIChatModel(
        "bench", base_url=base_url, api_key="bench", max_retries=0, max_in_flight=max_in_flight, pools=pools
    )
    with tempfile.TemporaryDirectory(prefix="greenroom-bench-chat-") as tmp:
        try:
            async with open_assistant(tmp, model=model, timeout=600) as assistant:
                contexts = []
                for index in range(conversations):
                    user = f"user{index}"
                    conversation = await assistant.runner.new_conversation(user)
                    contexts.append(AgentContext.from_request(user, conversation, []))

                async def one(index: int) -> None:
                    result = await assistant.runner.run(contexts[index], f"add errand {index}")
                    assert result.success and len(result.tool_calls) == 1, result

                figures = await _timed(conversations, one, sequential)
                stored = await assistant.store.list_tasks("user0")
                assert [t.title for t in stored] == ["errand 0"]
        finally:
            await model.aclose()
    return figures


async def _http(
    base_url: str, conversations: int, sequential: bool, max_in_flight: int, pools: int = 1
) -> dict[str, Any]:
    """The same conversations through the daemon's HTTP API (``POST /v1/chat``, one
    bearer token per user), the clients in another process: this process's CPU is the
    server's alone (API + runner), so its excess over ``greenroom`` is the API's share."""
    from greenroom.chat import open_assistant
    from greenroom.llm import OpenAIChatModel
    from greenroom.service import Principal, TokenStore, create_app
    from greenroom.service._app import ServiceParts
    from greenroom.service._serve import bind, serve
    from greenroom.service._tokens import new_token
    from greenroom.supervisor import SupervisorActor

    model = OpenAIChatModel(
        "bench", base_url=base_url, api_key="bench", max_retries=0, max_in_flight=max_in_flight, pools=pools
    )
    with tempfile.TemporaryDirectory(prefix="greenroom-bench-http-") as tmp:
        try:
            async with open_assistant(tmp, model=model, timeout=600) as assistant:
                backend = assistant.backend
                supervisor = await assistant.system.spawn(
                    lambda: SupervisorActor(backend.task_store()), name="supervisor"
                )
                extra = []
                items = []
                for index in range(conversations):
                    user = f"user{index}"
                    token, token_id = new_token()
                    extra.append((token, Principal(user, "chat", token_id)))
                    conversation = await assistant.runner.new_conversation(user)
                    body = {"message": f"add errand {index}", "conversation_id": conversation}
                    items.append({"token": token, "path": "/v1/chat", "body": body})
                stop = anyio.Event()
                parts = ServiceParts(
                    supervisor=supervisor,
                    events=lambda after, follow, last: backend.events(after=after, follow=follow, last=last),
                    events_dropped_through=backend.events_dropped_through,
                    tokens=TokenStore(None, extra=extra),
                    status=_no_status,
                    stop=stop.set,
                    chat=assistant.runner,
                )
                sock = bind("127.0.0.1", 0)
                async with anyio.create_task_group() as tg:
                    url = await tg.start(partial(serve, create_app(parts), sock, stop=stop))
                    job = f"{tmp}/job.json"
                    await anyio.Path(job).write_text(
                        json.dumps({"url": url, "sequential": sequential, "items": items})
                    )
                    cpu = time.process_time()
                    done = await anyio.run_process(
                        [sys.executable, "-m", "benchmarks._http_load", job], check=False
                    )
                    if done.returncode != 0:
                        lines = done.stderr.decode(errors="replace").strip().splitlines()
                        said = [line for line in lines if "Error" in line][-3:] or lines[-3:]
                        raise RuntimeError(f"the HTTP load generator failed: {said}")
                    cpu = time.process_time() - cpu
                    stop.set()
                figures: dict[str, Any] = json.loads(done.stdout)
                figures["cpu_per_conversation"] = cpu / conversations
                stored = await assistant.store.list_tasks("user0")
                assert [t.title for t in stored] == ["errand 0"]
                await supervisor.stop()
        finally:
            await model.aclose()
    return figures


async def _no_status() -> Any:
    from greenroom.service import DaemonStatus

    return DaemonStatus(version="bench", pid=os.getpid(), data_dir="", uptime=0.0)


def measure(
    backend: str,
    concurrency: list[int],
    latencies: list[int],
    sequential_count: int,
    max_in_flight: int,
    pools: int = 1,
    http: bool = False,
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    defaults = gc.get_threshold()
    for latency in latencies:
        with model_server(latency) as url:
            if not rows:  # both clients warmed up, then the heap frozen as `greenroom run` does
                anyio.run(_plain, url, 5, True, backend=backend)
                anyio.run(_greenroom, url, 5, True, max_in_flight, pools, backend=backend)
                freeze_startup_heap()
            for count in concurrency:
                sequential = count == 1
                n = sequential_count if sequential else count
                plain = anyio.run(_plain, url, n, sequential, backend=backend)
                mine = anyio.run(_greenroom, url, n, sequential, max_in_flight, pools, backend=backend)
                row = {"latency_ms": latency, "concurrency": count, "plain": plain, "greenroom": mine}
                if http:
                    row["http"] = anyio.run(_http, url, n, sequential, max_in_flight, pools, backend=backend)
                rows.append(row)
    gc.unfreeze()
    gc.set_threshold(*defaults)
    by_key = {(r["latency_ms"], r["concurrency"]): r for r in rows}
    checks = []
    api_share = [
        {
            "latency_ms": row["latency_ms"],
            "concurrency": row["concurrency"],
            "cpu_vs_runner": row["http"]["cpu_per_conversation"] / row["greenroom"]["cpu_per_conversation"],
        }
        for row in rows
        if "http" in row
    ]
    for latency in latencies:
        one = by_key.get((latency, 1))
        big = by_key.get((latency, max(concurrency)))
        if one and big and big is not one:
            checks.append(
                {
                    "latency_ms": latency,
                    "cpu_vs_plain_at_1": one["greenroom"]["cpu_per_conversation"]
                    / one["plain"]["cpu_per_conversation"],
                    "cpu_at_max_vs_own_at_1": big["greenroom"]["cpu_per_conversation"]
                    / one["greenroom"]["cpu_per_conversation"],
                    "throughput_vs_plain_at_max": big["greenroom"]["per_second"] / big["plain"]["per_second"],
                    "p99_over_p50_at_max": big["greenroom"]["p99"] / big["greenroom"]["p50"],
                }
            )
    return {
        "backend": backend,
        "max_in_flight": max_in_flight,
        "pools": pools,
        "rows": rows,
        "checks": checks,
        "api_share": api_share,
    }


def format_table(figures: dict[str, Any]) -> str:
    lines = [
        f"chat runner on {figures['backend']} (OpenAIChatModel max_in_flight={figures['max_in_flight']}, "
        f"pools={figures['pools']}; "
        "one message -> one tool call -> a text, per conversation)",
        "  latency  C      client      conv/s    p50 ms    p99 ms   CPU ms/conv",
    ]
    for row in figures["rows"]:
        for name in ("plain", "greenroom", "http"):
            if name not in row:
                continue
            f = row[name]
            lines.append(
                f"  {row['latency_ms']:>4} ms {row['concurrency']:>5}  {name:<10} {f['per_second']:>8.1f} "
                f"{f['p50'] * 1000:>9.1f} {f['p99'] * 1000:>9.1f} {f['cpu_per_conversation'] * 1000:>12.2f}"
            )
    for check in figures["checks"]:
        lines.append(
            f"  at {check['latency_ms']} ms: CPU/conv vs plain at C=1 {check['cpu_vs_plain_at_1']:.2f}x "
            "(target <= 2.0); "
            f"CPU at max C vs own at 1 {check['cpu_at_max_vs_own_at_1']:.2f}x (<= 1.3); "
            f"conv/s vs plain at max C {check['throughput_vs_plain_at_max']:.2f}x (>= 1.5); "
            f"p99/p50 {check['p99_over_p50_at_max']:.2f} (<= 1.5 at 50 ms)"
        )
    for share in figures.get("api_share", []):
        lines.append(
            f"  API at {share['latency_ms']} ms, C={share['concurrency']}: server CPU/conv through HTTP "
            f"vs the in-process runner {share['cpu_vs_runner']:.2f}x (target <= 1.25)"
        )
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser, positive_int: Any) -> None:
    """This suite's own options (the CLI adds ``--backend`` and ``--json`` to every suite)."""
    parser.add_argument(
        "--concurrency",
        type=positive_int,
        action="append",
        help="concurrent conversations (default 1, 100, 1000)",
    )
    parser.add_argument("--latency-ms", type=int, action="append", dest="latencies", help="default 0 and 50")
    parser.add_argument("--sequential", type=positive_int, default=50, help="conversations measured at C=1")
    parser.add_argument(
        "--max-in-flight", type=positive_int, default=64, help="model calls in flight at once"
    )
    parser.add_argument("--pools", type=positive_int, default=8, help="HTTP connection pools they share")
    parser.add_argument(
        "--http", action="store_true", help="also through the daemon's HTTP API (clients in another process)"
    )


def main(args: argparse.Namespace) -> int:
    from . import report_per_backend

    concurrency = args.concurrency or [1, 100, 1000]
    latencies = args.latencies or [0, 50]
    return report_per_backend(
        args.backend,
        args.json,
        lambda b: measure(
            b, concurrency, latencies, args.sequential, args.max_in_flight, args.pools, args.http
        ),
        format_table,
    )
