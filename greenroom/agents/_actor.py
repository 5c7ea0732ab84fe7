"""``AgentActor``: runs an agent's loop (claim -> handle -> complete/fail) as an actor.

The actor sends itself one ``_Work`` message per task. Each claim waits (parked at the
supervisor, no polling) until there is work of the agent's type. The actor stops
itself once the supervisor stops granting (``NoWork(closing=True)``).

``stop()`` while the claim is parked ends the claim at once (the supervisor drops a
claim whose asker left) and the actor stops. A task already running is left to finish
(or fail) and be reported first; a task granted in the instant of the stop, before it
started, is handed back (PENDING, the attempt not counted). Messages sent after
``stop()`` are refused.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio

from .._checks import check_seconds
from .._errors import StorageError
from ..actors import Actor, ActorStopped, AskTimeout
from ..supervisor import TaskGraphError
from ._base import BaseAgent
from ._runtime import AgentRuntime

logger = logging.getLogger("greenroom.agents")


class _Work:
    __slots__ = ()


_WORK = _Work()


class AgentActor(Actor):
    """Hosts ``agent`` (a :class:`BaseAgent`) with its ``runtime``: claims with
    ``runtime.claim_task(wait=True)`` and runs each task with ``agent.run`` (what
    ``execute_once`` does, split so that a stop can end the claim but not the task).

    If the supervisor is unreachable for a moment (restarting after a failed write,
    an ask timing out), the actor waits ``retry_delay`` seconds and claims again.
    """

    def __init__(self, agent: BaseAgent, runtime: AgentRuntime, *, retry_delay: float = 0.5) -> None:
        if not isinstance(agent, BaseAgent):
            raise TypeError(f"AgentActor agent must be a BaseAgent, got {agent!r}")
        self.agent = agent
        self.runtime = runtime
        self.retry_delay = check_seconds("AgentActor", "retry_delay", retry_delay)
        self._stopping = False
        self._parked: anyio.CancelScope | None = None

    def on_stop_requested(self) -> None:
        self._stopping = True
        if self._parked is not None:
            self._parked.cancel()  # the parked claim ends; a running task is not touched

    async def on_start(self) -> None:
        self.agent.attach(self.context)  # the agent's harnesses are this actor's children
        self.context.ref.tell(_WORK)

    async def on_stop(self) -> None:
        self.agent.attach(None)

    async def receive(self, message: Any) -> Any:
        if message is not _WORK:
            raise TypeError(f"AgentActor does not handle {type(message).__name__} messages")
        runtime = self.runtime
        try:
            # what ``execute_once(wait=True)`` does, with only the claim under the scope
            # a stop cancels, so that a running task is never cut short by it
            task = None
            if not self._stopping:
                with anyio.CancelScope() as parked:
                    self._parked = parked
                    try:
                        task = await runtime.claim_task(wait=True)
                    finally:
                        self._parked = None
            if task is not None:
                if self._stopping:  # granted as the stop came: hand it back unstarted
                    try:
                        await runtime.release_task(task.id)
                    except TaskGraphError as error:  # e.g. its lease ran out meanwhile
                        logger.warning("agent %r: %s not handed back: %s", runtime.agent_id, task.id, error)
                else:
                    runtime.running = task.id
                    try:
                        await self.agent.run(task, runtime)
                    finally:
                        runtime.running = None
        except (ActorStopped, AskTimeout, StorageError) as error:
            if self._stopping:
                return  # no retry: this actor is stopping anyway
            # a store that is away (PostgreSQL restarting) is reported once by the supervisor
            level = logging.DEBUG if isinstance(error, StorageError) else logging.WARNING
            logger.log(level, "agent %r: %s; retrying in %gs", runtime.agent_id, error, self.retry_delay)
            await anyio.sleep(self.retry_delay)
        if runtime.closing:
            self.context.stop()
            return
        if self._stopping:
            return  # the stop is under way: no next claim
        try:
            self.context.ref.tell(_WORK)
        except ActorStopped:
            pass  # being stopped: the loop ends here
