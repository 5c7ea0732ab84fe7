"""``PostgresEntityStore``: entities' saved states in PostgreSQL (``gr_entities``), shared
by every daemon of a fleet — the peer of the embedded SQLite file behind
``greenroom.store.EntityStore``."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import anyio

from ..store import (
    Answer,
    Claimed,
    Fenced,
    Mail,
    Posted,
    Record,
    StoredState,
    Written,
    check_key,
    check_kind,
    entity_fenced,
    save_rows,
    write_rows,
)
from ._db import Database

logger = logging.getLogger("greenroom.entities")


MAIL_CHANNEL = "gr_entity_mail"
"""What posts and answers ``NOTIFY``: the nodes that wait for mail wake and look."""


class _Placement:
    """The placement and mail half of ``PostgresEntityStore`` (one class, two concerns)."""

    db: Database
    _listening: Any

    async def claim(self, kind: str, keys: Sequence[str], node: str, lease: float) -> Claimed:
        check_kind(kind)
        wanted = sorted({check_key(key) for key in keys})  # in key order: two claimers never deadlock
        if not wanted:
            return Claimed([], {}, {})

        def take(connection: Any) -> Claimed:
            now = time.time()
            rows = connection.execute(
                "INSERT INTO gr_entities (kind, key, state, version, saved_at, node, lease_until, token) "
                "SELECT %(kind)s, k, ''::bytea, 0, %(now)s, %(node)s, %(until)s, 1 "
                "FROM unnest(%(keys)s::text[]) AS k ON CONFLICT (kind, key) DO UPDATE "
                "SET node = excluded.node, lease_until = excluded.lease_until, "
                # a lease this node still holds keeps its token; a new holding takes the next
                "token = CASE WHEN gr_entities.node = excluded.node AND gr_entities.lease_until >= %(now)s "
                "THEN gr_entities.token ELSE gr_entities.token + 1 END "
                "WHERE gr_entities.node IS NULL OR gr_entities.node = excluded.node "
                "OR gr_entities.lease_until < %(now)s "
                "RETURNING key, state, version, saved_at, token",
                {"kind": kind, "now": now, "node": node, "until": now + lease, "keys": wanted},
            ).fetchall()
            taken = [key for key, *_ in rows]
            tokens = {key: int(token) for key, *_, token in rows}
            states = {
                key: StoredState(key, bytes(state), int(version), float(at))
                for key, state, version, at, _ in rows
                if int(version) > 0
            }
            missing = sorted(set(wanted) - set(taken))
            elsewhere: dict[str, str] = {}
            if missing:  # a statement of its own: it sees what other claims committed meanwhile
                for key, holder in connection.execute(
                    "SELECT key, node FROM gr_entities WHERE kind = %s AND key = ANY(%s)", (kind, missing)
                ):
                    elsewhere[key] = holder or ""
            return Claimed(sorted(taken), states, elsewhere, tokens)

        return await self.db.run(take)

    async def renew(self, node: str, lease: float) -> dict[tuple[str, str], int]:
        until = time.time() + lease
        rows = await self.db.run(
            lambda c: c.execute(
                "UPDATE gr_entities SET lease_until = %s WHERE node = %s RETURNING kind, key, token",
                (until, node),
            ).fetchall()
        )
        return {(kind, key): int(token) for kind, key, token in rows}

    async def release(self, kind: str, keys: Sequence[str], node: str) -> None:
        check_kind(kind)
        wanted = sorted(check_key(key) for key in keys)
        if wanted:
            await self.db.run(
                lambda c: c.execute(
                    "UPDATE gr_entities SET node = NULL, lease_until = NULL "
                    "WHERE kind = %s AND key = ANY(%s) AND node = %s",
                    (kind, wanted, node),
                )
            )

    async def post(self, mail: Sequence[Posted]) -> None:
        rows = [
            (check_kind(kind), check_key(key), body, asker, ask_id) for kind, key, body, asker, ask_id in mail
        ]
        if not rows:
            return

        def insert(connection: Any) -> None:
            with connection.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO gr_entity_mail (kind, key, body, asker, ask_id) VALUES (%s, %s, %s, %s, %s)",
                    rows,
                )
            connection.execute("SELECT pg_notify(%s, '')", (MAIL_CHANNEL,))

        await self.db.run(insert)

    async def take_mail(self, node: str, limit: int = 256) -> list[Mail]:
        def take(connection: Any) -> list[Mail]:
            rows = connection.execute(
                # taken under the holding (node and token): a new holding takes it again
                "UPDATE gr_entity_mail m SET taken_by = e.node || '#' || e.token FROM gr_entities e "
                "WHERE e.kind = m.kind AND e.key = m.key AND m.seq IN ("
                " SELECT m.seq FROM gr_entity_mail m JOIN gr_entities e ON e.kind = m.kind AND e.key = m.key"
                " WHERE e.node = %(node)s AND m.taken_by IS DISTINCT FROM e.node || '#' || e.token"
                " ORDER BY m.seq LIMIT %(limit)s FOR UPDATE OF m SKIP LOCKED"
                ") RETURNING m.seq, m.kind, m.key, m.body, m.asker, m.ask_id",
                {"node": node, "limit": limit},
            ).fetchall()
            found = [
                Mail(int(seq), kind, key, bytes(body), asker, ask)
                for seq, kind, key, body, asker, ask in rows
            ]
            return sorted(found, key=lambda mail: mail.seq)

        return await self.db.run(take)

    async def done_mail(self, seqs: Sequence[int]) -> None:
        if seqs:
            done = list(seqs)
            await self.db.run(lambda c: c.execute("DELETE FROM gr_entity_mail WHERE seq = ANY(%s)", (done,)))

    async def answer(self, answers: Sequence[tuple[str, int, bool, bytes]]) -> None:
        rows = list(answers)
        if not rows:
            return

        def insert(connection: Any) -> None:
            with connection.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO gr_entity_answers (asker, ask_id, ok, body) VALUES (%s, %s, %s, %s)", rows
                )
            connection.execute("SELECT pg_notify(%s, '')", (MAIL_CHANNEL,))

        await self.db.run(insert)

    async def take_answers(self, node: str) -> list[Answer]:
        rows = await self.db.run(
            lambda c: c.execute(
                "DELETE FROM gr_entity_answers WHERE asker = %s RETURNING seq, ask_id, ok, body", (node,)
            ).fetchall()
        )
        return [Answer(int(ask_id), bool(ok), bytes(body)) for _, ask_id, ok, body in sorted(rows)]

    async def orphans(self, limit: int = 256) -> list[tuple[str, str]]:
        now = time.time()
        rows = await self.db.run(
            lambda c: c.execute(
                "SELECT DISTINCT m.kind, m.key FROM gr_entity_mail m LEFT JOIN gr_entities e "
                "ON e.kind = m.kind AND e.key = m.key WHERE e.node IS NULL OR e.lease_until < %s LIMIT %s",
                (now, limit),
            ).fetchall()
        )
        return [(kind, key) for kind, key in rows]

    async def wait(self, node: str, timeout: float) -> None:
        def listen() -> None:
            if self._listening is None:  # the first call listens and returns: what came before is unknown
                self._listening = self.db.connect()
                self._listening.execute(f"LISTEN {MAIL_CHANNEL}")
                return
            for _ in self._listening.notifies(timeout=timeout, stop_after=1):
                pass

        try:
            await anyio.to_thread.run_sync(listen)
        except Exception as error:  # psycopg's, from the thread: listen again next time
            connection, self._listening = self._listening, None
            if connection is not None:
                await anyio.to_thread.run_sync(connection.close)
            logger.warning("entities: the mail notifications' connection failed (%s)", type(error).__name__)
            await anyio.sleep(min(timeout, 1.0))

    async def _close_listening(self) -> None:
        connection, self._listening = self._listening, None
        if connection is not None:
            await anyio.to_thread.run_sync(connection.close)


class PostgresEntityStore(_Placement):
    """``EntityStore`` on the backend's database (the pool is the backend's; a waiting
    node has a ``LISTEN`` connection of its own, closed by :meth:`aclose`)."""

    shared = True

    def __init__(self, db: Database) -> None:
        self.db = db
        self._listening: Any = None

    async def load(self, kind: str, keys: Sequence[str]) -> dict[str, StoredState]:
        check_kind(kind)
        wanted = [check_key(key) for key in keys]
        if not wanted:
            return {}

        def select(connection: Any) -> dict[str, StoredState]:
            rows = connection.execute(
                "SELECT key, state, version, saved_at FROM gr_entities "
                "WHERE kind = %s AND key = ANY(%s) AND version > 0",
                (kind, wanted),
            )
            return {
                key: StoredState(key, bytes(state), int(version), float(at))
                for key, state, version, at in rows
            }

        return await self.db.run(select)

    async def save(self, kind: str, states: Sequence[tuple[str, bytes]]) -> dict[str, int]:
        rows = save_rows(kind, states)
        written = await self.write(kind, None, [Record(key, state) for key, state in rows])
        return written.versions

    async def write(self, kind: str, node: str | None, records: Sequence[Record]) -> Written:
        rows = write_rows(kind, records)
        if not rows:
            return Written({}, {})
        now = time.time()

        def write(connection: Any) -> Written:
            refused: dict[str, Fenced] = {}
            fenced = [record.key for record in rows if record.token is not None]
            if fenced:  # the holders locked, in key order, until the commit: a claim waits or sees it
                held = {
                    key: (holder, int(token))
                    for key, holder, token in connection.execute(
                        "SELECT key, node, token FROM gr_entities WHERE kind = %s AND key = ANY(%s) "
                        "ORDER BY key FOR UPDATE",
                        (kind, fenced),
                    )
                }
                for record in rows:
                    if record.token is not None:
                        holder, current = held.get(record.key, (None, None))
                        refusal = entity_fenced(kind, record.key, node, record.token, holder, current)
                        if refusal is not None:
                            refused[record.key] = refusal
            accepted = [record for record in rows if record.key not in refused]
            saved = [record for record in accepted if record.state is not None]
            versions: dict[str, int] = {}
            if saved:  # one statement, rows in key order
                found = connection.execute(
                    "INSERT INTO gr_entities (kind, key, state, version, saved_at) "
                    "SELECT %s, k, s, 1, %s FROM unnest(%s::text[], %s::bytea[]) AS u(k, s) "
                    "ON CONFLICT (kind, key) DO UPDATE SET state = excluded.state, "
                    "version = gr_entities.version + 1, saved_at = excluded.saved_at RETURNING key, version",
                    (kind, now, [r.key for r in saved], [r.state for r in saved]),
                )
                versions = {key: int(version) for key, version in found}
            done = [seq for record in accepted for seq in record.done]
            if done:
                connection.execute("DELETE FROM gr_entity_mail WHERE seq = ANY(%s)", (done,))
            answers = [answer for record in accepted for answer in record.answers]
            if answers:
                with connection.cursor() as cursor:
                    cursor.executemany(
                        "INSERT INTO gr_entity_answers (asker, ask_id, ok, body) VALUES (%s, %s, %s, %s)",
                        answers,
                    )
                connection.execute("SELECT pg_notify(%s, '')", (MAIL_CHANNEL,))
            return Written(versions, refused)

        return await self.db.run(write)

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
                lambda c: c.execute(
                    "SELECT count(*) FROM gr_entities WHERE kind = %s AND version > 0", (kind,)
                ).fetchone()[0]
            )
        )

    async def aclose(self) -> None:
        await self._close_listening()
