"""Harness actors: bounded phases of model and tool work (spec 003).

A :class:`HarnessActor` keeps one conversation history per ``context_label``,
admits every model call through a :class:`TokenBudget` (shareable by a team; in tokens,
in money, or both), honours a :class:`StopSignal` in two strengths, and runs tool calls
through the allowlist and a :class:`Sandbox` — all in a :class:`BoundedLoop`, the one
model-and-tool loop the chat engine runs on too, which counts each call's
:class:`Spend` and, its calls being streamed, their :class:`CallTimings`.
:class:`Harness` is its handle; every phase ends in a :class:`PhaseResult`.
"""

from ._actor import HarnessActor
from ._budget import Admission, TokenBudget
from ._handle import Harness
from ._journal import ApprovalNeeded, ReplayDiverged, StepJournalActor
from ._loop import BoundedLoop, Spend
from ._mcp import MCPAnswer, MCPClient, MCPServerConfig, MCPToolFailed, MCPToolInfo, risk_of
from ._phase import STOP_REASONS, PhaseResult, StopReason
from ._sandbox import Sandbox, ToolRefused, ToolTimedOut
from ._setup import HarnessSetup
from ._stop import StopSignal
from ._timings import CallTimings
from ._tools import RiskLevel, Tool, ToolCall, current_call
from ._totals import BudgetStore, Spent, check_budget_name

__all__ = [
    "STOP_REASONS",
    "Admission",
    "ApprovalNeeded",
    "BoundedLoop",
    "BudgetStore",
    "CallTimings",
    "Harness",
    "HarnessActor",
    "HarnessSetup",
    "MCPAnswer",
    "MCPClient",
    "MCPServerConfig",
    "MCPToolFailed",
    "MCPToolInfo",
    "PhaseResult",
    "ReplayDiverged",
    "RiskLevel",
    "Sandbox",
    "Spend",
    "Spent",
    "StepJournalActor",
    "StopReason",
    "StopSignal",
    "TokenBudget",
    "Tool",
    "ToolCall",
    "ToolRefused",
    "ToolTimedOut",
    "check_budget_name",
    "current_call",
    "risk_of",
]
