"""``PostgresChatStore``: the chat assistant's data (users' tasks, conversations and pending
confirmations) in PostgreSQL's ``greenroom_chat`` schema, shared by every daemon — the
PostgreSQL peer of the embedded SQLite store, behind ``greenroom.store.ChatStore``.

Each call is one transaction on the backend's pool. One conversation is served one request
at a time across all hosts: a request holds the conversation's row for its deadline
(``busy_by`` / ``busy_until``, taken with a conditional ``UPDATE``), so a request on
another host waits for it, and a host that dies mid-request frees it when the deadline
passes. Two requests creating the same conversation, or appending to it, never both win:
the primary keys decide (``ON CONFLICT``), and the loser is told.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import msgspec

from ..store import (
    ConversationHold,
    ConversationNotFound,
    Fenced,
    StoredMessage,
    StoredPending,
    TaskRow,
    messages_from_rows,
    pending_from_row,
)
from ._db import Database

T = TypeVar("T")

_TASK = "id, title, description, completed, created_at, updated_at"
_encoder = msgspec.json.Encoder()


def _row(row: tuple[Any, ...]) -> TaskRow:
    return TaskRow(
        id=row[0],
        title=row[1],
        description=row[2],
        completed=bool(row[3]),
        created_at=row[4],
        updated_at=row[5],
    )


def _owner(connection: Any, conversation_id: str, *, lock: bool = False) -> str | None:
    row = connection.execute(
        "SELECT user_id FROM greenroom_chat.conversations WHERE id = %s" + (" FOR UPDATE" if lock else ""),
        (conversation_id,),
    ).fetchone()
    return None if row is None else str(row[0])


def _check_hold(
    connection: Any, conversation_id: str, hold: int | None, action: str, *, lock: bool = False
) -> None:
    """``Fenced`` when ``hold`` is not the conversation's token now (its row locked by the
    caller's transaction, or here with ``lock``: a new holding waits for this commit, or
    this write sees it): another holder took it since the hold was given."""
    if hold is None:
        return
    row = connection.execute(
        "SELECT busy_token FROM greenroom_chat.conversations WHERE id = %s" + (" FOR SHARE" if lock else ""),
        (conversation_id,),
    ).fetchone()
    current = None if row is None else int(row[0])
    if current != hold:
        raise Fenced(
            f"conversation {conversation_id!r} ({action})", hold, current, "another request holds it now"
        )


def _under(connection: Any, hold: ConversationHold | None, action: str) -> Any:
    """The connection, once ``hold`` (if any) is checked current with its row locked."""
    if hold is not None:
        _check_hold(connection, hold.conversation_id, hold.token, action, lock=True)
    return connection


class PostgresChatStore:
    """The chat data on ``db`` (the backend's pool; not closed here). ``clock``: the wall
    clock rows are stamped with."""

    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        self.db = db
        self.clock = clock

    async def _run(self, fn: Callable[[Any], T]) -> T:
        return await self.db.run(fn)

    # -- tasks ------------------------------------------------------------------------

    async def add_task(
        self, user_id: str, title: str, description: str = "", *, hold: ConversationHold | None = None
    ) -> TaskRow:
        now = self.clock()
        row = await self._run(
            lambda c: (
                _under(c, hold, "add a task")
                .execute(
                    f"INSERT INTO greenroom_chat.tasks (user_id, title, description, created_at, updated_at) "
                    f"VALUES (%s, %s, %s, %s, %s) RETURNING {_TASK}",
                    (user_id, title, description, now, now),
                )
                .fetchone()
            )
        )
        return _row(row)

    async def list_tasks(self, user_id: str, status: str = "all") -> list[TaskRow]:
        where = {"all": "", "pending": " AND completed = 0", "completed": " AND completed = 1"}[status]
        rows = await self._run(
            lambda c: c.execute(
                f"SELECT {_TASK} FROM greenroom_chat.tasks WHERE user_id = %s{where} ORDER BY id", (user_id,)
            ).fetchall()
        )
        return [_row(row) for row in rows]

    async def update_task(
        self,
        user_id: str,
        task_id: int,
        *,
        title: str | None = None,
        description: str | None = None,
        hold: ConversationHold | None = None,
    ) -> TaskRow | None:
        now = self.clock()
        row = await self._run(
            lambda c: (
                _under(c, hold, "update a task")
                .execute(
                    "UPDATE greenroom_chat.tasks SET title = coalesce(%s, title), "
                    "description = coalesce(%s, description), updated_at = %s "
                    f"WHERE user_id = %s AND id = %s RETURNING {_TASK}",
                    (title, description, now, user_id, task_id),
                )
                .fetchone()
            )
        )
        return None if row is None else _row(row)

    async def complete_task(
        self, user_id: str, task_id: int, *, hold: ConversationHold | None = None
    ) -> TaskRow | None:
        now = self.clock()
        row = await self._run(
            lambda c: (
                _under(c, hold, "complete a task")
                .execute(
                    "UPDATE greenroom_chat.tasks SET completed = 1, updated_at = %s "
                    f"WHERE user_id = %s AND id = %s RETURNING {_TASK}",
                    (now, user_id, task_id),
                )
                .fetchone()
            )
        )
        return None if row is None else _row(row)

    async def delete_task(
        self, user_id: str, task_id: int, *, hold: ConversationHold | None = None
    ) -> TaskRow | None:
        row = await self._run(
            lambda c: (
                _under(c, hold, "delete a task")
                .execute(
                    f"DELETE FROM greenroom_chat.tasks WHERE user_id = %s AND id = %s RETURNING {_TASK}",
                    (user_id, task_id),
                )
                .fetchone()
            )
        )
        return None if row is None else _row(row)

    async def delete_tasks(
        self,
        user_id: str,
        task_ids: list[int],
        *,
        only_completed: bool = False,
        hold: ConversationHold | None = None,
    ) -> list[TaskRow]:
        ids = sorted(set(task_ids))
        rows = await self._run(
            lambda c: (
                _under(c, hold, "delete tasks")
                .execute(
                    f"DELETE FROM greenroom_chat.tasks WHERE user_id = %s AND id = ANY(%s) "
                    f"AND (completed = 1 OR NOT %s) RETURNING {_TASK}",
                    (user_id, ids, only_completed),
                )
                .fetchall()
            )
        )
        return sorted((_row(row) for row in rows), key=lambda task: task.id)

    # -- conversations ----------------------------------------------------------------

    async def open_conversation(self, user_id: str, conversation_id: str, *, create: bool) -> None:
        now = self.clock()

        def open_(c: Any) -> None:
            if create:
                c.execute(
                    "INSERT INTO greenroom_chat.conversations (id, user_id, created_at) VALUES (%s, %s, %s) "
                    "ON CONFLICT (id) DO NOTHING",
                    (conversation_id, user_id, now),
                )
            if _owner(c, conversation_id) != user_id:
                raise ConversationNotFound(conversation_id)

        await self._run(open_)

    @staticmethod
    def _history(c: Any, user_id: str, conversation_id: str, limit: int) -> list[StoredMessage]:
        rows = c.execute(
            "SELECT m.role, m.content, m.tool_calls, m.created_at FROM greenroom_chat.messages m "
            "JOIN greenroom_chat.conversations v ON v.id = m.conversation_id "
            "WHERE m.conversation_id = %s AND v.user_id = %s ORDER BY m.seq DESC LIMIT %s",
            (conversation_id, user_id, limit),
        ).fetchall()
        return messages_from_rows(rows)

    async def load_history(self, user_id: str, conversation_id: str, limit: int) -> list[StoredMessage]:
        return await self._run(lambda c: self._history(c, user_id, conversation_id, limit))

    async def save_turn(
        self,
        user_id: str,
        conversation_id: str,
        messages: list[StoredMessage],
        pending: StoredPending | None,
        *,
        hold: int | None = None,
    ) -> None:
        def save(c: Any) -> None:
            # the conversation's row locked: two turns of one conversation number in turn
            if _owner(c, conversation_id, lock=True) != user_id:
                raise ConversationNotFound(conversation_id)
            _check_hold(c, conversation_id, hold, "save a turn")
            (last,) = c.execute(
                "SELECT coalesce(max(seq), 0) FROM greenroom_chat.messages WHERE conversation_id = %s",
                (conversation_id,),
            ).fetchone()
            rows = [
                (
                    conversation_id,
                    last + offset,
                    message.role,
                    message.content,
                    None if message.tool_calls is None else _encoder.encode(message.tool_calls).decode(),
                    message.created_at,
                )
                for offset, message in enumerate(messages, 1)
            ]
            if rows:
                with c.cursor() as cursor:
                    cursor.executemany(
                        "INSERT INTO greenroom_chat.messages "
                        "(conversation_id, seq, role, content, tool_calls, created_at) "
                        "VALUES (%s, %s, %s, %s, %s, %s)",
                        rows,
                    )
            c.execute(
                "DELETE FROM greenroom_chat.pending_actions WHERE conversation_id = %s", (conversation_id,)
            )
            if pending is not None:
                c.execute(
                    "INSERT INTO greenroom_chat.pending_actions "
                    "(conversation_id, tool_name, parameters, title, expires_at) VALUES (%s, %s, %s, %s, %s)",
                    (
                        conversation_id,
                        pending.tool_name,
                        _encoder.encode(pending.parameters).decode(),
                        pending.title,
                        pending.expires_at,
                    ),
                )

        await self._run(save)

    @staticmethod
    def _pending(c: Any, user_id: str, conversation_id: str) -> StoredPending | None:
        row = c.execute(
            "SELECT p.tool_name, p.parameters, p.title, p.expires_at "
            "FROM greenroom_chat.pending_actions p "
            "JOIN greenroom_chat.conversations v ON v.id = p.conversation_id "
            "WHERE p.conversation_id = %s AND v.user_id = %s",
            (conversation_id, user_id),
        ).fetchone()
        return pending_from_row(row)

    async def load_pending(self, user_id: str, conversation_id: str) -> StoredPending | None:
        return await self._run(lambda c: self._pending(c, user_id, conversation_id))

    async def load_conversation(
        self, user_id: str, conversation_id: str, limit: int
    ) -> tuple[StoredPending | None, list[StoredMessage]]:
        def load(c: Any) -> tuple[StoredPending | None, list[StoredMessage]]:
            if _owner(c, conversation_id) != user_id:
                raise ConversationNotFound(conversation_id)
            return self._pending(c, user_id, conversation_id), self._history(
                c, user_id, conversation_id, limit
            )

        return await self._run(load)

    async def take_pending(
        self, user_id: str, conversation_id: str, expected: StoredPending, *, hold: int | None = None
    ) -> bool:
        def take(c: Any) -> bool:
            if hold is not None:  # the hold checked with the row locked, as a turn's save is
                _owner(c, conversation_id, lock=True)
                _check_hold(c, conversation_id, hold, "take a pending confirmation")
            row = c.execute(
                "DELETE FROM greenroom_chat.pending_actions WHERE conversation_id = %s AND tool_name = %s "
                "AND parameters = %s AND conversation_id IN "
                "(SELECT id FROM greenroom_chat.conversations WHERE user_id = %s) RETURNING conversation_id",
                (
                    conversation_id,
                    expected.tool_name,
                    _encoder.encode(expected.parameters).decode(),
                    user_id,
                ),
            ).fetchone()
            return row is not None

        return bool(await self._run(take))

    async def hold_conversation(self, conversation_id: str, holder: str, seconds: float) -> int | None:
        now = self.clock()
        row = await self._run(
            lambda c: c.execute(
                "UPDATE greenroom_chat.conversations SET busy_by = %(holder)s, busy_until = %(until)s, "
                # the same holder's live hold keeps its token; a new holding takes the next
                "busy_token = CASE WHEN busy_by = %(holder)s AND busy_until >= %(now)s "
                "THEN busy_token ELSE busy_token + 1 END WHERE id = %(id)s "
                "AND (busy_by IS NULL OR busy_until < %(now)s OR busy_by = %(holder)s) RETURNING busy_token",
                {"holder": holder, "until": now + seconds, "id": conversation_id, "now": now},
            ).fetchone()
        )
        return None if row is None else int(row[0])

    async def let_go_conversation(self, conversation_id: str, holder: str) -> None:
        await self._run(
            lambda c: c.execute(
                # the holding ends: a write still on its way under it (a request cut by its
                # deadline while its save was in flight) is refused, as a stale holder's is
                "UPDATE greenroom_chat.conversations SET busy_by = NULL, busy_until = NULL, "
                "busy_token = busy_token + 1 WHERE id = %s AND busy_by = %s",
                (conversation_id, holder),
            )
        )

    async def forget_idle(self, before: float, *, limit: int = 1000) -> int:
        """One statement, a batch at a time (never a mass ``DELETE``); a conversation a
        daemon holds now, or one another pass is deleting, is skipped."""
        query = (
            "WITH gone AS (SELECT c.id FROM greenroom_chat.conversations c WHERE coalesce("
            "(SELECT max(m.created_at) FROM greenroom_chat.messages m WHERE m.conversation_id = c.id), "
            "c.created_at) < %s AND (c.busy_until IS NULL OR c.busy_until < %s) LIMIT %s "
            "FOR UPDATE SKIP LOCKED), "
            "m AS (DELETE FROM greenroom_chat.messages WHERE conversation_id IN (SELECT id FROM gone)), "
            "p AS (DELETE FROM greenroom_chat.pending_actions "
            "WHERE conversation_id IN (SELECT id FROM gone)) "
            "DELETE FROM greenroom_chat.conversations WHERE id IN (SELECT id FROM gone)"
        )
        now = self.clock()
        return int(await self._run(lambda c: c.execute(query, (before, now, limit)).rowcount))

    async def aclose(self) -> None:
        """The pool is the backend's: nothing to close here."""
