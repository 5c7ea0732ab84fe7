"""The visibility policy (spec 000, S36): only the narrator may show text to users."""

from __future__ import annotations

import re
import secrets
from typing import Any

from .._errors import InvalidInput
from ..messages import AGENT_EVENTS, Append, Visibility

_SURFACING_KEY = re.compile(
    r"(render|show|display|surface|visible|publish|notify|narrate|send|present)_?(to_?)?_?user"
    r"|user_?(visible|facing|message|text)",
    re.IGNORECASE,
)


class PolicyError(InvalidInput):
    """An event the visibility policy refuses; nothing was appended.

    ``policy_error`` says which rule: ``"user_visible_payload"`` (a payload flag tries
    to surface text to the user) or ``"narrator_only"`` (``visibility="user"`` without
    the narrator's capability).
    """

    def __init__(self, policy_error: str, message: str) -> None:
        self.policy_error = policy_error
        super().__init__(message)


class NarratorCapability:
    """The narrator's token. Whoever holds this object may append ``visibility="user"``
    events; the log actor compares by identity, so it cannot be forged from a string or
    rebuilt from its repr."""

    __slots__ = ("_id",)

    def __init__(self) -> None:
        self._id = secrets.token_hex(4)

    def __repr__(self) -> str:
        return f"<NarratorCapability {self._id}>"

    def __reduce__(self) -> Any:
        raise TypeError("a NarratorCapability cannot be pickled or copied")


# Which keys the pattern matches, remembered: a fleet's payloads reuse a few keys, and a
# dict lookup is a fraction of a regex search. Cleared when full, so it stays bounded.
_KEY_VERDICTS: dict[str, bool] = {}
_KEY_VERDICTS_MAX = 4096


def _is_surfacing_key(key: str) -> bool:
    if len(_KEY_VERDICTS) >= _KEY_VERDICTS_MAX:
        _KEY_VERDICTS.clear()
    verdict = _KEY_VERDICTS[key] = _SURFACING_KEY.search(key) is not None
    return verdict


def surfacing_flag(payload: Any, path: str = "payload") -> str | None:
    """The path of a truthy flag in ``payload`` that tries to reach the user, if any."""
    if isinstance(payload, dict):
        verdicts = _KEY_VERDICTS
        for key, value in payload.items():
            if (
                value
                and isinstance(key, str)
                and (
                    verdicts.get(key)
                    or (key not in verdicts and _is_surfacing_key(key))
                    or (key == "visibility" and value == "user")
                )
            ):
                return f"{path}.{key}"
            if isinstance(value, (dict, list)):  # only containers can hide a flag deeper down
                found = surfacing_flag(value, f"{path}.{key}")
                if found is not None:
                    return found
    elif isinstance(payload, list):
        for index, item in enumerate(payload):
            if isinstance(item, (dict, list)):
                found = surfacing_flag(item, f"{path}[{index}]")
                if found is not None:
                    return found
    return None


def apply_policy(append: Append, narrator: NarratorCapability | None) -> Visibility:
    """The visibility ``append`` is stored with, or :class:`PolicyError`."""
    is_narrator = narrator is not None and append.capability is narrator
    if append.type in AGENT_EVENTS:
        flag = surfacing_flag(append.payload)
        if flag is not None:
            raise PolicyError(
                "user_visible_payload",
                f"{append.type} events are internal; {flag} tries to surface text to the user "
                "(only the narrator may show text to users)",
            )
        return "internal"
    if is_narrator:
        return append.visibility
    if append.visibility == "user":
        raise PolicyError(
            "narrator_only", f"only the narrator may append visibility='user' events (type {append.type!r})"
        )
    flag = surfacing_flag(append.payload)
    if flag is not None:
        raise PolicyError(
            "user_visible_payload",
            f"{flag} tries to surface text to the user; only the narrator may (type {append.type!r})",
        )
    return "internal"
