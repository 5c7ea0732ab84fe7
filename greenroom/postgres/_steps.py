"""``PostgresStepStore``: the step journal in PostgreSQL (``gr_steps``), shared by every
daemon of a fleet — the peer of the embedded SQLite journal behind
``greenroom.store.StepStore``. A task resumed on another daemon replays what the first
one recorded. Each call is one transaction on the backend's pool."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ..store import Step, check_step, encoded_body, step_from_row
from ._db import Database

_encoder = msgspec.json.Encoder()


def drop_steps(connection: Any, task_ids: list[str]) -> int:
    """Forget the steps of ``task_ids`` in the caller's transaction: :meth:`PostgresStepStore.drop`
    on its own, or the archive pass with the tasks it moves (one transaction: a task and its
    journal leave together). The one place ``gr_steps`` rows are deleted."""
    cursor = connection.execute("DELETE FROM gr_steps WHERE task_id = ANY(%s)", (task_ids,))
    return int(cursor.rowcount)


class PostgresStepStore:
    """``StepStore`` on the backend's database (the pool is the backend's)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def write(self, steps: Sequence[Step], *, durable: bool = True) -> None:
        rows = []
        for step in steps:
            check_step(step)
            body = encoded_body(step).decode()
            rows.append((step.task_id, step.key, step.kind, step.fingerprint, body, step.attempt, step.at))
        if not rows:
            return

        def insert(connection: Any) -> None:
            with connection.cursor() as cursor:
                if not durable:  # the server has it once committed: this process dying loses nothing
                    cursor.execute("SET LOCAL synchronous_commit TO off")
                cursor.executemany(
                    "INSERT INTO gr_steps (task_id, key, kind, fingerprint, body, attempt, at) "
                    "VALUES (%s, %s, %s, %s, %s::json, %s, %s) ON CONFLICT (task_id, key, kind) DO NOTHING",
                    rows,
                )

        await self.db.run(insert)

    async def sync(self) -> None:
        """A transaction with an id commits synchronously: the server flushes its WAL up to
        that commit, so every asynchronous commit before it is durable too."""

        def flush(connection: Any) -> None:
            connection.execute("SELECT pg_catalog.txid_current()")

        await self.db.run(flush)

    async def incarnation(self) -> str | None:
        """``None``: an asynchronous commit lives in the server's memory until its WAL is
        flushed, and a server's crash and restart (which need not change its start time)
        loses it; the journal makes what it must trust durable instead."""
        return None

    async def read(self, task_id: str) -> list[Step]:
        def fetch(connection: Any) -> list[tuple[Any, ...]]:
            return list(
                connection.execute(
                    "SELECT key, kind, fingerprint, body::text, attempt, at FROM gr_steps "
                    "WHERE task_id = %s ORDER BY seq",
                    (task_id,),
                )
            )

        return [step_from_row(task_id, row, "gr_steps") for row in await self.db.run(fetch)]

    async def read_many(self, task_ids: Sequence[str]) -> dict[str, list[Step]]:
        ids = list(dict.fromkeys(task_ids))

        def fetch(connection: Any) -> list[tuple[Any, ...]]:
            return list(
                connection.execute(
                    "SELECT task_id, key, kind, fingerprint, body::text, attempt, at FROM gr_steps "
                    "WHERE task_id = ANY(%s) ORDER BY seq",
                    (ids,),
                )
            )

        found: dict[str, list[Step]] = {task_id: [] for task_id in ids}
        for task_id, *row in await self.db.run(fetch) if ids else []:
            found[task_id].append(step_from_row(task_id, tuple(row), "gr_steps"))
        return found

    async def drop(self, task_ids: Sequence[str]) -> int:
        ids = list(task_ids)
        if not ids:
            return 0

        return await self.db.run(lambda connection: drop_steps(connection, ids))

    async def aclose(self) -> None:
        return None
