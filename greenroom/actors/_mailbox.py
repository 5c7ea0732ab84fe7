"""``RELEASED``: the mailbox of an idle actor whose buffer was given back (``ActorRef.trim``).

An empty ``deque`` costs ~0.7 KB (its first block), more than the rest of an idle actor.
An owner of many actors that sit idle (the entity host) trims them: the cell's mailbox
becomes this one shared, empty, never-written deque, and the first message makes it a
new one (every enqueueing site checks ``is RELEASED``: an identity test). Reading it
(``len``, truth, iteration) is reading an empty mailbox; writing it is a kernel bug,
raised as such.
"""

from __future__ import annotations

from collections import deque
from typing import Any, NoReturn

from .._errors import InternalError


class _Released(deque[Any]):
    __slots__ = ()

    def _written(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise InternalError("a released mailbox was written to (an enqueueing site missed RELEASED)")

    append = appendleft = extend = extendleft = insert = _written


RELEASED: deque[Any] = _Released()
