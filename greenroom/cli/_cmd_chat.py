"""``greenroom chat`` (the task assistant) and ``greenroom mcp serve`` (its tools over MCP)."""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from . import _args


def add_parsers(commands: Any) -> None:
    chat = commands.add_parser("chat", help="talk to the task assistant (offline by default)")
    _args.data_dir(chat)
    chat.add_argument("--user", default="me", help="whose tasks and conversations (default: me)")
    chat.add_argument("--conversation", help="resume this conversation (its id is printed when it starts)")
    chat.add_argument(
        "--message", "-m", action="append", dest="messages", metavar="TEXT",
        help="say this instead of reading standard input (repeatable)",
    )  # fmt: skip
    chat.add_argument(
        "--base-url", help="an OpenAI-compatible server (default: $OPENAI_BASE_URL, else offline)"
    )
    chat.add_argument("--model", dest="model_name", help="the model name there (default: $OPENAI_MODEL)")
    chat.add_argument("--mcp-url", help="take the tools from this MCP server (streamable HTTP)")
    chat.add_argument("--mcp-command", help="take the tools from this MCP server command (stdio)")
    chat.add_argument("--timeout", type=_args.seconds, help="seconds per request (default 30)")
    chat.add_argument(
        "--max-tokens", type=_args.int_between(1, 1_000_000),
        help="the longest reply a model call may generate (1024)",
    )  # fmt: skip
    chat.add_argument("--temperature", type=_args.temperature, help="sampling temperature, 0-2 (default 0)")
    chat.add_argument(
        "--context-window",
        type=_args.int_between(16, 100_000_000),
        help="the model's context window in tokens",
    )
    chat.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    _args.store(chat, "the tasks and conversations in this PostgreSQL database")
    chat.set_defaults(handler=run_chat)

    mcp = commands.add_parser("mcp", help="serve the task tools to MCP clients")
    serve = _args.actions(mcp).add_parser(
        "serve", help="MCP over stdio; the user id comes in each request's _meta"
    )
    _args.data_dir(serve)
    serve.add_argument("--http", metavar="HOST:PORT", help="serve over streamable HTTP at /mcp instead")
    serve.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    _args.store(serve, "the tasks in this PostgreSQL database")
    serve.set_defaults(handler=serve_mcp)


def run_chat(args: argparse.Namespace) -> int:
    from . import _chat

    return anyio.run(
        lambda: _chat.run_chat(
            data_dir=args.data_dir,
            user=args.user,
            conversation=args.conversation,
            messages=args.messages,
            base_url=args.base_url,
            model_name=args.model_name,
            mcp_url=args.mcp_url,
            mcp_command=args.mcp_command,
            timeout=args.timeout,
            max_tokens=args.max_tokens,
            temperature=args.temperature,
            context_window=args.context_window,
            store=args.store,
        ),
        backend=args.backend,
    )


def serve_mcp(args: argparse.Namespace) -> int:
    from . import _chat

    return anyio.run(
        lambda: _chat.serve_mcp(args.data_dir, args.http, store=args.store), backend=args.backend
    )
