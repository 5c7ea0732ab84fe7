"""Configuration-driven agents (spec 004): stages that pass an envelope.

:class:`Agent` runs one :class:`AgentConfig` stage on an :class:`Envelope`, through the
spec's lifecycle and processing modes; the contracts (:class:`AgentOutcome`,
:class:`StandardToolResult`, ...) are the spec's. A :class:`Pipeline` runs each stage
in a :class:`StageActor`; envelopes travel between them as messages.
"""

from ._agent import AGENT_COMPLETED, AGENT_STARTED, Agent, PromptRegistry, StageFailed, StageToolExecutor
from ._build import open_pipeline
from ._config import AgentConfig, PipelineConfig, RoutingRule, load_pipeline
from ._contracts import (
    AgentOutcome,
    IdempotencyClass,
    StandardToolResult,
    ToolErrorDetails,
    ToolResultData,
    ToolStatus,
    ValidationSeverity,
    normalize_tool_result,
)
from ._envelope import Envelope, StageRecord
from ._pipeline import Pipeline, PipelineError, PipelineResult
from ._tools import HarnessToolExecutor

__all__ = [
    "AGENT_COMPLETED",
    "AGENT_STARTED",
    "Agent",
    "AgentConfig",
    "AgentOutcome",
    "Envelope",
    "HarnessToolExecutor",
    "IdempotencyClass",
    "Pipeline",
    "PipelineConfig",
    "PipelineError",
    "PipelineResult",
    "PromptRegistry",
    "RoutingRule",
    "StageFailed",
    "StageRecord",
    "StageToolExecutor",
    "StandardToolResult",
    "ToolErrorDetails",
    "ToolResultData",
    "ToolStatus",
    "ValidationSeverity",
    "load_pipeline",
    "normalize_tool_result",
    "open_pipeline",
]
