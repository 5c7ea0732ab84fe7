"""``RuleBasedModel``: an offline chat model for the task assistant, behind ``ChatModel``.

It understands a small command language and answers exactly the way an LLM with tools
does — tool calls in its reply, then text once it sees their results — so the whole
chat path (engine, MCP, store, replies, logs) runs on it with no network:

- ``add buy milk`` / ``add task buy milk`` / ``remind me to buy milk``  → ``add_task``
- ``show my tasks`` / ``list`` / ``show pending`` / ``show completed``     → ``list_tasks``
- ``done buy milk`` / ``complete buy milk`` / ``finish buy milk``        → ``complete_task``
- ``delete buy milk`` / ``remove buy milk``                               → ``delete_task``
- ``delete all completed tasks`` / ``clear completed``             → ``delete_completed_tasks``
- ``rename buy milk to buy oat milk``                                       → ``update_task``
- a greeting → a greeting; ``add`` with nothing after it → a question (a call to
  ``ask_clarification`` when the request offers it); anything else → a polite refusal
  (it only manages tasks).

Deterministic: the same request always gets the same reply. Usage is estimated from the
text (about four characters a token).
"""

from __future__ import annotations

import itertools
import re

import anyio

from .._checks import check_seconds
from ..messages import ChatMessage, ChatReply, ChatRequest, ModelToolCall, Usage
from ._price import Price
from ._protocol import ClosingModel
from ._stream import PlayedModel

_GREETING = re.compile(r"^\s*(hi|hello|hey|good (morning|afternoon|evening)|thanks|thank you)\b", re.I)
_ADD = re.compile(
    r"^\s*(?:please\s+)?(?:add(?:\s+a)?(?:\s+task)?|remind me to|new task|create(?:\s+a)?\s+task)"
    r"\b[:\s]*(.*)$",
    re.I,
)
_LIST = re.compile(r"^\s*(?:please\s+)?(?:show|list|what are|what's on|display)\b(.*)$", re.I)
_DONE = re.compile(
    r"^\s*(?:please\s+)?(?:done|complete|finish(?:ed)?|mark|check off)\b[:\s]*"
    r"(.*?)(?:\s+as\s+(?:done|complete))?\s*$",
    re.I,
)
_BULK = re.compile(
    r"^\s*(?:please\s+)?(?:delete|remove|clear|drop)\s+(?:all\s+(?:of\s+)?)?(?:my\s+|the\s+)?"
    r"(?:completed|done|finished)(?:\s+tasks?)?\s*$",
    re.I,
)
_DELETE = re.compile(r"^\s*(?:please\s+)?(?:delete|remove|drop)\b[:\s]*(.*)$", re.I)
_RENAME = re.compile(r"^\s*(?:please\s+)?(?:rename|update|change)\b\s*(.+?)\s+to\s+(.+)$", re.I)

GREETING = "Hi! I can add, list, complete, update or delete your tasks. What would you like to do?"
REFUSAL = "I can only help with your tasks: adding, listing, completing, updating or deleting them."
WHICH_TITLE = "What should the task be called?"
WHICH_TASK = "Which task do you mean?"
DONE_TEXT = "Done."


def _strip_quotes(text: str) -> str:
    return text.strip().strip("'\"").strip()


class RuleBasedModel(PlayedModel, ClosingModel):
    """A ``ChatModel`` that follows the rules above. ``latency``: seconds per call
    (cancellable), for benchmarks and deadline tests; ``token_latency``: seconds between
    the pieces of a streamed reply (a whole reply takes as long as its stream). It
    streams (``stream``), on the event loop's clock."""

    def __init__(
        self, *, latency: float = 0.0, token_latency: float = 0.0, price: Price | None = None
    ) -> None:
        self.latency = check_seconds("RuleBasedModel", "latency", latency, zero_ok=True)
        self.token_latency = check_seconds("RuleBasedModel", "token_latency", token_latency, zero_ok=True)
        self.price = price
        self.calls = 0
        self._ids = itertools.count(1)

    async def chat(self, request: ChatRequest, *, timeout: float | None = None) -> ChatReply:
        if self.latency:
            await anyio.sleep(self.latency)
        else:
            await anyio.lowlevel.checkpoint()
        reply = self._answer(request)
        await self._play_rest(reply)
        return reply

    def _answer(self, request: ChatRequest) -> ChatReply:
        self.calls += 1
        reply = self._decide(request)
        prompt = sum(len(m.content or "") for m in request.messages) // 4 + 1
        completion = len(reply.text) // 4 + 8 * len(reply.tool_calls) + 1
        return ChatReply(reply.text, reply.tool_calls, Usage(prompt, completion), reply.finish_reason)

    def _call(self, name: str, **arguments: object) -> ChatReply:
        return ChatReply(
            tool_calls=(ModelToolCall(f"call-{next(self._ids)}", name, dict(arguments)),),
            finish_reason="tool_calls",
        )

    def _ask(self, question: str, names: set[str]) -> ChatReply:
        """Ask the user: through ``ask_clarification`` when offered (the chat engine's
        way of knowing a question from a greeting that ends in "?"), else as text."""
        if "ask_clarification" in names:
            return self._call("ask_clarification", question=question)
        return ChatReply(text=question)

    def _decide(self, request: ChatRequest) -> ChatReply:
        last: ChatMessage | None = request.messages[-1] if request.messages else None
        if last is None:
            return ChatReply(text=GREETING)
        if last.role == "tool" or not request.tools:
            return ChatReply(text=DONE_TEXT)  # it saw the results (or may not call tools): answer
        if last.role != "user":
            return ChatReply(text=DONE_TEXT)
        text = (last.content or "").strip()
        names = {tool.name for tool in request.tools}
        if (match := _RENAME.match(text)) and "update_task" in names:
            return self._call("update_task", title=_strip_quotes(match[1]), new_title=_strip_quotes(match[2]))
        if match := _ADD.match(text):
            title = _strip_quotes(match[1])
            return self._call("add_task", title=title) if title else self._ask(WHICH_TITLE, names)
        if _BULK.match(text) and "delete_completed_tasks" in names:
            return self._call("delete_completed_tasks")
        if match := _DELETE.match(text):
            title = _strip_quotes(match[1])
            return self._call("delete_task", title=title) if title else self._ask(WHICH_TASK, names)
        if match := _DONE.match(text):
            title = _strip_quotes(match[1])
            return self._call("complete_task", title=title) if title else self._ask(WHICH_TASK, names)
        if match := _LIST.match(text):
            rest = match[1].lower()
            status = "pending" if ("pending" in rest or "open" in rest or "to do" in rest) else "all"
            status = "completed" if ("completed" in rest or "done" in rest) else status
            return self._call("list_tasks", status=status)
        if _GREETING.match(text):
            return ChatReply(text=GREETING)
        return ChatReply(text=REFUSAL)

    async def aclose(self) -> None:
        pass
