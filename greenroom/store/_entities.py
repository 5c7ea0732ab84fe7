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


@runtime_checkable
class EntityStore(Protocol):
    """The saved states of entities. Every call is one transaction."""

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

    async def aclose(self) -> None:
        """Release what the store holds (a pool it was given stays open)."""
        ...
