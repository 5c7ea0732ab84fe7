"""``AgentActor``: runs an agent's loop (claim -> handle -> complete/fail) as an actor.

The actor sends itself one ``_Work`` message per task. Each claim waits (parked at the
supervisor, no polling) until there is work of the agent's type. The actor stops
itself once the supervisor stops granting (``NoWork(closing=True)``). Messages sent
before ``stop()`` are handled in order (a ``_Work`` already queued runs first: stop it
after ``StopGranting`` so that claim returns at once); messages sent after are refused.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio

from .._checks import check_seconds
from ..actors import Actor, ActorStopped, AskTimeout
from ._base import BaseAgent
from ._runtime import AgentRuntime

logger = logging.getLogger("greenroom.agents")


class _Work:
    __slots__ = ()


_WORK = _Work()


class AgentActor(Actor):
    """Hosts ``agent`` (a :class:`BaseAgent`) with its ``runtime``.

    If the supervisor is unreachable for a moment (restarting after a failed write,
    an ask timing out), the actor waits ``retry_delay`` seconds and claims again.
    """

    def __init__(self, agent: BaseAgent, runtime: AgentRuntime, *, retry_delay: float = 0.5) -> None:
        if not isinstance(agent, BaseAgent):
            raise TypeError(f"AgentActor agent must be a BaseAgent, got {agent!r}")
        self.agent = agent
        self.runtime = runtime
        self.retry_delay = check_seconds("AgentActor", "retry_delay", retry_delay)

    async def on_start(self) -> None:
        self.context.ref.tell(_WORK)

    async def receive(self, message: Any) -> Any:
        if message is not _WORK:
            raise TypeError(f"AgentActor does not handle {type(message).__name__} messages")
        runtime = self.runtime
        try:
            await self.agent.execute_once(runtime, wait=True)
        except (ActorStopped, AskTimeout) as error:
            logger.warning("agent %r: %s; retrying in %gs", runtime.agent_id, error, self.retry_delay)
            await anyio.sleep(self.retry_delay)
        if runtime.closing:
            self.context.stop()
            return
        try:
            self.context.ref.tell(_WORK)
        except ActorStopped:
            pass  # being stopped: the loop ends here
