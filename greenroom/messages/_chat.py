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


class ToolOutcome(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True, gc=False):
    """One tool call and what came of it — greenroom's one shape for it, from the model's
    request through the harness, the chat engine and the load generator to the store.

    ``ok``: the tool answered ``result`` (any JSON value); else ``error`` says what went
    wrong (a refusal, bad arguments, the tool raising) and ``error_code`` may class it
    (spec 002's ``NOT_FOUND``, ``INVALID_INPUT``, …). The specs' names are views of it:
    spec 003's tool-call dicts (:meth:`as_record`), spec 002's ``ToolResult`` and spec
    001's ``ToolCallRecord`` (``greenroom.chat``: ``ToolResult.of``, ``ToolCallRecord.of``),
    spec 004's ``StandardToolResult`` (``greenroom.pipeline``: ``StandardToolResult.of``).
    """

    name: str
    arguments: dict[str, Any]
    ok: bool
    result: Any = None
    error: str | None = None
    error_code: str | None = None
    id: str | None = None
    """The model's id for the call (``None``: the call was not the model's)."""
    duration_ms: int | None = None

    @classmethod
    def failed(
        cls,
        name: str,
        arguments: dict[str, Any],
        error: str,
        *,
        id: str | None = None,
        code: str | None = None,
    ) -> ToolOutcome:
        """A call that did not answer: ``error`` is what the model is told."""
        return cls(name=name, arguments=arguments, ok=False, error=error, error_code=code, id=id)

    def content(self) -> str:
        """What the model is shown: a text result as it is, any other as JSON, a failure
        as ``error: …``. ``TypeError`` for a result that is not JSON (:meth:`shown`)."""
        if not self.ok:
            return f"error: {self.error}"
        result = self.result
        return result if isinstance(result, str) else _encode(result).decode()

    def shown(self) -> tuple[ToolOutcome, str]:
        """This outcome and :meth:`content` — or, for a result that is not JSON, the
        failure saying so and its content (what a tool's caller keeps and shows)."""
        try:
            return self, self.content()
        except (TypeError, msgspec.EncodeError) as bad:
            error = f"tool {self.name!r} returned a value that is not JSON: {bad}"
            failed = ToolOutcome.failed(self.name, self.arguments, error, id=self.id)
            return failed, failed.content()

    def as_record(self) -> dict[str, Any]:
        """Spec 003's tool-call dict (``PhaseResult.tool_calls``): ``id``, ``name``,
        ``arguments``, ``ok`` and then ``result`` or ``error``."""
        record: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "arguments": self.arguments,
            "ok": self.ok,
        }
        if self.ok:
            record["result"] = self.result
        else:
            record["error"] = self.error
            if self.error_code is not None:
                record["error_code"] = self.error_code
        if self.duration_ms is not None:
            record["duration_ms"] = self.duration_ms
        return record


_encode = msgspec.json.Encoder().encode


class ChatMessage(msgspec.Struct, frozen=True, forbid_unknown_fields=True, omit_defaults=True, gc=False):
    """One message of a conversation — what a model is sent, what a harness keeps and
    what the chat store keeps. ``tool_calls`` only on ``assistant`` messages;
    ``tool_call_id`` only on ``tool`` messages (the answer to that call).

    ``at`` (when it was said, Unix seconds; ``0``: not recorded) and ``outcomes`` (the
    tools an assistant message's turn ran, and what came of them — what a conversation's
    reader sees instead of separate ``tool`` messages) are kept, never sent to a model."""

    role: Role
    content: str | None = None
    tool_calls: tuple[ModelToolCall, ...] = ()
    tool_call_id: str | None = None
    at: float = 0.0
    outcomes: tuple[ToolOutcome, ...] = ()


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
