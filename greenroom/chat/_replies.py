"""What the assistant says: spec 001's response formats, row by row.

Replies about tool results are made here from the results themselves, never from the
model's text, so they can hold no task id, tool name, stack trace or exception text.
A model's own free text (a greeting, a refusal, a question) goes through
:func:`clean_text`, which removes tool names and keeps it short. Every reply is at most
:data:`MAX_REPLY` characters.
"""

from __future__ import annotations

import re
from typing import Any

from ._tools import TASK_TOOLS, ToolResult

MAX_REPLY = 500
TITLE_CHARS = 60

ADDED = "Got it! Added '{title}' to your list. Anything else?"
COMPLETED = "Great! I've marked '{title}' as complete."
DELETED = "I've removed '{title}' from your tasks."
UPDATED = "Updated! '{title}' now has {changes}."
NOT_FOUND = "I couldn't find a task about '{query}' in your list."
AMBIGUOUS = "I found multiple tasks about '{query}'. Which one: {options}?"
INVALID = "Could you provide more details about {what}?"
SYSTEM_ERROR = "I'm having a bit of trouble right now. Please try again."
CONFIRM_DELETE = "Do you really want to delete '{title}'? Reply 'yes delete' to confirm."
CONFIRM_BULK = "That's a big action. Confirm with '{phrase}'."
BULK_WHAT = "This removes your {count} completed {tasks}: {titles}."
BULK_DELETED = "I've removed {count} completed {tasks} from your list."
BULK_GONE = "Those tasks were already gone; nothing was removed."
BULK_NOTHING = "You have no completed tasks to remove."
EXACT_PHRASE = "To confirm, reply '{phrase}'. Anything else cancels it."
LLM_FAILED = "I'm having trouble processing your request. Please try again."
RATE_LIMITED = "I'm receiving too many requests. Please wait a moment."
TOO_COMPLEX = "That request is too complex. Could you break it into smaller steps?"
TOO_MANY_CALLS = "I did what I could in one go; the rest needs another request."
NOTHING_PENDING = "There's nothing waiting for your confirmation right now."
CANCELLED_PENDING = "Okay, I won't delete '{title}'."
EMPTY_LIST = "Your list is empty. Want to add something?"
TOO_LONG = "That's more than I can take in at once. Could you say it in fewer words?"
NO_ANSWER = "I have no answer to that. Could you put it another way?"
CUT_OFF = "My answer ran too long and was cut off. Could you ask for something shorter?"
STOPPED = "I've been asked to stop for now. Please try again in a little while."
BUDGET_SPENT = "I've used up my allowance for now. Please try again later."
REST_FAILED = "I couldn't finish the rest: {cause}. Please check your list before asking again."

_CAUSES = {
    LLM_FAILED: "something went wrong on my side",
    RATE_LIMITED: "I'm receiving too many requests",
    TOO_LONG: "it got too long for me to take in",
    STOPPED: "I was asked to stop",
    BUDGET_SPENT: "I've used up my allowance for now",
}


def brief(text: str) -> str:
    """Why the rest of a request failed, in a few words, for :data:`REST_FAILED`."""
    return _CAUSES.get(text, _CAUSES[LLM_FAILED])


_FIELDS = {
    "title": "the task's title",
    "new_title": "the new title",
    "description": "the description",
    "status": "which tasks to show (all, pending or completed)",
}
_TOOL_NAME = re.compile(r"\b(" + "|".join(TASK_TOOLS) + r")\b")
_TRACE = re.compile(
    r"Traceback \(most recent call last\)|\bFile \"[^\"]+\", line \d+|\b[A-Z][a-zA-Z]+Error\b"
)


def quote(text: Any, limit: int = TITLE_CHARS) -> str:
    """A title or query as shown to a person: one line, at most ``limit`` characters."""
    value = " ".join(str(text).split())
    return value if len(value) <= limit else value[: limit - 1] + "…"


def short(text: str) -> str:
    return text if len(text) <= MAX_REPLY else text[: MAX_REPLY - 1] + "…"


def for_result(tool_name: str, result: ToolResult) -> str:
    """The reply for one executed tool call."""
    if not result.success:
        return for_error(result)
    data = result.data
    if tool_name == "add_task" and isinstance(data, dict):
        return ADDED.format(title=quote(data.get("title", "")))
    if tool_name == "complete_task" and isinstance(data, dict):
        return COMPLETED.format(title=quote(data.get("title", "")))
    if tool_name == "delete_task" and isinstance(data, dict):
        return DELETED.format(title=quote(data.get("title", "")))
    if tool_name == "update_task" and isinstance(data, dict):
        changed = data.get("changed") or []
        words = [
            {"title": "a new title", "description": "a new description"}.get(c, "changes") for c in changed
        ]
        return UPDATED.format(title=quote(data.get("title", "")), changes=" and ".join(words) or "changes")
    if tool_name == "delete_completed_tasks" and isinstance(data, dict):
        count = data.get("count")
        if not isinstance(count, int) or count <= 0:
            return BULK_GONE
        return BULK_DELETED.format(count=count, tasks=tasks_word(count))
    if tool_name == "list_tasks" and isinstance(data, list):
        return task_list(data)
    return SYSTEM_ERROR


def for_error(result: ToolResult) -> str:
    data = result.data if isinstance(result.data, dict) else {}
    if result.error_code == "NOT_FOUND" and data.get("none") == "completed":
        return BULK_NOTHING
    if result.error_code == "NOT_FOUND":
        return NOT_FOUND.format(query=quote(data.get("query", "that")))
    if result.error_code == "AMBIGUOUS":
        options = ", ".join(f"'{quote(o, 40)}'" for o in (data.get("options") or [])[:5])
        return AMBIGUOUS.format(query=quote(data.get("query", "that")), options=options or "which one")
    if result.error_code == "INVALID_INPUT":
        return INVALID.format(what=_FIELDS.get(str(data.get("field")), "what you have in mind"))
    return SYSTEM_ERROR


def tasks_word(count: int) -> str:
    return "task" if count == 1 else "tasks"


def confirm_bulk(count: int, titles: list[str], phrase: str) -> str:
    """What a bulk delete of ``count`` tasks removes (``titles``: the first few), and the
    phrase that confirms it (spec 001's prompt)."""
    shown = ", ".join(f"'{quote(t, 40)}'" for t in titles[:5])
    if count > len(titles[:5]):
        shown += f" and {count - len(titles[:5])} more"
    what = BULK_WHAT.format(count=count, tasks=tasks_word(count), titles=shown)
    return short(f"{what} {CONFIRM_BULK.format(phrase=phrase)}")


def task_list(tasks: list[Any]) -> str:
    """A numbered list with ☐ (to do) and ✓ (done); never an id."""
    if not tasks:
        return EMPTY_LIST
    lines = ["Here are your tasks:"]
    shown = 0
    for number, task in enumerate(tasks, 1):
        if not isinstance(task, dict):
            continue
        line = f"{number}. {'✓' if task.get('completed') else '☐'} {quote(task.get('title', ''), 50)}"
        if sum(len(x) + 1 for x in lines) + len(line) > MAX_REPLY - 30:
            break
        lines.append(line)
        shown += 1
    if shown < len(tasks):
        lines.append(f"…and {len(tasks) - shown} more.")
    return "\n".join(lines)


def clean_text(text: str) -> str:
    """A model's own words, made safe to show: no tool names, no stack traces, short."""
    if not text or not text.strip() or _TRACE.search(text):
        return LLM_FAILED if text and text.strip() else SYSTEM_ERROR
    cleaned = _TOOL_NAME.sub(lambda m: m.group(1).replace("_", " "), text.strip())
    return short(cleaned)


def combine(parts: list[str], tail: str | None = None) -> str:
    """Several replies in one message, within the length limit: as many as fit, then a
    count of the rest; ``tail`` (a closing remark) always stays."""
    unique: list[str] = []
    for part in parts:
        if part not in unique:
            unique.append(part)
    room = MAX_REPLY - (len(tail) + 1 if tail else 0)
    kept: list[str] = []
    for index, part in enumerate(unique):
        rest = len(unique) - index - 1
        note = f"…and {rest} more done." if rest else ""
        if sum(len(k) + 1 for k in kept) + len(part) + (len(note) + 1 if note else 0) > room:
            kept.append(f"…and {len(unique) - index} more done.")
            break
        kept.append(part)
    if tail:
        kept.append(tail)
    return short("\n".join(kept))
