"""The chat runner's records, by the names specs 001 and 002 give them.

Spec 001 (what a chat API calls): :class:`MessageHistory`, :class:`AgentContext`,
:class:`ToolCallRecord`, :class:`AgentResult`. Spec 002 (the decision engine):
:class:`DecisionType`, :class:`ToolCall`, :class:`PendingAction`, :class:`DecisionContext`,
:class:`AgentDecision`, :class:`AgentEngineConfig`. (Spec 000 names a task's result
``AgentResult`` too: that one is ``greenroom.messages.AgentResult``, what a task agent's
run ends with; this one is a chat reply. A model's own tool call is
``greenroom.messages.ModelToolCall``; this ``ToolCall`` is the engine's decision.)

Everything here is validated when built from outside (``AgentContext.from_request``,
``AgentEngineConfig``): a bad value is an ``InvalidInput`` naming the field and the value.
"""

from __future__ import annotations

import enum
import unicodedata
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from .._errors import InvalidInput, shown
from ..messages import ChatMessage, ToolOutcome

MAX_MESSAGE_CHARS = 4000
MAX_HISTORY = 1000
MAX_ID_CHARS = 256


def check_id(field_name: str, value: Any) -> str:
    """A user or conversation id as identity providers and chat apps issue them
    (``auth0|123``, ``ann+work@example.com``, a UUID): 1-256 characters, none of them a
    control or format character or a line break, no space at either end."""
    if not isinstance(value, str) or not value:
        raise InvalidInput(
            f"{field_name} must be non-empty text (got {shown(value)})", field=field_name, value=value
        )
    if len(value) > MAX_ID_CHARS:
        raise InvalidInput(
            f"{field_name} is {len(value)} characters; at most {MAX_ID_CHARS} are accepted",
            field=field_name,
            value=f"<{len(value)} characters>",
        )
    for char in value:
        if unicodedata.category(char)[0] == "C" or char in "\u2028\u2029":
            raise InvalidInput(
                f"{field_name} must not contain control characters (got {shown(value)})",
                field=field_name,
                value=value,
            )
    if value != value.strip():
        raise InvalidInput(
            f"{field_name} must not start or end with a space (got {shown(value)})",
            field=field_name,
            value=value,
        )
    return value


def check_timestamp(field_name: str, value: Any) -> datetime:
    """A message's time: a ``datetime`` or an ISO-8601 string (``2026-11-23T10:00:00Z``);
    without a zone it is UTC."""
    stamp = value
    if isinstance(value, str) and len(value) <= 64:
        try:
            stamp = datetime.fromisoformat(value)
        except ValueError:
            stamp = None
    if not isinstance(stamp, datetime):
        raise InvalidInput(
            f"{field_name} must be a datetime or an ISO-8601 time such as 2026-11-23T10:00:00Z "
            f"(got {shown(value)})",
            field=field_name,
            value=value,
        )
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=UTC)


def check_message(value: Any, field_name: str = "message") -> str:
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(
            f"{field_name} must be non-empty text (got {shown(value)})", field=field_name, value=value
        )
    if "\x00" in value:
        raise InvalidInput(f"{field_name} must not contain a NUL character", field=field_name, value=value)
    if len(value) > MAX_MESSAGE_CHARS:
        raise InvalidInput(
            f"{field_name} is {len(value)} characters; at most {MAX_MESSAGE_CHARS} are accepted",
            field=field_name,
            value=f"<{len(value)} characters>",
        )
    return value


# -- spec 001 ------------------------------------------------------------------------------


HistoryRole = Literal["user", "assistant"]


@dataclass(frozen=True, slots=True)
class MessageHistory:
    """One message of a conversation's history: spec 001's view of a kept
    :class:`~greenroom.messages.ChatMessage` (:meth:`of`)."""

    role: HistoryRole
    content: str
    timestamp: datetime
    tool_calls: list[dict[str, Any]] | None = None

    @classmethod
    def of(cls, message: ChatMessage) -> MessageHistory:
        """A kept message as spec 001 shows it: its tools as ``ToolCallRecord`` dicts."""
        role: HistoryRole = "assistant" if message.role == "assistant" else "user"
        calls = [ToolCallRecord.of(outcome).as_dict() for outcome in message.outcomes] or None
        return cls(role, message.content or "", datetime.fromtimestamp(message.at, UTC), calls)


@dataclass(frozen=True, slots=True)
class AgentContext:
    """Immutable context of one agent invocation."""

    user_id: str
    conversation_id: str
    message_history: tuple[MessageHistory, ...]

    @classmethod
    def from_request(cls, user_id: str, conversation_id: str, messages: list[dict[str, Any]]) -> AgentContext:
        """Build it from a chat API request; ``InvalidInput`` names the bad field."""
        check_id("user_id", user_id)
        check_id("conversation_id", conversation_id)
        if not isinstance(messages, list) or len(messages) > MAX_HISTORY:
            raise InvalidInput(
                f"messages must be a list of at most {MAX_HISTORY} messages (got {shown(messages)})",
                field="messages",
                value=messages,
            )
        history = []
        for index, raw in enumerate(messages):
            where = f"messages[{index}]"
            if not isinstance(raw, dict):
                raise InvalidInput(f"{where} must be an object (got {shown(raw)})", field=where, value=raw)
            role = raw.get("role")
            if role != "user" and role != "assistant":
                raise InvalidInput(
                    f"{where}.role must be 'user' or 'assistant' (got {shown(role)})",
                    field=f"{where}.role",
                    value=role,
                )
            content = raw.get("content")
            if not isinstance(content, str) or len(content) > MAX_MESSAGE_CHARS:
                raise InvalidInput(
                    f"{where}.content must be text of at most {MAX_MESSAGE_CHARS} characters "
                    f"(got {shown(content)})",
                    field=f"{where}.content",
                    value=content,
                )
            stamp = raw.get("timestamp")
            stamp = datetime.now(UTC) if stamp is None else check_timestamp(f"{where}.timestamp", stamp)
            calls = raw.get("tool_calls")
            if calls is not None and not (
                isinstance(calls, list) and all(isinstance(c, dict) for c in calls)
            ):
                raise InvalidInput(
                    f"{where}.tool_calls must be a list of objects (got {shown(calls)})",
                    field=f"{where}.tool_calls",
                    value=calls,
                )
            history.append(MessageHistory(role, content, stamp, calls))
        return cls(user_id, conversation_id, tuple(history))


@dataclass(frozen=True, slots=True)
class ToolCallRecord:
    """A tool call the agent made (``parameters`` never hold the user id): spec 001's view
    of a :class:`~greenroom.messages.ToolOutcome` (:meth:`of`); ``result`` is spec 002's
    ``ToolResult`` as a dict."""

    tool_name: str
    parameters: dict[str, Any]
    result: dict[str, Any]
    duration_ms: int

    @classmethod
    def of(cls, outcome: ToolOutcome) -> ToolCallRecord:
        result = {
            "success": outcome.ok,
            "data": outcome.result,
            "error": outcome.error,
            "error_code": outcome.error_code,
        }
        return cls(outcome.name, outcome.arguments, result, outcome.duration_ms or 0)

    def as_dict(self) -> dict[str, Any]:
        return {
            "tool_name": self.tool_name,
            "parameters": self.parameters,
            "result": self.result,
            "duration_ms": self.duration_ms,
        }

    def outcome(self) -> ToolOutcome:
        """The call as greenroom keeps it (a record from before the one shape, read back)."""
        result = self.result
        return ToolOutcome(
            name=self.tool_name,
            arguments=self.parameters,
            ok=bool(result.get("success")),
            result=result.get("data"),
            error=result.get("error"),
            error_code=result.get("error_code"),
            duration_ms=self.duration_ms,
        )


@dataclass(frozen=True, slots=True)
class AgentResult:
    """What ``AgentRunner.run`` returns: a reply a person can read, and what was done."""

    success: bool
    response: str
    tool_calls: list[ToolCallRecord]
    error: str | None = None

    @property
    def has_tool_calls(self) -> bool:
        return len(self.tool_calls) > 0


# -- spec 002 ------------------------------------------------------------------------------


class DecisionType(enum.Enum):
    RESPOND_ONLY = "RESPOND_ONLY"
    INVOKE_TOOL = "INVOKE_TOOL"
    ASK_CLARIFICATION = "ASK_CLARIFICATION"
    REQUEST_CONFIRMATION = "REQUEST_CONFIRMATION"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the engine made or means to make (``parameters`` without the user id)."""

    tool_name: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class PendingAction:
    """A call that waits for the user's confirmation: exactly this tool and these
    arguments, once, until ``expires_at`` (wall clock, seconds)."""

    tool_name: str
    parameters: dict[str, Any]
    title: str
    expires_at: float


@dataclass(frozen=True, slots=True)
class DecisionContext:
    user_id: str
    message: str
    conversation_id: str
    message_history: tuple[MessageHistory, ...] = ()
    pending_confirmation: PendingAction | None = None


@dataclass(frozen=True, slots=True)
class AgentDecision:
    decision_type: DecisionType
    tool_calls: list[ToolCall] | None = None
    response_text: str | None = None
    clarification_question: str | None = None
    pending_action: PendingAction | None = None
    records: list[ToolOutcome] = field(default_factory=list)
    """The calls executed while deciding (greenroom's addition: the runner keeps them)."""
    error: str | None = None
    """Set when the decision ended in a mapped error (the text is the friendly one)."""


@dataclass(frozen=True, slots=True)
class AgentEngineConfig:
    """Spec 002's engine settings, checked when made.

    greenroom's additions: ``max_tool_calls`` per decision; ``confirmation_seconds`` a
    pending delete stays confirmable; ``max_tokens``, the longest reply a model call may
    generate (``None``: the server's own limit — a small local model left unbounded can
    talk for minutes); ``max_history_tokens``, how much of the history (the last
    ``include_history_messages`` messages) is sent, in estimated tokens, oldest dropped
    first; ``context_window``, the model's window in tokens when known (else learned from
    the first ``ContextTooLong`` the server answers), which the history is fitted into.
    """

    max_iterations: int = 5
    include_history_messages: int = 10
    temperature: float = 0.0
    timeout_seconds: int = 30
    max_tool_calls: int = 10
    confirmation_seconds: float = 300.0
    max_tokens: int | None = 1024
    max_history_tokens: int = 4000
    context_window: int | None = None

    def __post_init__(self) -> None:
        for name, low, high in (
            ("max_iterations", 1, 50),
            ("include_history_messages", 0, MAX_HISTORY),
            ("timeout_seconds", 1, 3600),
            ("max_tool_calls", 1, 100),
            ("max_tokens", 1, 1_000_000),
            ("max_history_tokens", 0, 10_000_000),
            ("context_window", 16, 100_000_000),
        ):
            value = getattr(self, name)
            if value is None and name in ("max_tokens", "context_window"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise InvalidInput(
                    f"AgentEngineConfig {name} must be a whole number from {low} to {high} "
                    f"(got {shown(value)})",
                    field=name,
                    value=value,
                )
        temperature = self.temperature
        if (
            isinstance(temperature, bool)
            or not isinstance(temperature, (int, float))
            or not 0 <= temperature <= 2
        ):
            raise InvalidInput(
                f"AgentEngineConfig temperature must be a number from 0 to 2 (got {shown(temperature)})",
                field="temperature",
                value=temperature,
            )
        seconds = self.confirmation_seconds
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 < seconds <= 86400:
            raise InvalidInput(
                f"AgentEngineConfig confirmation_seconds must be in (0, 86400] (got {shown(seconds)})",
                field="confirmation_seconds",
                value=seconds,
            )


CONSTITUTION = """\
You are a helpful task management assistant. Your capabilities:

## Available Tools
- add_task: Create new tasks
- list_tasks: View user's tasks
- update_task: Modify task descriptions
- complete_task: Mark tasks as done
- delete_task: Remove tasks (requires confirmation)
- delete_completed_tasks: Remove all completed tasks at once (requires confirmation)
- ask_clarification: Ask the user what they mean, when a task operation is unclear

## Behavioral Rules
1. Only use tools when the user clearly wants a task operation
2. For greetings/general questions, respond conversationally WITHOUT tools
3. If the user's intent is unclear, ask a clarifying question (with ask_clarification)
4. For delete requests, always confirm before proceeding
5. Stay focused on task management - politely decline off-topic requests

## Response Guidelines
- Be concise and helpful
- Confirm successful operations
- Explain errors in user-friendly terms
- Never expose internal details or tool names to users
"""
"""Spec 002's constitution template: the engine's default system prompt."""
