"""``DaemonService``: the HTTP API of a running daemon, over its ``AgentHost``.

``async with DaemonService(host, stop) as service:`` binds the API's socket, opens the
chat assistant (its store from the host's backend, its MCP tools in-process, a runner
actor in the host's system, its events through the host's log actor), makes a local admin token
and writes ``daemon.json`` + ``admin.token`` (mode 0600) into the data dir, so the CLI on
this machine finds the daemon. :meth:`run` serves until ``stop`` is set, then lets the
requests in flight finish (a few seconds at most). Leaving the block removes the two
files and closes the assistant.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import AsyncGenerator
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any

import anyio
import msgspec

from .. import __version__
from .._errors import DataError
from .._files import replace_durably
from ..actors import ActorStopped
from ..harness import CallTimings, TokenBudget
from ..harness._journal import ReadSteps
from ..harness._ledger import TrackBudget
from ..harness._timings import merged
from ..llm import ChatModel, RuleBasedModel
from ..messages import Event, GraphStats, LogFigures, LogStats
from ..service import (
    AgentPool,
    BudgetStatus,
    ChatStatus,
    DaemonInfo,
    DaemonStatus,
    LogStatus,
    ModelTiming,
    Principal,
    TaskFigures,
    TokenStore,
    create_app,
    parse_address,
)
from ..service._app import ServiceParts
from ..service._client import ADMIN_TOKEN_FILE, DAEMON_FILE
from ..service._serve import bind, serve
from ..service._tokens import new_token
from ..store import Step
from ._config import SCRIPTED, model_for, price_for
from ._host import AgentHost
from ._workers import WorkerSlot, answer_for_machine

logger = logging.getLogger("greenroom.daemon")

_LOOPBACK = ("127.", "localhost", "::1", "[::1]")
GRACEFUL = 3.0
"""Seconds the requests in flight get when the API stops."""


class DaemonService:
    def __init__(
        self,
        host: AgentHost,
        stop: anyio.Event,
        *,
        listen: str | None = None,
        worker: WorkerSlot | None = None,
    ) -> None:
        self.host = host
        self.worker = worker
        """A worker of ``--workers``: the socket and token are its parent's, and its status
        answers for the whole machine (``_workers``)."""
        self.stop = stop
        self.config = host.config
        self.listen = listen or host.config.api.listen
        self.url = ""
        self.parts: ServiceParts
        self._stack = AsyncExitStack()
        self._socket: Any = None
        self._owned_files = False
        self._chat_store: Any = None
        self.stopped_by_api = False
        from ..service._history import History

        self.history = History(self.config.api.history_every)
        """The figures over time the status page charts (sampled while the API serves)."""
        """``POST /v1/stop`` asked for the stop."""

    async def __aenter__(self) -> DaemonService:
        try:
            await self._open()
        except BaseException:
            await self._close()
            raise
        return self

    async def _open(self) -> None:
        host = self.host
        worker = self.worker
        if worker is not None:  # the parent's listening socket, inherited: the kernel spreads connections
            self._socket = socket.socket(fileno=worker.fd)
            address = self._socket.getsockname()[:2]
        else:
            address = parse_address(self.listen, "api.listen")
            self._socket = bind(*address)
        bound = self._socket.getsockname()
        name = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        self.url = f"http://{name}:{bound[1]}"
        if not address[0].startswith(_LOOPBACK):
            logger.warning(
                "the API listens on %s, reachable from other machines: tokens are its only "
                "protection; put TLS in front of it",
                self.url,
            )
        token, token_id = new_token() if worker is None else (worker.token, worker.token.split("_")[1])
        records = host.store.records()  # on PostgreSQL: the tokens every daemon of the fleet knows
        self._stack.push_async_callback(records.aclose)
        tokens = TokenStore(
            records, extra=[(token, Principal("local-admin", "admin", token_id))], folded_from=host.data_dir
        )
        await tokens.load()
        runner = await self._open_chat() if self.config.chat.enabled else None
        self.parts = ServiceParts(
            supervisor=host.supervisor,
            events=self._events,
            events_dropped_through=self.host.store.events_dropped_through,
            tokens=tokens,
            status=self.status,
            stop=self._stop_requested,
            chat=runner,
            steps=self._steps,
            max_body_bytes=self.config.api.max_body_bytes,
            history=self.history.document,
        )
        info = DaemonInfo(
            self.url, os.getpid(), time.time(), __version__, store=host.store.where, shared=host.store.shared
        )
        if worker is None:  # a worker's parent wrote them, once for the machine
            await anyio.to_thread.run_sync(self._write_files, info, token)

    async def _steps(self, task_id: str) -> list[Step]:
        return await self.host.journal.ask(ReadSteps(task_id), timeout=None)

    def _events(self, after: int, follow: bool, last: int | None) -> AsyncGenerator[Event, None]:
        return self.host.store.events(after=after, follow=follow, last=last)

    async def _open_chat(self) -> Any:
        from ..chat import (
            AgentEngineConfig,
            AgentRunner,
            ChatStore,
            LLMAgentEngine,
            MCPToolExecutor,
            task_server,
        )

        host = self.host
        chat = self.config.chat
        # on PostgreSQL: shared by every daemon on the database
        store = ChatStore(host.store.records(), shared=host.store.shared)
        self._stack.push_async_callback(store.aclose)
        model: ChatModel
        if chat.model == SCRIPTED or self.config.llm is None:
            model = RuleBasedModel()
        else:
            model = host.model_named(chat.model)
        tools = await self._stack.enter_async_context(MCPToolExecutor(task_server(store)))
        settings = AgentEngineConfig(
            temperature=chat.temperature, max_tokens=chat.max_tokens, context_window=chat.context_window
        )
        # named: its spend lasts across restarts and is shared by the daemons of a database
        budget = TokenBudget(chat.budget_tokens, cost_limit=chat.budget_cost, name="chat")
        await host.ledger.ask(TrackBudget(budget), timeout=None)
        # the scripted model has no price; a [llm.prices] entry prices a server model
        engine = LLMAgentEngine(
            model,
            tools,
            config=settings,
            log=host.log,
            budget=budget,
            price=price_for(self.config, chat.model),
        )
        runner = await AgentRunner.spawn(host.system, engine, store, timeout=chat.timeout)
        self._stack.push_async_callback(runner.aclose)
        self._chat_store = store
        return runner

    async def _forget_idle_chats(self) -> None:
        """``[retention] chat_for``: every ``check_every`` s, the conversations idle that
        long go, a batch at a time. A failed pass is logged; the next one tries again."""
        retention = self.config.retention
        store = self._chat_store
        if retention.chat_for is None or store is None:
            return
        while True:
            try:
                while (gone := await store.forget_idle(time.time() - retention.chat_for)) > 0:
                    logger.info("chat: forgot %d conversation(s) idle past chat_for", gone)
            except DataError as error:
                logger.warning("chat: forgetting idle conversations failed: %s", error)
            await anyio.sleep(retention.check_every)

    def _stop_requested(self) -> None:
        self.stopped_by_api = True
        self.stop.set()

    def _write_files(self, info: DaemonInfo, token: str) -> None:
        data_dir = self.host.data_dir
        replace_durably(data_dir / ADMIN_TOKEN_FILE, token.encode() + b"\n", mode=0o600)
        replace_durably(data_dir / DAEMON_FILE, msgspec.json.encode(info) + b"\n", mode=0o600)
        self._owned_files = True

    def _remove_files(self) -> None:
        if not self._owned_files:
            return
        for name in (DAEMON_FILE, ADMIN_TOKEN_FILE):
            try:
                (self.host.data_dir / name).unlink()
            except FileNotFoundError:
                pass

    async def run(self) -> None:
        """Serve until ``stop`` is set; then requests in flight get a few seconds
        (``GRACEFUL`` at most). Cancelled, it sets ``stop`` and takes the same graceful
        path (the server runs under a shield bounded by that time), so the HTTP server is
        never torn down mid-request by a cancellation from outside."""
        sock, self._socket = self._socket, None
        app = create_app(self.parts)
        done = anyio.Event()
        shield = anyio.CancelScope(shield=True)

        async def serving() -> None:
            with shield:
                try:
                    await serve(app, sock, stop=self.stop, graceful_timeout=GRACEFUL)
                finally:
                    done.set()

        async def stop_chat() -> None:
            await self.stop.wait()  # set by then below, whatever ends the serving
            if self.parts.chat is not None:
                # chat decisions in flight end before their next model call, within the grace
                self.parts.chat.engine.stop.request()

        async with anyio.create_task_group() as tg:
            tg.start_soon(serving)
            tg.start_soon(stop_chat)
            forgetting = anyio.CancelScope()

            async def forget_idle_chats() -> None:
                with forgetting:
                    await self._forget_idle_chats()

            tg.start_soon(forget_idle_chats)
            sampling = anyio.CancelScope()

            async def sample_history() -> None:
                with sampling:
                    await self.history.run(self.status)

            tg.start_soon(sample_history)
            following = anyio.CancelScope()

            async def follow_tokens() -> None:
                with following:
                    await self.parts.tokens.follow()

            tg.start_soon(follow_tokens)
            try:
                await done.wait()
            finally:
                self.stop.set()
                with anyio.CancelScope(shield=True), anyio.move_on_after(GRACEFUL + 5):
                    await done.wait()
                shield.cancel()  # past the bound: close it hard
                forgetting.cancel()
                sampling.cancel()
                following.cancel()

    async def status(self) -> DaemonStatus:
        host = self.host
        stats: GraphStats = await host.stats()
        log: LogFigures | None
        try:
            log = await host.log.ask(LogStats(), timeout=None)
        except ActorStopped:  # stopping: the rest of the snapshot still says something
            log = None
        agents: dict[str, AgentPool] = {}
        setups: dict[str, dict[int, CallTimings]] = {}  # per type, each setup's timings once
        for agent, ref in host.agents:
            agent_type = agent.agent_type or type(agent).__name__
            pool = agents.setdefault(agent_type, AgentPool())
            pool.configured += 1
            pool.alive += int(ref.is_alive)
            runtime = host.runtimes.get(ref)
            pool.busy += int(runtime is not None and runtime.running is not None)
            pool.queued += ref.queued
            pool.restarts += ref.statistics().restarts
            if agent.llm is not None:
                pool.tokens_spent += agent.llm.usage.spent
                pool.model_calls += agent.llm.usage.calls
                pool.cost += agent.llm.usage.cost
                timings = agent.llm.timings
                setups.setdefault(agent_type, {})[id(timings)] = timings
        for agent_type, pool in agents.items():
            pool.model = model_for(host.config, agent_type) if agent_type in host.config.agents else None
            pool.cost = round(pool.cost, 6)
            pool.model_timing = msgspec.convert(
                merged(setups.get(agent_type, {}).values()).summary(), ModelTiming
            )
        mailboxes = {"supervisor": host.supervisor.queued, "log": host.log.queued}
        runner = self.parts.chat
        if runner is not None:
            mailboxes["chat-runner"] = runner.ref.queued
        own = DaemonStatus(
            version=__version__,
            pid=os.getpid(),
            data_dir=str(host.data_dir),
            uptime=round(time.time() - self.parts.started, 3),
            stopping=self.stop.is_set(),
            tasks=TaskFigures(
                total=stats.total,
                completed_here=stats.completed_here,
                granted_here=stats.granted_here,
                failures_here=stats.failures_here,
                by_status=stats.by_status,
                by_type=stats.by_type,
                runnable_types=stats.runnable_types,
                archived_here=stats.archived_here,
                archive_dropped_here=stats.archive_dropped_here,
                writes=stats.writes,
            ),
            log=None if log is None else LogStatus(appended_here=log.appended, writes=log.writes),
            agents=agents,
            chat=None if runner is None else _chat_status(runner.engine),
            mailboxes=mailboxes,
            budgets=self._budgets(),
            storage=await host.store.sizes(),
        )
        if self.worker is not None:
            return await anyio.to_thread.run_sync(answer_for_machine, self.worker, own)
        return own

    def _budgets(self) -> dict[str, BudgetStatus]:
        """The named budgets in use here (the agents' and the chat's): what every daemon of
        the store spent against each, as the ledger last read it."""
        budgets: dict[str, TokenBudget] = {}
        named = [agent.llm.budget for agent, _ in self.host.agents if agent.llm is not None]
        if self.parts.chat is not None:
            named.append(self.parts.chat.engine.budget)
        for budget in named:
            if budget is not None and budget.name is not None:
                budgets.setdefault(budget.name, budget)
        return {
            name: BudgetStatus(
                tokens=budget.spent,
                cost=round(budget.cost, 6),
                limit=budget.limit,
                cost_limit=budget.cost_limit,
                exhausted=budget.exhausted,
            )
            for name, budget in sorted(budgets.items())
        }

    async def _close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._remove_files)
        # not under the shield: the MCP client's task group must be left in its own scope order
        await self._stack.aclose()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._close()


def _chat_status(engine: Any) -> ChatStatus:
    """What the chat assistant spent in this daemon's run, and against its budget (the
    budget ``chat``: what every run and every daemon of the store spent)."""
    budget, spend = engine.budget, engine.spend
    return ChatStatus(
        llm_calls=spend.calls,
        prompt_tokens=spend.prompt_tokens,
        completion_tokens=spend.completion_tokens,
        total_tokens=spend.total_tokens,
        cost=round(spend.cost, 6),
        budget_spent_tokens=budget.spent,
        budget_spent_cost=round(budget.cost, 6),
        budget_tokens=budget.limit,
        budget_cost=budget.cost_limit,
        budget_exhausted=budget.exhausted,
    )
