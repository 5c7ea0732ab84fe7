"""``AgentRuntime`` (spec 000, S35): an agent's handle on the supervisor and the log."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .._checks import check_name, check_seconds
from ..actors import ActorRef
from ..log._policy import apply_policy
from ..messages import (
    AGENT_RESULT,
    AGENT_UPDATE,
    AgentError,
    AgentResult,
    AgentTask,
    Append,
    Claim,
    Complete,
    Event,
    Fail,
    GetTask,
    Granted,
    Heartbeat,
    NoWork,
    Park,
    Release,
)
from ..store import Store, result_payload

DEFAULT_REQUEST_TIMEOUT = 30.0


class AgentRuntime:
    """What an agent uses to claim work and report on it: every call is a message to
    the supervisor actor or the log actor, answered once the change is durable.

    ``heartbeat_interval``: how often a running task's lease is renewed (``None``:
    no automatic heartbeats; ``heartbeat_due`` is then always ``False``). Calls that
    message an actor raise what the actor refused (``TaskGraphError``, ``PolicyError``),
    ``ActorStopped`` once it stopped, and ``AskTimeout`` after ``request_timeout``.
    Cancelling a call abandons the wait; a change the actor already accepted still
    happens (the lease then runs out or the owner completes it again).

    ``journal``: the process's step-journal actor (``StepJournalActor``): with one, an
    agent's phases are durable — every model reply and tool result is recorded before it
    is acted on, and a task claimed again replays what its earlier attempts recorded.

    ``store``: the process's backend, for an agent that keeps durable records of its own
    (``greenroom load``'s agents write what they measured there); ``None`` outside a daemon.
    """

    def __init__(
        self,
        agent_id: str,
        agent_type: str,
        heartbeat_interval: float | None = None,
        *,
        supervisor: ActorRef,
        log: ActorRef,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
        clock: Callable[[], float] = time.time,
        journal: ActorRef | None = None,
        store: Store | None = None,
    ) -> None:
        self.agent_id = check_name("AgentRuntime", "agent_id", agent_id)
        self.agent_type = check_name("AgentRuntime", "agent_type", agent_type)
        self.heartbeat_interval = (
            None
            if heartbeat_interval is None
            else check_seconds("AgentRuntime", "heartbeat_interval", heartbeat_interval)
        )
        self.supervisor = supervisor
        self.log = log
        self.request_timeout = check_seconds("AgentRuntime", "request_timeout", request_timeout)
        self.clock = clock
        self.closing = False
        """Set once the supervisor answered ``NoWork(closing=True)``: it grants no more."""
        self.last_heartbeat_at: float | None = None
        self.journal = journal
        self.store = store
        self.running: str | None = None
        """The id of the task an :class:`AgentActor` runs with this runtime now (a gauge)."""
        self.tokens: dict[str, int] = {}
        """The fencing token of each attempt this runtime was granted and still reports on:
        every report names it, so a report from an attempt that lapsed is refused."""

    # -- claiming ---------------------------------------------------------------------

    async def claim_task(self, *, wait: bool = False) -> AgentTask | None:
        """Claim the best runnable task of this agent's type: it comes back IN_PROGRESS,
        ``owner`` stamped, ``attempt + 1``, under a lease. ``None`` when there is none;
        with ``wait=True`` wait (without polling) until there is one, or until the
        supervisor stops granting (then ``None`` and ``closing`` is set)."""
        reply = await self.supervisor.ask(
            Claim(self.agent_id, self.agent_type, wait=wait), timeout=None if wait else self.request_timeout
        )
        if isinstance(reply, Granted):
            self.last_heartbeat_at = reply.task.last_heartbeat_at
            self.tokens[reply.task.id] = reply.task.token
            return reply.task
        assert isinstance(reply, NoWork)
        if reply.closing:
            self.closing = True
        return None

    async def poll_next_task(self) -> AgentTask | None:
        """Claim without waiting: the next task, or ``None`` at once."""
        return await self.claim_task(wait=False)

    # -- reporting --------------------------------------------------------------------

    async def emit(self, event_type: str, task_id: str | None, payload: dict[str, Any]) -> Event:
        """Append an event as this agent (internal; the policy refuses user-facing ones)."""
        return await self.log.ask(
            Append(type=event_type, payload=payload, task_id=task_id, agent_id=self.agent_id),
            timeout=self.request_timeout,
        )

    async def emit_update(
        self, task_id: str, message: str, progress: float | None = None, **details: Any
    ) -> Event:
        """Append an ``AGENT_UPDATE`` event and refresh the task's ``last_heartbeat_at``."""
        payload: dict[str, Any] = {"message": message, **details}
        if progress is not None:
            payload["progress"] = progress
        event = await self.emit(AGENT_UPDATE, task_id, payload)
        await self.heartbeat(task_id)
        return event

    async def heartbeat(self, task_id: str) -> AgentTask:
        """Renew the lease on ``task_id``; raises ``Fenced`` (``NotOwner`` /
        ``InvalidTransition`` for a task this runtime was not granted) if the task was taken
        away (lease expired, cancelled)."""
        task: AgentTask = await self.supervisor.ask(
            Heartbeat(task_id, self.agent_id, self.tokens.get(task_id)), timeout=self.request_timeout
        )
        self.last_heartbeat_at = task.last_heartbeat_at
        return task

    def heartbeat_due(self, last_ts: float | None, now: float | None = None) -> bool:
        """``True`` when ``heartbeat_interval`` has elapsed since ``last_ts`` (wall clock)."""
        if self.heartbeat_interval is None:
            return False
        if last_ts is None:
            return True
        return (self.clock() if now is None else now) - last_ts >= self.heartbeat_interval

    @staticmethod
    def _check_result(task_id: str, payload: dict[str, Any]) -> None:
        """Refuse a result that tries to reach the user before anything changes (the
        supervisor writes the ``AGENT_RESULT``; the log would refuse it too late)."""
        apply_policy(Append(type=AGENT_RESULT, payload=payload, task_id=task_id), None)

    async def complete_task(self, task_id: str, result: AgentResult) -> AgentTask:
        """Mark the task COMPLETED; returns the persisted task. The completion and its
        ``AGENT_RESULT`` event are one durable fact: the supervisor writes both in one
        journal batch and the event log follows it (after a crash too). A result that
        tries to reach the user is refused first (``PolicyError``) and the task is
        left as it was."""
        self._check_result(task_id, result_payload(result))
        task: AgentTask = await self.supervisor.ask(
            Complete(task_id, self.agent_id, result, self.tokens.get(task_id)), timeout=self.request_timeout
        )
        self.tokens.pop(task_id, None)
        return task

    async def fail_task(self, task_id: str, error: AgentError) -> AgentTask:
        """Report a failed attempt (with an ``AGENT_RESULT`` whose ``outcome`` is
        ``"failed"``, written as for :meth:`complete_task`): the task goes back to
        PENDING if ``error.retryable`` and attempts remain, else FAILED."""
        self._check_result(
            task_id, {"outcome": "failed", "reason": error.reason, "retryable": error.retryable}
        )
        task: AgentTask = await self.supervisor.ask(
            Fail(task_id, self.agent_id, error, self.tokens.get(task_id)), timeout=self.request_timeout
        )
        self.tokens.pop(task_id, None)
        return task

    async def park_task(self, task_id: str, call: dict[str, Any]) -> AgentTask:
        """Park the task until a person decides ``call`` (WAITING: no owner, no lease, the
        attempt not counted); an approval or a denial makes it PENDING again, and the
        agent that claims it next replays to that call."""
        task: AgentTask = await self.supervisor.ask(
            Park(task_id, self.agent_id, call, self.tokens.get(task_id)), timeout=self.request_timeout
        )
        self.tokens.pop(task_id, None)
        return task

    async def get_task(self, task_id: str) -> AgentTask:
        """The task as stored now (for example a dependency, to read its result)."""
        return await self.supervisor.ask(GetTask(task_id), timeout=self.request_timeout)

    async def release_task(self, task_id: str) -> AgentTask:
        """Hand an unfinished task back (PENDING, the attempt not counted)."""
        task: AgentTask = await self.supervisor.ask(
            Release(task_id, self.agent_id, token=self.tokens.get(task_id)), timeout=self.request_timeout
        )
        self.tokens.pop(task_id, None)
        return task

    def token(self, task_id: str) -> int | None:
        """The fencing token of this runtime's attempt at ``task_id`` (``None``: none)."""
        return self.tokens.get(task_id)

    def give_up(self, task_id: str) -> None:
        """Forget the attempt at ``task_id``: it was fenced (another attempt holds the task)."""
        self.tokens.pop(task_id, None)
