"""The log actor: serialises event appends and applies the visibility policy (only the
narrator may show text to users); its ``EventStore`` keeps the events (see
``greenroom.store``)."""

from ._actor import LogActor, admit, check_append
from ._policy import NarratorCapability, PolicyError, apply_policy, surfacing_flag

__all__ = [
    "LogActor",
    "NarratorCapability",
    "PolicyError",
    "admit",
    "apply_policy",
    "check_append",
    "surfacing_flag",
]
