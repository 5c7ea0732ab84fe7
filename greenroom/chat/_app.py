"""``open_assistant``: the task assistant, wired, in one ``async with`` (the embedded default).

What ``greenroom chat`` runs, and the short way to embed it::

    async with open_assistant(data_dir) as assistant:
        conversation = await assistant.runner.new_conversation("alice")
        reply = await assistant.say("alice", conversation, "add buy milk")

It opens the store (``<data dir>/chat.sqlite3``), the MCP tool connection (the in-process
task server by default, or ``mcp``: a URL or ``mcp.StdioServerParameters``), an actor
system with the log actor (``<data dir>/events.jsonl``, so ``greenroom events tail``
shows the decision and tool logs) and the runner; leaving the block closes them in
reverse order. The model defaults to the offline :class:`RuleBasedModel`; whoever passes
a model closes it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from .._files import resolve_data_dir
from ..actors import ActorSystem
from ..llm import ChatModel, RuleBasedModel
from ..log import LogActor
from ._engine import LLMAgentEngine
from ._runner import AgentRunner
from ._store import CHAT_DB, SQLiteChatStore
from ._tools import MCPToolExecutor, task_server
from ._types import AgentContext, AgentEngineConfig, AgentResult


@dataclass
class Assistant:
    runner: AgentRunner
    store: SQLiteChatStore
    tools: MCPToolExecutor
    system: ActorSystem
    data_dir: Path

    async def say(self, user_id: str, conversation_id: str, message: str) -> AgentResult:
        """One request (see ``AgentRunner.run``); the history comes from the store."""
        return await self.runner.run(AgentContext.from_request(user_id, conversation_id, []), message)


@asynccontextmanager
async def open_assistant(
    data_dir: str | Path | None = None,
    *,
    model: ChatModel | None = None,
    mcp: Any = None,
    config: AgentEngineConfig | None = None,
    timeout: float | None = None,
) -> AsyncIterator[Assistant]:
    path = await anyio.to_thread.run_sync(resolve_data_dir, data_dir)
    store = SQLiteChatStore(path / CHAT_DB)
    try:
        async with (
            MCPToolExecutor(mcp if mcp is not None else task_server(store)) as tools,
            ActorSystem() as system,
        ):
            log = await system.spawn(lambda: LogActor(path), name="log")
            engine = LLMAgentEngine(
                model if model is not None else RuleBasedModel(), tools, config=config, log=log
            )
            runner = await AgentRunner.spawn(system, engine, store, timeout=timeout)
            try:
                yield Assistant(runner, store, tools, system, path)
            finally:
                await runner.aclose()
                await log.stop()
    finally:
        await store.aclose()
