"""``RecordStore``: keyed records with versions — the primitive a durable feature is built on.

A feature that must keep something (a budget's total, a load run's measurements) keeps it
as records in a *collection* of its own (``"budgets"``, ``"load/<run>"``): each record a
``key`` and a ``body`` (bytes the store never reads; the feature encodes them), with the
``version`` of its last write (1 after the first) and a ``seq`` — the store's order of
writes, larger for a later one — so a collection reads back by key or in the order it was
written. Two writes give every feature what it needs:

- :meth:`RecordStore.put` writes records whole or not at all, each optionally only at the
  version its writer read (``Put.expect``: a compare-and-set) — a counter several daemons
  add to, a setting two operators change at once: :class:`Conflict`, nothing written, and
  the writer reads again.
- :meth:`RecordStore.add` keeps the first record written under a key and ignores later
  ones (append-only records by key prefix): a measurement re-sent after a crash counts once.

Either write can be made under a task attempt (``fence=(task_id, token)``): refused whole
(``Fenced``, nothing written) once that attempt is not the task's live one, checked in the
write's own transaction (the attempt's row locked) on a shared store.

Each backend implements this once, and the contract suite proves it once for all of them:
the embedded store keeps records in ``records.sqlite3`` under the data dir, the PostgreSQL
store in ``gr_records`` every daemon of a fleet shares, and
:class:`greenroom.testing.MemoryRecordStore` keeps them in memory (tests, embedding apps
that need nothing on disk). Every call is one transaction; a cancelled caller stops waiting
and the transaction it started finishes whole on its own.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import msgspec

from .._errors import InvalidInput

MAX_COLLECTION = 200
MAX_KEY = 512
MAX_BODY = 16 << 20
"""The largest body a store keeps (16 MiB): a record is meant to be small."""
_COLLECTION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")


class Versioned(msgspec.Struct, frozen=True, gc=False):
    """One record as stored: its ``key`` and ``body``, its ``version`` (writes so far: 1
    after the first), its ``seq`` (the store's order of writes: larger is later) and
    ``updated_at`` (seconds since the epoch, the writer's clock)."""

    key: str
    body: bytes
    version: int
    seq: int
    updated_at: float


class Put(msgspec.Struct, frozen=True):
    """One record to write with :meth:`RecordStore.put`: ``body`` (``None``: delete the
    record), written only if the record's version is ``expect`` now (``None``: whatever it
    is; ``0``: only if there is no such record)."""

    key: str
    body: bytes | None
    expect: int | None = None


class Conflict(InvalidInput):
    """A :meth:`RecordStore.put` found a record at another version than its writer expected
    (another writer came first): nothing of the put was written. ``found``: the version
    there now (0: no record)."""

    def __init__(self, collection: str, key: str, expected: int, found: int) -> None:
        self.collection = collection
        self.key = key
        self.expected = expected
        self.found = found
        there = "no record" if found == 0 else f"version {found}"
        super().__init__(
            f"record {collection}/{key!r}: written expecting version {expected}, found {there}; "
            "nothing was written",
            field="expect",
            value=expected,
        )


def check_collection(collection: object) -> str:
    """A collection's name (``InvalidInput`` naming the field otherwise)."""
    if (
        not isinstance(collection, str)
        or not collection
        or len(collection) > MAX_COLLECTION
        or not _COLLECTION.match(collection)
    ):
        raise InvalidInput(
            f"record collection must be 1 to {MAX_COLLECTION} letters, digits or . _ : / - (starting "
            f"with a letter or digit), got {collection!r:.80}",
            field="collection",
            value=collection,
        )
    return collection


def check_record_key(key: object, field: str = "key") -> str:
    """A record's key: a string of 1 to 512 characters, no NUL, no lone surrogate."""
    if not isinstance(key, str) or not key or len(key) > MAX_KEY or "\x00" in key or not _encodable(key):
        raise InvalidInput(
            f"record {field} must be a string of 1 to {MAX_KEY} characters (no NUL), got {key!r:.80}",
            field=field,
            value=key,
        )
    return key


def check_key_prefix(prefix: object) -> str:
    """A key prefix to select by (``""``: every key)."""
    return "" if prefix == "" else check_record_key(prefix, "prefix")


def check_limit(limit: object) -> int | None:
    """How many records a read may answer (``None``: all)."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidInput(f"limit must be an int >= 1 or None, got {limit!r}", field="limit", value=limit)
    return limit


def check_seq(after: object) -> int:
    """A ``seq`` to read after (0: from the first)."""
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise InvalidInput(f"after must be an int >= 0, got {after!r:.80}", field="after", value=after)
    return after


def check_fence(fence: object) -> tuple[str, int] | None:
    """A write's task attempt, ``(task_id, token)`` (``None``: unfenced)."""
    if fence is None:
        return None
    if (
        not isinstance(fence, tuple)
        or len(fence) != 2
        or not isinstance(fence[0], str)
        or isinstance(fence[1], bool)
        or not isinstance(fence[1], int)
    ):
        raise InvalidInput(f"fence must be (task_id, token), got {fence!r:.80}", field="fence", value=fence)
    return fence


def _check_body(collection: str, key: str, body: object) -> bytes:
    if not isinstance(body, bytes) or len(body) > MAX_BODY:
        got = f"{len(body)} bytes" if isinstance(body, bytes) else type(body).__name__
        raise InvalidInput(
            f"record {collection}/{key!r}: body must be bytes, at most {MAX_BODY}, got {got}",
            field="body",
        )
    return body


Change = tuple[str, Put]
"""A :class:`Put` in a collection: what :meth:`RecordStore.write` takes."""


def change_rows(changes: Sequence[Change]) -> list[Change]:
    """``changes`` checked and in (collection, key) order (two writers lock rows in one
    order); ``InvalidInput`` naming the field — a record given twice among them — before
    anything is written."""
    seen: dict[tuple[str, str], Change] = {}
    for change in changes:
        if not isinstance(change, tuple) or len(change) != 2 or not isinstance(change[1], Put):
            raise InvalidInput(
                f"a write takes (collection, Put) pairs, got {type(change).__name__}", field="puts"
            )
        collection, put = change
        check_collection(collection)
        key = check_record_key(put.key)
        if put.body is not None:
            _check_body(collection, key, put.body)
        expect = put.expect
        if expect is not None and (isinstance(expect, bool) or not isinstance(expect, int) or expect < 0):
            raise InvalidInput(
                f"record {collection}/{key!r}: expect must be an int >= 0 or None, got {expect!r}",
                field="expect",
                value=expect,
            )
        if (collection, key) in seen:
            raise InvalidInput(
                f"record {collection}/{key!r}: one put writes it twice", field="key", value=key
            )
        seen[collection, key] = change
    return [seen[where] for where in sorted(seen)]


def add_rows(collection: str, records: Sequence[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    """``records`` (key, body) checked, in the order given, the first of each key kept;
    ``InvalidInput`` naming the field before anything is written."""
    check_collection(collection)
    rows: dict[str, bytes] = {}
    for record in records:
        if not isinstance(record, tuple) or len(record) != 2:
            raise InvalidInput(
                f"record {collection}: add takes (key, body) pairs, got {record!r:.80}", field="records"
            )
        key = check_record_key(record[0])
        rows.setdefault(key, _check_body(collection, key, record[1]))
    return list(rows.items())


def check_bump(collection: str, key: str, by: object) -> int:
    """A counter's step (``InvalidInput`` naming the field otherwise)."""
    check_collection(collection)
    check_record_key(key)
    if isinstance(by, bool) or not isinstance(by, int) or not -(2**62) < by < 2**62:
        raise InvalidInput(f"by must be an int, got {by!r:.40}", field="by", value=by)
    return by


def counted(collection: str, key: str, body: bytes | None, by: int) -> int:
    """A counter's value after adding ``by`` to what ``body`` holds (``None``: 0);
    ``InvalidInput`` naming ``key`` for a body that is not a counter."""
    try:
        value = 0 if body is None else int(body.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        raise InvalidInput(
            f"record {collection}/{key!r} is not a counter (its body is {body!r:.40})", field="key", value=key
        ) from None
    return value + by


def prefix_end(prefix: str) -> str | None:
    """The least string greater than every string starting with ``prefix`` (code point
    order, which UTF-8's byte order and PostgreSQL's ``C`` collation keep), so a prefix is
    the range ``[prefix, prefix_end)`` an index reads; ``None``: no upper bound."""
    while prefix:
        last = ord(prefix[-1]) + 1
        if last == 0xD800:  # surrogates are not characters a key holds
            last = 0xE000
        if last <= sys.maxunicode:
            return prefix[:-1] + chr(last)
        prefix = prefix[:-1]
    return None


async def put_by_write(
    records: RecordStore, collection: str, puts: Sequence[Put], fence: tuple[str, int] | None
) -> dict[str, int]:
    """:meth:`RecordStore.put` as one :meth:`RecordStore.write` in ``collection`` — how
    every backend answers ``put`` (the write checks the puts, once)."""
    check_collection(collection)
    written = await records.write([(collection, put) for put in puts], fence=fence)
    return {key: version for (_, key), version in written.items()}


def prefix_range(column: str, prefix: str, mark: str) -> tuple[str, tuple[str, ...]]:
    """The SQL condition ``" AND <column> >= <mark> [AND <column> < <mark>]"`` selecting the
    strings that start with ``prefix`` as an index range (:func:`prefix_end`), and its
    arguments; ``("", ())`` for the empty prefix. ``mark``: the driver's placeholder."""
    if not prefix:
        return "", ()
    end = prefix_end(prefix)
    if end is None:
        return f" AND {column} >= {mark}", (prefix,)
    return f" AND {column} >= {mark} AND {column} < {mark}", (prefix, end)


def _encodable(key: str) -> bool:
    try:
        key.encode()
    except UnicodeEncodeError:
        return False
    return True


@runtime_checkable
class RecordStore(Protocol):
    """Keyed records with versions, by collection (see the module doc). Every call is one
    transaction; a write that raised wrote nothing."""

    async def get(self, collection: str, keys: Sequence[str]) -> dict[str, Versioned]:
        """The records of ``keys`` (a key with no record is absent), in one read."""
        ...

    async def scan(
        self, collection: str, prefix: str = "", *, after: str | None = None, limit: int | None = None
    ) -> list[Versioned]:
        """The records whose key starts with ``prefix``, in key order, from the first key
        greater than ``after`` (``None``: the first), at most ``limit`` (``None``: all)."""
        ...

    async def since(
        self, collection: str, prefix: str = "", *, after: int = 0, limit: int | None = None
    ) -> list[Versioned]:
        """The records whose key starts with ``prefix`` written after ``seq`` ``after``, in
        the order they were written (a record written again is where its last write put
        it), at most ``limit``."""
        ...

    async def count(self, collection: str, prefix: str = "") -> int:
        """How many records of ``collection`` have a key starting with ``prefix``."""
        ...

    async def collections(self, prefix: str = "") -> dict[str, int]:
        """Every collection whose name starts with ``prefix`` that has records, with how
        many, in name order."""
        ...

    async def put(
        self, collection: str, puts: Sequence[Put], *, fence: tuple[str, int] | None = None
    ) -> dict[str, int]:
        """Write every :class:`Put` in one durable transaction (returns once it is on
        disk): each key's new version (0: deleted). :class:`Conflict` (nothing written) if
        a record is not at its put's ``expect``; ``Fenced`` (nothing written) under a
        ``fence`` that is not the task's live attempt; ``InvalidInput`` naming the field
        (:func:`change_rows`) before anything is written."""
        ...

    async def write(
        self, changes: Sequence[Change], *, fence: tuple[str, int] | None = None
    ) -> dict[tuple[str, str], int]:
        """:meth:`put` across collections: each ``(collection, Put)`` written in one durable
        transaction, or none; each ``(collection, key)``'s new version (0: deleted)."""
        ...

    async def add(
        self, collection: str, records: Sequence[tuple[str, bytes]], *, fence: tuple[str, int] | None = None
    ) -> int:
        """Keep each ``(key, body)`` whose key has no record yet, in one durable
        transaction, in the order given (a key that has one keeps what was written first);
        how many were new. ``Fenced`` and ``InvalidInput`` as :meth:`put`."""
        ...

    async def bump(self, collection: str, key: str, by: int = 1) -> int:
        """Add ``by`` to the counter ``key`` (a record whose body is a decimal integer,
        made at 0 if missing) in one durable transaction, and answer the new value: a
        sequence of ids many writers draw from at once, none waiting for another to read
        first. ``InvalidInput`` naming the field for a bad key or ``by``, or a record there
        that is not a counter."""
        ...

    async def drop(self, collection: str, prefix: str = "") -> int:
        """Delete the records whose key starts with ``prefix``; how many went."""
        ...

    async def aclose(self) -> None:
        """Release what the store holds (a pool it was given stays open)."""
        ...
