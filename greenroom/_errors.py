"""The root of every error greenroom raises on purpose, and the split a user needs.

- :class:`InvalidInput`: something from outside (a file, a message, a config, a CLI flag,
  a tool argument) is not valid. It names the field and the value, and nothing stored
  was changed. Also a ``ValueError``, so ``except ValueError`` keeps working.
- :class:`DataError`: the data on disk cannot be used as it is (a damaged file, a data
  dir another process holds). Nothing was changed; the text says what to look at.
- :class:`InternalError`: greenroom broke one of its own rules — a bug to report.

Everything else (``ActorError``, ``ModelError``, ...) derives from :class:`GreenroomError`
directly. A command-line front end shows any ``GreenroomError`` but ``InternalError`` as
one line; anything that is not a ``GreenroomError`` (nor an ``OSError``) is a bug.
"""

from __future__ import annotations

from typing import Any

MISSING: Any = type("Missing", (), {"__repr__": lambda self: "<missing>", "__slots__": ()})()
"""The ``value`` of an :class:`InvalidInput` about a field that was absent."""


class GreenroomError(Exception):
    """Base class of every error greenroom raises on purpose."""


class InvalidInput(GreenroomError, ValueError):
    """Input from outside is not valid; nothing stored was changed.

    ``field`` names the offending field (``""`` when it is the input as a whole) and
    ``value`` is what was found there (:data:`MISSING` when it was absent).
    """

    def __init__(self, message: str, *, field: str = "", value: Any = MISSING) -> None:
        super().__init__(message)
        self.field = field
        self.value = value


class DataError(GreenroomError, RuntimeError):
    """Data on disk cannot be used as it is (damaged, from a newer version, or held by
    another process). The files were left exactly as found."""


class StorageError(DataError):
    """A durable write failed: the disk is full, the file system is read-only, an I/O
    error. What was acknowledged before is on disk; what failed was not acknowledged.
    ``errno`` is the OS error number."""

    def __init__(self, message: str, *, errno: int | None = None) -> None:
        super().__init__(message)
        self.errno = errno


class StoreUnavailable(StorageError):
    """The store could not be reached (a database away or restarting). Nothing of the
    request happened; the same request may be sent again once it is back."""


_HINTS = {
    28: " (the disk is full)",
    30: " (the file system is read-only)",
    27: " (over a file size limit)",
    122: " (over a disk quota)",
    13: " (permission denied)",
    5: " (an I/O error)",
}


def storage_error(path: object, error: OSError) -> StorageError:
    """``error`` from writing ``path``, as a :class:`StorageError` a person can act on."""
    hint = _HINTS.get(error.errno or 0, "")
    return StorageError(f"cannot write {path}: {error.strerror or error}{hint}", errno=error.errno)


class InternalError(GreenroomError, RuntimeError):
    """greenroom broke one of its own invariants: a bug, never a user's mistake."""


def expected(error: BaseException) -> bool:
    """An error greenroom raises on purpose about the outside world (bad input, a damaged
    file, a full disk): its message says it all, and a log line needs no traceback."""
    return isinstance(error, GreenroomError) and not isinstance(error, InternalError)


def shown(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters: what an error message quotes."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
