"""A long-running daemon's memory: fewer malloc arenas (glibc only), a frozen startup heap.

glibc gives each new thread its own malloc arena, up to eight per core, and an arena
keeps the pages it once used. The daemon's worker threads (file writes, PostgreSQL
statements) each allocate and free large buffers, so a daemon's RSS climbed in steps
that were no Python object's: a PostgreSQL soak grew 112 -> 178 MB over 100,000 tasks
with a flat Python heap, and stayed flat with two arenas. ``greenroom run`` therefore
asks glibc for two arenas before any thread starts, unless ``MALLOC_ARENA_MAX`` is set
(the operator's value wins: glibc has read it already). Elsewhere this does nothing.

Python's cyclic garbage collector walks every tracked object in a full collection, and a
daemon's are mostly its imports (the SDKs, MCP, pydantic's schemas: ~150,000 objects), which
never become garbage. Under 1,000 concurrent chat conversations the full collections were
a fifth of the CPU (three of ~150 ms over 1,000 conversations). ``greenroom run`` freezes
the heap once it is serving (``gc.freeze()``: what exists then is left out of every later
collection), so a full collection walks only what the work itself made; and it collects
the young generation every 10,000 new containers instead of 700 (``DAEMON_GC_THRESHOLDS``):
with a thousand conversations alive, each young collection re-walked their survivors —
10-15 % of a conversation's CPU on this machine, for at most 10,000 objects of cyclic
garbage held a little longer.
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys

from ._errors import InvalidInput

M_ARENA_MAX = -8  # glibc's mallopt parameter number
DAEMON_ARENAS = 2
DAEMON_GC_THRESHOLDS = (10_000, 20, 20)
"""``gc.set_threshold`` for a serving daemon (Python's default: 700, 10, 10)."""


def limit_arenas(count: int = DAEMON_ARENAS) -> bool:
    """Ask glibc to use at most ``count`` arenas from now on; whether it did (``False``:
    not glibc, or ``MALLOC_ARENA_MAX`` set)."""
    if count < 1:
        raise InvalidInput(f"count must be at least 1, not {count!r}", field="count", value=count)
    if not sys.platform.startswith("linux") or os.environ.get("MALLOC_ARENA_MAX"):
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - present only in glibc
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_ARENA_MAX, count))


def freeze_startup_heap(thresholds: tuple[int, int, int] = DAEMON_GC_THRESHOLDS) -> int:
    """Collect once, then leave every object alive now out of later collections
    (``gc.freeze()``) and collect with ``thresholds`` from now on; returns how many were
    frozen. For a process that has finished starting: what it imported and built to serve
    stays for its life."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*thresholds)
    return gc.get_freeze_count()
