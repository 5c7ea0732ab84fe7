"""``SQLiteEntityStore``: entities' saved states on one SQLite file under the data dir
(``entities.sqlite3``, WAL, ``synchronous=FULL``: a ``save`` returned is on disk)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

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
from ._sqlite import SQLiteFile

ENTITIES_DB = "entities.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS entities (
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    state BLOB NOT NULL,
    version INTEGER NOT NULL,
    saved_at REAL NOT NULL,
    node TEXT,
    lease_until REAL,
    token INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (kind, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entities_by_node ON entities (node) WHERE node IS NOT NULL;
CREATE TABLE IF NOT EXISTS mail (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    body BLOB NOT NULL,
    asker TEXT,
    ask_id INTEGER,
    taken_by TEXT
);
CREATE INDEX IF NOT EXISTS mail_by_entity ON mail (kind, key, seq);
CREATE TABLE IF NOT EXISTS answers (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    asker TEXT NOT NULL,
    ask_id INTEGER NOT NULL,
    ok INTEGER NOT NULL,
    body BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS answers_by_asker ON answers (asker, seq);
"""
_CHUNK = 500


def _upgrade(db: sqlite3.Connection) -> None:
    """A file an older greenroom made: the leases' fencing ``token`` column added."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(entities)")}
    if "token" not in columns:
        try:
            db.execute("ALTER TABLE entities ADD COLUMN token INTEGER NOT NULL DEFAULT 0")
        except sqlite3.OperationalError as error:  # the other connection added it first
            if "duplicate column" not in str(error):
                raise


class SQLiteEntityStore:
    """``EntityStore`` on one SQLite file. Close it with :meth:`aclose`. Not ``shared``
    (one process owns a data dir): its hosts need no claims, though they work."""

    shared = False

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._file = SQLiteFile(self.path, _SCHEMA, upgrade=_upgrade)
        self._reads = SQLiteFile(self.path, _SCHEMA, upgrade=_upgrade)
        """A connection of its own for loads: in WAL mode they read while a save's write
        and fsync run (an activation never waits behind a passivation's save)."""

    async def load(self, kind: str, keys: Sequence[str]) -> dict[str, StoredState]:
        check_kind(kind)
        wanted = [check_key(key) for key in keys]
        if not wanted:
            return {}

        def select(db: sqlite3.Connection) -> dict[str, StoredState]:
            found: dict[str, StoredState] = {}
            for start in range(0, len(wanted), _CHUNK):
                chunk = wanted[start : start + _CHUNK]
                rows = db.execute(
                    "SELECT key, state, version, saved_at FROM entities WHERE kind = ? AND version > 0 "
                    f"AND key IN ({','.join('?' * len(chunk))})",
                    [kind, *chunk],
                )
                for key, state, version, saved_at in rows:
                    found[key] = StoredState(key, bytes(state), int(version), float(saved_at))
            return found

        return await self._reads.run(select, write=False)

    async def save(self, kind: str, states: Sequence[tuple[str, bytes]]) -> dict[str, int]:
        rows = save_rows(kind, states)
        written = await self.write(kind, None, [Record(key, state) for key, state in rows])
        return written.versions

    async def write(self, kind: str, node: str | None, records: Sequence[Record]) -> Written:
        rows = write_rows(kind, records)
        if not rows:
            return Written({}, {})
        now = time.time()

        def write(db: sqlite3.Connection) -> Written:
            versions: dict[str, int] = {}
            refused: dict[str, Fenced] = {}
            for record in rows:
                if record.token is not None:
                    held = db.execute(
                        "SELECT node, token FROM entities WHERE kind = ? AND key = ?", (kind, record.key)
                    ).fetchone()
                    holder, current = (None, None) if held is None else (held[0], int(held[1]))
                    fenced = entity_fenced(kind, record.key, node, record.token, holder, current)
                    if fenced is not None:
                        refused[record.key] = fenced
                        continue
                if record.state is not None:
                    (version,) = db.execute(
                        "INSERT INTO entities (kind, key, state, version, saved_at) VALUES (?, ?, ?, 1, ?) "
                        "ON CONFLICT (kind, key) DO UPDATE SET state = excluded.state, "
                        "version = entities.version + 1, saved_at = excluded.saved_at RETURNING version",
                        (kind, record.key, record.state, now),
                    ).fetchone()
                    versions[record.key] = int(version)
                if record.done:
                    db.executemany("DELETE FROM mail WHERE seq = ?", [(seq,) for seq in record.done])
                if record.answers:
                    db.executemany(
                        "INSERT INTO answers (asker, ask_id, ok, body) VALUES (?, ?, ?, ?)",
                        [(asker, ask_id, int(ok), body) for asker, ask_id, ok, body in record.answers],
                    )
            return Written(versions, refused)

        written = await self._file.write(write)
        if any(record.answers for record in rows if record.key not in written.refused):
            _wake(self.path)
        return written

    async def delete(self, kind: str, keys: Sequence[str]) -> int:
        check_kind(kind)
        wanted = [check_key(key) for key in keys]

        def remove(db: sqlite3.Connection) -> int:
            gone = 0
            for start in range(0, len(wanted), _CHUNK):
                chunk = wanted[start : start + _CHUNK]
                gone += db.execute(
                    f"DELETE FROM entities WHERE kind = ? AND key IN ({','.join('?' * len(chunk))})",
                    [kind, *chunk],
                ).rowcount
            return gone

        return await self._file.write(remove) if wanted else 0

    async def count(self, kind: str) -> int:
        check_kind(kind)
        return await self._reads.run(
            lambda db: int(
                db.execute(
                    "SELECT count(*) FROM entities WHERE kind = ? AND version > 0", (kind,)
                ).fetchone()[0]
            ),
            write=False,
        )

    # -- placement and mail (one process holds a data dir: the nodes are hosts in it) --------

    async def claim(self, kind: str, keys: Sequence[str], node: str, lease: float) -> Claimed:
        check_kind(kind)
        wanted = sorted({check_key(key) for key in keys})

        def take(db: sqlite3.Connection) -> Claimed:
            now = time.time()
            taken: list[str] = []
            states: dict[str, StoredState] = {}
            elsewhere: dict[str, str] = {}
            tokens: dict[str, int] = {}
            for key in wanted:
                row = db.execute(
                    "SELECT state, version, saved_at, node, lease_until, token FROM entities "
                    "WHERE kind = ? AND key = ?",
                    (kind, key),
                ).fetchone()
                if row is None:
                    db.execute(
                        "INSERT INTO entities (kind, key, state, version, saved_at, node, lease_until, "
                        "token) VALUES (?, ?, x'', 0, ?, ?, ?, 1)",
                        (kind, key, now, node, now + lease),
                    )
                    taken.append(key)
                    tokens[key] = 1
                    continue
                state, version, saved_at, holder, until, token = row
                live = holder is not None and until is not None and until >= now
                if live and holder != node:
                    elsewhere[key] = holder
                    continue
                token = int(token) if live else int(token) + 1  # a new holding: the next token
                db.execute(
                    "UPDATE entities SET node = ?, lease_until = ?, token = ? WHERE kind = ? AND key = ?",
                    (node, now + lease, token, kind, key),
                )
                taken.append(key)
                tokens[key] = token
                if int(version) > 0:
                    states[key] = StoredState(key, bytes(state), int(version), float(saved_at))
            return Claimed(taken, states, elsewhere, tokens)

        return await self._file.write(take) if wanted else Claimed([], {}, {})

    async def renew(self, node: str, lease: float) -> dict[tuple[str, str], int]:
        until = time.time() + lease
        rows = await self._file.write(
            lambda db: db.execute(
                "UPDATE entities SET lease_until = ? WHERE node = ? RETURNING kind, key, token", (until, node)
            ).fetchall()
        )
        return {(kind, key): int(token) for kind, key, token in rows}

    async def release(self, kind: str, keys: Sequence[str], node: str) -> None:
        check_kind(kind)
        wanted = [check_key(key) for key in keys]

        def free(db: sqlite3.Connection) -> None:
            db.executemany(
                "UPDATE entities SET node = NULL, lease_until = NULL WHERE kind = ? AND key = ? AND node = ?",
                [(kind, key, node) for key in wanted],
            )

        if wanted:
            await self._file.write(free)

    async def post(self, mail: Sequence[Posted]) -> None:
        rows = [
            (check_kind(kind), check_key(key), body, asker, ask_id) for kind, key, body, asker, ask_id in mail
        ]
        if rows:
            await self._file.write(
                lambda db: db.executemany(
                    "INSERT INTO mail (kind, key, body, asker, ask_id) VALUES (?, ?, ?, ?, ?)", rows
                )
            )
            _wake(self.path)

    async def take_mail(self, node: str, limit: int = 256) -> list[Mail]:
        def take(db: sqlite3.Connection) -> list[Mail]:
            rows = db.execute(
                # taken under the holding (node and token): a new holding takes it again
                "SELECT m.seq, m.kind, m.key, m.body, m.asker, m.ask_id, e.node || '#' || e.token "
                "FROM mail m JOIN entities e ON e.kind = m.kind AND e.key = m.key "
                "WHERE e.node = ? AND m.taken_by IS NOT e.node || '#' || e.token "
                "ORDER BY m.seq LIMIT ?",
                (node, limit),
            ).fetchall()
            db.executemany("UPDATE mail SET taken_by = ? WHERE seq = ?", [(row[6], row[0]) for row in rows])
            return [
                Mail(int(seq), kind, key, bytes(body), asker, ask)
                for seq, kind, key, body, asker, ask, _ in rows
            ]

        return await self._file.write(take)

    async def done_mail(self, seqs: Sequence[int]) -> None:
        done = [(seq,) for seq in seqs]
        if done:
            await self._file.write(lambda db: db.executemany("DELETE FROM mail WHERE seq = ?", done))

    async def answer(self, answers: Sequence[tuple[str, int, bool, bytes]]) -> None:
        rows = [(asker, ask_id, int(ok), body) for asker, ask_id, ok, body in answers]
        if rows:
            await self._file.write(
                lambda db: db.executemany(
                    "INSERT INTO answers (asker, ask_id, ok, body) VALUES (?, ?, ?, ?)", rows
                )
            )
            _wake(self.path)

    async def take_answers(self, node: str) -> list[Answer]:
        def take(db: sqlite3.Connection) -> list[Answer]:
            rows = db.execute(
                "SELECT seq, ask_id, ok, body FROM answers WHERE asker = ? ORDER BY seq", (node,)
            ).fetchall()
            db.executemany("DELETE FROM answers WHERE seq = ?", [(row[0],) for row in rows])
            return [Answer(int(ask_id), bool(ok), bytes(body)) for _, ask_id, ok, body in rows]

        return await self._file.write(take)

    async def orphans(self, limit: int = 256) -> list[tuple[str, str]]:
        now = time.time()
        rows = await self._reads.run(
            lambda db: db.execute(
                "SELECT DISTINCT m.kind, m.key FROM mail m LEFT JOIN entities e "
                "ON e.kind = m.kind AND e.key = m.key WHERE e.node IS NULL OR e.lease_until < ? LIMIT ?",
                (now, limit),
            ).fetchall(),
            write=False,
        )
        return [(kind, key) for kind, key in rows]

    async def wait(self, node: str, timeout: float) -> None:
        nodes = _waiting.setdefault(self.path, {})
        event = nodes.get(node)
        if event is None:  # the first call registers and returns: what came before is unknown
            nodes[node] = anyio.Event()
            return
        with anyio.move_on_after(timeout):
            await event.wait()
        if event.is_set():
            nodes[node] = anyio.Event()

    async def aclose(self) -> None:
        try:
            await self._reads.aclose()
        finally:
            await self._file.aclose()


_waiting: dict[Path, dict[str, anyio.Event]] = {}
"""The nodes that wait for mail on each entities file, in this process (one process holds
a data dir: its hosts are the only nodes); a post sets each one's event, so a node that
was not waiting at that moment returns at once from its next ``wait``."""


def _wake(path: Path) -> None:
    for event in _waiting.get(path, {}).values():
        event.set()
