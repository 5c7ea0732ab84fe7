"""``EntityRef``: the handle on one entity, valid whether or not it is active.

``tell`` never waits: to an active entity it goes straight into its actor's mailbox; to
one that is not, it waits in the host for the activation and is handed over in the order
sent — at most the class's ``mailbox_size`` of them, then ``MailboxFull``
(:class:`~greenroom.entities.EntityMailboxFull` while it is not active). ``send`` is the
same, waiting for room instead. ``ask`` waits for the activation if needed, then asks the
entity's actor. Messages
sent before a passivation began are handled by the passivating actor; those sent after
it go to the next activation. Nothing is lost, unless the host closes first (then
:class:`~greenroom.entities.EntitiesClosed`) or the activation fails
(:class:`~greenroom.entities.ActivationFailed`: a tell is dropped with a warning, an ask
raises it).
"""

from __future__ import annotations

import math
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, final

import anyio
from anyio.lowlevel import checkpoint

from .._errors import GreenroomError, InvalidInput
from .._guard import NoPublicConstructor
from ..actors import DEFAULT_ASK_TIMEOUT, ActorRef, ActorStopped, AskTimeout, MailboxFull
from ._placement import OutgoingMailFull

if TYPE_CHECKING:
    from ._host import EntityHost, _Slot


class _EntityFull(MailboxFull):
    """A message for an entity that was not accepted (no actor yet: the entity is named).
    ``kind``, ``key``, ``size`` (the bound that was reached)."""

    def __init__(self, kind: str, key: str, size: int, text: str) -> None:
        GreenroomError.__init__(self, f"entity {kind}/{key!r} {text}")
        self.kind = kind
        self.key = key
        self.size = size


class EntityMailboxFull(_EntityFull):
    """``tell`` found as many messages waiting for an entity's activation as its class's
    ``mailbox_size``; this one was not accepted (``await ref.send(message)`` waits for
    room instead). ``kind``, ``key``, ``size``."""

    def __init__(self, kind: str, key: str, size: int) -> None:
        super().__init__(
            kind, key, size, f"has {size} messages waiting for its activation (its mailbox_size)"
        )


class ActivationsFull(_EntityFull):
    """As many entities as the host's ``max_waiting`` wait for their activation (a store
    that is slow or away, a flood of first messages to new keys): a ``tell`` to one more
    is refused, nothing kept; ``send`` and ``ask`` wait for room instead. ``kind``,
    ``key``, ``size``."""

    def __init__(self, kind: str, key: str, size: int) -> None:
        super().__init__(
            kind,
            key,
            size,
            f"is one more than the {size} entities waiting for their activation (max_waiting)",
        )


class EntityAskTimeout(AskTimeout):
    """The ask's time ran out while the entity was being activated (an ``AskTimeout``:
    the message may still be handled)."""

    def __init__(self, text: str) -> None:  # no actor yet to name: the entity is named instead
        GreenroomError.__init__(self, text)


@final
class EntityRef(metaclass=NoPublicConstructor):
    __slots__ = ("_host", "_id", "_slot", "key", "kind")
    _made_by = "Entities.ref(cls, key) returns one"

    def __init__(self, host: EntityHost, kind: str, key: str) -> None:
        self._host = host
        self.kind = kind
        self.key = key
        self._id = (kind, key)
        self._slot: _Slot | None = None
        """The entity's slot while it is active (checked ``live`` at each use)."""

    def __repr__(self) -> str:
        return f"EntityRef({self.kind}/{self.key!r})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, EntityRef)
            and other._host is self._host
            and (other.kind, other.key) == (self.kind, self.key)
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.key))

    def tell(self, message: Any) -> None:
        """Send ``message`` without waiting (see the module doc for where it waits).
        ``EntitiesClosed`` once the host is closed; ``MailboxFull`` when as many messages
        as its class's ``mailbox_size`` wait already (this one was not accepted), or
        :class:`OutgoingMailFull` when it is on another node and the host's
        ``max_outgoing`` messages wait to be posted there, or :class:`ActivationsFull`
        when the host's ``max_waiting`` entities wait for their activation."""
        host = self._host
        slot = self._slot = host.live(self._id, self._slot)
        if slot is not None:  # active: straight into its mailbox
            try:
                slot.ref.tell(message)  # type: ignore[union-attr]  # live: it has its actor
                return
            except ActorStopped:  # it failed for good (its strategy stopped it): back from its last save
                host.died(slot)
                self._slot = None
        if host.deliver(self._id, message) is not None:
            raise EntityMailboxFull(self.kind, self.key, host.mailbox_size(self.kind))

    async def send(self, message: Any) -> None:
        """Send ``message`` as ``tell`` does, waiting for room where as many messages as
        its class's ``mailbox_size`` wait already (in its mailbox, or for its activation),
        or the host's ``max_outgoing`` or ``max_waiting``. Always a checkpoint. Cancelled
        while waiting: nothing was sent. Raises ``EntitiesClosed`` once the host is
        closed, and ``ActivationFailed`` when the activation it waited for failed (the
        message was not accepted)."""
        await checkpoint()
        host = self._host
        while True:
            slot = self._slot = host.live(self._id, self._slot)
            if slot is not None and slot.ref is not None:
                try:
                    await slot.ref.send(message)
                    return
                except ActorStopped:  # passivated or failed meanwhile: where it is now
                    if not slot.ref.is_alive:
                        host.died(slot)
                    self._slot = None
                    continue
            try:
                full = host.deliver(self._id, message)
            except (OutgoingMailFull, ActivationsFull):  # the store is behind: wait for room
                await host.room()
                continue
            if full is None:
                return
            await full.done.wait()  # its activation handed the waiting ones over (or failed)
            if full.error is not None:
                raise full.error

    def ask(self, message: Any, timeout: float | None = DEFAULT_ASK_TIMEOUT) -> Coroutine[Any, Any, Any]:
        """Send ``message`` and wait for what the entity's ``receive`` returns, activating
        it first if needed. Raises what ``receive`` raised, ``ActivationFailed``,
        ``EntitiesClosed``, ``AskTimeout`` after ``timeout`` seconds (``None``: as long as
        it takes; the message may still be handled; :class:`EntityAskTimeout` when the
        time ran out waiting for the activation). Cancelled: the message may still be
        handled, its answer dropped. To an active entity this is its actor's own ``ask``
        (no step of its own: an ask costs what an actor's does)."""
        slot = self._slot = self._host.live(self._id, self._slot)
        if slot is not None and slot.ref is not None and slot.ref.is_alive:
            return slot.ref.ask(message, timeout=timeout)
        return self._ask_waiting(message, timeout)

    async def _ask_waiting(self, message: Any, timeout: float | None) -> Any:
        if timeout is not None and not (timeout > 0):
            raise InvalidInput(
                f"ask timeout must be a positive number of seconds or None, got {timeout!r}",
                field="timeout",
                value=timeout,
            )
        host = self._host
        with anyio.move_on_after(math.inf if timeout is None else timeout) as scope:
            for _ in range(3):  # passivated between its activation and the ask: once more
                ref = await _activated(host, self._id)
                if ref is None:  # held by another node: through the store
                    return await host.ask_elsewhere(self._id, message)
                try:
                    return await ref.ask(message, timeout=None)
                except ActorStopped:
                    if host.closed:
                        raise
            assert ref is not None
            raise ActorStopped(ref, "stopped while asked, three times")
        assert scope.cancelled_caught
        raise EntityAskTimeout(f"{self!r} did not answer a {type(message).__name__} within {timeout} s")


async def _activated(host: EntityHost, ident: tuple[str, str]) -> ActorRef | None:
    """``host.ref_for(ident)``, waiting for room while too many entities wait for their
    activation (:class:`ActivationsFull`)."""
    while True:
        try:
            return await host.ref_for(ident)
        except ActivationsFull:
            await host.room()
