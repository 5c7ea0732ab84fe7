"""``TokenGauge``: how many tokens a request will take, estimated and calibrated by the
server's own counts, so a history can be trimmed to fit a model's context window.

The estimate is the one :func:`estimate_usage` makes (about four characters a token,
plus a little per message, per tool call and for the tool schemas on offer); every reply
that reports ``usage`` moves a correction factor towards what the server counted, so a
model whose tokenizer is wordier than four characters a token is not overfilled twice.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ..messages import ChatMessage, ChatRequest, ToolSpec, Usage

_encoder = msgspec.json.Encoder()
_MIN_FACTOR, _MAX_FACTOR = 0.25, 8.0


def message_tokens(message: ChatMessage) -> int:
    """The uncorrected estimate for one message (as :func:`estimate_usage` counts it)."""
    arguments = sum(len(_encoder.encode(call.arguments)) for call in message.tool_calls)
    return 4 + len(message.content or "") // 4 + (8 * len(message.tool_calls)) + arguments // 4


def tools_tokens(tools: Sequence[ToolSpec]) -> int:
    """The uncorrected estimate for the tool schemas offered with a request."""
    return sum(len(_encoder.encode(tool)) for tool in tools) // 4


class TokenGauge:
    """Estimates of prompt sizes in tokens, corrected by what a server reports.

    ``factor``: the current correction (1.0 until a reply reports usage). Not thread
    safe; one per engine (or per model) on one event loop.
    """

    def __init__(self) -> None:
        self.factor = 1.0

    def estimate(self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec] = ()) -> int:
        """Tokens these messages and tool schemas are likely to take, corrected."""
        raw = sum(message_tokens(m) for m in messages) + tools_tokens(tools)
        return int(raw * self.factor) + 1

    def observe(self, request: ChatRequest, usage: Usage) -> None:
        """Learn from a reply: ``usage.prompt_tokens`` is what ``request`` really took.
        A reply without a count (``0``) teaches nothing."""
        if usage.prompt_tokens <= 0:
            return
        raw = sum(message_tokens(m) for m in request.messages) + tools_tokens(request.tools)
        if raw <= 0:
            return
        seen = min(_MAX_FACTOR, max(_MIN_FACTOR, usage.prompt_tokens / raw))
        # a moving average: one odd reply moves it a third of the way
        self.factor += (seen - self.factor) / 3

    def fit(self, history: Sequence[ChatMessage], budget: int) -> list[ChatMessage]:
        """The longest recent part of ``history`` whose estimate is within ``budget``
        tokens (oldest messages dropped first; empty when not even the newest fits)."""
        kept: list[ChatMessage] = []
        used = 0
        for message in reversed(history):
            cost = int(message_tokens(message) * self.factor) + 1
            if used + cost > budget:
                break
            used += cost
            kept.append(message)
        kept.reverse()
        return kept
