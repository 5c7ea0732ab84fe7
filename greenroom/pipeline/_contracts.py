"""Spec 004's contracts: outcomes, tool statuses and the standardized tool result.

Carried over from the Go original into Python form: ``AgentOutcome`` (with
``is_terminal``, ``is_success``, ``requires_loop``), ``ToolStatus`` (``from_string``),
``IdempotencyClass`` (``from_risk_level``), ``ValidationSeverity``,
``StandardToolResult`` (``success`` / ``failure`` constructors, cross-field ``validate``),
``ToolErrorDetails`` (``from_exception``, ``not_found``), ``ToolResultData`` (known
fields extracted, the rest kept in ``raw``) and ``normalize_tool_result`` for legacy
results.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from .._errors import InvalidInput, shown
from ..harness import RiskLevel
from ..messages import ToolOutcome


class AgentOutcome(enum.Enum):
    SUCCESS = "success"
    ERROR = "error"
    CLARIFY = "clarify"
    CONFIRM = "confirm"
    REPLAN = "replan"
    LOOP_BACK = "loop_back"
    TERMINATE = "terminate"
    SKIP = "skip"
    PARTIAL = "partial"

    def is_terminal(self) -> bool:
        """Ends this run of the pipeline for the envelope: an error, an explicit terminate,
        or a question to the caller (``clarify``, ``confirm``: resuming is a new run;
        :meth:`pauses` tells those apart)."""
        return self in (
            AgentOutcome.ERROR,
            AgentOutcome.TERMINATE,
            AgentOutcome.CLARIFY,
            AgentOutcome.CONFIRM,
        )

    def is_success(self) -> bool:
        return self in (AgentOutcome.SUCCESS, AgentOutcome.SKIP, AgentOutcome.PARTIAL)

    def requires_loop(self) -> bool:
        """Sends the envelope back to an earlier stage (bounded by the hop limit)."""
        return self in (AgentOutcome.LOOP_BACK, AgentOutcome.REPLAN)

    def pauses(self) -> bool:
        """Returns the envelope to its caller with a question (resumable)."""
        return self in (AgentOutcome.CLARIFY, AgentOutcome.CONFIRM)


class ToolStatus(enum.Enum):
    SUCCESS = "success"
    ERROR = "error"

    @classmethod
    def from_string(cls, value: Any) -> ToolStatus:
        """Parse a status, case-insensitively, with the words legacy tools use for the two
        (``ok``, ``completed``, ``done``; ``failed``, ``failure``); ``InvalidInput`` names
        any other value."""
        if isinstance(value, str):
            found = _STATUS_WORDS.get(value.strip().lower())
            if found is not None:
                return cls(found)
        raise InvalidInput(
            f"tool status must be 'success' or 'error' (got {shown(value)})", field="status", value=value
        )


_STATUS_WORDS = {
    **dict.fromkeys(("success", "succeeded", "ok", "completed", "complete", "done"), "success"),
    **dict.fromkeys(("error", "failed", "failure", "fail"), "error"),
}


class IdempotencyClass(enum.Enum):
    SAFE = "safe"
    IDEMPOTENT = "idempotent"
    NON_IDEMPOTENT = "non_idempotent"

    @classmethod
    def from_risk_level(cls, risk: RiskLevel) -> IdempotencyClass:
        """Read-only tools are safe to repeat; writes may be repeated if idempotent;
        anything riskier is assumed to have effects that must not run twice."""
        if risk <= RiskLevel.READ_ONLY:
            return cls.SAFE
        if risk <= RiskLevel.WRITES:
            return cls.IDEMPOTENT
        return cls.NON_IDEMPOTENT


class ValidationSeverity(enum.Enum):
    CRITICAL = "critical"
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class ToolErrorDetails:
    error_type: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)
    recoverable: bool = False

    @classmethod
    def from_exception(cls, error: BaseException, *, recoverable: bool = False) -> ToolErrorDetails:
        return cls(type(error).__name__, str(error) or type(error).__name__, {}, recoverable)

    @classmethod
    def not_found(cls, entity: str, identifier: str) -> ToolErrorDetails:
        return cls(
            "not_found",
            f"{entity} not found: {identifier}",
            {"entity": entity, "identifier": identifier},
            False,
        )


@dataclass(frozen=True, slots=True)
class StandardToolResult:
    """One tool call's result: ``SUCCESS`` with ``data``, or ``ERROR`` with ``error``."""

    status: ToolStatus
    data: dict[str, Any] = field(default_factory=dict)
    error: ToolErrorDetails | None = None
    message: str | None = None

    @classmethod
    def success(cls, data: dict[str, Any] | None = None, message: str | None = None) -> StandardToolResult:
        return cls(ToolStatus.SUCCESS, dict(data or {}), None, message)

    @classmethod
    def failure(cls, error: ToolErrorDetails, message: str | None = None) -> StandardToolResult:
        return cls(ToolStatus.ERROR, {}, error, message)

    @classmethod
    def of(cls, outcome: ToolOutcome) -> StandardToolResult:
        """Spec 004's view of a :class:`~greenroom.messages.ToolOutcome`: its result as the
        data (one that is not an object as ``{"result": ...}``), or its error, classed by
        its code (``error`` when it has none)."""
        if outcome.ok:
            result = outcome.result
            return cls.success(result if isinstance(result, dict) else {"result": result})
        return cls.failure(
            ToolErrorDetails(outcome.error_code or "error", outcome.error or "the tool failed")
        )

    def validate(self) -> None:
        """Cross-field rules: a success has no error; a failure has one."""
        if self.status is ToolStatus.SUCCESS and self.error is not None:
            raise InvalidInput(
                "a successful tool result cannot carry an error", field="error", value=self.error
            )
        if self.status is ToolStatus.ERROR and self.error is None:
            raise InvalidInput("a failed tool result needs error details", field="error", value=None)
        if not isinstance(self.data, dict):
            raise InvalidInput(
                f"tool result data must be an object (got {shown(self.data)})", field="data", value=self.data
            )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status.value, "data": self.data}
        if self.error is not None:
            out["error"] = {
                "error_type": self.error.error_type,
                "message": self.error.message,
                "details": self.error.details,
                "recoverable": self.error.recoverable,
            }
        if self.message is not None:
            out["message"] = self.message
        return out


@dataclass(frozen=True, slots=True)
class ToolResultData:
    """A tool's output with the fields the pipeline knows pulled out; the rest in ``raw``."""

    items_explored: list[str] = field(default_factory=list)
    items_pending: list[str] = field(default_factory=list)
    discoveries: list[dict[str, Any]] = field(default_factory=list)
    evidence: list[dict[str, Any]] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    _KNOWN = ("items_explored", "items_pending", "discoveries", "evidence")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolResultData:
        if not isinstance(data, dict):
            raise InvalidInput(
                f"tool result data must be an object (got {shown(data)})", field="data", value=data
            )
        known: dict[str, Any] = {}
        for name in cls._KNOWN:
            value = data.get(name, [])
            if not isinstance(value, list):
                raise InvalidInput(f"{name} must be a list (got {shown(value)})", field=name, value=value)
            known[name] = list(value)
        raw = {k: v for k, v in data.items() if k not in cls._KNOWN}
        return cls(raw=raw, **known)


_READ_FIELDS = frozenset({"status", "message", "data", "error"})
"""The fields of a legacy result ``normalize_tool_result`` reads for themselves."""


def normalize_tool_result(result: Any) -> StandardToolResult:
    """Any legacy result as a ``StandardToolResult``, keeping what it says: one already is;
    a dict with a ``status`` is read as one (``error`` as a message or details; data that
    is not an object kept as ``{"value": data}``, and the dict's own other fields kept in
    the data beside it — nothing a tool returned is lost, as ``ToolResultData.Raw``
    keeps what it does not know); a dict with an ``error`` and no status is a failure;
    any other dict is a success's data; an exception is a failure; ``None`` an empty
    success. Anything else is ``InvalidInput``."""
    if isinstance(result, StandardToolResult):
        return result
    if result is None:
        return StandardToolResult.success()
    if isinstance(result, BaseException):
        return StandardToolResult.failure(ToolErrorDetails.from_exception(result))
    if isinstance(result, dict):
        if "status" not in result and result.get("error") in (None, False, ""):
            return StandardToolResult.success(result)
        status = ToolStatus.from_string(result["status"]) if "status" in result else ToolStatus.ERROR
        message = result.get("message") if isinstance(result.get("message"), str) else None
        raw_data = result.get("data")
        data = raw_data if isinstance(raw_data, dict) else ({} if raw_data is None else {"value": raw_data})
        own = {key: value for key, value in result.items() if key not in _READ_FIELDS and key not in data}
        if own:
            data = {**own, **data}
        if status is ToolStatus.SUCCESS:
            return StandardToolResult.success(data, message)
        error = result.get("error")
        if isinstance(error, dict):
            extra = error.get("details")
            details = ToolErrorDetails(
                str(error.get("error_type", "error")),
                str(error.get("message", "")),
                extra if isinstance(extra, dict) else {},
                bool(error.get("recoverable", False)),
            )
        else:
            details = ToolErrorDetails("error", str(error) if error is not None else "unknown error")
        return StandardToolResult(ToolStatus.ERROR, data, details, message)
    raise InvalidInput(
        f"cannot read {type(result).__name__} as a tool result (got {shown(result)})",
        field="result",
        value=result,
    )
