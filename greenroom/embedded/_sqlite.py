"""``SQLiteFile``: one SQLite database under the data dir, used from worker threads one
transaction at a time — what the chat store and the step journal share.

WAL, ``synchronous=FULL`` (a committed transaction is on disk), opened on first use with
its schema. With ``synchronous="NORMAL"`` a commit is written to the WAL without waiting
for the disk — it survives this process's death (the kernel has it), not yet a power loss —
and :meth:`sync` makes every commit before it durable (an ``fdatasync`` of the WAL, what
``FULL`` does at each commit), off the transactions' lane, so commits never wait for it.

:meth:`run` runs a function in one transaction in a worker thread: a writer
takes the write lock at once (``BEGIN IMMEDIATE``: another process's writer waits, never
a deadlock half-way); a reader reads its snapshot. Calls queue in the event loop (a
capacity limiter of one), not on the thread lock. A cancelled caller stops waiting; the
transaction it started finishes on its own.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import anyio

from .._errors import InvalidInput, StorageError, storage_error
from .._threads import run_blocking

T = TypeVar("T")


class SQLiteFile:
    def __init__(
        self,
        path: str | Path,
        schema: str,
        *,
        foreign_keys: bool = False,
        synchronous: str = "FULL",
        upgrade: Callable[[sqlite3.Connection], None] | None = None,
        mode: int | None = None,
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise InvalidInput(
                f"synchronous must be FULL or NORMAL, got {synchronous!r}",
                field="synchronous",
                value=synchronous,
            )
        self.path = Path(path)
        self._schema = schema
        self._upgrade = upgrade
        """Brings a file an older greenroom made up to ``schema`` (its columns added), once
        the schema's statements ran."""
        self._mode = mode
        """The permissions a new file is made with (``None``: the umask's); SQLite gives
        its WAL and shared-memory files the same."""
        self._foreign_keys = foreign_keys
        self._synchronous = synchronous
        self._lock = threading.Lock()
        self._limiter: anyio.CapacityLimiter | None = None
        self._db: sqlite3.Connection | None = None
        self._wal: int | None = None  # a descriptor of the WAL file, for sync (NORMAL only)
        self._sync_lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        db = self._db
        if db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self._mode is not None and not self.path.exists():
                os.close(
                    os.open(self.path, os.O_CREAT | os.O_WRONLY | getattr(os, "O_CLOEXEC", 0), self._mode)
                )
            db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None, timeout=30)
            _use_wal(db)
            db.execute(f"PRAGMA synchronous={self._synchronous}")
            if self._foreign_keys:
                db.execute("PRAGMA foreign_keys=ON")
            db.executescript(self._schema)
            if self._upgrade is not None:
                self._upgrade(db)
            self._db = db
        return db

    def run_blocking(self, fn: Callable[[sqlite3.Connection], T], *, write: bool = True) -> T:
        """``fn(connection)`` in one transaction, in the calling thread: for code already
        in a worker thread (never the event loop's)."""
        with self._lock:
            db = self._connect()
            db.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                value = fn(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return value

    async def run(self, fn: Callable[[sqlite3.Connection], T], *, write: bool = True) -> T:
        """``fn(connection)`` in one transaction, in a worker thread (see the module doc)."""

        def call() -> T:
            return self.run_blocking(fn, write=write)

        async with self._queue():  # queued here, in FIFO order, not on the thread lock
            return await run_blocking(call)

    async def write(self, fn: Callable[[sqlite3.Connection], T], *, durable: bool = False) -> T:
        """:meth:`run` of a writing ``fn`` (``durable``: then :meth:`sync`), its failures as
        the one error every writer gives: ``StorageError`` naming the file (SQLite says
        "disk I/O error", not which: the disk may be full, read-only or over a limit)."""
        try:
            value = await self.run(fn, write=True)
            if durable:
                await self.sync()
        except OSError as error:
            raise storage_error(self.path, error) from None
        except sqlite3.OperationalError as error:
            raise StorageError(
                f"cannot write {self.path}: {error} (the disk may be full, read-only or over a size limit)"
            ) from None
        return value

    def _queue(self) -> anyio.CapacityLimiter:
        """The line the transactions (and :meth:`compact`) wait in, made on first use."""
        limiter = self._limiter
        if limiter is None:
            limiter = self._limiter = anyio.CapacityLimiter(1)
        return limiter

    def sync_blocking(self) -> None:
        """Make every transaction committed before this call durable (``fdatasync`` of the
        WAL file), in the calling thread: it takes no SQLite lock, so transactions go on
        meanwhile. Nothing to do before the first commit or with ``synchronous="FULL"``."""
        if self._synchronous == "FULL":
            return
        with self._sync_lock:
            if self._wal is None:
                with self._lock:  # the WAL exists once the connection wrote; it stays while open
                    if self._db is None:
                        return
                    self._wal = _open_wal(self.path)
            if self._wal is not None:
                _datasync(self._wal)

    async def sync(self) -> None:
        """:meth:`sync_blocking` in a worker thread. Cancelled, the sync finishes in its
        thread; the caller stops waiting."""
        await run_blocking(self.sync_blocking)

    def compact_blocking(self) -> None:
        """Give the space of deleted rows back to the file system (``VACUUM``) and empty the
        WAL (a ``TRUNCATE`` checkpoint), in the calling worker thread: after a retention
        pass deleted many rows, so the file shrinks with what it holds."""
        with self._lock:
            db = self._connect()
            db.execute("VACUUM")
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    async def compact(self) -> None:
        """:meth:`compact_blocking` in a worker thread, queued with the transactions."""
        async with self._queue():
            await run_blocking(self.compact_blocking)

    def close_blocking(self) -> None:
        """Close the connection, from a worker thread (a later call opens it again); what
        it committed is synced first."""
        with self._sync_lock, self._lock:
            if self._db is not None and self._synchronous == "NORMAL":
                wal = self._wal if self._wal is not None else _open_wal(self.path)
                if wal is not None:
                    _datasync(wal)
                    if wal != self._wal:
                        os.close(wal)
            if self._db is not None:
                self._db.close()
                self._db = None
            if self._wal is not None:
                os.close(self._wal)
                self._wal = None

    async def aclose(self) -> None:
        """Close the connection (a later call opens it again)."""
        await anyio.to_thread.run_sync(self.close_blocking)


def _use_wal(db: sqlite3.Connection, timeout: float = 30.0) -> None:
    """Put the file in WAL mode. Switching needs the file to itself, and SQLite answers
    "database is locked" at once, without waiting, while another connection (another
    store object, another process) has it: wait and try again, as every other statement
    waits for a lock (up to ``timeout`` seconds). A file in WAL mode already is left so."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if db.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                db.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
        time.sleep(0.005)  # a worker thread, not the event loop: the other holder needs a moment


def _open_wal(path: Path) -> int | None:
    try:
        return os.open(f"{path}-wal", os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None


def _datasync(fd: int) -> None:
    if hasattr(os, "fdatasync"):
        os.fdatasync(fd)
    else:  # macOS, Windows
        os.fsync(fd)
