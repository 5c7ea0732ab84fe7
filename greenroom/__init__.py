"""greenroom: an actor-model runtime for LLM agents, on anyio (asyncio and trio)."""

from .actors import (
    Actor,
    ActorContext,
    ActorError,
    ActorRef,
    ActorStopped,
    ActorSystem,
    AskTimeout,
    Backoff,
    ChildFailed,
    DeadLetter,
    DeadLetters,
    Directive,
    MailboxFull,
    SupervisorStrategy,
    Terminated,
    Timer,
)

__version__ = "0.1.0"

__all__ = [
    "Actor",
    "ActorContext",
    "ActorError",
    "ActorRef",
    "ActorStopped",
    "ActorSystem",
    "AskTimeout",
    "Backoff",
    "ChildFailed",
    "DeadLetter",
    "DeadLetters",
    "Directive",
    "MailboxFull",
    "SupervisorStrategy",
    "Terminated",
    "Timer",
    "__version__",
]
