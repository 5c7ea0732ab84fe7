"""``LoadRecordStore``: what a load run measured, kept where every daemon of the run writes
— on the store's records (collection ``load/<run>``), no backend code of its own.

A run of ``greenroom load`` spread over several daemons (its sessions are tasks in the
shared graph) has each daemon's load agents write a record per request and per session
here, as they are made; the command that started the run builds one report from all of
them. A record is a JSON object under a key unique in its run (``r/...`` a request,
``s/<index>`` a session): the first record written under a key is kept — a session run
again after a crash never counts twice — and records read back in the order they arrived.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import msgspec

from .._errors import InvalidInput
from ..store import RecordStore

PREFIX = "load/"
"""Every run's collection is ``load/<run>``."""
MAX_RUN = 100  # within a task id: load-<run>-<n>
MAX_KEY = 200
MAX_BODY = 1 << 20
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$")
_RUN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")  # a part of task ids: no "/"


class LoadEntry(msgspec.Struct, frozen=True, gc=False):
    """One record of a run: ``key`` (unique in the run; a prefix groups records, as
    ``r/`` the requests and ``s/`` the sessions) and ``body`` (a JSON object)."""

    key: str
    body: bytes


def check_run(run: object) -> str:
    """A run's name (``InvalidInput`` naming the field otherwise)."""
    if not isinstance(run, str) or not run or len(run) > MAX_RUN or not _RUN.match(run):
        raise InvalidInput(
            f"load run must be 1 to {MAX_RUN} letters, digits or . _ : - (starting with a letter or "
            f"digit), got {run!r:.80}",
            field="run",
            value=run,
        )
    return run


def check_prefix(prefix: object) -> str:
    """A key prefix to select by (``""``: every key)."""
    if prefix == "":
        return ""
    if not isinstance(prefix, str) or len(prefix) > MAX_KEY or not _NAME.match(prefix):
        raise InvalidInput(f"load record prefix must be a key's start, got {prefix!r:.80}", field="prefix")
    return prefix


def check_entries(run: str, entries: Sequence[LoadEntry]) -> None:
    """Refuse a batch the records cannot keep, naming the field (nothing of it is written)."""
    check_run(run)
    for entry in entries:
        key = entry.key
        if not isinstance(key, str) or not key or len(key) > MAX_KEY or not _NAME.match(key):
            raise InvalidInput(
                f"load record key must be 1 to {MAX_KEY} letters, digits or . _ : / -, got {key!r:.80}",
                field="key",
                value=key,
            )
        body = entry.body
        if not isinstance(body, bytes) or not body.startswith(b"{") or len(body) > MAX_BODY:
            raise InvalidInput(
                f"load record {key!r}: body must be a JSON object of at most {MAX_BODY} bytes, "
                f"got {body!r:.80}",
                field="body",
            )


class LoadRecordStore:
    """A load run's records on ``records`` (a :class:`~greenroom.store.RecordStore`:
    ``store.records()``). Every call is one transaction. :meth:`aclose` closes
    ``records``."""

    def __init__(self, records: RecordStore) -> None:
        self.records = records

    async def add(
        self, run: str, entries: Sequence[LoadEntry], *, fence: tuple[str, int] | None = None
    ) -> int:
        """Keep ``entries`` in one durable transaction (returns once they are on disk); an
        entry whose key the run already has keeps what was written first. How many were
        new. ``InvalidInput`` (naming the field) for a bad run, key or body, before
        anything is written. ``fence``: ``(task id, token)`` of the load session's task
        attempt the entries were measured under — refused whole (``Fenced``, nothing
        written) once that attempt is not the task's live one."""
        check_entries(run, entries)
        if not entries:
            return 0
        return await self.records.add(PREFIX + run, [(e.key, e.body) for e in entries], fence=fence)

    async def read(self, run: str, prefix: str = "") -> list[LoadEntry]:
        """The run's records whose key starts with ``prefix``, in the order they arrived."""
        found = await self.records.since(PREFIX + check_run(run), check_prefix(prefix))
        return [LoadEntry(record.key, record.body) for record in found]

    async def count(self, run: str, prefix: str = "") -> int:
        """How many records of the run have a key starting with ``prefix``."""
        return await self.records.count(PREFIX + check_run(run), check_prefix(prefix))

    async def runs(self) -> dict[str, int]:
        """Every run kept, with its number of records, in name order."""
        return {name[len(PREFIX) :]: n for name, n in (await self.records.collections(PREFIX)).items()}

    async def drop(self, run: str) -> int:
        """Forget the run's records; how many went."""
        return await self.records.drop(PREFIX + check_run(run))

    async def aclose(self) -> None:
        """Close the records."""
        await self.records.aclose()
