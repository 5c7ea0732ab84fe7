"""The log actor: serialises event appends and applies the visibility policy (only the
narrator may show text to users); its ``EventStore`` keeps the events (see
``greenroom.store``). :func:`narrate` shows a model's reply to users as it is made,
under the narrator's capability."""

from ._actor import LogActor
from ._narrate import narrate
from ._policy import NarratorCapability, PolicyError

__all__ = [
    "LogActor",
    "NarratorCapability",
    "PolicyError",
    "narrate",
]
