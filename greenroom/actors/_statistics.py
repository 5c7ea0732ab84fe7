"""``ref.statistics()`` and ``system.statistics()``: what a status page shows about actors.

Snapshots, as trio's ``MemoryChannelStatistics``: each value is true when it is read and
changes right after; watch them, never decide on them.
"""

from __future__ import annotations

import msgspec


class ActorStatistics(msgspec.Struct, frozen=True):
    """One actor, now."""

    name: str
    alive: bool
    """``False`` once it has stopped (its ref refuses messages)."""
    mailbox_depth: int
    """Messages (and kernel signals) waiting to be handled."""
    mailbox_limit: int | None
    """The bound of its mailbox (``None``: unbounded)."""
    senders_waiting: int
    """``send`` / ``ask`` calls waiting for room in the full mailbox."""
    restarts: int
    """Times its supervisor restarted it since it was spawned."""
    dead_letters: int
    """Messages to it that were never delivered (see ``DeadLetter``)."""
    children: int


class SystemStatistics(msgspec.Struct, frozen=True):
    """A whole actor system, now."""

    actors: int
    """Live actors, top-level and children."""
    mailbox_depth: int
    """Messages waiting, summed over the live actors."""
    restarts: int
    """Restarts since the system started, stopped actors' included."""
    dead_letters: int
    dead_letters_by_reason: dict[str, int]
