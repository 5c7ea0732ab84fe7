"""``EntityStore``: the state of entities (an actor per key), kept while they are passivated.

An entity class has a ``kind`` (its name); each of its entities a ``key``. What the store
keeps of one is its state, encoded by the entity class (bytes the store never reads), a
``version`` (how many times it was saved) and when it was last saved. Activating an
entity loads its state; passivating it — and any point the entity chooses — saves it.
Saves of many entities go in one durable transaction (the entity host gathers them), so
a save returned is on disk (the files: SQLite with ``synchronous=FULL``; PostgreSQL: a
committed transaction), and a save that failed changed nothing.

The embedded store keeps the states in ``entities.sqlite3`` under the data dir, the
PostgreSQL store in ``gr_entities``, which every daemon of a fleet shares.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import msgspec

from .._errors import InvalidInput

MAX_KIND = 200
MAX_KEY = 512
MAX_STATE = 16 << 20
"""The largest state a store keeps (16 MiB): an entity's state is meant to be small."""
_KIND = re.compile(r"^[A-Za-z_][A-Za-z0-9_.:-]*$")


class StoredState(msgspec.Struct, frozen=True):
    """One entity's saved state: ``state`` as its class encoded it, ``version`` (saves so
    far: 1 after the first) and ``saved_at`` (seconds since the epoch)."""

    key: str
    state: bytes
    version: int
    saved_at: float


def check_kind(kind: object) -> str:
    """An entity class's kind (``InvalidInput`` naming the field otherwise)."""
    if not isinstance(kind, str) or not kind or len(kind) > MAX_KIND or not _KIND.match(kind):
        raise InvalidInput(
            f"entity kind must be 1 to {MAX_KIND} letters, digits or _ . : - (starting with a "
            f"letter or _), got {kind!r:.80}",
            field="kind",
            value=kind,
        )
    return kind


def check_key(key: object) -> str:
    """An entity's key: a non-empty string of at most 512 characters, no NUL."""
    if not isinstance(key, str) or not key or len(key) > MAX_KEY or "\x00" in key:
        raise InvalidInput(
            f"entity key must be a string of 1 to {MAX_KEY} characters (no NUL), got {key!r:.80}",
            field="key",
            value=key,
        )
    return key


def save_rows(kind: str, states: Sequence[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """``states`` (key, encoded state) checked, the last of each key kept, in key order (two
    writers lock rows in one order); ``InvalidInput`` naming the field, before anything is
    saved."""
    check_kind(kind)
    latest: dict[str, bytes] = {}
    for key, state in states:
        check_key(key)
        if not isinstance(state, bytes):
            raise InvalidInput(
                f"entity {kind}/{key}: state must be bytes, got {type(state).__name__}", field="state"
            )
        if len(state) > MAX_STATE:
            raise InvalidInput(
                f"entity {kind}/{key}: state is {len(state)} bytes, more than {MAX_STATE}",
                field="state",
                value=len(state),
            )
        latest[key] = state
    return sorted(latest.items())


class Claimed(msgspec.Struct, frozen=True):
    """What a claim found: the keys now held by the claiming node (``taken``) with the
    saved states of those that have one (``states``), and the keys another node's live
    lease holds (``elsewhere``: key -> that node)."""

    taken: list[str]
    states: dict[str, StoredState]
    elsewhere: dict[str, str]


class Mail(msgspec.Struct, frozen=True):
    """A message for an entity held by another node, through the store: ``body`` as the
    sender encoded it; ``asker`` and ``ask_id`` when it asks (the answer goes to them)."""

    seq: int
    kind: str
    key: str
    body: bytes
    asker: str | None = None
    ask_id: int | None = None


class Answer(msgspec.Struct, frozen=True):
    """The answer to an ask that went through the store: ``ok`` and the encoded value, or
    not ok and the encoded error (its type and text)."""

    ask_id: int
    ok: bool
    body: bytes


Posted = tuple[str, str, bytes, "str | None", "int | None"]
"""A message to post: kind, key, body, asker (or ``None``), ask id (or ``None``)."""


@runtime_checkable
class EntityStore(Protocol):
    """The saved states of entities, their placement and their mail. Every call is one
    transaction. ``shared``: several processes may use the store at once (PostgreSQL), so
    hosts claim their entities; on a store one process owns (the files) they need not."""

    shared: bool

    async def load(self, kind: str, keys: Sequence[str]) -> dict[str, StoredState]:
        """The saved states of ``keys`` (a key never saved is absent), in one read."""
        ...

    async def save(self, kind: str, states: Sequence[tuple[str, bytes]]) -> dict[str, int]:
        """Save each ``(key, state)`` in one durable transaction (a key given twice: its
        last state); answers each key's new ``version``. ``InvalidInput`` (naming the
        field) for a bad kind, key or state, before anything is saved."""
        ...

    async def delete(self, kind: str, keys: Sequence[str]) -> int:
        """Forget the states of ``keys``; how many there were."""
        ...

    async def count(self, kind: str) -> int:
        """How many entities of ``kind`` have a saved state."""
        ...

    # -- placement: an entity active on at most one node at a time ----------------------------

    async def claim(self, kind: str, keys: Sequence[str], node: str, lease: float) -> Claimed:
        """Take each key for ``node`` until ``lease`` seconds from now where it is free,
        already ``node``'s, or its holder's lease has lapsed — and read the saved states of
        those taken, in the same transaction. A key a live lease of another node holds is
        answered in ``elsewhere`` and left as it is."""
        ...

    async def renew(self, node: str, lease: float) -> int:
        """Extend every lease ``node`` holds to ``lease`` seconds from now; how many."""
        ...

    async def release(self, kind: str, keys: Sequence[str], node: str) -> None:
        """Give up ``node``'s leases on ``keys`` (those another node holds are left)."""
        ...

    # -- mail: messages for entities held elsewhere ---------------------------------------------

    async def post(self, mail: Sequence[Posted]) -> None:
        """Keep each message (in one transaction) until its entity's holder has handled
        it, and wake the nodes that wait (:meth:`wait`)."""
        ...

    async def take_mail(self, node: str, limit: int = 256) -> list[Mail]:
        """Messages (oldest first) for entities ``node`` holds, not taken by ``node``
        already: marked as ``node``'s. A message taken by a node that since lost the
        entity is taken again by its new holder (delivered at least once)."""
        ...

    async def done_mail(self, seqs: Sequence[int]) -> None:
        """Forget messages that were handled."""
        ...

    async def answer(self, answers: Sequence[tuple[str, int, bool, bytes]]) -> None:
        """Keep each ``(asker, ask_id, ok, body)`` for its asker, and wake it."""
        ...

    async def take_answers(self, node: str) -> list[Answer]:
        """The answers waiting for ``node``, taken (forgotten here)."""
        ...

    async def orphans(self, limit: int = 256) -> list[tuple[str, str]]:
        """Entities with mail that no live lease holds (their holder released or died):
        whoever finds them activates them, and their mail is then its."""
        ...

    async def wait(self, node: str, timeout: float) -> None:
        """Return once mail or answers for ``node`` may be waiting (a post or an answer
        since the last call), or after ``timeout`` seconds. Cancelled: returns nothing."""
        ...

    async def aclose(self) -> None:
        """Release what the store holds (a pool it was given stays open)."""
        ...
