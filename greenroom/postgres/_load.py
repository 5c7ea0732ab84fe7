"""``PostgresLoadRecordStore``: a load run's records in PostgreSQL (``gr_load``), written by
every daemon of a fleet that runs the run's sessions — the peer of the embedded SQLite
file behind ``greenroom.store.LoadRecordStore``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..messages import AgentTask, TaskStatus
from ..store import LoadEntry, check_entries, check_prefix, check_run, fenced
from ._db import Database


class PostgresLoadRecordStore:
    """``LoadRecordStore`` on the backend's database (the pool is the backend's)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def add(
        self, run: str, entries: Sequence[LoadEntry], *, fence: tuple[str, int] | None = None
    ) -> int:
        check_entries(run, entries)
        if not entries:
            return 0
        keys = [entry.key for entry in entries]
        bodies = [entry.body for entry in entries]

        def insert(connection: Any) -> int:
            if fence is not None:  # the session's attempt, checked with its task's row locked
                task_id, token = fence
                row = connection.execute(
                    "SELECT status, owner, token FROM gr_tasks WHERE id = %s FOR SHARE", (task_id,)
                ).fetchone()
                live = None
                if row is not None:
                    live = AgentTask(task_id, "-", status=TaskStatus(row[0]), owner=row[1], token=row[2])
                refusal = fenced(live, task_id, None, token, "record load")
                if refusal is not None:
                    raise refusal
            cursor = connection.execute(
                "INSERT INTO gr_load (run, key, body) SELECT %s, k, b FROM unnest(%s::text[], %s::bytea[]) "
                "WITH ORDINALITY AS t(k, b, n) ORDER BY n ON CONFLICT (run, key) DO NOTHING",
                (run, keys, bodies),
            )
            return int(cursor.rowcount)

        return await self.db.run(insert)

    async def read(self, run: str, prefix: str = "") -> list[LoadEntry]:
        check_run(run)
        check_prefix(prefix)

        def fetch(connection: Any) -> list[LoadEntry]:
            rows = connection.execute(
                "SELECT key, body FROM gr_load WHERE run = %s AND starts_with(key, %s) ORDER BY seq",
                (run, prefix),
            )
            return [LoadEntry(key, bytes(body)) for key, body in rows]

        return await self.db.run(fetch)

    async def count(self, run: str, prefix: str = "") -> int:
        check_run(run)
        check_prefix(prefix)

        def fetch(connection: Any) -> int:
            row = connection.execute(
                "SELECT count(*) FROM gr_load WHERE run = %s AND starts_with(key, %s)", (run, prefix)
            ).fetchone()
            return int(row[0])

        return await self.db.run(fetch)

    async def runs(self) -> dict[str, int]:
        def fetch(connection: Any) -> dict[str, int]:
            rows = connection.execute("SELECT run, count(*) FROM gr_load GROUP BY run ORDER BY run")
            return {run: int(n) for run, n in rows}

        return await self.db.run(fetch)

    async def drop(self, run: str) -> int:
        check_run(run)

        def delete(connection: Any) -> int:
            return int(connection.execute("DELETE FROM gr_load WHERE run = %s", (run,)).rowcount)

        return await self.db.run(delete)

    async def aclose(self) -> None:
        pass
