"""The task-graph owner: one actor that grants claims by message and keeps the graph in a
``TaskStore`` (files under a data dir, or PostgreSQL; see ``greenroom.store``)."""

from ..store import (
    DuplicateTask,
    Fenced,
    InvalidSubmission,
    InvalidTransition,
    NotOwner,
    TaskGraphError,
    UnknownTask,
)
from ._actor import SupervisorActor
from ._bulk import MAX_BULK, BulkDecision, WaitingFilter, decide_waiting

__all__ = [
    "MAX_BULK",
    "BulkDecision",
    "DuplicateTask",
    "Fenced",
    "InvalidSubmission",
    "InvalidTransition",
    "NotOwner",
    "SupervisorActor",
    "TaskGraphError",
    "UnknownTask",
    "WaitingFilter",
    "decide_waiting",
]
