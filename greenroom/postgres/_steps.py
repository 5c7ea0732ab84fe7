"""``PostgresStepStore``: the step journal in PostgreSQL (``gr_steps``), shared by every
daemon of a fleet — the peer of the embedded SQLite journal behind
``greenroom.store.StepStore``. A task resumed on another daemon replays what the first
one recorded. Each call is one transaction on the backend's pool."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Sequence
from typing import Any

import anyio
import msgspec

from .._files import resolve_data_dir
from .._notes import FOLD_AT, NoteLog, read_notes
from .._process import boot_id
from ..messages import AgentTask, TaskStatus
from ..store import BEFORE_AN_EFFECT, Refused, Step, check_step, encoded_body, fenced, step_from_row
from ._db import Database

logger = logging.getLogger("greenroom.harness")

_encoder = msgspec.json.Encoder()


def drop_steps(connection: Any, task_ids: list[str]) -> int:
    """Forget the steps of ``task_ids`` in the caller's transaction: :meth:`PostgresStepStore.drop`
    on its own, or the archive pass with the tasks it moves (one transaction: a task and its
    journal leave together). The one place ``gr_steps`` rows are deleted."""
    cursor = connection.execute("DELETE FROM gr_steps WHERE task_id = ANY(%s)", (task_ids,))
    return int(cursor.rowcount)


NOTES = "steps.noted"
"""The file under a daemon's data dir its step store notes results in (``greenroom._notes``)."""


class PostgresStepStore:
    """``StepStore`` on the backend's database (the pool is the backend's). ``data_dir``:
    the daemon's (``None``: the default one), where :meth:`note` keeps results that this
    process dying must not lose until the database has them."""

    def __init__(self, db: Database, data_dir: str | os.PathLike[str] | None = None) -> None:
        self.db = db
        self._data_dir = data_dir
        self._log: NoteLog | None = None
        self._folded = False
        self.notes_identity: str | None = None
        """This machine's boot and the notes' file, once known: a release that names it was
        made by a process whose notes this one folded before reading (the same data dir,
        the same boot), so what that process noted is here."""

    async def write(self, steps: Sequence[Step], *, durable: bool = True) -> Refused:
        """One transaction; the tasks of the fenced steps are locked ``FOR SHARE`` in it
        first (a grant of one of them waits for this commit, or this write sees the grant)."""
        for step in steps:
            check_step(step)
        if not steps:
            return {}
        fenced_ids = sorted({step.task_id for step in steps if step.token})

        def insert(connection: Any) -> Refused:
            refused: Refused = {}
            with connection.cursor() as cursor:
                if not durable:  # the server has it once committed: this process dying loses nothing
                    cursor.execute("SET LOCAL synchronous_commit TO off")
                live: dict[str, AgentTask] = {}
                now: float | None = None  # the server's clock: a paused writer's own clock says nothing
                if fenced_ids:
                    for row in cursor.execute(
                        "SELECT id, status, owner, token, lease_expires_at, "
                        "extract(epoch FROM clock_timestamp())::float8 FROM gr_tasks WHERE id = ANY(%s) "
                        "ORDER BY id FOR SHARE",
                        (fenced_ids,),
                    ):
                        live[row[0]] = AgentTask(
                            id=row[0],
                            type="-",
                            status=TaskStatus(row[1]),
                            owner=row[2],
                            token=row[3],
                            lease_expires_at=row[4],
                        )
                        now = row[5]
                rows = []
                for step in steps:
                    if step.token:
                        at = now if step.kind in BEFORE_AN_EFFECT else None
                        refusal = fenced(
                            live.get(step.task_id), step.task_id, None, step.token, "record a step", at
                        )
                        if refusal is not None:
                            refused[(step.task_id, step.token)] = refusal
                            continue
                    body = encoded_body(step).decode()
                    rows.append(
                        (step.task_id, step.key, step.kind, step.fingerprint, body, step.attempt, step.at)
                    )
                if rows:
                    cursor.executemany(
                        "INSERT INTO gr_steps (task_id, key, kind, fingerprint, body, attempt, at) VALUES "
                        "(%s, %s, %s, %s, %s::json, %s, %s) ON CONFLICT (task_id, key, kind) DO NOTHING",
                        rows,
                    )
            return refused

        return await self.db.run(insert)

    async def _sync(self) -> None:
        """A transaction with an id commits synchronously: the server flushes its WAL up to
        that commit, so every asynchronous commit before it is durable too."""

        def flush(connection: Any) -> None:
            connection.execute("SELECT pg_catalog.txid_current()")

        await self.db.run(flush)

    async def incarnation(self) -> str | None:
        """``None``: an asynchronous commit lives in the server's memory until its WAL is
        flushed, and a server's crash and restart (which need not change its start time)
        loses it; the journal makes what it must trust durable instead (a call's release
        is a durable write). The results this daemon's previous process noted are folded in
        first (the journal asks this as it starts, before any task is granted again)."""
        await self._fold_left()
        return None

    async def note(self, step: Step) -> None:
        """One ``O_APPEND`` line in ``steps.noted`` under the daemon's data dir, from the
        caller's task (no round trip: the database has it with the journal's next batch).
        It matters when this process dies first: its next process on the data dir folds
        the notes in — fenced as any write, so a result noted by an attempt another daemon
        took over since is refused — before granting anything. A result noted here helps a
        restart of this daemon, not another daemon taking the task over meanwhile."""
        await self._fold_left()
        assert self._log is not None
        self._log.append(step)

    async def _fold_left(self) -> None:
        if not self._folded:
            self._folded = True
            if self._log is None:
                where = await anyio.to_thread.run_sync(resolve_data_dir, self._data_dir)
                self._log = NoteLog(where / NOTES)
            await self._fold()  # what a fold cut short set aside, if anything
            await self._fold()
            boot = await anyio.to_thread.run_sync(boot_id)
            if boot is not None:
                self.notes_identity = f"{boot}:{self._log.path.resolve()}"

    async def _fold(self) -> None:
        assert self._log is not None
        aside = self._log.set_aside()
        if aside is None:
            return
        steps = await anyio.to_thread.run_sync(read_notes, aside)
        refused = await self.write(steps, durable=True) if steps else {}
        for fence in refused.values():
            logger.warning("journal: a noted step of a process gone was not folded in: %s", fence)
        await anyio.to_thread.run_sync(functools.partial(aside.unlink, missing_ok=True))

    async def sync(self) -> None:
        await self._sync()
        if self._log is not None and self._log.size > FOLD_AT:
            await self._fold()

    async def read(self, task_id: str) -> list[Step]:
        await self._fold_left()

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
        await self._fold_left()
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
