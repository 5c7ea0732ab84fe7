"""``TaskArchive``: finished tasks that left the live graph, on the files.

A daemon that runs for months cannot keep every task it ever ran in memory: finished
tasks leave the live graph (by the ``[retention]`` policy) into the archive, where
``tasks show``, ``tasks list --archived`` and the API still find them and their ids stay
taken. The archive is ``archive/`` under the data dir:

- ``tasks-<n>.jsonl.gz``: segments, one per archiving pass, each written once (temp file,
  fsync, rename) and never changed: a gzip of one JSON task per line. Retention drops a
  segment whole.
- ``index.sqlite3``: where each archived task is (its segment), with what a listing
  filters on (status, type, order) — a lookup reads one segment, a listing pages the
  index.

Writes come from one process (the graph's owner, holding its lock); any process may read.
Every method blocks only a worker thread.
"""

from __future__ import annotations

import gzip
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from functools import partial
from pathlib import Path

import anyio
import msgspec

from .._errors import DataError, InternalError
from .._files import replace_durably
from ..messages import AgentTask, ListTasks, TaskStatus
from ..store import FIXED_PART, HistoryPart, listed, over_budget
from ._sqlite import SQLiteFile

ARCHIVE_DIR = "archive"
INDEX_DB = "index.sqlite3"

_SCHEMA = """
PRAGMA journal_size_limit = 131072;
PRAGMA wal_autocheckpoint = 32;
CREATE TABLE IF NOT EXISTS segments (
    seq INTEGER PRIMARY KEY,
    tasks INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    last_finished REAL NOT NULL,
    created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    segment INTEGER NOT NULL,
    ord INTEGER NOT NULL,
    status TEXT NOT NULL,
    type TEXT NOT NULL,
    finished_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_by_order ON tasks (ord);
CREATE INDEX IF NOT EXISTS tasks_by_segment ON tasks (segment);
"""

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(AgentTask)


class ArchiveSizes(msgspec.Struct, frozen=True):
    tasks: int = 0
    segments: int = 0
    bytes: int = 0


class TaskArchive:
    """The archive of one data dir. ``cached_segments``: decoded segments kept for
    lookups (a ``tasks show`` of neighbours reads one file once)."""

    def __init__(self, data_dir: Path, *, cached_segments: int = 2) -> None:
        self.path = data_dir / ARCHIVE_DIR
        self._index = SQLiteFile(self.path / INDEX_DB, _SCHEMA)
        self._cache: OrderedDict[int, dict[str, AgentTask]] = OrderedDict()
        self._cache_size = cached_segments
        self._cache_lock = threading.Lock()

    def segment_path(self, seq: int) -> Path:
        return self.path / f"tasks-{seq:08d}.jsonl.gz"

    # -- writing --------------------------------------------------------------------------

    async def add(self, tasks: Sequence[AgentTask]) -> int:
        """Write ``tasks`` (final ones) as a new segment, durably, and index them; the
        segment's number. A task archived before is indexed at its new place (a pass a
        crash interrupted before the live graph forgot it)."""
        if not tasks:
            return 0
        for task in tasks:
            if not task.status.final:
                raise InternalError(f"archive: task {task.id!r} is {task.status.value}, not finished")
        seq = await self._index.run(_next_segment, write=False)
        data = gzip.compress(b"".join(_encoder.encode(task) + b"\n" for task in tasks), compresslevel=6)
        path = self.segment_path(seq)
        await anyio.to_thread.run_sync(_write_segment, path, data)
        rows = [(t.id, seq, t.order, t.status.value, t.type, t.updated_at) for t in tasks]
        last = max(t.updated_at for t in tasks)

        def index(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT INTO segments (seq, tasks, bytes, last_finished, created_at) VALUES (?, ?, ?, ?, ?)",
                (seq, len(rows), len(data), last, time.time()),
            )
            db.executemany(
                "INSERT OR REPLACE INTO tasks (id, segment, ord, status, type, finished_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                rows,
            )

        await self._index.run(index, write=True)
        return seq

    async def drop_finished_before(self, before: float) -> int:
        """Drop every segment whose tasks all finished before ``before`` (whole files,
        never row by row); how many tasks went."""

        return await self._drop("last_finished < ?", (before,))

    async def drop_over_budget(self, budget: int | None) -> int:
        """Drop the segments the disk budget has no room for, the archive's share of the
        oldest history (see :func:`over_budget`); how many tasks went."""
        if budget is None:
            return 0
        parts = await anyio.to_thread.run_sync(history_parts, self.path.parent)
        names = [part.name for part in over_budget(parts, budget) if part.kind == "archive"]
        seqs = [int(name.removeprefix("tasks-").removesuffix(".jsonl.gz")) for name in names]
        if not seqs:
            return 0
        return await self._drop(f"seq IN ({', '.join('?' * len(seqs))})", tuple(seqs))

    async def _drop(self, where: str, params: tuple[object, ...]) -> int:
        def forget(db: sqlite3.Connection) -> list[tuple[int, int]]:
            gone = db.execute(f"SELECT seq, tasks FROM segments WHERE {where}", params).fetchall()
            for seq, _ in gone:
                db.execute("DELETE FROM tasks WHERE segment = ?", (seq,))
                db.execute("DELETE FROM segments WHERE seq = ?", (seq,))
            return gone

        gone = await self._index.run(forget, write=True)
        for seq, _ in gone:  # the index no longer points at them: remove the files
            await anyio.to_thread.run_sync(_unlink, self.segment_path(seq))
            with self._cache_lock:
                self._cache.pop(seq, None)
        if gone:
            await self._index.compact()  # the index shrinks with what it holds (it is in the budget)
        return sum(count for _, count in gone)

    # -- reading --------------------------------------------------------------------------

    async def statuses(self, ids: Sequence[str]) -> dict[str, TaskStatus]:
        """The archived ones among ``ids``, with their final status."""
        return await anyio.to_thread.run_sync(self.statuses_blocking, list(ids))

    def statuses_blocking(self, ids: list[str]) -> dict[str, TaskStatus]:
        """:meth:`statuses` in the calling (worker) thread."""
        wanted = list(dict.fromkeys(ids))
        if not wanted or not (self.path / INDEX_DB).exists():
            return {}

        def fetch(db: sqlite3.Connection) -> list[tuple[str, str]]:
            rows: list[tuple[str, str]] = []
            for start in range(0, len(wanted), 500):
                chunk = wanted[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows += db.execute(f"SELECT id, status FROM tasks WHERE id IN ({marks})", chunk).fetchall()
            return rows

        rows = self._index.run_blocking(fetch, write=False)
        return {task_id: TaskStatus(status) for task_id, status in rows}

    async def get(self, task_id: str) -> AgentTask | None:
        """The archived task ``task_id``, or ``None``."""
        if not await self._exists():
            return None
        found = await self._index.run(
            lambda db: db.execute("SELECT segment FROM tasks WHERE id = ?", (task_id,)).fetchone(),
            write=False,
        )
        if found is None:
            return None
        return (await self._segment(int(found[0]))).get(task_id)

    async def page(self, listing: ListTasks) -> list[AgentTask]:
        """The archived tasks ``listing`` keeps, from its bound on, in submission order (or
        the other way), at most its ``limit``. The index narrows by state and type; the
        other filters read the tasks, a chunk of the index at a time."""
        if not await self._exists():
            return []
        status = listing.status and listing.status.value
        newest = listing.newest_first
        bound = listing.after if not newest else (2**63 - 1 if listing.before is None else listing.before)
        plain = listing.owner is None and listing.text is None and listing.updated_since is None
        chunk = -1 if listing.limit is None else (listing.limit if plain else max(listing.limit, 256))
        found: list[AgentTask] = []
        while True:
            rows = await self._index.run(
                partial(_page_rows, status, listing.type, bound, newest, chunk), write=False
            )
            for task_id, seq, order in rows:
                bound = order
                task = (await self._segment(seq)).get(task_id)
                if task is not None and (plain or listed(task, listing)):
                    found.append(task)
                    if listing.limit is not None and len(found) >= listing.limit:
                        return found
            if chunk < 0 or len(rows) < chunk:
                return found

    async def used(self) -> bool:
        """Whether anything was ever archived (cheap: no count)."""
        if not await self._exists():
            return False
        found = await self._index.run(
            lambda db: db.execute("SELECT 1 FROM segments LIMIT 1").fetchone(), write=False
        )
        return found is not None

    async def sizes(self) -> ArchiveSizes:
        if not await self._exists():
            return ArchiveSizes()
        tasks, segments, size = await self._index.run(_count_sizes, write=False)
        return ArchiveSizes(int(tasks), int(segments), int(size))

    def sizes_blocking(self) -> ArchiveSizes:
        """:meth:`sizes` in the calling thread (a command that starts no event loop)."""
        if not (self.path / INDEX_DB).exists():
            return ArchiveSizes()
        tasks, segments, size = self._index.run_blocking(_count_sizes, write=False)
        return ArchiveSizes(int(tasks), int(segments), int(size))

    async def _exists(self) -> bool:
        return await anyio.to_thread.run_sync((self.path / INDEX_DB).exists)

    async def _segment(self, seq: int) -> dict[str, AgentTask]:
        with self._cache_lock:
            cached = self._cache.get(seq)
            if cached is not None:
                self._cache.move_to_end(seq)
                return cached
        tasks = await anyio.to_thread.run_sync(_read_segment, self.segment_path(seq))
        with self._cache_lock:
            self._cache[seq] = tasks
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return tasks

    async def aclose(self) -> None:
        await self._index.aclose()

    def close_blocking(self) -> None:
        """:meth:`aclose` from a worker thread."""
        self._index.close_blocking()


def _next_segment(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM segments").fetchone()[0])


def _unlink(path: Path) -> None:
    path.unlink(missing_ok=True)


def _write_segment(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_durably(path, data)


def _read_segment(path: Path) -> dict[str, AgentTask]:
    try:
        data = gzip.decompress(path.read_bytes())
    except (OSError, EOFError) as error:
        raise DataError(f"cannot read the archive segment {path}: {error}") from None
    found: dict[str, AgentTask] = {}
    for number, line in enumerate(data.splitlines(), 1):
        try:
            task = _decoder.decode(line)
        except msgspec.DecodeError as error:
            raise DataError(f"{path}, line {number}: not a task ({error})") from None
        found[task.id] = task
    return found


def _index_bytes(directory: Path) -> int:
    total = 0
    for suffix in ("", "-wal", "-shm"):
        try:
            total += (directory / f"{INDEX_DB}{suffix}").stat().st_size
        except FileNotFoundError:
            pass
    return total


def history_parts(data_dir: Path) -> list[HistoryPart]:
    """The parts of the history under ``data_dir`` retention may drop (the event log's
    closed segments and the archive's segments), each with its file's time and size, and
    the archive's index (its WAL too) as a part that counts but is never dropped — the
    event log and the archive both judge the disk budget from this listing. Blocking."""
    from ._reader import EVENTS_DIR

    parts = [HistoryPart(FIXED_PART, INDEX_DB, 0.0, _index_bytes(data_dir / ARCHIVE_DIR))]
    for kind, directory, pattern in (
        ("events", data_dir / EVENTS_DIR, "*.jsonl"),
        ("archive", data_dir / ARCHIVE_DIR, "tasks-*.jsonl.gz"),
    ):
        for path in directory.glob(pattern):
            try:
                stat = path.stat()
            except FileNotFoundError:
                continue
            parts.append(HistoryPart(kind, path.name, stat.st_mtime, stat.st_size))
    return parts


def _count_sizes(db: sqlite3.Connection) -> tuple[int, int, int]:
    """Archived tasks, segments and their bytes. Tasks are counted in the index, not per
    segment: a pass a crash cut short between the index and the graph's journal archives
    its tasks again, into a later segment."""
    row = db.execute(
        "SELECT (SELECT COUNT(*) FROM tasks), COUNT(*), COALESCE(SUM(bytes), 0) FROM segments"
    ).fetchone()
    return int(row[0]), int(row[1]), int(row[2])


def _page_rows(
    status: str | None, agent_type: str | None, bound: int, newest: bool, limit: int, db: sqlite3.Connection
) -> list[tuple[str, int, int]]:
    """Up to ``limit`` (``-1``: all) archived tasks' id, segment and order past ``bound``."""
    direction = "ord < ? ORDER BY ord DESC" if newest else "ord > ? ORDER BY ord"
    return db.execute(
        "SELECT id, segment, ord FROM tasks WHERE (? IS NULL OR status = ?) AND (? IS NULL OR type = ?) "
        f"AND {direction} LIMIT ?",
        (status, status, agent_type, agent_type, bound, limit),
    ).fetchall()
