"""``Entities``: the host of a process's entities — activation, passivation, saves.

One host per actor system and entity store (``async with Entities(system, store,
[Counter, Profile]) as entities``). It keeps the *active* entities only: each is an actor
of the system, found by ``(kind, key)`` in a table; a passivated entity costs nothing
here (its state is in the store). ``entities.ref(Counter, "u-1")`` is valid forever.

- **Activation.** A message for an entity that is not active waits in the host while
  the activator loads its state (many keys of a kind in one read), spawns its actor and
  hands it the waiting messages, in the order sent. ``activations_per_second`` bounds
  how fast that happens (after a mass restart every client's first message activates
  at once: the waiting is in the host, not on the store). A state that cannot be
  decoded fails that entity's activation — its asks raise :class:`ActivationFailed`, its
  tells are dropped with a warning — and nothing else; its next message tries again.
- **Bounded waiting.** The messages told to one entity while it is not active are bounded
  by its class's ``mailbox_size`` (its actor's mailbox bound): past it ``tell`` raises
  :class:`EntityMailboxFull` (a ``MailboxFull``) to the sender and ``send`` waits for
  room; nothing accepted is dropped and the host goes on. The same holds for messages to
  entities on other nodes waiting to be posted through the store (``max_outgoing``,
  default 10,000: :class:`OutgoingMailFull`; an ask waits for room).
- **Passivation.** Every ``idle_after / 4`` seconds the janitor passivates the entities
  with no message since ``idle_after`` (per class). Passivating: the key leaves the table
  (new messages wait in the host), the actor is stopped (it handles what it had accepted,
  then :meth:`Entity.on_passivate`), its state is saved — one write per batch — and if
  messages came meanwhile it is activated again from the state just saved.
- **The cap.** ``max_active`` holds: entities with a live actor (active, or passivating and
  not stopped yet) never number more. An activation waits for room; the room is made by
  passivating the least recently used entities, idle ones first (a busy one is drained:
  it handles what it accepted, then stops). An entity that asks a not-active entity inside
  ``receive`` while every other one is busy waits for its ask's timeout.
- **Saves.** :meth:`Entity.save` and passivations go through one saver: what gathered
  while a write ran is the next write (one transaction per kind).
- **Closing** (leaving the ``async with``) passivates every active entity (reason
  ``"shutdown"``), saving their states, then stops. Messages sent after that fail with
  :class:`EntitiesClosed`. Cancelled while closing: the saves are shielded for at most
  ``close_timeout`` seconds.

``subscribe(ref)`` tells an actor (a test's probe) each ``EntityActivated`` and
``EntityPassivated``.
"""

from __future__ import annotations

import logging
from collections import OrderedDict, deque
from collections.abc import Callable, Coroutine, Iterable
from types import TracebackType
from typing import Any, TypeVar

import anyio
import msgspec

from .._checks import check_int, check_seconds
from .._commit import Batcher
from .._errors import DataError, GreenroomError, InvalidInput
from ..actors import ActorRef, ActorStopped, ActorSystem, MailboxFull
from ..messages import EntityActivated, EntityPassivated, PassivatedBecause
from ..store import EntityStore, Fenced, Mail, MailAnswer, Record, StoredState, check_key
from ._entity import Entity, answer_mail
from ._placement import MAX_OUTGOING, Placement, new_node
from ._ref import ActivationsFull, EntityRef

logger = logging.getLogger("greenroom.entities")

E = TypeVar("E", bound=Entity[Any])
Id = tuple[str, str]


class ActivationFailed(DataError):
    """An entity could not be activated: its saved state does not decode as its class's
    ``state_type`` (the store's bytes are kept as they are), or the store could not be
    read. Its other messages are not affected: the next one tries again."""

    def __init__(self, kind: str, key: str, reason: str) -> None:
        super().__init__(f"entity {kind}/{key!r} cannot be activated: {reason}")
        self.kind = kind
        self.key = key


SAVE_BATCH = 4096
"""The most saves of a kind one write holds (more wait for the next)."""
MAX_WAITING = 100_000
"""Entities that may wait for their activation at once, by default."""


class EntitiesClosed(GreenroomError):
    """The host is closed: it takes no more messages."""


class _Slot:
    """An active entity (or one being passivated): its actor, the instance the actor
    runs now, and what the janitor needs."""

    __slots__ = (
        "claimed_at",
        "cls",
        "encoded",
        "entity",
        "epoch",
        "fenced",
        "host",
        "initial",
        "key",
        "leaving",
        "live",
        "passivating",
        "ref",
        "reload",
        "seen",
        "token",
        "used",
        "version",
    )

    def __init__(
        self, host: EntityHost, cls: type[Entity[Any]], key: str, version: int, token: int | None = None
    ) -> None:
        self.host = host
        self.cls = cls
        self.key = key
        self.version = version
        self.token = token
        """The fencing token of this node's lease on it (``None``: a store one process owns)."""
        self.claimed_at = anyio.current_time()
        self.fenced = False
        """Its lease is another node's now: it was given up, and writes nothing more."""
        self.ref: ActorRef | None = None
        self.entity: Entity[Any] | None = None
        self.reload = False
        self.encoded: bytes | None = None
        self.used = True
        self.seen = 0.0
        self.initial: Any = None
        """The state loaded at activation (``None``: the class's initial state)."""
        self.leaving: _Waiting | None = None
        """While it is passivated: where its messages wait meanwhile."""
        self.live = False
        """In the table with its actor: messages go straight to it (refs cache the slot)."""
        self.epoch = -1
        """The host's activation count when a message last moved it to the recent end."""
        self.passivating = False
        """Its actor is being stopped for a passivation: the instance that ends it saves."""

    def __call__(self) -> Entity[Any]:
        """The actor's factory (a slot is one: no closure per entity): the first instance
        gets the state loaded here; a restart's reloads the last save in ``on_start``."""
        entity = self.cls()
        entity._slot = self
        entity.key = self.key
        if self.entity is None:
            state, self.initial = self.initial, None
            entity.state = entity.initial_state() if state is None else state
        else:
            self.reload = True
        self.entity = entity
        return entity


class _Waiting:
    """An entity's messages while it is not active: told ones in order, and how many
    asks wait (each for ``done``, then sends itself)."""

    __slots__ = (
        "asks",
        "done",
        "encoded",
        "error",
        "passivating",
        "queued",
        "ref",
        "remote",
        "token",
        "told",
        "version",
    )

    def __init__(self, passivating: bool = False) -> None:
        self.told: list[Any] = []
        self.asks = 0
        self.done = anyio.Event()
        self.ref: ActorRef | None = None
        self.error: BaseException | None = None
        self.passivating = passivating
        """Its actor is stopping: it cannot be activated before it has stopped."""
        self.remote = False
        """Another node holds it: its asks go there through the store."""
        self.queued = False
        self.encoded: bytes | None = None
        """The state a passivation just saved (an activation right after uses it)."""
        self.version = 0
        self.token: int | None = None
        """The lease's token that state was saved under (kept: the lease was not released)."""


class _Save:
    """A write on its way to the store: an entity's state (``None``: kept — only the mail
    settled) under its lease's token, with the mail it handled and their answers."""

    __slots__ = ("answers", "done", "encoded", "error", "finished", "key", "kind", "slot", "token", "version")

    def __init__(
        self,
        slot: _Slot | None,
        encoded: bytes | None,
        *,
        kind: str = "",
        key: str = "",
        token: int | None = None,
        done: tuple[int, ...] = (),
        answers: tuple[MailAnswer, ...] = (),
    ) -> None:
        self.slot = slot
        self.kind = slot.cls.kind if slot is not None else kind
        self.key = slot.key if slot is not None else key
        self.token = slot.token if slot is not None else token
        self.encoded = encoded
        self.done = done
        self.answers = answers
        self.finished = anyio.Event()
        self.error: BaseException | None = None
        """The store's error, or the :class:`Fenced` refusal (nothing of it was written)."""
        self.version = 0

    def record(self) -> Record:
        return Record(self.key, self.encoded, self.token, self.done, self.answers)


class EntityHost:
    """A process's entities in one place: the table of active ones, the waiting lines,
    the activator, the saver and the janitor — and its methods without an underscore are
    all the refs (``_ref``), placement (``_placement``) and the entities (``_entity``) use
    of it. Users hold :class:`Entities`, its public face."""

    def __init__(
        self,
        system: ActorSystem,
        store: EntityStore,
        classes: Iterable[type[Entity[Any]]],
        *,
        max_active: int | None = None,
        activations_per_second: float | None = None,
        batch: int = 256,
        close_timeout: float = 30.0,
        node: str | None = None,
        lease: float = 30.0,
        max_outgoing: int = MAX_OUTGOING,
        max_waiting: int = MAX_WAITING,
    ) -> None:
        self.system = system
        self.store = store
        self.node = node or new_node()
        """This host's name among the daemons sharing the store (placement and mail)."""
        self.lease = check_seconds("Entities", "lease", lease)
        self._placement = (
            Placement(self, store, self.node, self.lease, check_int("Entities", "max_outgoing", max_outgoing))
            if getattr(store, "shared", False)
            else None
        )
        self.classes: dict[str, type[Entity[Any]]] = {}
        for cls in classes:
            if not (isinstance(cls, type) and issubclass(cls, Entity)):
                raise InvalidInput(
                    f"Entities classes must be Entity subclasses, got {cls!r}", field="classes"
                )
            if cls.kind in self.classes and self.classes[cls.kind] is not cls:
                raise InvalidInput(
                    f"two entity classes share the kind {cls.kind!r}", field="kind", value=cls.kind
                )
            self.classes[cls.kind] = cls
            if self._placement is not None:  # mail exists: a mailed message answers its state
                answer_mail(cls)
        self.max_active = None if max_active is None else check_int("Entities", "max_active", max_active)
        self.rate = (
            None
            if activations_per_second is None
            else check_seconds("Entities", "activations_per_second", activations_per_second)
        )
        self.batch = check_int("Entities", "batch", batch)
        self.close_timeout = check_seconds("Entities", "close_timeout", close_timeout)
        self._active: OrderedDict[Id, _Slot] = OrderedDict()
        """The active entities, least recently used first — to the resolution of an
        activation: an entity's first message since the last activation moves it to the
        recent end (``_epoch`` counts activations), later ones until the next activation
        do not. The order is read only right after activations (the cap), and a stream of
        messages between two activations costs one move per entity, not one per message."""
        self._epoch = 0
        self._waiting: dict[Id, _Waiting] = {}
        self.max_waiting = check_int("Entities", "max_waiting", max_waiting)
        """Entities that may wait for their activation at once (see :class:`ActivationsFull`)."""
        self._waiting_room = anyio.Event()
        self._queue: deque[Id] = deque()
        self._queued = anyio.Event()
        self._saves: Batcher[_Save] = Batcher(max_batch=SAVE_BATCH, owner="Entities")
        """Saves waiting for the saver, a lane per kind (one write per kind at a time)."""
        self._saves_waiting = anyio.Event()
        self._stopping: set[_Slot] = set()
        """Slots out of the table whose actor has not stopped yet (they count for the cap)."""
        self._room = anyio.Event()
        """Set when an actor stopped (room under the cap may have been made)."""
        self._subscribers: list[ActorRef] = []
        self._task_group: anyio.abc.TaskGroup | None = None
        self._closed = False
        self.activations = 0
        self.passivations = 0
        self.given_up = 0
        """Entities given up because another node holds their lease now (a pause, a stall)."""

    # -- addressing -------------------------------------------------------------------------

    def ref(self, cls: type[E], key: str) -> EntityRef:
        """The entity of class ``cls`` and ``key``: valid whether or not it is active.
        ``InvalidInput`` naming ``cls`` for a class this host does not serve (or what is
        not a class), naming ``key`` for a bad key."""
        kind = getattr(cls, "kind", None) if isinstance(cls, type) and issubclass(cls, Entity) else None
        if not isinstance(kind, str) or self.classes.get(kind) is not cls:
            served = ", ".join(sorted(c.__name__ for c in self.classes.values())) or "none"
            raise InvalidInput(
                f"this host serves no entity class {cls!r} (it serves: {served})", field="cls", value=cls
            )
        return EntityRef._create(self, kind, check_key(key))

    def subscribe(self, ref: ActorRef) -> None:
        """Tell ``ref`` every ``EntityActivated`` and ``EntityPassivated`` from now on."""
        self._subscribers.append(ref)

    async def passivate(self, ref: EntityRef) -> bool:
        """Passivate that entity now (as its idle time would: what it accepted first, then
        ``on_passivate``, then the save); return once its state is saved. ``False`` if it
        was not active. Messages sent meanwhile wait for its next activation."""
        slot = self._active.get((ref.kind, ref.key))
        if slot is None:
            return False
        await self._passivate([slot], "idle")
        return True

    @property
    def active(self) -> int:
        """Entities active now (a gauge)."""
        return len(self._active)

    def is_active(self, cls: type[Entity[Any]], key: str) -> bool:
        return (cls.kind, key) in self._active

    # -- the refs' side (what ``_ref`` uses; nothing else of the host is theirs) ------------

    def live(self, ident: Id, slot: _Slot | None) -> _Slot | None:
        """The slot of ``ident`` while it is active (``slot``: the one a ref remembers),
        marked used now — its first message since the last activation makes it the most
        recent (see ``_active``); ``None`` when it is not active."""
        if slot is None or not slot.live:
            slot = self._active.get(ident)
            if slot is None or not slot.live:
                return None
        slot.used = True
        if slot.epoch != self._epoch:
            slot.epoch = self._epoch
            self._active.move_to_end(ident)
        return slot

    def died(self, slot: _Slot) -> None:
        """Its actor stopped on its own (it kept failing): forget it; the next message
        activates it from its last save."""
        ident = (slot.cls.kind, slot.key)
        slot.live = False
        if self._active.get(ident) is slot:
            del self._active[ident]
            self._room.set()
            logger.warning("entities: %s/%r stopped after failing; its last saved state stands", *ident)

    def deliver(self, ident: Id, message: Any) -> _Waiting | None:
        """A message for an entity that is not active here: posted to the node a recent
        claim found holding it, or kept for its activation, in order. ``None`` when it
        was taken; else the full waiting line (its ``done``: room, or the activation's
        failure). Raises ``OutgoingMailFull`` (posting) or ``ActivationsFull`` (too many
        entities wait for their activation), nothing kept, and ``EntitiesClosed``."""
        placement = self._placement
        if placement is not None and placement.holder_of(ident) is not None:
            placement.send(ident, message)
            return None
        waiting = self._wait(ident)
        size = self.classes[ident[0]].mailbox_size if ident[0] in self.classes else None
        if size is not None and len(waiting.told) >= size:
            return waiting
        waiting.told.append(message)
        return None

    async def room(self) -> None:
        """Wait until a refused message may be taken: room among the messages posted to
        other nodes, and among the entities waiting for their activation. Cancelled:
        nothing changes."""
        if self._placement is not None:
            await self._placement.room()
        while len(self._waiting) >= self.max_waiting and not self._closed:
            if self._waiting_room.is_set():  # (an old one: every waiter shares the next)
                self._waiting_room = anyio.Event()
            await self._waiting_room.wait()

    def mailbox_size(self, kind: str) -> int:
        return self.classes[kind].mailbox_size or 0

    @property
    def closed(self) -> bool:
        return self._closed

    async def ask_elsewhere(self, ident: Id, message: Any) -> Any:
        """Ask the node holding ``ident`` through the store (see ``Placement.ask``)."""
        assert self._placement is not None
        return await self._placement.ask(ident, message)

    async def ref_for(self, ident: Id) -> ActorRef | None:
        """The actor of an active entity, once it is (activating it first); ``None`` when
        another node holds it (the ask goes there through the store)."""
        slot = self._active.get(ident)
        if slot is not None and slot.ref is not None and not slot.ref.is_alive:
            self.died(slot)
            slot = None
        slot = self.live(ident, slot)
        if slot is not None and slot.ref is not None:
            return slot.ref
        if slot is None and self._placement is not None and self._placement.holder_of(ident) is not None:
            return None
        waiting = self._wait(ident)
        waiting.asks += 1
        await waiting.done.wait()
        if waiting.error is not None:
            raise waiting.error
        if waiting.remote:
            return None
        assert waiting.ref is not None
        return waiting.ref

    # -- placement's side (what ``_placement`` uses) -----------------------------------------

    def wake(self, ident: Id) -> None:
        """Activate ``ident`` with no message (its mail, found unheld, is then ours)."""
        idle = ident not in self._active and ident not in self._waiting
        if ident[0] in self.classes and idle and not self._closed and self._task_group is not None:
            self._wait(ident)

    def start_soon(self, fn: Callable[..., Coroutine[Any, Any, Any]], *args: Any) -> None:
        """Run ``fn(*args)`` in the host's task group (nothing once it stopped)."""
        if self._task_group is not None:
            self._task_group.start_soon(fn, *args)

    def token_of(self, ident: Id) -> int | None:
        """The lease token ``ident`` is active here under (``None``: not active)."""
        slot = self._active.get(ident)
        return None if slot is None else slot.token

    def _unwait(self, ident: Id) -> _Waiting | None:
        """``ident`` waits no more (activated, failed, or left passivated)."""
        waiting = self._waiting.pop(ident, None)
        if len(self._waiting) < self.max_waiting:
            self._waiting_room.set()
        return waiting

    def _wait(self, ident: Id) -> _Waiting:
        if self._closed or self._task_group is None:
            said = "closed" if self._closed else "not running (use it in `async with`)"
            raise EntitiesClosed(f"the entity host is {said}: no message reaches {ident[0]}/{ident[1]!r}")
        waiting = self._waiting.get(ident)
        if waiting is None:
            if len(self._waiting) >= self.max_waiting:
                raise ActivationsFull(ident[0], ident[1], self.max_waiting)
            waiting = self._waiting[ident] = _Waiting()
        if not waiting.queued and not waiting.passivating:  # (stopping: queued once it stopped)
            waiting.queued = True
            self._queue.append(ident)
            self._queued.set()
        return waiting

    # -- running ----------------------------------------------------------------------------

    async def __aenter__(self) -> EntityHost:
        self._task_group = anyio.create_task_group()
        await self._task_group.__aenter__()
        self._task_group.start_soon(self._activator, name="greenroom-entities-activator")
        self._task_group.start_soon(self._saver, name="greenroom-entities-saver")
        self._task_group.start_soon(self._janitor, name="greenroom-entities-janitor")
        placement = self._placement
        if placement is not None:  # a store several daemons share: leases and mail
            self._task_group.start_soon(placement.renewing, name="greenroom-entities-leases")
            self._task_group.start_soon(placement.posting, name="greenroom-entities-post")
            self._task_group.start_soon(placement.mail, name="greenroom-entities-mail")
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        group = self._task_group
        assert group is not None
        try:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self.close_timeout):
                self._closed = True
                self._waiting_room.set()  # those waiting for room: closed now
                self._queue.clear()
                while self._active or self._waiting:
                    for ident, waiting in list(self._waiting.items()):
                        if not waiting.passivating:  # not activated yet: it will not be
                            self._fail_waiting(ident, EntitiesClosed("the entity host closed first"))
                    if self._active:
                        await self._passivate(list(self._active.values()), "shutdown")
                    elif self._waiting:  # a passivation in flight (its save) finishes
                        await anyio.sleep(0.01)
            if self._placement is not None:
                with anyio.CancelScope(shield=True), anyio.move_on_after(self.close_timeout):
                    await self._placement.flush()
        finally:
            group.cancel_scope.cancel()
            self._task_group = None
            await group.__aexit__(kind, error, tb)
        return None

    # -- activation -------------------------------------------------------------------------

    async def _activator(self) -> None:
        while True:
            while not self._queue:
                self._queued = anyio.Event()
                await self._queued.wait()
            # paced: a tenth of a second's worth at a time, then the rest of that tenth
            most = self.batch if self.rate is None else max(1, min(self.batch, int(self.rate / 10)))
            if self.max_active is not None:  # no more than the cap leaves room for
                most = await self._make_room(min(most, len(self._queue)))
                if not self._queue:  # what waited was handled meanwhile (failed, closed)
                    continue
            taken: dict[str, list[str]] = {}
            count = 0
            while self._queue and count < most:
                kind, key = self._queue.popleft()
                taken.setdefault(kind, []).append(key)
                count += 1
            began = anyio.current_time()
            for kind, keys in taken.items():
                try:
                    await self._activate(kind, keys)
                except Exception as error:  # a bug's, not a message's: these fail, the host goes on
                    logger.exception("entities: activating %d %s failed", len(keys), kind)
                    for key in keys:
                        self._fail_waiting((kind, key), ActivationFailed(kind, key, repr(error)))
            if self.rate is not None:
                await anyio.sleep(max(0.0, count / self.rate - (anyio.current_time() - began)))

    async def _activate(self, kind: str, keys: list[str]) -> None:
        cls = self.classes.get(kind)
        wanted = [key for key in keys if (kind, key) in self._waiting]
        if cls is None:
            for key in wanted:
                self._fail_waiting(
                    (kind, key), InvalidInput(f"no entity class of kind {kind!r}", field="kind")
                )
            return
        to_load = [key for key in wanted if self._waiting[(kind, key)].encoded is None]
        stored: dict[str, StoredState] = {}
        tokens: dict[str, int] = {}
        if to_load:
            try:
                if self._placement is None:
                    stored = await self.store.load(kind, to_load)
                else:  # claimed for this node, and read, in one transaction
                    stored, elsewhere, tokens = await self._placement.claim(kind, to_load)
                    for key in elsewhere:
                        waiting = self._unwait((kind, key))
                        if waiting is not None:
                            self._placement.forward((kind, key), waiting)
                    wanted = [key for key in wanted if key not in elsewhere]
            except Exception as error:  # the store away: these fail now; the next message retries
                for key in to_load:
                    self._fail_waiting(
                        (kind, key), ActivationFailed(kind, key, f"its state could not be read: {error}")
                    )
                logger.warning("entities: %d %s activation(s) failed: %s", len(to_load), kind, error)
                wanted = [key for key in wanted if key not in to_load]
        for key in wanted:
            ident = (kind, key)
            waiting = self._waiting.get(ident)
            if waiting is None:
                continue
            encoded, version, token = waiting.encoded, waiting.version, waiting.token
            if encoded is None:
                token = tokens.get(key)
                if key in stored:
                    encoded, version = stored[key].state, stored[key].version
            await self._start(cls, key, waiting, encoded, version, token)

    async def _start(
        self,
        cls: type[Entity[Any]],
        key: str,
        waiting: _Waiting,
        encoded: bytes | None,
        version: int,
        token: int | None,
    ) -> None:
        ident = (cls.kind, key)
        if self._closed:
            self._fail_waiting(ident, EntitiesClosed("the entity host closed first"))
            return
        try:
            state = None if encoded is None else msgspec.json.decode(encoded, type=cls.state_type)
        except (msgspec.DecodeError, msgspec.ValidationError) as error:
            wanted = _type_name(cls.state_type)
            reason = f"its saved state (version {version}) does not decode as {wanted}: {error}"
            self._fail_waiting(ident, ActivationFailed(cls.kind, key, reason))
            return
        slot = _Slot(self, cls, key, version, token)
        slot.seen = anyio.current_time()
        slot.initial = state
        try:
            ref = await self.system.spawn(slot, mailbox_size=cls.mailbox_size)
        except Exception as error:  # on_activate (or the class's __init__) raised
            self._fail_waiting(ident, ActivationFailed(cls.kind, key, f"{type(error).__name__}: {error}"))
            return
        slot.ref = ref
        slot.live = True
        self._epoch += 1
        slot.epoch = self._epoch
        self._active[ident] = slot
        self._unwait(ident)
        for message in waiting.told:  # in the order sent, before anything sent from now on
            ref.tell(message)  # a fresh mailbox: what waited (at most its bound) fits
        waiting.ref = ref
        waiting.done.set()
        self.activations += 1
        self._announce(EntityActivated(cls.kind, key, version))

    def _fail_waiting(self, ident: Id, error: BaseException) -> None:
        waiting = self._unwait(ident)
        if waiting is None:
            return
        if waiting.told:
            logger.warning(
                "entities: %d message(s) told to %s/%r dropped: %s",
                len(waiting.told),
                ident[0],
                ident[1],
                error,
            )
        waiting.error = error
        waiting.done.set()

    async def reload(self, slot: _Slot) -> Any:
        """The state last saved (a restarted entity's), or its initial state."""
        stored = (await self.store.load(slot.cls.kind, [slot.key])).get(slot.key)
        if stored is None:
            assert slot.entity is not None
            return slot.entity.initial_state()
        slot.version = stored.version
        return msgspec.json.decode(stored.state, type=slot.cls.state_type)

    # -- passivation ------------------------------------------------------------------------

    async def _janitor(self) -> None:
        every = min(cls.idle_after for cls in self.classes.values()) / 4 if self.classes else 60.0
        while True:
            await anyio.sleep(every)
            await self.sweep()

    async def sweep(self) -> None:
        """One pass of the janitor (it runs every ``idle_after / 4`` seconds): passivate
        the entities no message reached for their ``idle_after``, and give back the
        mailbox buffer of those none reached since the last pass (``ActorRef.trim``: an
        idle entity costs less than a busy one)."""
        now = anyio.current_time()
        idle: list[_Slot] = []
        for slot in list(self._active.values()):
            if slot.used:
                slot.used = False
                slot.seen = now
            elif slot.ref is not None and slot.ref.idle:
                if now - slot.seen >= slot.cls.idle_after:
                    idle.append(slot)
                else:
                    slot.ref.trim()
        if idle:
            await self._passivate(idle, "idle")

    async def _make_room(self, wanted: int) -> int:
        """Room under ``max_active`` for up to ``wanted`` activations (at least one), made
        by passivating the least recently used entities — idle ones first, a busy one only
        when none is idle — and waiting for their actors to stop."""
        limit = self.max_active
        assert limit is not None
        while True:
            room = limit - len(self._active) - len(self._stopping)
            if room >= wanted:
                return wanted
            chosen: list[_Slot] = []
            for slot in self._active.values():  # least recently used first
                if len(chosen) >= wanted - room:
                    break
                if slot.ref is None or slot.ref.idle:
                    chosen.append(slot)
            if not chosen and room <= 0 and not self._stopping and self._active:
                chosen.append(next(iter(self._active.values())))  # all busy: drain the oldest
            if chosen and self._task_group is not None:
                for slot in chosen:  # out of the table now: their messages wait in the host
                    self._leave(slot)
                self._task_group.start_soon(self._passivate, chosen, "cap", False)
            if room > 0:
                return room
            self._room = anyio.Event()
            await self._room.wait()

    def _leave(self, slot: _Slot) -> bool:
        """Take ``slot`` out of the table (its messages wait in the host from now on);
        ``False`` if it had left already (another passivation has it)."""
        ident = (slot.cls.kind, slot.key)
        slot.live = False
        if self._active.get(ident) is not slot:
            return False
        del self._active[ident]
        self._stopping.add(slot)
        waiting = self._waiting.get(ident)
        if waiting is None:
            waiting = self._waiting[ident] = _Waiting(passivating=True)
        waiting.passivating = True
        slot.leaving = waiting
        return True

    def _stopped(self, slot: _Slot) -> None:
        """Its actor has stopped: from now on a message activates it again at once, from
        the state its passivation encoded (its save may still be on its way: saves of one
        key are written in the order made) — and if messages came meanwhile, now."""
        if slot in self._stopping:  # its actor is gone: room under the cap
            self._stopping.discard(slot)
            self._room.set()
        waiting = slot.leaving
        ident = (slot.cls.kind, slot.key)
        if waiting is None or self._waiting.get(ident) is not waiting:
            return
        waiting.passivating = False
        waiting.encoded, waiting.version = slot.encoded, slot.version
        waiting.token = None if slot.fenced else slot.token
        if waiting.told or waiting.asks:
            if self._closed:
                self._fail_waiting(ident, EntitiesClosed("the entity host closed first"))
            else:
                waiting.queued = True
                self._queue.append(ident)
                self._queued.set()

    async def _passivate(self, slots: list[_Slot], reason: PassivatedBecause, leave: bool = True) -> None:
        """Stop each entity (its accepted messages first, then ``on_passivate``); from
        then on a message brings it back at once from the state just encoded; save the
        states (one write per kind); then announce each passivation."""
        if leave:
            slots = [slot for slot in slots if self._leave(slot)]

        async def stop(slot: _Slot) -> None:
            slot.passivating = True  # whichever instance ends the stop saves (a restarted one too)
            if slot.ref is not None:
                await slot.ref.stop()
            self._stopped(slot)

        async with anyio.create_task_group() as group:
            for slot in slots:
                group.start_soon(stop, slot)
        by_kind: dict[str, list[_Slot]] = {}
        for slot in slots:
            by_kind.setdefault(slot.cls.kind, []).append(slot)
        for kind_slots in by_kind.values():
            saves = [
                _Save(slot, slot.encoded)
                for slot in kind_slots
                if slot.encoded is not None and not slot.fenced
            ]
            if saves:
                await self._write_until_done(saves)
        released: dict[str, list[str]] = {}
        for slot in slots:
            self.passivations += 1
            self._announce(
                EntityPassivated(slot.cls.kind, slot.key, reason, slot.version if slot.encoded else 0)
            )
            waiting, ident = slot.leaving, (slot.cls.kind, slot.key)
            slot.leaving = None
            if waiting is not None and self._waiting.get(ident) is waiting and not waiting.queued:
                self._unwait(ident)  # no message came: it stays passivated, its state saved
                released.setdefault(slot.cls.kind, []).append(slot.key)
        if self._placement is not None:
            for kind, keys in released.items():
                await self._placement.release(kind, keys)

    async def _write_until_done(self, saves: list[_Save]) -> None:
        """Write a passivation's states, again after a failure (with a growing pause) until
        they are durable: a passivated entity's state lives nowhere else."""
        pause = 0.1
        while True:
            for save in saves:
                self._saves.add(None, save, save.kind)
            self._saves_waiting.set()
            for save in saves:
                await save.finished.wait()
            failed = [save for save in saves if save.error is not None and not isinstance(save.error, Fenced)]
            if not failed:
                return
            logger.error(
                "entities: %d state(s) of passivated entities not saved, trying again in %.1f s: %s",
                len(failed), pause, failed[0].error,
            )  # fmt: skip
            await anyio.sleep(pause)
            pause = min(pause * 2, 5.0)
            saves = [_Save(save.slot, save.encoded) for save in failed if save.slot is not None]

    # -- saving -----------------------------------------------------------------------------

    async def save(self, slot: _Slot, encoded: bytes) -> None:
        """:meth:`Entity.save`: ``Fenced`` when its lease is another node's (the entity is
        given up meanwhile), or the store's error."""
        if slot.fenced:
            raise Fenced(f"entity {slot.cls.kind}/{slot.key!r}", slot.token or 0, None, "it was given up")
        save = _Save(slot, encoded)
        await self._write(save)
        if save.error is not None:
            raise save.error

    async def settle(
        self, mail: Mail, encoded: bytes | None, token: int | None, answers: tuple[MailAnswer, ...]
    ) -> BaseException | None:
        """Write the state ``mail`` left (``None``: as saved) with its ``done`` and
        ``answers``, under ``token``; the store's error or refusal, if any."""
        slot = self._active.get((mail.kind, mail.key))
        if slot is not None and slot.token != token:
            slot = None
        save = _Save(
            slot, encoded, kind=mail.kind, key=mail.key, token=token, done=(mail.seq,), answers=answers
        )
        await self._write(save)
        return save.error

    async def _write(self, save: _Save) -> None:
        """Hand ``save`` to the saver and wait until it was written or refused."""
        self._saves.add(None, save, save.kind)
        self._saves_waiting.set()
        await save.finished.wait()

    async def _saver(self) -> None:
        """Write the saves waiting, a kind's batch at a time (``Batcher``: the oldest kind
        first, each kind's saves gathered while its last write ran)."""
        while True:
            while not self._saves:
                self._saves_waiting = anyio.Event()
                await self._saves_waiting.wait()
            placement = self._placement
            if placement is not None and placement.lapsed():  # woken from a pause: what is ours?
                await placement.renew_now()
            batch = self._saves.take()
            if batch is None:  # (each kind's lane is free here: the saver is the only writer)
                continue
            try:
                for line in _rounds(batch.values):
                    await self._write_saves(str(batch.key), line)
            finally:
                self._saves.done(batch)

    async def _write_saves(self, kind: str, saves: list[_Save]) -> None:
        """One write of ``kind``'s ``saves``; each save told its version, its refusal
        (its entity given up) or the store's error."""
        node = None if self._placement is None else self.node
        try:
            written = await self.store.write(kind, node, [save.record() for save in saves])
        except Exception as error:  # each waiter gets it (a passivation tries again)
            for save in saves:
                save.error = error
                save.finished.set()
            return
        for save in saves:
            refusal = written.refused.get(save.key)
            if refusal is not None:
                save.error = refusal
                if save.slot is not None:
                    self._give_up(save.slot, refusal)
            elif save.slot is not None:
                save.slot.version = save.version = written.versions.get(save.key, save.slot.version)
            save.finished.set()

    # -- leases lost ------------------------------------------------------------------------

    def _give_up(self, slot: _Slot, why: Fenced) -> None:
        """``slot``'s lease is another node's: stop its actor now (what it had queued fails
        with ``ActorStopped``), save nothing of it; messages sent from now on go where the
        entity is (an activation claims it and finds its holder). Logged once."""
        if slot.fenced:
            return
        slot.fenced = True
        slot.encoded = None
        logger.warning("entities: %s/%r given up, nothing more written: %s", slot.cls.kind, slot.key, why)
        self.given_up += 1
        if self._leave(slot) and self._task_group is not None:
            self._task_group.start_soon(self._drop, slot)

    async def _drop(self, slot: _Slot) -> None:
        if slot.ref is not None:
            await slot.ref.stop(now=True)
        self._stopped(slot)
        waiting, ident = slot.leaving, (slot.cls.kind, slot.key)
        slot.leaving = None
        if waiting is not None and self._waiting.get(ident) is waiting and not waiting.queued:
            self._unwait(ident)

    def held(self, held: dict[tuple[str, str], int], asked_at: float) -> None:
        """A renewal asked at ``asked_at`` found this node holding ``held``: give up every
        entity claimed before it whose lease is not among them (or under another token)."""
        for slot in [*self._active.values(), *self._stopping]:
            if slot.token is None or slot.fenced or slot.claimed_at >= asked_at:
                continue
            ident = (slot.cls.kind, slot.key)
            current = held.get(ident)
            if current != slot.token:
                why = "its lease lapsed and another node holds it" if current is None else "a newer lease"
                self._give_up(slot, Fenced(f"entity {ident[0]}/{ident[1]!r}", slot.token, current, why))

    def give_up_all(self, why: str) -> None:
        """This node's renewals failed for a whole lease: others may hold its entities now."""
        for slot in [*self._active.values(), *self._stopping]:
            if slot.token is not None and not slot.fenced:
                self._give_up(slot, Fenced(f"entity {slot.cls.kind}/{slot.key!r}", slot.token, None, why))

    # -- telling subscribers ----------------------------------------------------------------

    def _announce(self, event: EntityActivated | EntityPassivated) -> None:
        for ref in list(self._subscribers):
            try:
                ref.tell(event)
            except ActorStopped:
                self._subscribers.remove(ref)
            except MailboxFull:  # a slow subscriber misses it; the host goes on
                logger.warning("entities: subscriber %r is full; it missed %r", ref.name, event)


def _type_name(state_type: Any) -> str:
    return getattr(state_type, "__name__", None) or repr(state_type)


class Entities:
    """The host of entities (see the module doc). ``classes``: the entity classes it
    serves (a message for another raises ``InvalidInput``); the keywords as the module
    doc says (``max_waiting``: :class:`ActivationsFull`)."""

    def __init__(
        self,
        system: ActorSystem,
        store: EntityStore,
        classes: Iterable[type[Entity[Any]]],
        *,
        max_active: int | None = None,
        activations_per_second: float | None = None,
        batch: int = 256,
        close_timeout: float = 30.0,
        node: str | None = None,
        lease: float = 30.0,
        max_outgoing: int = MAX_OUTGOING,
        max_waiting: int = MAX_WAITING,
    ) -> None:
        self._host = EntityHost(
            system, store, classes, max_active=max_active, activations_per_second=activations_per_second,
            batch=batch, close_timeout=close_timeout, node=node, lease=lease, max_outgoing=max_outgoing,
            max_waiting=max_waiting,
        )  # fmt: skip
        self.system = system
        self.store = store
        self.node = self._host.node
        """This host's name among the daemons sharing the store (placement and mail)."""
        self.classes = self._host.classes

    def ref(self, cls: type[E], key: str) -> EntityRef:
        """The entity of class ``cls`` and ``key``: valid whether or not it is active.
        ``InvalidInput`` naming ``cls`` for a class this host does not serve (or what is
        not a class), naming ``key`` for a bad key."""
        return self._host.ref(cls, key)

    def subscribe(self, ref: ActorRef) -> None:
        """Tell ``ref`` each ``EntityActivated`` and ``EntityPassivated`` from now on (a
        full mailbox misses one, with a warning; a stopped one is dropped)."""
        self._host.subscribe(ref)

    async def passivate(self, ref: EntityRef) -> bool:
        """Passivate that entity now (as its idle time would: what it accepted first, then
        ``on_passivate``, then the save); return once its state is saved. ``False`` if it
        was not active. Messages sent meanwhile wait for its next activation."""
        return await self._host.passivate(ref)

    @property
    def active(self) -> int:
        """Entities active now (a gauge)."""
        return self._host.active

    def is_active(self, cls: type[Entity[Any]], key: str) -> bool:
        return self._host.is_active(cls, key)

    async def sweep(self) -> None:
        """Passivate the idle entities now (what the janitor does on its timer)."""
        await self._host.sweep()

    @property
    def activations(self) -> int:
        return self._host.activations

    @property
    def passivations(self) -> int:
        return self._host.passivations

    @property
    def given_up(self) -> int:
        """Entities given up because another node holds their lease now (a pause, a stall)."""
        return self._host.given_up

    async def __aenter__(self) -> Entities:
        await self._host.__aenter__()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        return await self._host.__aexit__(kind, error, tb)


def _rounds(saves: list[_Save]) -> list[list[_Save]]:
    """``saves`` (one kind's, in order) as the writes they need: a key's saves under one
    holding share a write; a save under another holding of the key (its lease lost and
    taken again) goes in the next write, and so does every later save of that key."""
    rounds: list[list[_Save]] = []
    at: dict[str, tuple[int, int | None]] = {}  # key -> (its round, its token there)
    for save in saves:
        found = at.get(save.key)
        number = 0 if found is None else found[0] + (found[1] != save.token)
        at[save.key] = (number, save.token)
        while len(rounds) <= number:
            rounds.append([])
        rounds[number].append(save)
    return rounds
