"""Where undeliverable messages are counted, kept (the most recent) and published."""

from __future__ import annotations

import logging
from collections import Counter, deque
from typing import TYPE_CHECKING, Any

from .._tracing import Traced
from ._messages import DeadLetter, DeadLetterReason

if TYPE_CHECKING:
    from ._ref import ActorRef

logger = logging.getLogger("greenroom.actors.deadletters")


class DeadLetters:
    """``system.dead_letters``: every message that could not be delivered.

    ``count`` and ``by_reason`` count them all; ``recent()`` keeps the last ``keep``;
    subscribed actors get each one as a :class:`DeadLetter` (a subscriber whose own
    mailbox is full or stopped misses it, counted in ``missed``, never recursively).
    """

    def __init__(self, keep: int = 1000) -> None:
        self.count = 0
        self.missed = 0
        self.by_reason: Counter[DeadLetterReason] = Counter()
        self._recent: deque[DeadLetter] = deque(maxlen=keep)
        self._subscribers: list[ActorRef] = []

    def record(self, recipient: ActorRef, message: Any, reason: DeadLetterReason) -> None:
        if type(message) is Traced:
            message = message.message
        self.count += 1
        recipient._cell.dead_letter_count += 1
        self.by_reason[reason] += 1
        letter = DeadLetter(recipient, message, reason)
        self._recent.append(letter)
        logger.debug("dead letter to %r (%s): %s message", recipient.name, reason, type(message).__name__)
        for subscriber in self._subscribers:
            cell = subscriber._cell
            if (
                subscriber is recipient
                or not cell.accepting
                or (cell.limit is not None and len(cell.mailbox) + cell.reserved >= cell.limit)
            ):
                self.missed += 1
                continue
            cell.deliver_system(letter)

    def recent(self) -> list[DeadLetter]:
        return list(self._recent)

    def subscribe(self, ref: ActorRef) -> None:
        if ref not in self._subscribers:
            self._subscribers.append(ref)

    def unsubscribe(self, ref: ActorRef) -> None:
        if ref in self._subscribers:
            self._subscribers.remove(ref)
