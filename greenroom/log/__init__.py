"""The log actor: serialises event appends to ``events.jsonl`` and applies the
visibility policy (only the narrator may show text to users)."""

from ._actor import LogActor, admit, check_append, recover_tail
from ._policy import NarratorCapability, PolicyError, apply_policy, surfacing_flag
from ._reader import EVENTS_FILE, EventLogError, read_events, tail_events

__all__ = [
    "EVENTS_FILE",
    "EventLogError",
    "LogActor",
    "NarratorCapability",
    "PolicyError",
    "admit",
    "apply_policy",
    "check_append",
    "read_events",
    "recover_tail",
    "surfacing_flag",
    "tail_events",
]
