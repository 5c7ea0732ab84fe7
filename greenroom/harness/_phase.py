"""``PhaseResult``: what one bounded phase of LLM and tool work produced (spec 003, 2.1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal, get_args

from .._errors import InvalidInput

StopReason = Literal["done", "max_iterations", "budget_exhausted", "stop_requested"]
"""Why a phase ended (a closed set: mypy checks every comparison against it)."""

STOP_REASONS: Final[frozenset[StopReason]] = frozenset(get_args(StopReason))
"""``done``: the model answered without asking for tools (or tool-only mode ran its
calls). ``max_iterations``: the phase used its iterations. ``budget_exhausted``: the
token budget refused the next model call. ``stop_requested``: a stop signal ended it."""


@dataclass(frozen=True, slots=True)
class PhaseResult:
    """The only thing a phase returns: operational output, never accounting.

    ``final_text``: the last model text of the phase (``""`` in tool-only mode).
    ``tool_calls``: every tool call of the phase, in order, as dicts with ``id``,
    ``name``, ``arguments``, ``ok`` and ``result`` (when ``ok``) or ``error``.
    ``stop_reason``: one of :data:`STOP_REASONS`. Frozen and slotted: no token or cost
    attribute can be added to it.
    """

    final_text: str
    tool_calls: list[dict[str, Any]]
    stop_reason: StopReason

    def __post_init__(self) -> None:
        if self.stop_reason not in STOP_REASONS:
            raise InvalidInput(
                f"PhaseResult stop_reason must be one of {sorted(STOP_REASONS)}, got {self.stop_reason!r}",
                field="stop_reason",
                value=self.stop_reason,
            )
