"""``BaseAgent`` (spec 000, S34): claim a task, handle it, report, through the hooks."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

import anyio

from .._errors import GreenroomError, expected
from .._files import resolve_data_dir
from ..actors import ActorContext
from ..harness import ApprovalNeeded, Harness, HarnessSetup, PhaseResult, ReplayDiverged, StopSignal
from ..harness._journal import TaskJournal
from ..messages import AgentError, AgentResult, AgentTask
from ..supervisor import Fenced, TaskGraphError
from ._runtime import AgentRuntime
from ._workspace import artifact_filename, check_agent_name, ensure_agent_workspace

logger = logging.getLogger("greenroom.agents")


class TaskFailed(GreenroomError):
    """Raise from ``handle_task`` to fail the attempt with this reason; ``retryable``
    sends the task back to PENDING while attempts remain."""

    def __init__(self, reason: str, *, retryable: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable


class BaseAgent:
    """Subclass it: set ``agent_type`` and write ``handle_task``.

    ``execute_once`` claims one task and runs it through the hooks: ``on_assign``
    (an ``AGENT_UPDATE``), ``handle_task`` (heartbeating on its own every
    ``runtime.heartbeat_interval``; call ``on_progress`` to report), then
    ``on_complete`` (marks it COMPLETED with an ``AGENT_RESULT``) or ``on_error``
    (an ``AGENT_RESULT`` with ``outcome="failed"``). Override a hook to add to it and
    call ``super()`` to keep its event.

    An exception from ``handle_task`` fails the attempt: ``TaskFailed`` says whether
    it is retryable; any other exception is retryable if ``retry_unexpected_errors``
    (default ``True``: most surprises in LLM work are transient).

    Cancellation: if the caller is cancelled, it propagates and the task's lease runs
    out (it is retried). ``abandon()`` instead stops ``handle_task`` and hands the
    task back unfinished (shutdown), without using up an attempt.

    LLM and tool work goes through :meth:`run_phase` (spec 003's ``_run_phase``, 2.4), on a harness
    actor built from ``llm`` (a :class:`HarnessSetup`): one harness per :meth:`run`,
    created by the first phase, stopped when the run ends (``stop(now=True)``: a phase
    still running is interrupted, so nothing of a run outlives it). The budget and stop
    checks live in the harness, not here.

    Where the harness lives: inside an :class:`AgentActor` (the daemon's pools), it is
    that actor's child (the actor calls :meth:`attach` with its context), so its life is
    bounded by its parent's and a crash goes to the parent's supervisor strategy.
    Embedded on its own (``await agent.run(task, runtime)`` in a test or an app), it is
    a top-level actor of ``runtime.supervisor.system``, stopped the same way when the run
    ends. Files go under :meth:`_workspace_root` (``<agents_folder>/<name>``;
    ``agents_folder`` defaults to ``<data dir>/agents``).
    """

    agent_type: ClassVar[str] = ""
    retry_unexpected_errors: ClassVar[bool] = True

    def __init__(
        self,
        name: str | None = None,
        *,
        llm: HarnessSetup | None = None,
        agents_folder: str | os.PathLike[str] | None = None,
    ) -> None:
        self._scope: anyio.CancelScope | None = None
        owner = type(self).__name__
        self._named = name is not None
        if name is None:  # a default from the type, made safe as a directory name
            name = re.sub(r"[^\w\-]", "_", self.agent_type).strip("_") or owner
        self.name = check_agent_name(owner, name)
        if llm is not None and not isinstance(llm, HarnessSetup):
            raise TypeError(f"{owner} llm must be a HarnessSetup, got {llm!r}")
        self.llm = llm
        self._agents_folder = None if agents_folder is None else Path(agents_folder)
        self._harness: Harness | None = None
        self._harness_prompt = ""
        self._stop: StopSignal | None = None
        self._current: tuple[AgentTask, AgentRuntime] | None = None
        self._parent: ActorContext | None = None

    def attach(self, context: ActorContext | None) -> None:
        """Spawn this agent's harnesses as children of the actor ``context`` belongs
        to (``AgentActor`` does it on start); ``None``: as top-level actors of the
        runtime's system again."""
        if context is not None and not isinstance(context, ActorContext):
            raise TypeError(f"{type(self).__name__}.attach takes an ActorContext or None, got {context!r}")
        self._parent = context

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        raise NotImplementedError(f"{type(self).__name__} must implement handle_task")

    # -- hooks ------------------------------------------------------------------------

    async def on_assign(self, task: AgentTask, runtime: AgentRuntime) -> None:
        await runtime.emit_update(task.id, "assigned", progress=0.0, attempt=task.attempt)

    async def on_progress(
        self, task: AgentTask, runtime: AgentRuntime, message: str, progress: float | None = None
    ) -> None:
        await runtime.emit_update(task.id, message, progress=progress)

    async def on_complete(self, task: AgentTask, result: AgentResult, runtime: AgentRuntime) -> None:
        await runtime.complete_task(task.id, result)

    async def on_error(self, task: AgentTask, error: AgentError, runtime: AgentRuntime) -> None:
        await runtime.fail_task(task.id, error)

    def error_for(self, exc: Exception) -> AgentError:
        if isinstance(exc, TaskFailed):
            return AgentError(reason=exc.reason, retryable=exc.retryable)
        if isinstance(exc, ReplayDiverged):  # another attempt would stop the same way
            return AgentError(reason=str(exc), retryable=False)
        return AgentError(reason=f"{type(exc).__name__}: {exc}", retryable=self.retry_unexpected_errors)

    # -- the loop body ----------------------------------------------------------------

    def abandon(self) -> None:
        """Stop the running ``handle_task`` and hand its task back (see the class doc)."""
        if self._scope is not None:
            self._scope.cancel()

    async def execute_once(
        self, runtime: AgentRuntime, *, wait: bool = False
    ) -> AgentResult | AgentError | None:
        """Claim and run one task. Returns its ``AgentResult``, the ``AgentError`` it
        failed with, or ``None`` when there was no work (or the task was handed back
        or taken away)."""
        task = await runtime.claim_task(wait=wait)
        if task is None:
            return None
        return await self.run(task, runtime)

    async def run(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult | AgentError | None:
        """Run one claimed task through the hooks (what :meth:`execute_once` does after
        claiming). Each run starts without a harness; the first :meth:`run_phase`
        creates one and it is closed when the run ends, however it ends."""
        self._reset_harness()
        self._current = (task, runtime)
        self._stop = StopSignal()
        try:
            return await self._run_hooks(task, runtime)
        finally:
            self._current = None
            await self._close_harness()

    async def _run_hooks(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult | AgentError | None:
        """The hooks, then the report. An attempt the store fenced off (its lease lapsed and
        the task was granted again, or it ended) is given up quietly: nothing more is
        reported or written under it, and the agent takes other work."""
        try:
            return await self._run_attempt(task, runtime)
        except Fenced as fenced:
            runtime.give_up(task.id)
            logger.warning("agent %r gave up task %r: %s", runtime.agent_id, task.id, fenced)
            return None

    async def _run_attempt(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult | AgentError | None:
        lost: list[TaskGraphError] = []
        outcome: AgentResult | Exception | None = None
        with anyio.CancelScope() as scope:
            self._scope = scope
            try:
                await self.on_assign(task, runtime)
                async with anyio.create_task_group() as tg:
                    if runtime.heartbeat_interval is not None:
                        tg.start_soon(self._heartbeats, task, runtime, scope, lost)
                    try:
                        outcome = await self.handle_task(task, runtime)
                    except Exception as exc:
                        outcome = exc
                    tg.cancel_scope.cancel()
            finally:
                self._scope = None
        if lost:
            runtime.give_up(task.id)
            logger.warning("agent %r lost task %r: %s", runtime.agent_id, task.id, lost[0])
            return None
        if isinstance(outcome, Fenced):  # a step it recorded was refused: the attempt is stale
            raise outcome
        if scope.cancelled_caught:  # abandon(): hand it back
            await runtime.release_task(task.id)
            return None
        if isinstance(outcome, ApprovalNeeded):  # park it on that call; this agent takes other work
            await runtime.park_task(task.id, outcome.call)
            logger.info("agent %r: task %r waits for approval: %s", runtime.agent_id, task.id, outcome)
            return None
        if isinstance(outcome, Exception):
            error = self.error_for(outcome)
            if not isinstance(outcome, TaskFailed):
                plain = expected(
                    outcome
                )  # greenroom's own refusals say it all; an agent's bug needs its trace
                logger.warning(
                    "agent %r: task %r raised%s", runtime.agent_id, task.id,
                    f" {type(outcome).__name__}: {outcome}" if plain else "",
                    exc_info=None if plain else outcome,
                )  # fmt: skip
            await self.on_error(task, error, runtime)
            return error
        if not isinstance(outcome, AgentResult):
            error = AgentError(
                reason=f"handle_task returned {type(outcome).__name__}, expected AgentResult", retryable=False
            )
            await self.on_error(task, error, runtime)
            return error
        await self.on_complete(task, outcome, runtime)
        return outcome

    async def _heartbeats(
        self, task: AgentTask, runtime: AgentRuntime, scope: anyio.CancelScope, lost: list[TaskGraphError]
    ) -> None:
        interval = runtime.heartbeat_interval
        assert interval is not None
        while True:
            await anyio.sleep(interval)
            try:
                await runtime.heartbeat(task.id)
            except TaskGraphError as error:  # the lease expired or the task was cancelled
                lost.append(error)
                scope.cancel()
                return

    # -- phases (spec 003, 2.4) -----------------------------------------------------------

    def _reset_harness(self) -> None:
        """Forget the previous run's harness (it was closed when that run ended)."""
        self._harness = None
        self._harness_prompt = ""

    async def _close_harness(self) -> None:
        harness, self._harness = self._harness, None
        if harness is not None:
            # nothing of this run may outlive it: a phase still running is interrupted.
            # The stop is requested before the first checkpoint, so a cancelled run
            # still stops its harness; only the wait for it is given up.
            await harness.aclose(now=True)

    def request_stop(self, *, immediate: bool = False) -> None:
        """Stop the running task's phases: after the current turn, or (``immediate``)
        cancelling the model call and tool call in flight. Each phase then ends with
        ``stop_requested``; ``handle_task`` decides what to do with that."""
        if self._stop is not None:
            self._stop.request(immediate=immediate)

    async def run_phase(
        self,
        system_prompt: str = "",
        user_message: str = "",
        tool_names: list[str] | None = None,
        max_iterations: int = 10,
        continue_context: bool = True,
        context_label: str | None = None,
        direct_tool_calls: Iterable[dict[str, Any]] | None = None,
    ) -> PhaseResult:
        """Run one bounded phase on this run's harness (see ``Harness.run_bounded``).

        The first call of a run creates the harness with ``system_prompt``; later calls
        reuse it and ignore ``system_prompt`` (logged at debug level if it differs).
        With ``direct_tool_calls`` no model call is made (the harness is still created:
        its sandbox runs the calls). Only valid inside :meth:`run` (``RuntimeError``).
        Cancellation: the phase stops at once, as ``Harness.run_bounded`` says.
        """
        if self._current is None:
            raise RuntimeError(f"{type(self).__name__}.run_phase() is only valid while run() handles a task")
        if self.llm is None:
            raise RuntimeError(f"{type(self).__name__} has no llm (HarnessSetup): it cannot run phases")
        task, runtime = self._current
        if self._harness is None:
            logs_dir = await anyio.to_thread.run_sync(self._logs_dir)
            durable: dict[str, Any] = {}
            if runtime.journal is not None:  # replay what earlier attempts recorded
                durable["journal"] = await TaskJournal.load(
                    task.id, task.attempt, runtime.journal, task.decisions, task.token
                )
            self._harness = await self.llm.spawn(
                self._parent if self._parent is not None else runtime.supervisor.system,
                system_prompt=system_prompt,
                stop=self._stop,
                agent_id=runtime.agent_id,
                task_id=task.id,
                summary_path=logs_dir / "run_summary.json",
                log=runtime.log,
                **durable,
            )
            self._harness_prompt = system_prompt
        elif system_prompt and system_prompt != self._harness_prompt:
            logger.debug(
                "agent %r: run_phase ignores a new system_prompt; the harness keeps its first", self.name
            )
        return await self._harness.run_bounded(
            user_message,
            tool_names,
            max_iterations,
            continue_context,
            context_label,
            direct_tool_calls=direct_tool_calls,
        )

    _run_phase = run_phase
    """Spec 003's name for :meth:`run_phase`: the same call."""

    # -- workspace (spec 003, 2.3) ----------------------------------------------------------

    def place_workspace(self, agents_folder: str | os.PathLike[str], name: str) -> None:
        """Where a host puts this agent's workspace: ``agents_folder`` and ``name`` apply
        only where the agent was not given its own (a host calls this before any run)."""
        if self._agents_folder is None:
            self._agents_folder = Path(agents_folder)
        if not self._named:
            self.name = check_agent_name(type(self).__name__, name)

    @property
    def agents_folder(self) -> Path:
        if self._agents_folder is None:
            self._agents_folder = resolve_data_dir(None) / "agents"
        return self._agents_folder

    def _workspace_root(self) -> Path:
        """``<agents_folder>/<name>``, with ``artifacts``, ``logs`` and ``memory`` in it;
        created on use (not when the agent is made; again if removed).

        It touches the file system (a few blocking calls): from async code call it, or
        the accessors below, in a worker thread (``await
        anyio.to_thread.run_sync(self._artifacts_dir)``), as ``run_phase`` does."""
        return ensure_agent_workspace(self.name, self.agents_folder)

    def _artifacts_dir(self) -> Path:
        return self._workspace_root() / "artifacts"

    def _logs_dir(self) -> Path:
        return self._workspace_root() / "logs"

    def _memory_dir(self) -> Path:
        return self._workspace_root() / "memory"

    def _artifact_filename(self, name: str, suffix: str = ".md") -> str:
        """``<safe name>_<YYYYMMDD_HHMMSS><suffix>`` (UTC); see ``artifact_filename``."""
        return artifact_filename(name, suffix)
