"""``Request[R]``: a message type that says what its ask answers.

A message class that subclasses ``Request[R]`` makes ``await ref.ask(message)`` typed
``R`` for a type checker, with no cast at the call site; any other message is answered
as ``Any``. Nothing changes at run time: the actor still returns what it returns.
"""

from __future__ import annotations

from typing import Generic, TypeVar

R = TypeVar("R", covariant=True)


class Request(Generic[R]):
    """Mix into a message class (a msgspec ``Struct`` too): ``class Stats(Struct,
    Request[GraphStats])``. Adds no fields and no slots."""

    __slots__ = ()
