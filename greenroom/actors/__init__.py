"""The actor kernel: actors, refs, the system, supervision, death watch, timers, dead letters.

Knows nothing about agents or LLMs; everything else in greenroom is built on it.
"""

from .._request import Request
from ._actor import Actor, ActorContext
from ._deadletters import DeadLetters
from ._defaults import DEFAULT_ASK_TIMEOUT, DEFAULT_MAILBOX_SIZE
from ._exceptions import ActorError, ActorStopped, AskTimeout, ChildFailed, Interrupted, MailboxFull
from ._messages import DeadLetter, DeadLetterReason, Terminated
from ._ref import ActorRef
from ._reply import PendingReply
from ._statistics import ActorStatistics, SystemStatistics
from ._supervision import Backoff, Directive, SupervisorStrategy
from ._system import ActorSystem
from ._timers import Timer

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
    "DeadLetter",
    "DeadLetterReason",
    "DeadLetters",
    "Directive",
    "Interrupted",
    "MailboxFull",
    "PendingReply",
    "Request",
    "SupervisorStrategy",
    "SystemStatistics",
    "Terminated",
    "Timer",
]
