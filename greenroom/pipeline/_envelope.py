"""``Envelope``: what travels between the stages of a pipeline.

The raw input, each stage's output by key, free metadata, the hop count (every stage
run is a hop, loops included) and the stage history. It is a plain mutable record owned
by one stage at a time: a stage actor takes it in a message, works on it, and passes it
on, so no two tasks ever touch one envelope at once.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._contracts import AgentOutcome


@dataclass(slots=True)
class StageRecord:
    stage: str
    outcome: str
    duration_ms: int
    error: str | None = None
    summary: str = ""
    """The start of the stage's output as JSON (what it did, at a glance)."""


@dataclass(slots=True)
class Envelope:
    raw_input: str = ""
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)
    hop_count: int = 0
    history: list[StageRecord] = field(default_factory=list)
    envelope_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    done_effects: set[str] = field(default_factory=set)
    """Keys of the non-idempotent tool steps already run (never run twice)."""
    outcome: AgentOutcome | None = None
    """The last stage's outcome."""
    next_stage: str | None = None
    """Where routing sends it next (``None``: the pipeline ends)."""
    question: str | None = None
    """What a stage that asked to clarify or confirm wants to know."""

    def get_output(self, key: str) -> dict[str, Any] | None:
        return self.outputs.get(key)

    def set_output(self, key: str, output: dict[str, Any]) -> None:
        self.outputs[key] = output
