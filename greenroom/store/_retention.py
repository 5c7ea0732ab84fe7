"""``Retention``: how long finished work stays where — the ``[retention]`` policy.

A finished task (completed, failed, cancelled) stays in the live graph for
``archive_after`` seconds, and at most the newest ``keep_finished`` of them do; older ones
leave for the archive, where reads still find them and their ids stay taken.
``archive_for`` drops archived tasks that old, a whole segment (files) or partition
(PostgreSQL) at a time. A task's step journal (durable work) goes when the task is
archived: nothing replays a finished task. The defaults keep a day of finished tasks live
and the archive forever: a short run behaves as if nothing were archived.

The event log rolls into segments of ``events_per_segment`` events (files under
``events/``; PostgreSQL partitions of ``gr_events``); ``events_for`` drops whole segments
that old, never the newest. A reader resuming from a sequence number retention dropped is
told so (``EventsGone``, HTTP 410 with the oldest kept), never given a silent gap.

``disk_budget`` bounds the history: closed event segments and archive segments together.
Over it, the oldest part goes first, events or archive alike, whichever is older. The
live graph, the event log's open segment and the chat store are not in it (nothing there
can go without losing live state); ``chat_for`` drops conversations idle that long.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

Seconds = Annotated[float, msgspec.Meta(gt=0, le=100 * 365 * 86400)]


class Retention(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    archive_after: Seconds | None = 86400.0
    """Seconds a finished task stays in the live graph (``None``: no limit by age)."""
    keep_finished: Annotated[int, msgspec.Meta(ge=0, le=10**9)] | None = 100_000
    """At most this many finished tasks stay live, the newest (``None``: no limit by count)."""
    archive_for: Seconds | None = None
    """Seconds an archived task is kept (``None``: forever)."""
    check_every: Annotated[float, msgspec.Meta(ge=0.01, le=86400)] = 10.0
    """Seconds between archiving passes."""
    batch: Annotated[int, msgspec.Meta(ge=1, le=1_000_000)] = 10_000
    """Tasks archived by one pass at most (one segment on the files)."""

    events_per_segment: Annotated[int, msgspec.Meta(ge=1, le=10**9)] = 100_000
    """Events in one segment of the event log (a file; a PostgreSQL partition)."""
    events_for: Seconds | None = None
    """Seconds a closed event segment is kept after its last event (``None``: forever)."""
    disk_budget: Annotated[int, msgspec.Meta(ge=1)] | None = None
    """Bytes the history (closed event segments and archive segments) may take; the
    oldest parts are dropped past it (``None``: no budget)."""
    chat_for: Seconds | None = None
    """Seconds an idle conversation of the chat assistant is kept (``None``: forever)."""

    @property
    def archives(self) -> bool:
        """Whether finished tasks ever leave the live graph."""
        return self.archive_after is not None or self.keep_finished is not None


class HistoryPart(msgspec.Struct, frozen=True):
    """A part of the history retention may drop whole: ``kind`` ``"events"`` or
    ``"archive"``, ``name`` (a file, a partition), ``at`` (its newest entry's time)."""

    kind: str
    name: str
    at: float
    bytes: int


FIXED_PART = "fixed"
"""The kind of a part that counts against the budget but is never dropped (an index that
shrinks with what it indexes)."""


def over_budget(parts: list[HistoryPart], budget: int | None) -> list[HistoryPart]:
    """The parts to drop, oldest first, so that what stays fits in ``budget`` bytes (parts
    of kind ``FIXED_PART`` count, and stay). Pure: the event log and the archive each compute it
    over both, and drop their own."""
    if budget is None:
        return []
    total = sum(part.bytes for part in parts)
    dropped: list[HistoryPart] = []
    for part in sorted(parts, key=lambda part: (part.at, part.kind, part.name)):
        if total <= budget:
            break
        if part.kind == FIXED_PART:
            continue
        dropped.append(part)
        total -= part.bytes
    return dropped
