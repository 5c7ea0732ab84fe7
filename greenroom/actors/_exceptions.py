"""The exceptions the actor kernel raises."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._errors import GreenroomError

if TYPE_CHECKING:
    from ._ref import ActorRef


class ActorError(GreenroomError):
    """Base class of every error the actor kernel raises itself."""


class ActorStopped(ActorError):
    """The actor is stopping or stopped and takes no more messages.

    Raised by ``tell``, ``send`` and ``ask`` once ``stop()`` was requested, and by an
    ``ask`` whose message was still queued (or being handled) when the actor stopped
    without finishing it.
    """

    def __init__(self, ref: ActorRef, detail: str = "is stopped") -> None:
        super().__init__(f"actor {ref.name!r} {detail}")
        self.ref = ref


class MailboxFull(ActorError):
    """``tell`` found the bounded mailbox full; the message was not enqueued.

    Use ``await ref.send(message)`` to wait for room instead.
    """

    def __init__(self, ref: ActorRef, size: int) -> None:
        super().__init__(f"mailbox of actor {ref.name!r} is full ({size} messages)")
        self.ref = ref
        self.size = size


class AskTimeout(ActorError, TimeoutError):
    """No reply arrived within the ``ask`` timeout.

    The message stays accepted: the actor still handles it, and its reply is dropped.
    The text names the message's type, never its content (it may hold secrets).
    """

    def __init__(self, ref: ActorRef, message: object, timeout: float) -> None:
        super().__init__(
            f"ask to actor {ref.name!r} timed out after {timeout:g}s (message type {type(message).__name__})"
        )
        self.ref = ref
        self.timeout = timeout


class ChildFailed(ActorError):
    """A child escalated its failure; raised in its parent (or out of the system).

    ``child`` is the failed child's ref and ``__cause__`` the child's exception.
    """

    def __init__(self, child: ActorRef, error: BaseException) -> None:
        super().__init__(f"child actor {child.name!r} escalated {type(error).__name__}: {error}")
        self.child = child
        self.error = error


class Interrupted(ActorError):
    """The handling of this message was cut short: ``ref.interrupt()``,
    ``ref.stop(now=True)`` or ``context.stop(child, now=True)`` cancelled it while an
    interruptible actor was working on it. The actor itself carries on (or stops, for a
    stop); it is not a failure and its supervisor is not involved.
    """

    def __init__(self, ref: ActorRef, message: object) -> None:
        super().__init__(
            f"actor {ref.name!r} was interrupted while handling a {type(message).__name__} message"
        )
        self.ref = ref
