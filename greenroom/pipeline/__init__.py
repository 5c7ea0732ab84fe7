"""Configuration-driven agents (spec 004): stages that pass an envelope.

:class:`Agent` runs one :class:`AgentConfig` stage on an :class:`Envelope`, through the
spec's lifecycle and processing modes; the contracts (:class:`AgentOutcome`,
:class:`StandardToolResult`, ...) are the spec's. Stage actors and the pipeline runner
come next.
"""

from ._agent import AGENT_COMPLETED, AGENT_STARTED, Agent, PromptRegistry, StageFailed, StageToolExecutor
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

__all__ = [
    "AGENT_COMPLETED",
    "AGENT_STARTED",
    "Agent",
    "AgentConfig",
    "AgentOutcome",
    "Envelope",
    "IdempotencyClass",
    "PipelineConfig",
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
]
