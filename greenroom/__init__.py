"""greenroom: an actor-model runtime for LLM agents, on anyio (asyncio and trio).

The public surface is the actor kernel's, re-exported from :mod:`greenroom.actors`, and
the root of greenroom's errors: every error greenroom raises on purpose is a
:class:`GreenroomError` (each package exports its own, all under it); ``except
greenroom.InvalidInput`` catches bad input from any layer, ``except greenroom.DataError``
data on disk or in a store that cannot be used (``StorageError`` a write that failed,
``StoreUnavailable`` a store out of reach, ``DataDirBusy`` a data dir another process
holds), and ``InternalError`` is a bug to report.
"""

from typing import TYPE_CHECKING

from ._errors import DataError, GreenroomError, InternalError, InvalidInput, StorageError, StoreUnavailable
from ._files import DataDirBusy
from ._lazy import lazy

if TYPE_CHECKING:
    from .actors import (
        DEFAULT_ASK_TIMEOUT,
        DEFAULT_MAILBOX_SIZE,
        Actor,
        ActorContext,
        ActorError,
        ActorRef,
        ActorStatistics,
        ActorStopped,
        ActorSystem,
        AskTimeout,
        Backoff,
        ChildFailed,
        DeadLetter,
        DeadLetterReason,
        DeadLetters,
        Directive,
        Interrupted,
        MailboxFull,
        PendingReply,
        Request,
        SupervisorStrategy,
        SystemStatistics,
        Terminated,
        Timer,
    )

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_ASK_TIMEOUT",
    "DEFAULT_MAILBOX_SIZE",
    "Actor",
    "ActorContext",
    "ActorError",
    "ActorRef",
    "ActorStatistics",
    "ActorStopped",
    "ActorSystem",
    "AskTimeout",
    "Backoff",
    "ChildFailed",
    "DataDirBusy",
    "DataError",
    "DeadLetter",
    "DeadLetterReason",
    "DeadLetters",
    "Directive",
    "GreenroomError",
    "InternalError",
    "Interrupted",
    "InvalidInput",
    "MailboxFull",
    "PendingReply",
    "Request",
    "StorageError",
    "StoreUnavailable",
    "SupervisorStrategy",
    "SystemStatistics",
    "Terminated",
    "Timer",
    "__version__",
]

# the kernel's names (``greenroom.actors.__all__``; a test keeps them equal) are imported on
# first use, so ``import greenroom`` alone (the CLI's start) stays cheap; the names defined
# above are found before this is asked
__getattr__ = lazy(globals(), dict.fromkeys(("actors", *__all__), ".actors"))
