"""What the entity host tells its subscribers (a test's probe, a status page)."""

from __future__ import annotations

from typing import Literal

import msgspec

PassivatedBecause = Literal["idle", "cap", "shutdown"]


class EntityActivated(msgspec.Struct, frozen=True):
    """An entity became active: its state loaded (``version`` 0: never saved, it starts
    from its initial state)."""

    kind: str
    key: str
    version: int


class EntityPassivated(msgspec.Struct, frozen=True):
    """An entity was passivated: its state saved (``version``: the save's; 0 when there
    was nothing to save: it failed and stopped, its last save stands), its actor stopped."""

    kind: str
    key: str
    reason: PassivatedBecause
    version: int
