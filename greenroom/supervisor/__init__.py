"""The task-graph owner: an actor that holds the graph in memory, is the only writer of
``tasks.graph.json``, and grants claims by message."""

from ._actor import SupervisorActor
from ._errors import (
    GraphFileError,
    InvalidSubmission,
    InvalidTransition,
    NotOwner,
    TaskGraphError,
    UnknownTask,
)
from ._graph import TaskGraph
from ._outbox import result_payload
from ._store import GRAPH_FILE, JOURNAL_FILE, GraphStore, LoadReport

__all__ = [
    "GRAPH_FILE",
    "JOURNAL_FILE",
    "GraphFileError",
    "GraphStore",
    "InvalidSubmission",
    "InvalidTransition",
    "LoadReport",
    "NotOwner",
    "SupervisorActor",
    "TaskGraph",
    "TaskGraphError",
    "UnknownTask",
    "result_payload",
]
