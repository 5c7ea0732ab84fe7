"""The harness actor's messages: run one bounded phase (``RunBounded``, answered with a
``PhaseResult``), read a context's history (``GetHistory``)."""

from __future__ import annotations

from typing import Any

import msgspec

from .._request import Request
from ._chat import ChatMessage


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
