"""The log actor: serialises event appends and applies the visibility policy (only the
narrator may show text to users); its ``EventStore`` keeps the events (see
``greenroom.store``)."""

from ._actor import LogActor
from ._policy import NarratorCapability, PolicyError

__all__ = [
    "LogActor",
    "NarratorCapability",
    "PolicyError",
]
