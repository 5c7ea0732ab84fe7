"""Agents as actors that claim, work and report (spec 000, S34-S35), with bounded
LLM phases and workspaces (spec 003, 2.3-2.4)."""

from ..harness import HarnessSetup, PhaseResult
from ._actor import AgentActor
from ._base import BaseAgent, TaskFailed
from ._runtime import DEFAULT_REQUEST_TIMEOUT, AgentRuntime
from ._workspace import artifact_filename

__all__ = [
    "DEFAULT_REQUEST_TIMEOUT",
    "AgentActor",
    "AgentRuntime",
    "BaseAgent",
    "HarnessSetup",
    "PhaseResult",
    "TaskFailed",
    "artifact_filename",
]
