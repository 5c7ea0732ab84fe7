"""``ChatStore``: the chat assistant's data — users' tasks, conversations and pending
confirmations — and the records it is kept in.

The chat runner owns this interface; the embedded store (SQLite under the data dir) and
the PostgreSQL one (shared by several daemons) implement it. Every call is one
transaction: it happens whole or not at all, and a cancelled caller never leaves half a
row (the call it started finishes on its own).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol, runtime_checkable

import msgspec

from .._errors import InvalidInput
from ..messages._codec import prepare_types


class TaskRow(msgspec.Struct, frozen=True, kw_only=True):
    """One of a user's tasks. ``number`` is its position in the user's list (1-based),
    what a person sees; ``id`` is the store's key and is never shown."""

    id: int
    title: str
    description: str = ""
    completed: bool = False
    created_at: float = 0.0
    updated_at: float = 0.0


class ConversationHold(msgspec.Struct, frozen=True):
    """A request's hold on a conversation: its id and the token
    :meth:`ChatStore.hold_conversation` gave. A to-do write made under it (the assistant's
    tools, for the request) is refused with ``Fenced``, nothing changed, once another
    holder took the conversation — the request paused past its hold."""

    conversation_id: str
    token: int


class StoredMessage(msgspec.Struct, frozen=True, kw_only=True):
    role: Literal["user", "assistant"]
    content: str
    created_at: float
    tool_calls: list[dict[str, Any]] | None = None


def pending_from_row(row: tuple[str, str, str, float] | None) -> StoredPending | None:
    """A pending confirmation from its ``(tool_name, parameters as JSON, title,
    expires_at)`` row, if there is one."""
    if row is None:
        return None
    return StoredPending(
        tool_name=row[0], parameters=msgspec.json.decode(row[1]), title=row[2], expires_at=row[3]
    )


def messages_from_rows(rows: Sequence[tuple[str, str, str | None, float]]) -> list[StoredMessage]:
    """A history from ``(role, content, tool_calls as JSON, created_at)`` rows read newest
    first (what both stores select): oldest first."""
    return [
        StoredMessage(
            role="user" if role == "user" else "assistant",
            content=content,
            created_at=created_at,
            tool_calls=None if calls is None else msgspec.json.decode(calls),
        )
        for role, content, calls, created_at in reversed(rows)
    ]


class StoredPending(msgspec.Struct, frozen=True, kw_only=True):
    """A confirmation the user was asked for: exactly this call, once, before it expires."""

    tool_name: str
    parameters: dict[str, Any]
    title: str
    expires_at: float


class ConversationNotFound(InvalidInput):
    """No conversation with that id belongs to this user (nothing was changed)."""

    def __init__(self, conversation_id: str) -> None:
        super().__init__(
            f"no conversation {conversation_id!r} for this user",
            field="conversation_id",
            value=conversation_id,
        )


@runtime_checkable
class ChatStore(Protocol):
    """What the chat layer needs from a database. Every call is one transaction, and a
    user only ever reaches their own tasks and conversations: another user's id finds
    nothing (``None``, ``[]``, :class:`ConversationNotFound`) and changes nothing."""

    async def add_task(
        self, user_id: str, title: str, description: str = "", *, hold: ConversationHold | None = None
    ) -> TaskRow:
        """A new task of the user's, not completed; its ``id`` is new in the store.
        ``hold`` (here and in every to-do write): the request's hold, checked in the same
        transaction — ``Fenced`` and nothing changed once another holder took it."""
        ...

    async def list_tasks(self, user_id: str, status: str = "all") -> list[TaskRow]:
        """The user's tasks (``"all"``, ``"pending"`` or ``"completed"``), oldest first."""
        ...

    async def update_task(
        self,
        user_id: str,
        task_id: int,
        *,
        title: str | None = None,
        description: str | None = None,
        hold: ConversationHold | None = None,
    ) -> TaskRow | None:
        """Change what is given; the task as it is now, or ``None`` (not the user's)."""
        ...

    async def complete_task(
        self, user_id: str, task_id: int, *, hold: ConversationHold | None = None
    ) -> TaskRow | None:
        """Mark it completed; the task, or ``None`` (not the user's)."""
        ...

    async def delete_task(
        self, user_id: str, task_id: int, *, hold: ConversationHold | None = None
    ) -> TaskRow | None:
        """Remove it; the task as it was, or ``None`` (not the user's)."""
        ...

    async def delete_tasks(
        self,
        user_id: str,
        task_ids: list[int],
        *,
        only_completed: bool = False,
        hold: ConversationHold | None = None,
    ) -> list[TaskRow]:
        """Remove those of ``task_ids`` that are the user's (and completed, with
        ``only_completed``), in one transaction; the tasks removed, as they were, by id."""
        ...

    async def open_conversation(self, user_id: str, conversation_id: str, *, create: bool) -> None:
        """Make sure the conversation is the user's: create it (``create``), or raise
        :class:`ConversationNotFound` (also for another user's conversation)."""
        ...

    async def load_history(self, user_id: str, conversation_id: str, limit: int) -> list[StoredMessage]:
        """The conversation's last ``limit`` messages, oldest first (``[]``: not the user's)."""
        ...

    async def save_turn(
        self,
        user_id: str,
        conversation_id: str,
        messages: list[StoredMessage],
        pending: StoredPending | None,
        *,
        hold: int | None = None,
    ) -> None:
        """Append a request's messages and set (or clear, with ``None``) its pending
        confirmation, all in one transaction; :class:`ConversationNotFound` if the
        conversation is not the user's. ``hold``: the token of the request's hold — the
        turn is refused whole (``Fenced``, nothing written) once another holder took the
        conversation (the request paused past its hold, another daemon served the next)."""
        ...

    async def load_pending(self, user_id: str, conversation_id: str) -> StoredPending | None:
        """The confirmation the user was asked for in this conversation, if any."""
        ...

    async def load_conversation(
        self, user_id: str, conversation_id: str, limit: int
    ) -> tuple[StoredPending | None, list[StoredMessage]]:
        """What a request starts from, read in one go: the pending confirmation (if any)
        and the last ``limit`` messages, oldest first. :class:`ConversationNotFound` if
        the conversation is not the user's."""
        ...

    async def take_pending(
        self, user_id: str, conversation_id: str, expected: StoredPending, *, hold: int | None = None
    ) -> bool:
        """Remove the pending confirmation if it is still exactly ``expected``: ``True``
        for the one caller that took it (across every process sharing the store).
        ``hold``: the token of the caller's hold (:meth:`hold_conversation`): refused with
        ``Fenced`` once another holder took the conversation."""
        ...

    async def hold_conversation(self, conversation_id: str, holder: str, seconds: float) -> int | None:
        """Take the conversation for one request for at most ``seconds`` across every
        process sharing the store: the hold's fencing token (``None``: another holder has
        it now). The token stays while ``holder`` keeps a live hold, and grows when the
        conversation passes to another holder (or a lapsed hold is taken again): a turn
        saved under an older token is refused (``save_turn``'s ``hold``). A store one
        process owns may always answer the same token: its runner already serves a
        conversation one request at a time."""
        ...

    async def let_go_conversation(self, conversation_id: str, holder: str) -> None:
        """Give back a hold ``holder`` has (nothing if it has none). The holding ends: a
        write still on its way under its token (a request cut by its deadline whose save
        was in flight) is refused on a store shared by several processes."""
        ...

    async def forget_idle(self, before: float, *, limit: int = 1000) -> int:
        """Delete at most ``limit`` conversations with no turn since ``before`` (their
        messages and pending confirmation with them), never one held by a request now;
        how many went (``[retention] chat_for``). A user's task list is not touched."""
        ...

    async def aclose(self) -> None:
        """Release what the store holds (a pool it was given stays open)."""
        ...


prepare_types(TaskRow, StoredMessage, StoredPending)  # read in the stores' worker threads
