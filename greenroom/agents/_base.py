"""``BaseAgent`` (spec 000, S34): claim a task, handle it, report, through the hooks."""

from __future__ import annotations

import logging
from typing import ClassVar

import anyio

from ..messages import AgentError, AgentResult, AgentTask
from ..supervisor import TaskGraphError
from ._runtime import AgentRuntime

logger = logging.getLogger("greenroom.agents")


class TaskFailed(Exception):
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
    """

    agent_type: ClassVar[str] = ""
    retry_unexpected_errors: ClassVar[bool] = True

    def __init__(self) -> None:
        self._scope: anyio.CancelScope | None = None

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
        return await self._run(task, runtime)

    async def _run(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult | AgentError | None:
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
            logger.warning("agent %r lost task %r: %s", runtime.agent_id, task.id, lost[0])
            return None
        if scope.cancelled_caught:  # abandon(): hand it back
            await runtime.release_task(task.id)
            return None
        if isinstance(outcome, Exception):
            error = self.error_for(outcome)
            if not isinstance(outcome, TaskFailed):
                logger.warning("agent %r: task %r raised", runtime.agent_id, task.id, exc_info=outcome)
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
