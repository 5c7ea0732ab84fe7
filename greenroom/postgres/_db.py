"""``Database``: one PostgreSQL server, reached through psycopg 3's sync API on worker threads.

psycopg's async API runs only on asyncio; its sync API on a thread runs the same under
asyncio and trio. ``await db.run(fn)`` calls ``fn(connection)`` in a worker thread with a
connection from the pool, inside one transaction (committed when ``fn`` returns, rolled
back when it raises). Cancelling the awaiting task does not stop the thread: the
transaction finishes (or fails) on its own and its result is dropped, so every ``fn`` is
one short transaction, never a wait.

The URL's password is never logged or put in an error: :func:`redact` hides it, and a
password may come from the environment instead (``PGPASSWORD``, as libpq reads it).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

import anyio

from .. import _threads
from .._errors import InternalError, InvalidInput, StoreUnavailable

logger = logging.getLogger("greenroom.postgres")

T = TypeVar("T")

_PASSWORD = re.compile(r"(postgres(?:ql)?://[^:/@]*:)([^@]*)(@)")


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***``."""
    return _PASSWORD.sub(r"\1***\3", url)


def check_url(url: str) -> str:
    if not isinstance(url, str) or not re.match(r"^postgres(ql)?://", url):
        raise InvalidInput(
            f"the store must be a postgresql:// URL (got {redact(str(url))!r:.100})",
            field="store",
            value=None,
        )
    return url


class DatabaseError(StoreUnavailable):
    """PostgreSQL could not be reached or failed the transaction (away, restarting, out of
    connections, a server fault); nothing of it happened. The message names the server
    (no password)."""


class DataRefused(InvalidInput):
    """PostgreSQL refused a value it cannot store (a NUL character in text or JSON, a
    number out of range); the transaction did nothing. Outside input: a 400, not an outage."""


class ConflictError(DatabaseError):
    """The transaction was rolled back by a conflict with another (a deadlock, a
    serialization failure, a row another transaction wrote first): nothing of it happened,
    and the same request may be retried."""


SESSION_BOUNDS = {
    "idle_in_transaction_session_timeout": "10s",
    "lock_timeout": "5s",
    "statement_timeout": "300s",
}
"""What greenroom sets on every connection it opens, so no frozen process stalls the fleet:
a session that stops answering inside a transaction (a ``SIGSTOP``, a laptop lid, a network
that hangs) is ended by the server after 10 s, its row locks released; a statement waits
for a lock 5 s at most (then fails, and is retried by its caller), and runs 5 minutes at
most. A claim never waits on another's lock at all (``SKIP LOCKED``); a report on a row a
frozen session locked waits at most the idle bound plus the lock bound (15 s)."""


class Database:
    """A connection pool to ``url`` (``min_size`` connections kept open, at most
    ``max_size``). Open it with ``async with Database(url) as db:``. Every connection has
    :data:`SESSION_BOUNDS`."""

    def __init__(self, url: str, *, min_size: int = 1, max_size: int = 8, timeout: float = 10.0) -> None:
        self.url = check_url(url)
        self.min_size = min_size
        self.max_size = max_size
        self.timeout = timeout
        self._pool: Any = None
        self._limiter = anyio.CapacityLimiter(max_size)
        self.repairs: list[Callable[[Any, Exception], bool]] = []
        """Ways to mend what made a transaction fail a ``CHECK`` — the backend's own (an
        event numbered past the log's partitions: make them). Each is called with a
        connection of its own, in a transaction, and the error; one that answers ``True``
        mended it, and the failed transaction runs again (twice at most). The pool itself
        knows no schema."""
        # the pool logs each failed reconnection while a server restarts; the supervisor
        # says once that PostgreSQL is away and once that it is back
        logging.getLogger("psycopg.pool").setLevel(logging.ERROR)

    async def __aenter__(self) -> Database:
        await anyio.to_thread.run_sync(self._open)
        return self

    def _open(self) -> None:
        from psycopg_pool import ConnectionPool

        self._pool = ConnectionPool(
            self.url,
            min_size=self.min_size,
            max_size=self.max_size,
            timeout=self.timeout,
            open=False,
            # autocommit: a one-statement operation is one round trip (no BEGIN, no COMMIT
            # sent); ``run`` opens a transaction block for everything else
            kwargs={"autocommit": True},
            configure=_configure,
        )
        try:
            self._pool.open(wait=True, timeout=self.timeout)
        except Exception as error:  # psycopg's and the pool's errors, in a thread: nothing async here
            self._pool = None
            raise DatabaseError(f"cannot connect to PostgreSQL at {redact(self.url)}: {error}") from None

    async def __aexit__(self, *exc: object) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(pool.close)

    def run_sync(self, fn: Callable[[Any], T], *, single: bool = False) -> T:
        """``fn(connection)`` in one transaction, in this thread (blocking). ``single``:
        ``fn`` runs exactly one statement, which is its own transaction (one round trip)."""
        import psycopg

        if self._pool is None:
            raise DatabaseError("the database is closed")
        for attempt in range(3):
            try:
                with self._pool.connection() as connection:
                    if single:
                        return fn(connection)
                    with connection.transaction():
                        return fn(connection)
            except psycopg.errors.CheckViolation as error:
                # something a repair can mend (see ``repairs``): mend it, run the transaction again
                if attempt == 2 or not self._repaired(error):
                    raise self.mapped(error) from None
            except psycopg.Error as error:
                raise self.mapped(error) from None
        raise AssertionError("unreachable")  # pragma: no cover

    def _repaired(self, error: Exception) -> bool:
        """Whether one of :attr:`repairs` mended what made ``error`` (in this thread)."""
        import psycopg

        for repair in self.repairs:
            try:
                with self._pool.connection() as connection, connection.transaction():
                    if repair(connection, error):
                        return True
            except psycopg.Error as failure:
                raise self.mapped(failure) from None
        return False

    def mapped(self, error: Exception) -> Exception:
        """A psycopg error as greenroom's: every class has a home, so no caller ever sees
        a raw one (a worker that did would stop answering)."""
        import psycopg

        where = f"PostgreSQL at {redact(self.url)}: {_first_line(error)}"
        state = getattr(error, "sqlstate", None) or ""
        if isinstance(error, psycopg.DataError):  # class 22: the data, not the server
            return DataRefused(f"PostgreSQL cannot store this: {_first_line(error)}")
        if state.startswith("40") or isinstance(error, psycopg.IntegrityError):
            return ConflictError(where)  # a deadlock, a serialization failure, a row written first
        if isinstance(error, psycopg.ProgrammingError | psycopg.NotSupportedError):
            return InternalError(f"greenroom sent PostgreSQL a statement it refused (a bug): {where}")
        return DatabaseError(where)  # away, restarting, cut off, out of connections, a server fault

    async def run(self, fn: Callable[[Any], T], *, single: bool = False) -> T:
        """``fn(connection)`` in one transaction, on a worker thread (see the module doc
        for what cancellation does; ``single`` as in :meth:`run_sync`)."""
        call = partial(self.run_sync, fn, single=single)
        _threads.began()  # work, not idleness, for a virtual clock
        try:
            return await anyio.to_thread.run_sync(call, limiter=self._limiter)
        finally:
            _threads.ended()

    def connect(self, *, autocommit: bool = True) -> Any:
        """A connection of its own, outside the pool (for ``LISTEN``). Blocking."""
        import psycopg

        try:
            connection = psycopg.connect(self.url, autocommit=autocommit, connect_timeout=int(self.timeout))
            _bound(connection)
            if not autocommit:
                connection.commit()  # the bounds are the session's, not this transaction's
            return connection
        except psycopg.Error as error:
            raise DatabaseError(f"cannot connect to PostgreSQL at {redact(self.url)}: {error}") from None


def _configure(connection: Any) -> None:
    """Each pooled connection plans its (prepared) statements once. greenroom's statements
    are written for their indexes, whatever the parameters; left to choose, PostgreSQL
    re-plans a statement whose generic plan it estimates dearer than the last custom ones
    (a batch's arrays), and planning a claim or a completion costs more CPU than running it."""
    connection.execute("SET plan_cache_mode = force_generic_plan")
    _bound(connection)


def _bound(connection: Any) -> None:
    for setting, value in SESSION_BOUNDS.items():
        connection.execute(f"SET {setting} = '{value}'")


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]
