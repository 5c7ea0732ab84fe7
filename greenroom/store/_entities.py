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
from ._errors import Fenced

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
    lease holds (``elsewhere``: key -> that node). ``tokens``: each taken key's fencing
    token — the same as before for a lease the node still held, the next one (it only ever
    grows) for a key that was free, released or lapsed."""

    taken: list[str]
    states: dict[str, StoredState]
    elsewhere: dict[str, str]
    tokens: dict[str, int] = {}


MailAnswer = tuple[str, int, bool, bytes]
"""An answer to a mailed ask: asker, ask id, ok, body (the encoded value or error)."""


class Record(msgspec.Struct, frozen=True):
    """One entity's write (:meth:`EntityStore.write`): its new ``state`` (``None``: kept as
    it is — only the token is checked and the mail settled), under the fencing ``token``
    of the lease it was made under (``None``: unfenced, for a store one process owns), with
    the mail it handled (``done``: forgotten) and the answers to it (``answers``: kept for
    their askers) — all of it or none, in the same transaction as the state."""

    key: str
    state: bytes | None
    token: int | None = None
    done: tuple[int, ...] = ()
    answers: tuple[MailAnswer, ...] = ()


class Written(msgspec.Struct, frozen=True):
    """What a write did: each accepted key's new ``version`` (a record that kept its
    state: absent), and each refused key's :class:`Fenced` (nothing of that record was
    written: its state, its mail's ``done``, its answers)."""

    versions: dict[str, int]
    refused: dict[str, Fenced]


def write_rows(kind: str, records: Sequence[Record]) -> list[Record]:
    """``records`` checked (as :func:`save_rows`) and one per key, in key order: records of
    one key under one token merged (the last state, every mail's ``done`` and answers);
    ``InvalidInput`` naming ``token`` for one key under two tokens, before anything is
    written."""
    check_kind(kind)
    merged: dict[str, Record] = {}
    for record in records:
        if not isinstance(record, Record):
            raise InvalidInput(
                f"entity {kind}: a write takes Records, got {type(record).__name__}", field="records"
            )
        key = check_key(record.key)
        state = record.state
        if state is not None and (not isinstance(state, bytes) or len(state) > MAX_STATE):
            save_rows(kind, [(key, state)])  # raises, naming the field
        token = record.token
        if token is not None and (isinstance(token, bool) or not isinstance(token, int) or token < 0):
            raise InvalidInput(
                f"entity {kind}/{key}: token must be an int >= 0, got {token!r}", field="token", value=token
            )
        before = merged.get(key)
        if before is None:
            merged[key] = record
            continue
        if before.token != token:
            raise InvalidInput(
                f"entity {kind}/{key}: one write holds it under two tokens ({before.token} and {token})",
                field="token",
                value=token,
            )
        merged[key] = Record(
            key,
            before.state if record.state is None else record.state,
            token,
            before.done + record.done,
            before.answers + record.answers,
        )
    return [merged[key] for key in sorted(merged)]


def entity_fenced(
    kind: str, key: str, node: str | None, token: int | None, holder: str | None, current: int | None
) -> Fenced | None:
    """The refusal of a write to ``kind/key`` by ``node`` under ``token`` — the one rule
    both stores apply — or ``None`` when it may be written: unfenced (``token`` ``None``), or
    ``token`` is the key's current one (``current``; ``None``: the key was never claimed)
    and ``node`` its ``holder`` (a lease released or taken by another node ended it)."""
    if token is None:
        return None
    what = f"entity {kind}/{key!r} (a write by {node!r})"
    if current is None:
        return Fenced(what, token, None, "it was never claimed")
    if token != current:
        return Fenced(what, token, current, "its lease was taken by a newer holder")
    if holder != node:
        held = "released" if holder is None else f"held by {holder!r}"
        return Fenced(what, token, current, f"its lease is {held}")
    return None


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
        last state), unfenced; answers each key's new ``version``. ``InvalidInput`` (naming
        the field) for a bad kind, key or state, before anything is saved."""
        ...

    async def write(self, kind: str, node: str | None, records: Sequence[Record]) -> Written:
        """Write each :class:`Record` of ``kind`` made by ``node`` in one durable
        transaction: a record under a token that is not its key's current one, or whose
        lease ``node`` no longer holds, is refused whole (:func:`entity_fenced`) and the
        others written — their states (each version one more), their mail done, their
        answers kept and their askers woken. ``InvalidInput`` (naming the field) before
        anything is written (:func:`write_rows`)."""
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

    async def renew(self, node: str, lease: float) -> dict[tuple[str, str], int]:
        """Extend every lease ``node`` holds to ``lease`` seconds from now (one it let lapse
        and nobody took too: its token stays); answers what it holds, ``(kind, key)`` ->
        token. A lease missing from the answer was taken by another node: its holder here
        gives the entity up without writing."""
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
        """Messages (oldest first) for entities ``node`` holds, not taken under its present
        holding already: marked as taken under it (the node and the lease's token). A
        message taken under an earlier holding — a node that since lost the entity, or
        released and claimed it again — is taken again by the present one: handled
        exactly once when its ``done`` is written with the state it left
        (:meth:`write` under the lease's token), at least once otherwise."""
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
