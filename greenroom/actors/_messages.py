"""System messages the kernel delivers to actors and observers.

They live in the kernel rather than in ``greenroom.messages`` because they carry
``ActorRef``s, which never cross a process boundary or touch disk.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import msgspec

if TYPE_CHECKING:
    from ._ref import ActorRef


class Terminated(msgspec.Struct, frozen=True):
    """Delivered to every watcher when the watched actor has stopped.

    ``reason`` is ``None`` for a normal stop, or the exception that stopped it
    (a failure its supervisor decided to stop on, or one past the restart limit).
    """

    ref: ActorRef
    reason: BaseException | None = None


DeadLetterReason = Literal["stopped", "dropped", "mailbox full", "abandoned"]
"""Why a message was not delivered (see :class:`DeadLetter`)."""


class DeadLetter(msgspec.Struct, frozen=True):
    """A message that could not be delivered, as recorded by ``system.dead_letters``.

    ``reason`` says why: ``"stopped"`` (sent after the stop), ``"dropped"`` (left in
    the mailbox when the actor stopped without draining), ``"mailbox full"`` (a timer
    tick that found no room), ``"abandoned"`` (an ask to an interruptible actor whose
    asker gave up before the actor took the message: it is never started).
    """

    recipient: ActorRef
    message: Any
    reason: DeadLetterReason
