"""``Retention``: how long finished work stays where — the ``[retention]`` policy.

A finished task (completed, failed, cancelled) stays in the live graph for
``archive_after`` seconds, and at most the newest ``keep_finished`` of them do; older ones
leave for the archive, where reads still find them and their ids stay taken.
``archive_for`` drops archived tasks that old, a whole segment (files) or partition
(PostgreSQL) at a time. A task's step journal (durable work) goes when the task is
archived: nothing replays a finished task. The defaults keep a day of finished tasks live
and the archive forever: a short run behaves as if nothing were archived.
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

    @property
    def archives(self) -> bool:
        """Whether finished tasks ever leave the live graph."""
        return self.archive_after is not None or self.keep_finished is not None
