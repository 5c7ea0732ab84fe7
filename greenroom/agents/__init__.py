"""Agents as actors that claim, work and report (spec 000, S34-S35)."""

from ._actor import AgentActor
from ._base import BaseAgent, TaskFailed
from ._runtime import DEFAULT_REQUEST_TIMEOUT, AgentRuntime

__all__ = ["DEFAULT_REQUEST_TIMEOUT", "AgentActor", "AgentRuntime", "BaseAgent", "TaskFailed"]
