"""``BudgetStore``: what each named budget has spent, kept across restarts — on the store's
records (collection ``budgets``, one record per name), no backend code of its own.

A :class:`~greenroom.harness.TokenBudget` given a ``name`` (a team's budget, the chat
assistant's) is durable in a daemon: its spend is added here, in batches, and a restarted
daemon — or another daemon of a fleet on the same database — continues from the total
kept here, not from zero. A budget of one run needs none of this: a replayed step restores
what it spent from the step journal.

An add writes each total plus its increment only at the version this store last read or
wrote (``Put.expect``), and reads again when another writer came first (``Conflict``):
daemons adding at once never lose one another's spend, and a daemon alone on its budgets
adds in one transaction. A reset writes a zero total (versions only grow).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping, Sequence

import msgspec

from .._errors import InvalidInput, StorageError
from ..store import Conflict, Put, RecordStore, Versioned

COLLECTION = "budgets"
MAX_NAME = 200
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")
_TRIES = 100
"""Adds tried before giving up (each one lost to another writer that added meanwhile)."""


class Spent(msgspec.Struct, frozen=True):
    """What a budget spent: ``tokens``, ``cost`` (in the prices' currency), ``calls``;
    ``updated_at`` (seconds since the epoch) when read from a store."""

    tokens: int = 0
    cost: float = 0.0
    calls: int = 0
    updated_at: float = 0.0


class _Total(msgspec.Struct, frozen=True):
    """A total as its record's body keeps it (the time is the record's)."""

    tokens: int = 0
    cost: float = 0.0
    calls: int = 0


_decode = msgspec.json.Decoder(_Total).decode
_encode = msgspec.json.Encoder().encode


def check_budget_name(name: object) -> str:
    """A budget's name (``InvalidInput`` naming the field otherwise)."""
    if not isinstance(name, str) or not name or len(name) > MAX_NAME or not _NAME.match(name):
        raise InvalidInput(
            f"budget name must be 1 to {MAX_NAME} letters, digits or . _ : / - (starting with a "
            f"letter or digit), got {name!r:.80}",
            field="name",
            value=name,
        )
    return name


def check_spent(name: str, spent: Spent) -> None:
    """Refuse an increment a store cannot add (negative, not finite), naming the field."""
    if isinstance(spent.tokens, bool) or not isinstance(spent.tokens, int) or not 0 <= spent.tokens < 2**62:
        raise InvalidInput(
            f"budget {name!r}: tokens must be 0 to 2**62, got {spent.tokens!r}", field="tokens"
        )
    if not isinstance(spent.cost, (int, float)) or not 0 <= spent.cost < math.inf:
        raise InvalidInput(f"budget {name!r}: cost must be a number >= 0, got {spent.cost!r}", field="cost")
    if isinstance(spent.calls, bool) or not isinstance(spent.calls, int) or not 0 <= spent.calls < 2**62:
        raise InvalidInput(f"budget {name!r}: calls must be 0 to 2**62, got {spent.calls!r}", field="calls")


def _spent(record: Versioned) -> Spent:
    total = _decode(record.body)
    return Spent(total.tokens, total.cost, total.calls, record.updated_at)


class BudgetStore:
    """The named budgets' totals, on ``records`` (a :class:`~greenroom.store.RecordStore`:
    ``store.records()``). Every call is one transaction of the records (an add may take
    several tries, each whole or nothing). :meth:`aclose` closes ``records``."""

    def __init__(self, records: RecordStore) -> None:
        self.records = records
        self._known: dict[str, tuple[int, _Total]] = {}
        """Each total this store last read or wrote, with its version: an add writes at
        that version straight away, and reads again only when another writer came first."""

    async def add(self, spends: Mapping[str, Spent]) -> dict[str, Spent]:
        """Add each increment to its budget's total (creating it at zero) in one durable
        transaction; answers the totals after it — what every daemon spent, for each name
        given (so a writer also learns what others spent). ``InvalidInput`` (naming the
        field) for a bad name or increment, before anything is added."""
        for name, spent in spends.items():
            check_budget_name(name)
            check_spent(name, spent)
        names = sorted(spends)
        if not names:
            return {}
        kept = {name: self._known[name] for name in names if name in self._known}
        if len(kept) < len(names):
            kept = await self._read(names)
        for _ in range(_TRIES):
            totals: dict[str, _Total] = {}
            puts = []
            for name in names:
                version, had = kept.get(name, (0, _Total()))
                more = spends[name]
                total = _Total(had.tokens + more.tokens, had.cost + float(more.cost), had.calls + more.calls)
                totals[name] = total
                puts.append(Put(name, _encode(total), version))
            try:
                versions = await self.records.put(COLLECTION, puts)
            except Conflict:  # another daemon added first: add to what it left
                kept = await self._read(names)
                continue
            for name, total in totals.items():
                self._known[name] = (versions[name], total)
            now = time.time()
            return {name: Spent(t.tokens, t.cost, t.calls, now) for name, t in totals.items()}
        raise StorageError(f"budgets {names}: {_TRIES} adds in a row lost to other writers; nothing added")

    async def _read(self, names: list[str]) -> dict[str, tuple[int, _Total]]:
        """The totals of ``names`` as stored now, with their versions (remembered)."""
        found = await self.records.get(COLLECTION, names)
        for name, record in found.items():
            self._known[name] = (record.version, _decode(record.body))
        return {name: self._known[name] for name in names if name in found}

    async def read(self, names: Sequence[str] | None = None) -> dict[str, Spent]:
        """The totals of ``names`` (``None``: every budget); a name never spent is absent."""
        if names is None:
            return {record.key: _spent(record) for record in await self.records.scan(COLLECTION)}
        wanted = [check_budget_name(name) for name in names]
        return {name: _spent(record) for name, record in (await self.records.get(COLLECTION, wanted)).items()}

    async def reset(self, name: str) -> Spent | None:
        """Start ``name`` from zero again (an operator's new period); what it had spent,
        or ``None`` if it had no total. The total is written as zero, not deleted: its
        version only ever grows, so a writer holding an older one never adds to the new
        period as if it were the old."""
        check_budget_name(name)
        for _ in range(_TRIES):
            kept = (await self.records.get(COLLECTION, [name])).get(name)
            if kept is None:
                return None
            try:
                versions = await self.records.put(COLLECTION, [Put(name, _encode(_Total()), kept.version)])
            except Conflict:
                continue
            self._known[name] = (versions[name], _Total())
            return _spent(kept)
        raise StorageError(f"budget {name!r}: {_TRIES} resets in a row lost to other writers")

    async def aclose(self) -> None:
        """Close the records."""
        await self.records.aclose()
