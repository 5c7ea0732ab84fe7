"""Events in the event log (``events.jsonl``): one JSON object per line."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

Visibility = Literal["internal", "user"]

AGENT_UPDATE = "AGENT_UPDATE"
AGENT_RESULT = "AGENT_RESULT"
TASK_SUBMITTED = "TASK_SUBMITTED"
TASK_CLAIMED = "TASK_CLAIMED"
TASK_COMPLETED = "TASK_COMPLETED"
TASK_FAILED = "TASK_FAILED"
TASK_RETRIED = "TASK_RETRIED"
TASK_CANCELLED = "TASK_CANCELLED"
TASK_WAITING = "TASK_WAITING"
"""A task parked for a person: its payload carries the exact call."""
TASK_APPROVED = "TASK_APPROVED"
TASK_DENIED = "TASK_DENIED"
"""A person decided a waiting call (who and when in the payload); the task is PENDING again."""
NARRATION = "NARRATION"
NARRATION_DELTA = "NARRATION_DELTA"
"""A piece of a narration as the model makes it (``visibility="user"``: the narrator's
only; ``greenroom.log.narrate``). The ``NARRATION`` after the last one holds it whole."""
HARNESS_PHASE = "HARNESS_PHASE"
"""One bounded phase of a harness actor ended (internal). A durable phase says how many
of its steps were ``replayed`` from the journal and how many it ``recorded``."""

AGENT_EVENTS = frozenset({AGENT_UPDATE, AGENT_RESULT})
"""Event types that agents emit; the log actor forces them to ``visibility="internal"``."""


class Event(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One appended event. ``seq`` starts at 1 and has no gaps; ``ts`` is wall-clock.

    ``origin`` is set on events appended from a durable journal (``AppendMany`` with an
    ``origin``): ``(journal batch seq, position in the batch)``. The journal is their
    source of truth; the origin lets a store keep each once, however often it is sent.
    """

    seq: int
    ts: float
    type: str
    visibility: Visibility = "internal"
    task_id: str | None = None
    agent_id: str | None = None
    payload: dict[str, Any] = {}
    origin: tuple[int, int] | None = None


class GraphEvent(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """An event a task-graph transition causes (``TASK_*``, an agent's ``AGENT_RESULT``):
    made durable with the transition, by the backend that stores the graph."""

    type: str
    task_id: str | None = None
    agent_id: str | None = None
    payload: dict[str, Any] = {}
