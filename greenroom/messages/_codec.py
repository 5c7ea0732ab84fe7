"""Decoding records from outside with errors that name the field and the value."""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec

from .._errors import MISSING as MISSING
from .._errors import InvalidInput, shown

T = TypeVar("T")


_PATH = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_STEP = re.compile(r"\.([A-Za-z_][A-Za-z_0-9]*)|\[(\d+)\]")


class RecordError(InvalidInput):
    """A record from outside (a file, a message, a CLI flag) is not valid.

    ``field`` is the dotted path of the offending field (``""`` for the record itself)
    and ``value`` what was found there (``MISSING`` when the field was absent).
    """

    def __init__(self, what: str, field: str, value: Any, problem: str) -> None:
        self.what = what
        self.problem = problem
        where = f" field {field!r}" if field else ""
        got = "" if value is MISSING else f" (got {shown(value)})"
        super().__init__(f"bad {what}:{where} {problem}{got}", field=field, value=value)


def _lookup(raw: Any, path: str) -> tuple[str, Any]:
    if "[...]" in path:  # msgspec does not say which dict key; keep its placeholder
        return path.lstrip("."), MISSING
    value = raw
    parts: list[str] = []
    for name, index in _STEP.findall(path):
        if name:
            parts.append(name)
            value = value.get(name) if isinstance(value, dict) else None
        else:
            parts.append(f"[{index}]")
            i = int(index)
            value = value[i] if isinstance(value, list) and i < len(value) else None
    return ".".join(parts).replace(".[", "["), value


def convert(raw: Any, kind: type[T], what: str, *, prefix: str = "") -> T:
    """Validate already-decoded JSON ``raw`` as ``kind`` (msgspec rules, strict types).

    ``prefix`` is prepended to the field path in errors (for a record inside another)."""
    try:
        return msgspec.convert(raw, kind)
    except msgspec.ValidationError as error:
        text = str(error)
        match = _PATH.search(text)
        field, value = _lookup(raw, match["path"]) if match else ("", raw)
        problem = text[: match.start()] if match else text
        named = re.match(r"Object (missing required|contains unknown) field `([^`]*)`", problem)
        if named is not None:
            container = value
            field = f"{field}.{named[2]}" if field else named[2]
            if named[1] == "missing required":
                problem, value = "is required", MISSING
            else:
                problem = "is not a known field"
                value = container.get(named[2]) if isinstance(container, dict) else None
        if prefix:
            field = f"{prefix}.{field}" if field and not field.startswith("[") else f"{prefix}{field}"
        raise RecordError(what, field, value, problem[0].lower() + problem[1:]) from None


def decode_json(data: bytes | str, kind: type[T], what: str) -> T:
    """Decode JSON text as ``kind``; a syntax or type error is a :class:`RecordError`."""
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError as error:
        raise RecordError(what, "", None, f"is not valid JSON: {error}") from None
    return convert(raw, kind, what)


def prepare_types(*kinds: Any) -> None:
    """Build msgspec's decoding information for ``kinds`` now, on this thread.

    msgspec builds a type's information lazily, the first time the type is converted or
    decoded, and that build is not thread-safe: it runs Python code (reading the class's
    annotations), so the GIL can pass to another thread building the same type, and the
    two corrupt each other (a segmentation fault: daemons on PostgreSQL, whose pool
    threads convert their first rows to ``AgentTask`` all at once, died this way). Every
    module whose types worker threads decode prepares them when it is imported, before any
    thread can. A type msgspec cannot decode is left alone (it would fail anyway)."""
    for kind in kinds:
        try:
            msgspec.json.Decoder(kind)
        except TypeError:
            continue
