"""``AgentHost``: one actor system with the log actor, the supervisor and the agent pools.

``async with AgentHost(config, data_dir) as host:`` opens the backend (the config's
``[store]``, or the ``store`` given: see :func:`choose_store`), spawns the log actor and the
supervisor on it (on the files, they take their OS locks: a second host on the same data
dir fails at once with ``DataDirBusy``) and the agents. Leaving the block runs
:meth:`shutdown`, then closes the backend.
"""

from __future__ import annotations

import logging
import math
import os
import re
from contextlib import AsyncExitStack
from pathlib import Path
from types import TracebackType
from typing import Any

import anyio

from .._errors import InvalidInput, StorageError, StoreUnavailable
from .._files import resolve_data_dir
from .._loopwatch import LoopWatch
from ..actors import ActorRef, ActorStopped, ActorSystem, Directive, SupervisorStrategy
from ..agents import AgentActor, AgentRuntime, BaseAgent
from ..harness import BudgetStore, MCPClient, StepJournalActor
from ..harness._ledger import BudgetLedgerActor, TrackBudget
from ..log import LogActor, NarratorCapability
from ..messages import AwaitChange, GraphStats, Stats, StopGranting
from ..store import Store
from ..supervisor import SupervisorActor
from ._backend import choose_store
from ._config import ConfigError, DaemonConfig, agent_class, model_for, price_for
from ._workers import worker_node_file

logger = logging.getLogger("greenroom.daemon")


def _decide(error: Exception) -> Directive:
    """The host's actors restart after a failure, except when the disk refuses a durable
    write: nothing can make progress then, so the daemon stops and says why. (A database
    out of reach is not that: its requests fail and are retried until it is back.)"""
    if isinstance(error, StorageError) and not isinstance(error, StoreUnavailable):
        return Directive.ESCALATE
    return Directive.RESTART


_STRATEGY = SupervisorStrategy(decider=_decide)


class AgentHost:
    def __init__(
        self,
        config: DaemonConfig,
        data_dir: str | os.PathLike[str] | None = None,
        *,
        store: Store | None = None,
        narrator: NarratorCapability | None = None,
        instance: str | None = None,
    ) -> None:
        self.config = config
        self._data_dir_arg = data_dir
        self.data_dir: Path
        """The data dir, absolute and created: set on entering (resolving it touches the
        file system, so it happens in a worker thread, not in the constructor)."""
        self.store: Store = (
            store
            if store is not None
            else choose_store(
                config.store.url,
                data_dir,
                pool_size=config.store.pool_size,
                notify=config.store.notify,
                node_file=worker_node_file(),
            )
        )
        """The backend: everything durable goes through it."""
        self.narrator = narrator
        self.instance = instance or ""
        self.system = ActorSystem(
            shutdown_timeout=max(config.shutdown_grace, 1.0), supervisor_strategy=_STRATEGY
        )
        self.agents: list[tuple[BaseAgent, ActorRef]] = []
        self.runtimes: dict[ActorRef, AgentRuntime] = {}
        """Each agent actor's runtime (what it runs now: the status page's "busy")."""
        self.supervisor: ActorRef
        self.log: ActorRef
        self.journal: ActorRef
        """The step journal's writer: every agent's phases are durable (replayed after a crash)."""
        self.ledger: ActorRef
        """Keeps every named budget (a team's, the chat's) in step with its stored total."""
        self.models: dict[str, Any] = {}
        """The ``[llm]`` server's clients by model name (closed at shutdown)."""
        self.mcp: dict[str, MCPClient] = {}
        """The ``[mcp.<name>]`` servers' clients, open while the daemon runs (closed at
        shutdown, after the agents stopped, in the task that opened them)."""
        self._mcp_stack = AsyncExitStack()
        self._stopped = False
        self._store_open = False
        self.initial_stats: GraphStats
        """The graph's counts when the supervisor had loaded it, before any agent started."""
        self.final_stats: GraphStats | None = None
        """The graph's counts at shutdown, after running tasks finished or were handed back."""

    async def __aenter__(self) -> AgentHost:
        self.data_dir = await anyio.to_thread.run_sync(resolve_data_dir, self._data_dir_arg)
        await self.store.__aenter__()
        self._store_open = True
        await self.system.__aenter__()
        try:
            await self._start()
        except BaseException as error:
            with anyio.CancelScope(shield=True):
                for model in self.models.values():
                    await model.aclose()
            await self._mcp_stack.aclose()
            await self.system.__aexit__(type(error), error, error.__traceback__)
            await self._close_store()
            raise
        return self

    async def _close_store(self) -> None:
        if self._store_open:
            self._store_open = False
            with anyio.CancelScope(shield=True):
                await self.store.__aexit__(None, None, None)

    async def _spawn_stores(self) -> None:
        config, store = self.config, self.store
        self.instance = self.instance or await store.instance()
        instance = self.instance
        narrator = self.narrator
        self.log = await self.system.spawn(
            lambda: LogActor(store.event_store(retention=config.retention), narrator=narrator), name="log"
        )
        self.journal = await self.system.spawn(lambda: StepJournalActor(store.step_store()), name="journal")
        self.ledger = await self.system.spawn(
            lambda: BudgetLedgerActor(BudgetStore(store.records())), name="budgets"
        )
        self.supervisor = await self.system.spawn(
            lambda: SupervisorActor(
                store.task_store(
                    lease_seconds=config.lease_seconds,
                    limits=config.limits,
                    instance=instance,
                    retention=config.retention,
                )
            ),
            name="supervisor",
        )

    async def _start(self) -> None:
        config = self.config
        await self.system.spawn(  # a quarter of the lease: said well before a lease is lost
            lambda: LoopWatch(config.lease_seconds / 4, "every lease's heartbeat and check waited"),
            name="loopwatch",
        )
        await self._spawn_stores()
        await self._open_mcp()
        self.initial_stats = await self.stats()
        heartbeat = config.heartbeat_interval or config.lease_seconds / 3
        for agent_type, pool in config.agents.items():
            cls = agent_class(pool.agent, f"agents.{agent_type}.agent", agent_type, "config")
            for index in range(pool.concurrency):
                agent = cls()
                self._give_model(agent, agent_type)
                self._give_mcp_tools(agent, agent_type)
                safe_type = re.sub(r"[^\w\-]", "_", agent_type)
                agent.place_workspace(self.data_dir / "agents", f"{safe_type}-{index + 1}")
                runtime = AgentRuntime(
                    f"{agent_type}-{index + 1}@{self.instance}",
                    agent_type,
                    heartbeat,
                    supervisor=self.supervisor,
                    log=self.log,
                    journal=self.journal,
                    store=self.store,
                )
                ref = await self.system.spawn(
                    lambda agent=agent, runtime=runtime: AgentActor(agent, runtime),  # type: ignore[misc]
                    name=f"agent:{agent_type}-{index + 1}",
                )
                self.agents.append((agent, ref))
                self.runtimes[ref] = runtime
        await self._track_budgets()

    async def _track_budgets(self) -> None:
        """Every named budget of the agents' setups continues from its stored total."""
        tracked: set[int] = set()
        for agent, _ in self.agents:
            budget = agent.llm.budget if agent.llm is not None else None
            if budget is not None and budget.name is not None and id(budget) not in tracked:
                tracked.add(id(budget))
                await self.ledger.ask(TrackBudget(budget), timeout=None)

    async def _open_mcp(self) -> None:
        """Connect to every ``[mcp.<name>]`` server, once: a server that cannot be reached,
        or lacks a tool the config names, is a ``ConfigError`` naming it (the daemon does
        not start half-equipped)."""
        for name, server in self.config.mcp.items():
            field = f"mcp.{name}"
            try:
                client = await self._mcp_stack.enter_async_context(server.client())
                server.wanted(client, f"{field}.tools")
            except InvalidInput as error:
                raise ConfigError(f"config: {error}") from None
            except OSError as error:
                raise ConfigError(f"config: field {field!r}: the server cannot be started: {error}") from None
            self.mcp[name] = client

    def _give_mcp_tools(self, agent: BaseAgent, agent_type: str) -> None:
        """Give the agent's LLM phases the tools of its pool's ``mcp`` servers."""
        names = self.config.agents[agent_type].mcp
        if not names:
            return
        if agent.llm is None:
            raise ConfigError(
                f"config: agent type {agent_type!r} ({type(agent).__name__}) has no LLM phases, so "
                f"the tools of agents.{agent_type}.mcp would not be used; remove it"
            )
        for name in names:
            server, client = self.config.mcp[name], self.mcp[name]
            try:
                agent.llm.add_tools(client.harness_tools(server.wanted(client, f"mcp.{name}.tools")))
            except InvalidInput as error:
                raise ConfigError(f"config: agents.{agent_type}.mcp: {error}") from None

    def _give_model(self, agent: BaseAgent, agent_type: str) -> None:
        """Put the agent's LLM phases on the ``[llm]`` server's model for its type (one
        client per model name, shared by every agent using it). An agent without LLM
        phases keeps none: ``[llm] model`` is for the agents that have them; only a pool
        that names a model for such an agent is refused (the setting would do nothing)."""
        name = model_for(self.config, agent_type)
        if name is None:
            return
        if agent.llm is None:
            if self.config.agents[agent_type].model is None:
                return
            raise ConfigError(
                f"config: agent type {agent_type!r} ({type(agent).__name__}) has no LLM phases, so "
                f'model {name!r} would not be used; set agents.{agent_type}.model = "scripted" or '
                "remove it"
            )
        try:
            agent.llm.use_model(self.model_named(name))
        except ValueError as error:  # a budget in money, and no [llm.prices] entry for the model
            raise ConfigError(f"config: agent type {agent_type!r} on model {name!r}: {error}") from None

    def model_named(self, name: str) -> Any:
        """The ``[llm]`` server's client for model ``name`` (one per name, shared; closed
        at shutdown)."""
        llm = self.config.llm
        assert llm is not None
        model = self.models.get(name)
        if model is None:
            from ..llm import OpenAIChatModel
            from ..llm._openai import NO_KEY

            key = (os.environ.get(llm.api_key_env) if llm.api_key_env else None) or NO_KEY
            model = self.models[name] = OpenAIChatModel(
                name,
                base_url=llm.base_url,
                api_key=key,
                timeout=llm.timeout,
                max_retries=llm.max_retries,
                max_in_flight=llm.max_in_flight,
                client=llm.client,
                stream=llm.stream,
                max_tokens=llm.max_tokens,
                temperature=llm.temperature,
                price=price_for(self.config, name),
            )
        return model

    async def stats(self) -> GraphStats:
        """The graph's figures. No timeout of its own: while the store stalls (a
        connection that hangs), the caller waits — a daemon never ends because its store
        is slow; ``StoreUnavailable`` once the store says it is out of reach."""
        return await self.supervisor.ask(Stats(), timeout=None)

    def is_idle(self, stats: GraphStats) -> bool:
        """What the store says: nothing running (this host's tasks or another's, whose
        lease may lapse back to it) and nothing runnable for the agent types it serves."""
        served = set(self.config.agents)
        return stats.by_status.get("IN_PROGRESS", 0) == 0 and not served.intersection(stats.runnable_types)

    @property
    def busy(self) -> bool:
        """One of this host's agents runs a task now."""
        return any(runtime.running is not None for runtime in self.runtimes.values())

    async def wait_idle(self) -> GraphStats:
        """Return once this host has nothing in flight (no agent of it runs a task) and
        nothing it could claim (:meth:`is_idle`, from one snapshot of the store). Checked
        each time the supervisor reports a change (``AwaitChange``: a report, a claim that
        found no work, a person's action, a lease check, tasks another daemon made ready),
        never in a sleep loop; the store is asked only once no agent here is busy.
        Cancellable at any time. While the store cannot answer (``StoreUnavailable``) the
        host is not known to be idle: it waits for the next change (a lease check comes
        every ``lease_seconds / 4`` at most)."""
        changes = -1  # the first ask answers at once
        while True:
            changes = await self.supervisor.ask(AwaitChange(changes), timeout=None)
            if self.busy:
                continue  # its agent's next claim (granted or parked) is the next change
            try:
                stats = await self.stats()
            except StoreUnavailable:
                continue
            if self.is_idle(stats):
                return stats
            changes = stats.changes  # what the figures include: wake at the next change

    async def shutdown(self, grace: float | None = None) -> None:
        """Stop taking claims, give running tasks ``grace`` seconds (default: the
        config's ``shutdown_grace``) to finish, hand back the rest, stop everything.

        Idempotent. Shielded from cancellation, so a cancelled caller still leaves
        the data dir consistent and unlocked; takes at most ``grace`` plus the
        time to hand tasks back and fold the journal.
        """
        if self._stopped:
            return
        self._stopped = True
        grace = self.config.shutdown_grace if grace is None else grace
        with anyio.CancelScope(shield=True):
            try:
                await self.supervisor.ask(StopGranting())
            except ActorStopped:
                logger.warning("shutdown: the supervisor has stopped already (see above why)")
            except Exception:
                logger.exception("shutdown: the supervisor did not take StopGranting")
            with anyio.move_on_after(grace if math.isfinite(grace) else None):
                for _, ref in self.agents:
                    await ref.stop()
            busy = [(agent, ref) for agent, ref in self.agents if ref.is_alive]
            if busy:
                logger.warning("shutdown: handing back %d unfinished task(s)", len(busy))
                for agent, _ in busy:
                    agent.abandon()
                for _, ref in busy:
                    await ref.stop()
            try:
                with anyio.move_on_after(10):  # a stalled store: the summary shows the counts from the start
                    self.final_stats = await self.stats()
            except ActorStopped:
                pass  # said above; the summary then shows the counts from the start
            except StoreUnavailable as error:
                logger.warning("shutdown: no final counts, the store is out of reach: %s", error)
            except Exception:
                logger.exception("shutdown: the supervisor did not answer Stats")
            await self.supervisor.stop()
            await self.journal.stop()
            await self.ledger.stop()
            await self.log.stop()
            for model in self.models.values():
                await model.aclose()
        # the MCP clients' task groups were entered after every scope above: they are left
        # here, outside the shield (each client's own exit closes its server whatever comes)
        await self._mcp_stack.aclose()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            await self.shutdown(0 if exc is not None else None)
        finally:
            try:
                result = await self.system.__aexit__(exc_type, exc, tb)
            finally:
                await self._close_store()
        return result
