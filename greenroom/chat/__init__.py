"""The chat runner (specs 001 and 002): a task-management assistant, end to end.

:class:`AgentRunner` runs each request in its own short-lived, interruptible actor (a
child of a long-lived runner actor) under a deadline; :class:`LLMAgentEngine` decides with
any ``ChatModel`` and calls the task tools through a :class:`ToolExecutor` — an MCP client
(:class:`MCPToolExecutor`) on the MCP server :func:`task_server` serves, in-process by
default, or any MCP server by URL or command. The user's to-dos and conversations live in a
:class:`ChatStore`, on the records of the daemon's store (``ChatStore(store.records(),
shared=store.shared)``: no backend code of its own).
``AgentRunner.stream`` gives a request's answer as it is made (:class:`ChatEvents`).
"""

from ._app import Assistant, open_assistant
from ._engine import CHAT_DECISION, CHAT_TOOL, LLMAgentEngine
from ._kept import ChatStore, ConversationHold, ConversationNotFound, StoredPending, TaskRow
from ._runner import AgentRunner
from ._stream import ChatEvent, ChatEvents, ReplyDelta, ToolFinished, ToolStarted
from ._tools import TASK_TOOLS, MCPToolExecutor, ToolExecutor, ToolResult, task_server
from ._types import (
    CONSTITUTION,
    AgentContext,
    AgentDecision,
    AgentEngineConfig,
    AgentResult,
    DecisionContext,
    DecisionType,
    MessageHistory,
    PendingAction,
    ToolCall,
    ToolCallRecord,
)

__all__ = [
    "CHAT_DECISION",
    "CHAT_TOOL",
    "CONSTITUTION",
    "TASK_TOOLS",
    "AgentContext",
    "AgentDecision",
    "AgentEngineConfig",
    "AgentResult",
    "AgentRunner",
    "Assistant",
    "ChatEvent",
    "ChatEvents",
    "ChatStore",
    "ConversationHold",
    "ConversationNotFound",
    "DecisionContext",
    "DecisionType",
    "LLMAgentEngine",
    "MCPToolExecutor",
    "MessageHistory",
    "PendingAction",
    "ReplyDelta",
    "StoredPending",
    "TaskRow",
    "ToolCall",
    "ToolCallRecord",
    "ToolExecutor",
    "ToolFinished",
    "ToolResult",
    "ToolStarted",
    "open_assistant",
    "task_server",
]
