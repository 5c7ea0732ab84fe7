"""Chat-model records: what a harness sends a model and what comes back.

The shapes follow the OpenAI chat-completions protocol closely enough that the
adapter is a plain mapping, but they are ours: a tool call's ``arguments`` are
already a dict, and a model that sent arguments that are not a JSON object says so in
``arguments_error`` instead of raising.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from .._request import Request

Role = Literal["system", "user", "assistant", "tool"]


class ModelToolCall(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """One call a model asked for. ``arguments_error`` is set (and ``arguments`` empty)
    when the model's arguments were not a JSON object."""

    id: str
    name: str
    arguments: dict[str, Any] = {}
    arguments_error: str | None = None


class ChatMessage(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    """One message of a conversation. ``tool_calls`` only on ``assistant`` messages;
    ``tool_call_id`` only on ``tool`` messages (the answer to that call)."""

    role: Role
    content: str | None = None
    tool_calls: tuple[ModelToolCall, ...] = ()
    tool_call_id: str | None = None


class ToolSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """A tool as offered to a model: ``parameters`` is a JSON Schema object."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(default_factory=lambda: {"type": "object", "properties": {}})


class Usage(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """Tokens one model call used."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class ChatRequest(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """One model call: the whole conversation so far, the tools on offer, and
    ``tool_choice`` (``"auto"``, ``"none"`` or ``"required"``; ignored without tools)."""

    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: Literal["auto", "none", "required"] = "auto"
    temperature: float | None = None
    """For this call (``None``: the model's own setting)."""
    max_tokens: int | None = None


class ChatReply(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """What a model answered: text, tool calls (either may be empty) and usage."""

    text: str = ""
    tool_calls: tuple[ModelToolCall, ...] = ()
    usage: Usage = Usage()
    finish_reason: str = "stop"


class RunBounded(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Ask a harness actor to run one bounded phase; the reply is a ``PhaseResult``.

    ``direct_tool_calls`` (each ``{"name": ..., "arguments": {...}}``, optionally
    ``"id"``) switches to tool-only mode: no model call, the other fields ignored.
    """

    user_message: str = ""
    tool_names: tuple[str, ...] | None = None
    max_iterations: int = 10
    continue_context: bool = True
    context_label: str | None = None
    direct_tool_calls: tuple[dict[str, Any], ...] | None = None


class GetHistory(msgspec.Struct, Request[list[ChatMessage]], frozen=True, forbid_unknown_fields=True):
    """Ask a harness actor for a copy of one context's history (``None``: the primary)."""

    context_label: str | None = None
