"""Every message, event and record that crosses an actor boundary or touches disk.

msgspec Structs only: no behaviour, no I/O. ``RecordError`` (a ``ValueError``) names
the field and the value when a record from outside does not validate.
"""

import msgspec

from . import _chat, _entities, _events, _harness, _protocol, _tasks
from ._chat import (
    CallTiming,
    ChatDelta,
    ChatMessage,
    ChatReply,
    ChatRequest,
    ModelToolCall,
    Role,
    ToolOutcome,
    ToolSpec,
    Usage,
)
from ._codec import MISSING, RecordError, convert, prepare_types
from ._entities import EntityActivated, EntityPassivated, PassivatedBecause
from ._events import (
    AGENT_EVENTS,
    AGENT_RESULT,
    AGENT_UPDATE,
    HARNESS_PHASE,
    NARRATION,
    NARRATION_DELTA,
    TASK_APPROVED,
    TASK_CANCELLED,
    TASK_CLAIMED,
    TASK_COMPLETED,
    TASK_DENIED,
    TASK_FAILED,
    TASK_RETRIED,
    TASK_SUBMITTED,
    TASK_WAITING,
    Event,
    GraphEvent,
    Visibility,
)
from ._harness import GetHistory, RunBounded
from ._protocol import (
    Append,
    AppendMany,
    AwaitChange,
    Cancel,
    Claim,
    Complete,
    Decide,
    Dependents,
    Durations,
    Fail,
    Flush,
    GetTask,
    Granted,
    GraphStats,
    Heartbeat,
    ListTasks,
    LogFigures,
    LogStats,
    NoWork,
    Park,
    Release,
    Retry,
    Stats,
    StopGranting,
    Submit,
    Subscribe,
    Unsubscribe,
)
from ._tasks import AgentError, AgentResult, AgentTask, TaskLimits, TaskStatus

__all__ = [
    "AGENT_EVENTS",
    "AGENT_RESULT",
    "AGENT_UPDATE",
    "HARNESS_PHASE",
    "MISSING",
    "NARRATION",
    "NARRATION_DELTA",
    "TASK_APPROVED",
    "TASK_CANCELLED",
    "TASK_CLAIMED",
    "TASK_COMPLETED",
    "TASK_DENIED",
    "TASK_FAILED",
    "TASK_RETRIED",
    "TASK_SUBMITTED",
    "TASK_WAITING",
    "AgentError",
    "AgentResult",
    "AgentTask",
    "Append",
    "AppendMany",
    "AwaitChange",
    "CallTiming",
    "Cancel",
    "ChatDelta",
    "ChatMessage",
    "ChatReply",
    "ChatRequest",
    "Claim",
    "Complete",
    "Decide",
    "Dependents",
    "Durations",
    "EntityActivated",
    "EntityPassivated",
    "Event",
    "Fail",
    "Flush",
    "GetHistory",
    "GetTask",
    "Granted",
    "GraphEvent",
    "GraphStats",
    "Heartbeat",
    "ListTasks",
    "LogFigures",
    "LogStats",
    "ModelToolCall",
    "NoWork",
    "Park",
    "PassivatedBecause",
    "RecordError",
    "Release",
    "Retry",
    "Role",
    "RunBounded",
    "Stats",
    "StopGranting",
    "Submit",
    "Subscribe",
    "TaskLimits",
    "TaskStatus",
    "ToolOutcome",
    "ToolSpec",
    "Unsubscribe",
    "Usage",
    "Visibility",
    "convert",
]

# every message type, the private ones too, prepared for decoding before
# any worker thread decodes one (see prepare_types): the stores convert rows and read
# files in worker threads
prepare_types(
    *(
        value
        for module in (_chat, _entities, _events, _harness, _protocol, _tasks)
        for value in list(vars(module).values())
        if isinstance(value, type) and issubclass(value, msgspec.Struct)
    )
)
