"""greenroom: an actor-model runtime for LLM agents, on anyio (asyncio and trio).

The public surface is the actor kernel's, re-exported from :mod:`greenroom.actors`, and
the root of greenroom's errors: every error greenroom raises on purpose is a
:class:`GreenroomError` (each package exports its own, all under it); ``except
greenroom.InvalidInput`` catches bad input from any layer, ``except greenroom.DataError``
data on disk or in a store that cannot be used (``StorageError`` a write that failed,
``StoreUnavailable`` a store out of reach, ``DataDirBusy`` a data dir another process
holds), and ``InternalError`` is a bug to report.
"""

from . import actors
from ._errors import DataError, GreenroomError, InternalError, InvalidInput, StorageError, StoreUnavailable
from ._files import DataDirBusy
from .actors import *  # noqa: F403 -- the kernel's __all__ is the package's surface

__version__ = "0.1.0"

__all__ = [
    *actors.__all__,
    "DataDirBusy",
    "DataError",
    "GreenroomError",
    "InternalError",
    "InvalidInput",
    "StorageError",
    "StoreUnavailable",
    "__version__",
]
