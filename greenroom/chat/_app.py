"""``open_assistant``: the task assistant, wired, in one ``async with`` (the embedded default).

What ``greenroom chat`` runs, and the short way to embed it::

    async with open_assistant(data_dir) as assistant:
        conversation = await assistant.runner.new_conversation("alice")
        reply = await assistant.say("alice", conversation, "add buy milk")

It opens the chat's data on the backend's records (``<data dir>/records.sqlite3`` by
default; or ``store``, an open ``greenroom.store.Store``, such as a shared PostgreSQL one),
the MCP tool connection (the in-process task server by default, or ``mcp``: a URL or
``mcp.StdioServerParameters``), an actor system with the log actor on the backend's event
log (so ``greenroom events tail`` shows the decision and tool logs) and the runner;
leaving the block closes them in reverse order. The model defaults to the offline
:class:`RuleBasedModel`; whoever passes a model closes it. ``budget``, ``stop`` and
``sandbox`` are the engine's (see :class:`LLMAgentEngine`): share a
:class:`~greenroom.harness.TokenBudget` or a :class:`~greenroom.harness.StopSignal` with
your agents' harnesses to bound or stop them all at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..actors import ActorSystem
from ..embedded import EmbeddedStore
from ..harness import Sandbox, StopSignal, TokenBudget
from ..llm import ChatModel, RuleBasedModel
from ..log import LogActor
from ..store import Store
from ._engine import LLMAgentEngine
from ._kept import ChatStore
from ._runner import AgentRunner
from ._stream import ChatEvents
from ._tools import MCPToolExecutor, task_server
from ._types import AgentContext, AgentEngineConfig, AgentResult


@dataclass
class Assistant:
    runner: AgentRunner
    store: ChatStore
    tools: MCPToolExecutor
    system: ActorSystem
    backend: Store

    async def say(self, user_id: str, conversation_id: str, message: str) -> AgentResult:
        """One request (see ``AgentRunner.run``); the history comes from the store."""
        return await self.runner.run(AgentContext.from_request(user_id, conversation_id, []), message)

    def say_streamed(
        self, user_id: str, conversation_id: str, message: str
    ) -> AbstractAsyncContextManager[ChatEvents]:
        """One request with its answer as it is made (see ``AgentRunner.stream``)."""
        return self.runner.stream(AgentContext.from_request(user_id, conversation_id, []), message)


@asynccontextmanager
async def open_assistant(
    data_dir: str | Path | None = None,
    *,
    store: Store | None = None,
    model: ChatModel | None = None,
    mcp: Any = None,
    config: AgentEngineConfig | None = None,
    timeout: float | None = None,
    budget: TokenBudget | None = None,
    stop: StopSignal | None = None,
    sandbox: Sandbox | None = None,
) -> AsyncIterator[Assistant]:
    async with AsyncExitStack() as stack:
        backend = store if store is not None else await stack.enter_async_context(EmbeddedStore(data_dir))
        chat = ChatStore(backend.records(), shared=backend.shared)
        stack.push_async_callback(chat.aclose)
        server = mcp if mcp is not None else task_server(chat)
        tools = await stack.enter_async_context(MCPToolExecutor(server))
        system = await stack.enter_async_context(ActorSystem())
        log = await system.spawn(lambda: LogActor(backend.event_store()), name="log")
        chat_model = model if model is not None else RuleBasedModel()
        engine = LLMAgentEngine(
            chat_model, tools, config=config, log=log, budget=budget, stop=stop, sandbox=sandbox
        )
        runner = await AgentRunner.spawn(system, engine, chat, timeout=timeout)
        try:
            yield Assistant(runner, chat, tools, system, backend)
        finally:
            await runner.aclose()
            await log.stop()
