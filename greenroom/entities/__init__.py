"""Entities: an actor per key, activated on demand, passivated when idle.

Subclass :class:`Entity` (its ``state_type``, its ``receive``), host the classes with
:class:`Entities` on an actor system and an ``EntityStore`` (``store.entity_store()``),
and address any key with ``entities.ref(Cls, key)`` — an :class:`EntityRef` that is
always valid. See :mod:`greenroom.entities._host` for activation, passivation, saves and
what happens to messages sent meanwhile.
"""

from ._entity import Entity
from ._host import ActivationFailed, Entities, EntitiesClosed
from ._placement import OutgoingMailFull, RemoteEntityError
from ._ref import ActivationsFull, EntityAskTimeout, EntityMailboxFull, EntityRef

__all__ = [
    "ActivationFailed",
    "ActivationsFull",
    "Entities",
    "EntitiesClosed",
    "Entity",
    "EntityAskTimeout",
    "EntityMailboxFull",
    "EntityRef",
    "OutgoingMailFull",
    "RemoteEntityError",
]
