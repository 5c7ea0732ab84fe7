"""``PostgresEntityStore``: entities' saved states in PostgreSQL (``gr_entities``), shared
by every daemon of a fleet — the peer of the embedded SQLite file behind
``greenroom.store.EntityStore``."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from ..store import StoredState, check_key, check_kind, save_rows
from ._db import Database


class PostgresEntityStore:
    """``EntityStore`` on the backend's database (the pool is the backend's)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    async def load(self, kind: str, keys: Sequence[str]) -> dict[str, StoredState]:
        check_kind(kind)
        wanted = [check_key(key) for key in keys]
        if not wanted:
            return {}

        def select(connection: Any) -> dict[str, StoredState]:
            rows = connection.execute(
                "SELECT key, state, version, saved_at FROM gr_entities WHERE kind = %s AND key = ANY(%s)",
                (kind, wanted),
            )
            return {
                key: StoredState(key, bytes(state), int(version), float(at))
                for key, state, version, at in rows
            }

        return await self.db.run(select)

    async def save(self, kind: str, states: Sequence[tuple[str, bytes]]) -> dict[str, int]:
        rows = save_rows(kind, states)
        if not rows:
            return {}
        now = time.time()
        keys = [key for key, _ in rows]
        values = [state for _, state in rows]

        def upsert(connection: Any) -> dict[str, int]:  # one statement, rows in key order
            found = connection.execute(
                "INSERT INTO gr_entities (kind, key, state, version, saved_at) "
                "SELECT %s, k, s, 1, %s FROM unnest(%s::text[], %s::bytea[]) AS u(k, s) "
                "ON CONFLICT (kind, key) DO UPDATE SET state = excluded.state, "
                "version = gr_entities.version + 1, saved_at = excluded.saved_at RETURNING key, version",
                (kind, now, keys, values),
            )
            return {key: int(version) for key, version in found}

        return await self.db.run(upsert)

    async def delete(self, kind: str, keys: Sequence[str]) -> int:
        check_kind(kind)
        wanted = [check_key(key) for key in keys]
        if not wanted:
            return 0
        return int(
            await self.db.run(
                lambda c: (
                    c.execute(
                        "DELETE FROM gr_entities WHERE kind = %s AND key = ANY(%s)", (kind, wanted)
                    ).rowcount
                )
            )
        )

    async def count(self, kind: str) -> int:
        check_kind(kind)
        return int(
            await self.db.run(
                lambda c: c.execute("SELECT count(*) FROM gr_entities WHERE kind = %s", (kind,)).fetchone()[0]
            )
        )

    async def aclose(self) -> None:
        pass
