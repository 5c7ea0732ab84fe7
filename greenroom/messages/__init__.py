"""Every message, event and record that crosses an actor boundary or touches disk.

msgspec Structs only: no behaviour, no I/O. ``RecordError`` (a ``ValueError``) names
the field and the value when a record from outside does not validate.
"""

import msgspec

from ._chat import (
    ChatMessage,
    ChatReply,
    ChatRequest,
    GetHistory,
    Role,
    RunBounded,
    ToolCall,
    ToolSpec,
    Usage,
)
from ._codec import MISSING, RecordError, convert, decode_json, prepare_types
from ._events import (
    AGENT_EVENTS,
    AGENT_RESULT,
    AGENT_UPDATE,
    HARNESS_PHASE,
    NARRATION,
    TASK_CANCELLED,
    TASK_CLAIMED,
    TASK_COMPLETED,
    TASK_FAILED,
    TASK_RETRIED,
    TASK_SUBMITTED,
    Event,
    OutboxEvent,
    Visibility,
)
from ._protocol import (
    Append,
    AppendBatch,
    Cancel,
    Claim,
    Complete,
    Fail,
    GetTask,
    Granted,
    GraphStats,
    Heartbeat,
    ListTasks,
    NoWork,
    OutboxDelivered,
    OutboxLost,
    OutboxPosition,
    Release,
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
    "TASK_CANCELLED",
    "TASK_CLAIMED",
    "TASK_COMPLETED",
    "TASK_FAILED",
    "TASK_RETRIED",
    "TASK_SUBMITTED",
    "AgentError",
    "AgentResult",
    "AgentTask",
    "Append",
    "AppendBatch",
    "Cancel",
    "ChatMessage",
    "ChatReply",
    "ChatRequest",
    "Claim",
    "Complete",
    "Event",
    "Fail",
    "GetHistory",
    "GetTask",
    "Granted",
    "GraphStats",
    "Heartbeat",
    "ListTasks",
    "NoWork",
    "OutboxDelivered",
    "OutboxEvent",
    "OutboxLost",
    "OutboxPosition",
    "RecordError",
    "Release",
    "Role",
    "RunBounded",
    "Stats",
    "StopGranting",
    "Submit",
    "Subscribe",
    "TaskLimits",
    "TaskStatus",
    "ToolCall",
    "ToolSpec",
    "Unsubscribe",
    "Usage",
    "Visibility",
    "convert",
    "decode_json",
    "prepare_types",
]

# every message type, prepared for decoding before any worker thread decodes one (see
# prepare_types): the stores convert rows and read files in worker threads
prepare_types(
    *(
        value
        for value in list(globals().values())
        if isinstance(value, type) and issubclass(value, msgspec.Struct)
    )
)
