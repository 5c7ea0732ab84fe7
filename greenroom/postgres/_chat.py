"""``PostgresChatStore``: the chat assistant's data (users' tasks, conversations, pending
confirmations) in PostgreSQL, shared by every daemon, behind the chat layer's
``ChatStore`` interface.

It runs the embedded store's statements — the same rules, one transaction per call — in
the ``greenroom_chat`` schema on the daemon's pool. One conversation is served one request
at a time across all hosts: a request holds the conversation's row for its deadline
(``busy_by`` / ``busy_until``, taken with a conditional ``UPDATE``), so a request on
another host waits for it, and a host that dies mid-request frees it when the deadline
passes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..chat._store import SQLiteChatStore, TaskRow
from ._db import Database

T = TypeVar("T")


class _Adapted:
    """A psycopg connection that takes the embedded store's ``?`` placeholders."""

    __slots__ = ("connection",)

    def __init__(self, connection: Any) -> None:
        self.connection = connection

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> Any:
        return self.connection.execute(sql.replace("?", "%s"), params)


class PostgresChatStore(SQLiteChatStore):
    def __init__(self, db: Database, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__("unused", clock=clock)
        self.db = db

    async def _run(self, fn: Callable[[Any], T], *, write: bool = True) -> T:
        def call(connection: Any) -> T:
            connection.execute("SET LOCAL search_path TO greenroom_chat")
            return fn(_Adapted(connection))

        return await self.db.run(call)

    async def add_task(self, user_id: str, title: str, description: str = "") -> TaskRow:
        now = self.clock()

        def add(db: Any) -> TaskRow:
            (task_id,) = db.execute(
                "INSERT INTO tasks (user_id, title, description, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?) RETURNING id",
                (user_id, title, description, now, now),
            ).fetchone()
            return TaskRow(id=task_id, title=title, description=description, created_at=now, updated_at=now)

        return await self._run(add)

    async def hold_conversation(self, conversation_id: str, holder: str, seconds: float) -> bool:
        """Take the conversation for ``seconds`` unless another holder has it now."""
        now = self.clock()

        def hold(db: Any) -> bool:
            row = db.execute(
                "UPDATE conversations SET busy_by = ?, busy_until = ? WHERE id = ? "
                "AND (busy_by IS NULL OR busy_until < ? OR busy_by = ?) RETURNING id",
                (holder, now + seconds, conversation_id, now, holder),
            ).fetchone()
            return row is not None

        return await self._run(hold)

    async def let_go_conversation(self, conversation_id: str, holder: str) -> None:
        def let_go(db: Any) -> None:
            db.execute(
                "UPDATE conversations SET busy_by = NULL, busy_until = NULL WHERE id = ? AND busy_by = ?",
                (conversation_id, holder),
            )

        await self._run(let_go)

    async def aclose(self) -> None:
        """The pool is the daemon's: nothing to close here."""
