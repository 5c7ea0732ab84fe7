"""``Entity``: an actor per key, whose state outlives its activation.

An entity class has a ``kind`` (by default its class name) and a ``state_type`` (any
type msgspec encodes: a ``msgspec.Struct``, a ``dict``...). Each key of it is one actor,
addressed through its host by ``(class, key)`` (an :class:`~greenroom.entities.EntityRef`,
valid whether or not the entity is active). The host activates it on its first message
(its ``state`` loaded from the store, or :meth:`Entity.initial_state` for a key never
saved), and passivates it after ``idle_after`` seconds without a message, or when the
host's cap of active entities needs the room (least recently used first): its
:meth:`Entity.on_passivate` runs, its state is saved, its actor stopped.

What happens to messages: those the entity's actor accepted before its passivation began
are handled first (a passivation is an actor's draining ``stop``); those sent once it
began wait in the host and go to the next activation, in the order sent — none is lost.
A ``receive`` that raises answers its asker with the error, and the actor restarts as
any actor does: a fresh instance reloads the state last *saved* (changes since then are
gone), and the next message is handled by it — also during a passivation: the failed
instance's state is never saved, and the one that finishes the passivation saves its own.
:meth:`Entity.save` makes the state durable at a point the entity chooses, in one write
with other entities' saves.

Messages waiting for one activation are bounded by ``mailbox_size`` (as its actor's
mailbox is, default 10,000): past it ``tell`` raises
:class:`~greenroom.actors.MailboxFull` to the sender and ``await ref.send(...)`` waits for
room. Nothing already accepted is dropped, and the host goes on.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

import msgspec

from .._errors import InvalidInput
from ..actors import DEFAULT_MAILBOX_SIZE, Actor
from ..store import check_kind

if TYPE_CHECKING:
    from ._host import _Slot

S = TypeVar("S")
logger = logging.getLogger("greenroom.entities")


class Mailed:
    """A message that came through the store (another node's): the entity answers it with
    ``(value, state, token)`` — what ``receive`` returned, the state it left encoded at
    that instant and its lease's token — so that the mail's ``done``, its answer and that
    state are written together (exactly once)."""

    __slots__ = ("message",)

    def __init__(self, message: Any) -> None:
        self.message = message


def answer_mail(cls: type[Entity[Any]]) -> None:
    """Make ``cls`` (and the classes it inherits ``receive`` from) answer a :class:`Mailed`
    message with the state it left. Done by a host on a shared store, where mail exists,
    once per class: a class hosted only on the files pays nothing per message."""
    for klass in cls.__mro__:
        receive = klass.__dict__.get("receive")
        if klass is Entity or klass is Actor or not issubclass(klass, Entity):
            continue
        if receive is not None and not getattr(receive, "_answers_mail", False):
            klass.receive = _answering_mail(receive)  # type: ignore[method-assign,assignment]


def _answering_mail(receive: Callable[[Any, Any], Awaitable[Any]]) -> Callable[[Any, Any], Awaitable[Any]]:
    """``receive`` as it is, but for a :class:`Mailed` message: handled by ``receive``,
    answered with the state it left (see :class:`Mailed`)."""

    @functools.wraps(receive)
    async def wrapped(self: Entity[Any], message: Any) -> Any:
        if type(message) is not Mailed:
            return await receive(self, message)
        value = await receive(self, message.message)
        slot = self._slot
        return value, encode_state(self), None if slot is None else slot.token

    wrapped._answers_mail = True  # type: ignore[attr-defined]
    return wrapped


class Entity(Actor, Generic[S]):
    """Subclass it, set ``state_type``, write ``receive``; see the module doc.

    Class settings: ``kind`` (its name in the store: default the class name; renaming a
    class without keeping ``kind`` leaves its saved states behind), ``state_type``
    (default ``dict``) and ``idle_after`` (seconds without a message before passivation;
    default 120, as Akka's sharding)."""

    kind: ClassVar[str] = ""
    state_type: ClassVar[Any] = dict
    idle_after: ClassVar[float] = 120.0
    message_type: ClassVar[Any] = Any
    """What a message that came from another node through the store decodes as (msgspec
    types; the default: JSON's values)."""
    mailbox_size: ClassVar[int | None] = DEFAULT_MAILBOX_SIZE
    """Messages one entity may have waiting: in its actor's mailbox, and in the host while
    it is being activated (``None``: no bound)."""

    key: str
    """Which entity of its kind this is."""
    state: S
    """What it keeps: saved on passivation and by :meth:`save`, loaded on activation."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "kind" not in cls.__dict__ or not cls.__dict__["kind"]:
            cls.kind = cls.__name__
        check_kind(cls.kind)
        size = cls.mailbox_size
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
            raise InvalidInput(
                f"{cls.__name__}.mailbox_size must be a number of messages >= 1 or None, got {size!r}",
                field="mailbox_size",
                value=size,
            )
        idle = cls.idle_after
        if isinstance(idle, bool) or not isinstance(idle, int | float) or not 0 < idle < math.inf:
            raise InvalidInput(
                f"{cls.__name__}.idle_after must be a number of seconds > 0, got {idle!r}",
                field="idle_after",
                value=idle,
            )

    def __init__(self) -> None:
        super().__init__()
        self._slot: _Slot | None = None

    def initial_state(self) -> S:
        """The state of a key never saved (default: ``state_type()``)."""
        made: S = self.state_type()
        return made

    async def on_activate(self) -> None:
        """Runs once its state is loaded, before its first message (a restart too)."""

    async def on_passivate(self) -> None:
        """Runs when its passivation begins, after the messages it had accepted and before
        its state is saved: the place to trim the state."""

    async def save(self) -> None:
        """Make ``state`` durable now (in one write with the other saves waiting); return
        once it is. The store's error (``StoreUnavailable``, a full disk) propagates: the
        state is then as durable as it was. Cancelled: the save may still happen."""
        slot = self._slot
        if slot is None:
            raise RuntimeError("save() is for an entity its host activated")
        await slot.host.save(slot, encode_state(self))

    # -- the host's side -----------------------------------------------------------------

    async def on_start(self) -> None:
        slot = self._slot
        if slot is not None and slot.reload:  # a restart after a failure: the last saved state
            self.state = await slot.host.reload(slot)
        await self.on_activate()

    async def on_stop(self) -> None:
        slot = self._slot
        # only the instance that ends a passivation saves: one stopped by its failure (to be
        # restarted, or for good) leaves the last save standing, as a restart promises
        if slot is not None and slot.passivating and not slot.fenced and self.context.failure is None:
            try:
                await self.on_passivate()
            except Exception:  # its state is saved all the same (as it is now)
                logger.exception(
                    "entities: %s/%r: on_passivate failed; its state is saved as it is", self.kind, self.key
                )
            try:
                slot.encoded = encode_state(self)
            except (TypeError, msgspec.EncodeError) as error:
                logger.error(
                    "entities: %s/%r: its state cannot be encoded (%s); its last save stands",
                    self.kind, self.key, error,
                )  # fmt: skip


def encode_state(entity: Entity[Any]) -> bytes:
    """The entity's state as the store keeps it (JSON, msgspec's encoding)."""
    return msgspec.json.encode(entity.state)
