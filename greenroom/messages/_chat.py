"""Chat-model records: what a harness sends a model and what comes back (the messages
a harness actor itself answers are in ``_harness``).

The shapes follow the OpenAI chat-completions protocol closely enough that the
adapter is a plain mapping, but they are ours: a tool call's ``arguments`` are
already a dict, and a model that sent arguments that are not a JSON object says so in
``arguments_error`` instead of raising.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

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


class CallTiming(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """How a streamed model call went, in seconds of the event loop's clock.

    ``first_token``: from the request to the first piece of the reply (text or a tool
    call); ``duration``: from the request to the reply's end; ``tokens_per_second``: the
    reply's tokens after the first over the time they took (``None`` when the reply was
    one piece, or took no time)."""

    first_token: float
    duration: float
    tokens_per_second: float | None = None


class ChatReply(msgspec.Struct, frozen=True, forbid_unknown_fields=True, gc=False):
    """What a model answered: text, tool calls (either may be empty) and usage.
    ``timing``: how the call went when it was streamed (``None`` otherwise)."""

    text: str = ""
    tool_calls: tuple[ModelToolCall, ...] = ()
    usage: Usage = Usage()
    finish_reason: str = "stop"
    timing: CallTiming | None = None


class ChatDelta(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    """One piece of a streamed reply: ``text`` as the model makes it, or a ``tool_call``
    once all of its fragments arrived; the last piece carries ``usage`` and
    ``finish_reason`` (and is the only one that does)."""

    text: str = ""
    tool_call: ModelToolCall | None = None
    usage: Usage | None = None
    finish_reason: str | None = None
