"""Placement: on a store several daemons share (PostgreSQL), an entity is active on at
most one of them, and a message for one active elsewhere reaches it through the store.

- **Leases.** Activating claims the entity for this node (``EntityStore.claim``: the
  claim and the load are one transaction, and the claim's fencing token is the slot's);
  the node renews all its leases every ``lease / 3`` seconds and releases an entity once
  it is passivated and saved. A node that dies stops renewing: after ``lease`` seconds its
  entities can be claimed by whoever messages them next. A node that paused: its writes
  under the old token are refused by the store, and its next renewal gives up what it no
  longer holds (``EntityHost.held``); renewals failing for a whole lease give up all.
- **Mail.** A message for an entity another node holds is posted to the store (encoded
  with msgspec: such messages must be msgspec types; the entity decodes them as its
  class's ``message_type``). The holder's mail loop takes its mail (woken by the store's
  notification, or every second), hands each message to the entity in order — an ask on
  the holder's side, so the mail is done only once the entity handled it — and answers
  the asks through the store, where the asker's mail loop finds them. Mail is handled
  exactly once: its ``done`` and its answer are written with the state it left, under the
  lease's token (``_settle``), so a holder that dies or loses the lease with mail taken but
  not settled leaves it, and nothing of its handling, to the next holder. Mail for an
  entity nobody holds (its holder released or died) is found by every node's loop, once a
  second, and the entity activated there to take it.

On a store only this process uses (the files), none of this runs: every activation is
local.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from .._commit import Batcher
from .._errors import GreenroomError, InvalidInput
from ..actors import MailboxFull
from ..store import Claimed, EntityStore, Fenced, Mail, MailAnswer, Posted, StoredState
from ._entity import Mailed

if TYPE_CHECKING:
    from ._host import EntityHost, Id, _Waiting

logger = logging.getLogger("greenroom.entities")


class RemoteEntityError(GreenroomError):
    """An entity on another node raised while handling an ask sent through the store: its
    error's type and text (the error itself stays there)."""


def new_node() -> str:
    """A name for this host among the daemons of a database: host, process, and a nonce."""
    return f"{socket.gethostname()[:60]}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


MAX_OUTGOING = 10_000
"""Messages for entities on other nodes a node keeps before they are posted (default)."""


class OutgoingMailFull(MailboxFull):
    """``tell`` to an entity on another node found as many messages waiting to be posted
    through the store as the host's ``max_outgoing`` (the store is slow or away); this one
    was not accepted (``await ref.send(message)`` waits for room instead). ``kind``,
    ``key``, ``size``."""

    def __init__(self, kind: str, key: str, size: int) -> None:  # no actor here: the entity is named
        GreenroomError.__init__(
            self,
            f"entity {kind}/{key!r} is on another node, and {size} messages wait to be posted there "
            "(max_outgoing): the store is slow or out of reach",
        )
        self.kind = kind
        self.key = key
        self.size = size


class _RemoteAsk:
    __slots__ = ("answer", "done")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.answer: Any = None


class Placement:
    """The host's side of placement and mail (see the module doc)."""

    def __init__(
        self, host: EntityHost, store: EntityStore, node: str, lease: float, max_outgoing: int = MAX_OUTGOING
    ) -> None:
        self.host = host
        self.store = store
        self.node = node
        self.lease = lease
        self.max_outgoing = max_outgoing
        """Messages for entities on other nodes this node keeps before they are posted: a
        told one past it is refused (:class:`OutgoingMailFull`), a sent one or an ask
        waits for room — as a full mailbox answers its sender."""
        self._room = anyio.Event()
        self._holders: dict[Id, tuple[str, float]] = {}
        """Where an entity was held last time a claim said so, and until when to trust it."""
        self._asks: dict[int, _RemoteAsk] = {}
        self._ids = itertools.count(1)
        self._outgoing: Batcher[Posted] = Batcher(owner="Entities")
        """The messages waiting to be posted (a batch at a time, in the order sent)."""
        self._posting = anyio.Event()
        self._chains: dict[Id, list[Mail]] = {}
        self._renewed = 0.0
        """When (this process's clock) the last renewal that went through was asked."""

    # -- claims -------------------------------------------------------------------------------

    async def claim(
        self, kind: str, keys: list[str]
    ) -> tuple[dict[str, StoredState], dict[str, str], dict[str, int]]:
        """Take ``keys`` for this node and read their states; those held elsewhere apart;
        the fencing token of each key taken."""
        claimed: Claimed = await self.store.claim(kind, keys, self.node, self.lease)
        now = anyio.current_time()
        for key, holder in claimed.elsewhere.items():
            self._holders[(kind, key)] = (holder, now + self.lease / 2)
        return claimed.states, claimed.elsewhere, claimed.tokens

    def holder_of(self, ident: Id) -> str | None:
        """The node that holds ``ident``, if a recent claim said so."""
        found = self._holders.get(ident)
        if found is None:
            return None
        if found[1] < anyio.current_time():
            del self._holders[ident]
            return None
        return found[0]

    def _forget_stale(self, now: float) -> None:
        """Drop the holders no longer trusted (a million keys asked once stay no longer)."""
        stale = [ident for ident, (_, until) in self._holders.items() if until < now]
        for ident in stale:
            del self._holders[ident]

    def full(self) -> bool:
        """As many messages wait to be posted as :attr:`max_outgoing`."""
        return len(self._outgoing) >= self.max_outgoing

    async def room(self) -> None:
        """Return once fewer than :attr:`max_outgoing` messages wait to be posted (the
        posting loop took a batch). Cancelled: returns nothing, takes no room."""
        while self.full():
            if self._room.is_set():
                self._room = anyio.Event()
            await self._room.wait()

    def forward(self, ident: Id, waiting: _Waiting) -> None:
        """Send what waited for ``ident`` (held elsewhere) through the store; its asks,
        woken, go there themselves. Accepted already: never refused for room."""
        for message in waiting.told:
            self.send(ident, message, accepted=True)
        waiting.remote = True
        waiting.done.set()

    def send(self, ident: Id, message: Any, *, accepted: bool = False) -> None:
        """Post a told message (encoded now: one that cannot be is dropped, said).
        :class:`OutgoingMailFull` (nothing kept) when :meth:`full`, unless ``accepted``."""
        if not accepted and self.full():
            raise OutgoingMailFull(ident[0], ident[1], self.max_outgoing)
        try:
            body = msgspec.json.encode(message)
        except (TypeError, msgspec.EncodeError) as error:
            logger.error(
                "entities: a %s told to %s/%r (on another node) is not a msgspec type; dropped: %s",
                type(message).__name__, ident[0], ident[1], error,
            )  # fmt: skip
            return
        self._outgoing.add(None, (ident[0], ident[1], body, None, None))
        self._posting.set()

    async def ask(self, ident: Id, message: Any) -> Any:
        """Ask ``ident`` on another node through the store; its answer, or its error as
        :class:`RemoteEntityError`. Cancelled: the answer, if it comes, is dropped."""
        try:
            body = msgspec.json.encode(message)
        except (TypeError, msgspec.EncodeError) as error:
            raise InvalidInput(
                f"a message to {ident[0]}/{ident[1]!r} on another node must be a msgspec type, "
                f"not {type(message).__name__}: {error}",
                field="message",
            ) from None
        await self.room()
        ask_id = next(self._ids)
        pending = self._asks[ask_id] = _RemoteAsk()
        try:  # behind the tells posted before it: a sender's messages arrive in the order sent
            self._outgoing.add(None, (ident[0], ident[1], body, self.node, ask_id))
            self._posting.set()
            await pending.done.wait()
        finally:
            self._asks.pop(ask_id, None)
        ok, value = pending.answer
        if not ok:
            raise RemoteEntityError(f"{ident[0]}/{ident[1]!r} on another node raised {value}")
        return value

    async def release(self, kind: str, keys: Sequence[str]) -> None:
        try:
            await self.store.release(kind, keys, self.node)
        except Exception as error:  # its lease lapses on its own
            logger.warning("entities: could not release %d %s lease(s): %s", len(keys), kind, error)

    # -- the loops (in the host's task group) ----------------------------------------------------

    def lapsed(self) -> bool:
        """No renewal went through for half a lease (a pause, a stall): what this node
        still holds is not known until the next one."""
        return anyio.current_time() - self._renewed > self.lease / 2

    async def renew_now(self) -> bool:
        """Renew every lease of this node and give up the entities it no longer holds
        (another node took them while this one did not renew); ``False`` if the store
        could not be reached — past a whole lease without one, every entity is given up."""
        asked_at = anyio.current_time()
        try:
            held = await self.store.renew(self.node, self.lease)
        except Exception as error:  # the next renewal tries again; past the lease, others may claim
            since = asked_at - self._renewed
            logger.error(
                "entities: could not renew this node's leases (%.1f s since the last): %s", since, error
            )
            if since > self.lease:
                self.host.give_up_all(f"this node could not renew its leases for {since:.1f} s")
            return False
        self._renewed = asked_at
        self.host.held(held, asked_at)
        return True

    async def renewing(self) -> None:
        self._renewed = anyio.current_time()  # the claims so far were made just now
        while True:
            await anyio.sleep(self.lease / 3)
            await self.renew_now()

    async def posting(self) -> None:
        while True:
            while not self._outgoing:
                self._posting = anyio.Event()
                await self._posting.wait()
            await self.flush()

    async def flush(self) -> None:
        """Post what waits to be posted (again after a failure, with a pause)."""
        outgoing = self._outgoing
        while (batch := outgoing.take()) is not None:
            self._room.set()  # taken: senders waiting for room go on
            try:
                await self.store.post(batch.values)
            except Exception as error:
                outgoing.put_back(batch)  # kept, first, in order, for the next try
                logger.error("entities: could not post %d message(s), trying again: %s", len(batch), error)
                await anyio.sleep(1.0)
            else:
                outgoing.done(batch)

    async def mail(self) -> None:
        await self.store.wait(self.node, 0.0)  # listening from now on
        last_sweep = -1e9
        while True:
            try:
                mails = await self.store.take_mail(self.node)
                answers = await self.store.take_answers(self.node)
                now = anyio.current_time()
                unheld: list[Id] = []
                if now - last_sweep >= 1.0:
                    last_sweep = now
                    unheld = await self.store.orphans(256)
                    self._forget_stale(now)
            except Exception as error:
                logger.warning("entities: could not read the mail: %s", error)
                await anyio.sleep(1.0)
                continue
            for answer in answers:
                pending = self._asks.get(answer.ask_id)
                if pending is not None:
                    pending.answer = (answer.ok, _decoded(answer.body))
                    pending.done.set()
            for mail in mails:
                self._deliver(mail)
            for ident in unheld:  # activated here: its mail is then this node's
                self.host.wake(ident)
            if not mails and not answers:
                await self.store.wait(self.node, 0.25)

    def _deliver(self, mail: Mail) -> None:
        ident = (mail.kind, mail.key)
        chain = self._chains.get(ident)
        if chain is not None:
            chain.append(mail)  # after what is being delivered: in order
            return
        self._chains[ident] = [mail]
        self.host.start_soon(self._deliver_chain, ident)

    async def _deliver_chain(self, ident: Id) -> None:
        chain = self._chains[ident]
        try:
            while chain:
                mail = chain.pop(0)
                await self._deliver_one(mail)
        finally:
            del self._chains[ident]

    async def _deliver_one(self, mail: Mail) -> None:
        """Hand ``mail`` to its entity; its ``done`` and its answer are written with the
        state it left (one transaction, under the entity's lease token: exactly once — a
        holder that lost the lease meanwhile writes none of it, and the next holder handles
        the mail again)."""
        host = self.host
        ident = (mail.kind, mail.key)
        cls = host.classes.get(mail.kind)
        encoded: bytes | None = None
        token: int | None = None
        answer: tuple[bool, bytes]
        if cls is None:
            answer = (False, msgspec.json.encode(f"InvalidInput: no entity class of kind {mail.kind!r} here"))
        else:
            try:
                message = msgspec.json.decode(mail.body, type=cls.message_type)
                handled = await host.ref(cls, mail.key).ask(Mailed(message), timeout=None)
                value, encoded, token = handled
                answer = (True, msgspec.json.encode(value))
            except Exception as error:  # the asker gets its type and text; the state stays as saved
                answer = (False, msgspec.json.encode(f"{type(error).__name__}: {error}"))
                token = host.token_of(ident)
        answers: tuple[MailAnswer, ...] = ()
        if mail.asker is not None and mail.ask_id is not None:
            answers = ((mail.asker, mail.ask_id, answer[0], answer[1]),)
        failed = await host.settle(mail, encoded, token, answers)
        if failed is not None and not isinstance(failed, Fenced):  # not done: taken again
            logger.warning("entities: mail %d handled but not marked done: %s", mail.seq, failed)


def _decoded(body: bytes) -> Any:
    try:
        return msgspec.json.decode(body)
    except msgspec.DecodeError:
        return body
