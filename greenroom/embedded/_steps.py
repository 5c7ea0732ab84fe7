"""``SQLiteStepStore``: the step journal on one SQLite file under the data dir
(``steps.sqlite3``, WAL). A write commits to the WAL (the kernel has it: this process
dying loses nothing); a durable write, or :meth:`~SQLiteStepStore.sync`, then syncs the
WAL, on its own lane, so a commit never waits behind a sync in flight.

Used from worker threads one call at a time, like the chat store; a write is one
transaction (``BEGIN IMMEDIATE``), so another process reading the file sees a batch whole
or not at all.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio
import msgspec

from .._errors import storage_error
from .._notes import FOLD_AT, NoteLog, read_notes
from .._process import boot_id
from ..messages import AgentTask
from ..store import BEFORE_AN_EFFECT, Refused, Step, check_step, encoded_body, fenced, step_from_row
from ._sqlite import SQLiteFile

STEPS_DB = "steps.sqlite3"

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS steps (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id TEXT NOT NULL,
    key TEXT NOT NULL,
    kind TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    body BLOB NOT NULL,
    attempt INTEGER NOT NULL,
    at REAL NOT NULL,
    UNIQUE (task_id, key, kind)
);
"""

_encoder = msgspec.json.Encoder()
_INSERT = (
    "INSERT OR IGNORE INTO steps (task_id, key, kind, fingerprint, body, attempt, at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?)"
)
NOTED_SUFFIX = ".noted"


LiveTask = Callable[[str], "tuple[bool, AgentTask | None, float]"]
"""``task_id -> (this process owns the task graph, the task as it is live there or None,
the graph's clock now)``."""


class SQLiteStepStore:
    """``StepStore`` on one SQLite file. Close it with :meth:`aclose`.

    ``live_task``: how this process's task graph sees a task now — the one data dir's
    owner process serialises its attempts there, so a step's token is checked against it
    as the step is handed to the file (on the event loop, where grants happen too)."""

    def __init__(self, path: str | Path, *, live_task: LiveTask | None = None) -> None:
        self.path = Path(path)
        self._file = SQLiteFile(self.path, _SCHEMA, synchronous="NORMAL")
        self._run = self._file.run
        self._live_task = live_task
        self._log = NoteLog(self.path.with_name(self.path.name + NOTED_SUFFIX))
        """Steps noted (:meth:`note`): the kernel has each once its ``write`` returned."""
        self._folded = False
        """The notes a dead process left were folded into the file (before any read)."""

    def _checked_rows(self, steps: Sequence[Step]) -> tuple[list[tuple[Any, ...]], Refused]:
        """The rows of ``steps`` to write, and the attempts refused (fenced off)."""
        rows = []
        refused: Refused = {}
        for step in steps:
            check_step(step)
        for step in steps:
            if step.token and self._live_task is not None:
                owned, task, now = self._live_task(step.task_id)
                at = now if step.kind in BEFORE_AN_EFFECT else None  # the clock the graph's leases run on
                refusal = fenced(task, step.task_id, None, step.token, "record a step", at) if owned else None
                if refusal is not None:
                    refused[(step.task_id, step.token)] = refusal
                    continue
            body = encoded_body(step)
            rows.append((step.task_id, step.key, step.kind, step.fingerprint, body, step.attempt, step.at))
        return rows, refused

    async def write(self, steps: Sequence[Step], *, durable: bool = True) -> Refused:
        rows, refused = self._checked_rows(steps)
        await self._fold_left()
        if not rows:
            return refused

        def insert(db: sqlite3.Connection) -> None:
            db.executemany(_INSERT, rows)

        await self._file.write(insert, durable=durable)
        return refused

    async def note(self, step: Step) -> None:
        """One ``O_APPEND`` line in ``steps.sqlite3.noted`` (``greenroom._notes``), from the
        caller's task, checked against the graph first (``Fenced``): no wait behind other
        tasks' batches."""
        _, refused = self._checked_rows([step])
        if refused:
            raise next(iter(refused.values()))
        self._log.append(step)

    async def sync(self) -> None:
        try:
            await self._file.sync()
            if self._log.size > FOLD_AT:
                await self._fold()
        except OSError as error:
            raise storage_error(self.path, error) from None

    async def _fold_left(self) -> None:
        """Fold the notes an earlier process left (once, before the first read or write, or
        when the journal starts: before any task is granted again)."""
        if not self._folded:
            self._folded = True
            await self._fold()  # what a fold cut short set aside, if anything
            await self._fold()

    async def _fold(self) -> None:
        """Write the noted steps into the file durably (fenced as any write, each kept only
        where its place is still empty), then forget them."""
        aside = self._log.set_aside()
        if aside is None:
            return
        rows, _ = self._checked_rows(await anyio.to_thread.run_sync(read_notes, aside))

        def fold(db: sqlite3.Connection) -> None:
            db.executemany(_INSERT, rows)

        await self._file.write(fold, durable=True)
        await anyio.to_thread.run_sync(functools.partial(aside.unlink, missing_ok=True))

    async def incarnation(self) -> str | None:
        """The machine's boot (Linux's ``boot_id``): a commit is in the kernel's page cache
        until synced, and only a reboot (a power loss, a kernel crash) loses that. ``None``
        where the boot cannot be read."""
        await self._fold_left()  # the journal asks first: notes folded before any grant
        boot = await anyio.to_thread.run_sync(boot_id)
        return None if boot is None else f"boot:{boot}"

    async def read(self, task_id: str) -> list[Step]:
        await self._fold_left()

        def fetch(db: sqlite3.Connection) -> list[tuple[Any, ...]]:
            return db.execute(
                "SELECT key, kind, fingerprint, body, attempt, at FROM steps WHERE task_id = ? ORDER BY seq",
                (task_id,),
            ).fetchall()

        return [step_from_row(task_id, row, str(self.path)) for row in await self._run(fetch, write=False)]

    async def read_many(self, task_ids: Sequence[str]) -> dict[str, list[Step]]:
        ids = list(dict.fromkeys(task_ids))
        await self._fold_left()

        def fetch(db: sqlite3.Connection) -> list[tuple[Any, ...]]:
            rows: list[tuple[Any, ...]] = []
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows += db.execute(
                    "SELECT task_id, key, kind, fingerprint, body, attempt, at FROM steps "
                    f"WHERE task_id IN ({marks}) ORDER BY seq",
                    chunk,
                ).fetchall()
            return rows

        found: dict[str, list[Step]] = {task_id: [] for task_id in ids}
        for task_id, *row in await self._run(fetch, write=False) if ids else []:
            found[task_id].append(step_from_row(task_id, tuple(row), str(self.path)))
        return found

    async def drop(self, task_ids: Sequence[str]) -> int:
        ids = list(task_ids)

        def delete(db: sqlite3.Connection) -> int:
            removed = 0
            for start in range(0, len(ids), 500):
                chunk = ids[start : start + 500]
                marks = ",".join("?" * len(chunk))
                removed += db.execute(f"DELETE FROM steps WHERE task_id IN ({marks})", chunk).rowcount
            return removed

        if not ids or not await anyio.to_thread.run_sync(self.path.exists):
            return 0  # a journal never written holds nothing to drop: it is not made for that
        return await self._run(delete, write=True)

    async def aclose(self) -> None:
        self._log.close()
        await self._file.aclose()
