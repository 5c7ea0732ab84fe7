"""``greenroom chat`` (an interactive session with the task assistant) and ``greenroom mcp
serve`` (the task tools as an MCP server on stdio, for any MCP client)."""

from __future__ import annotations

import shlex
import sys
from typing import Any, TextIO

import anyio

from .._errors import InvalidInput
from ..chat import AgentEngineConfig, ConversationNotFound, ReplyDelta, open_assistant, task_server
from ..chat._types import check_id
from ..daemon._backend import choose_store

PROMPT = "you> "


def _model(base_url: str | None, model: str | None) -> Any:
    """The offline rule-based model, or an OpenAI-compatible server when one is named
    (``--base-url`` / ``--model``, or ``OPENAI_BASE_URL`` / ``OPENAI_MODEL``)."""
    import os

    from ..llm import BASE_URL_ENV, MODEL_ENV, OpenAIChatModel

    if (
        base_url is None
        and model is None
        and not os.environ.get(BASE_URL_ENV)
        and not os.environ.get(MODEL_ENV)
    ):
        return None
    return OpenAIChatModel(model, base_url=base_url)


def _mcp(url: str | None, command: str | None) -> Any:
    if url is not None and command is not None:
        raise InvalidInput("give --mcp-url or --mcp-command, not both", field="--mcp-url", value=url)
    if url is not None:
        if not url.startswith(("http://", "https://")):
            raise InvalidInput(
                f"--mcp-url must be an http(s) URL (got {url!r})", field="--mcp-url", value=url
            )
        return url
    if command is not None:
        from mcp.client.stdio import StdioServerParameters

        words = shlex.split(command)
        if not words:
            raise InvalidInput("--mcp-command is empty", field="--mcp-command", value=command)
        return StdioServerParameters(command=words[0], args=words[1:])
    return None


async def run_chat(
    *,
    data_dir: str | None,
    user: str,
    conversation: str | None,
    messages: list[str] | None,
    base_url: str | None,
    model_name: str | None,
    mcp_url: str | None,
    mcp_command: str | None,
    timeout: float | None,
    max_tokens: int | None = None,
    temperature: float | None = None,
    context_window: int | None = None,
    store: str | None = None,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    interactive: bool | None = None,
) -> int:
    """Talk to the assistant: each ``--message`` in turn, or lines from standard input
    until end of input (or ``/quit``). Prints the conversation id first (resume it with
    ``--conversation``), then each answer as it is made (the model's words as they come;
    an answer about what the tools did, whole)."""
    check_id("--user", user)
    if conversation is not None:
        check_id("--conversation", conversation)
    settings: dict[str, Any] = {"max_tokens": max_tokens, "context_window": context_window}
    if max_tokens is None:
        del settings["max_tokens"]  # the engine's default bound
    if temperature is not None:
        settings["temperature"] = temperature
    config = AgentEngineConfig(**settings)
    backend = choose_store(store, data_dir)
    model = _model(base_url, model_name)
    mcp = _mcp(mcp_url, mcp_command)
    try:
        async with (
            backend,
            open_assistant(store=backend, model=model, mcp=mcp, config=config, timeout=timeout) as assistant,
        ):
            if conversation is None:
                conversation = await assistant.runner.new_conversation(user)
                print(f"greenroom: new conversation {conversation} (resume it with --conversation)", file=err)
            else:
                try:
                    await assistant.store.open_conversation(user, conversation, create=False)
                except ConversationNotFound:
                    raise InvalidInput(
                        f"--conversation {conversation!r} is not a conversation of user {user!r}",
                        field="--conversation",
                        value=conversation,
                    ) from None
                print(f"greenroom: resuming conversation {conversation}", file=err)
            tty = sys.stdin.isatty() if interactive is None else interactive
            source = iter(messages) if messages is not None else None
            while True:
                if source is not None:
                    line = next(source, None)
                else:
                    if tty:
                        print(PROMPT, end="", file=out, flush=True)
                    line = await anyio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True)
                    line = line if line else None
                if line is None or line.strip() in ("/quit", "/exit"):
                    return 0
                if not line.strip():
                    continue
                shown = False  # part of the answer is on screen
                try:
                    async with assistant.say_streamed(user, conversation, line.strip()) as events:
                        async for event in events:  # the reply, printed as it is made
                            if not isinstance(event, ReplyDelta):
                                continue
                            if event.replace and shown:  # an answer other than the words shown
                                print(file=out)
                                shown = False
                            if not shown:
                                print("assistant> ", end="", file=out)
                                shown = True
                            print(event.text, end="", file=out, flush=True)
                except TimeoutError as error:
                    if shown:
                        print(file=out)
                    print(f"assistant> Sorry, that took too long ({error}).", file=out, flush=True)
                    continue
                except InvalidInput as error:
                    print(f"greenroom: {error}", file=err, flush=True)
                    continue
                print(file=out, flush=True)
    finally:
        if model is not None:
            await model.aclose()


async def serve_mcp(
    data_dir: str | None, http: str | None = None, *, store: str | None = None, err: TextIO = sys.stderr
) -> int:
    """Serve the task tools until the client closes stdio (or, with ``http``
    ``HOST:PORT``, over streamable HTTP at ``/mcp`` until interrupted). The user id comes
    in each request's ``_meta``; calls without one are refused."""
    address = None if http is None else _address(http)
    async with choose_store(store, data_dir) as backend:
        from ..chat import ChatStore

        await _serve_tools(ChatStore(backend.records(), shared=backend.shared), address, err)
    return 0


async def _serve_tools(store: Any, address: tuple[str, int] | None, err: TextIO) -> None:
    try:
        server = task_server(store)
        if address is None:
            await server.run_stdio_async()
        else:
            host, port = address
            print(f"greenroom: serving the task tools on http://{host}:{port}/mcp", file=err, flush=True)
            await _serve_http(server.streamable_http_app(host=host), host, port)
    finally:
        await store.aclose()


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise InvalidInput(f"--http must be HOST:PORT (got {text!r})", field="--http", value=text)
    return host, int(port)


async def _serve_http(app: Any, host: str, port: int) -> None:
    """Hypercorn on the running backend (its asyncio and trio servers are two modules:
    the one backend-specific choice here)."""
    import sniffio
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"{host}:{port}"]
    config.accesslog = None
    if sniffio.current_async_library() == "trio":
        from hypercorn.trio import serve as serve_trio

        await serve_trio(app, config)
    else:
        from hypercorn.asyncio import serve as serve_asyncio

        await serve_asyncio(app, config)
