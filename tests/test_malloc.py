"""``greenroom run`` keeps glibc to two malloc arenas and freezes its startup heap
(``greenroom._malloc``)."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys

import pytest

from greenroom._malloc import limit_arenas

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not hasattr(ctypes.CDLL(None), "gnu_get_libc_version"),
    reason="glibc only",
)

# Eight threads allocate at once; glibc's malloc_stats() prints one "Arena N:" per arena.
SCRIPT = """
import ctypes, sys, threading
from greenroom._malloc import limit_arenas
print(limit_arenas() if sys.argv[1] == "limit" else None)
barrier = threading.Barrier(8)
kept = []
def work():
    kept.append([bytes(100_000) for _ in range(4)])
    barrier.wait()
threads = [threading.Thread(target=work) for _ in range(8)]
for thread in threads: thread.start()
for thread in threads: thread.join()
sys.stdout.flush()
ctypes.CDLL(None).malloc_stats()
"""


def _arenas(mode: str, **env: str) -> tuple[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | env,
        check=True,
    )
    return done.stdout.strip(), sum(line.startswith("Arena ") for line in done.stderr.splitlines())


@glibc
def test_threads_of_a_limited_process_share_two_arenas() -> None:
    assert _arenas("limit") == ("True", 2)
    said, arenas = _arenas("none")  # the same threads without the limit: one arena each
    assert said == "None" and arenas > 2


@glibc
def test_an_operators_malloc_arena_max_is_left_alone() -> None:
    assert _arenas("limit", MALLOC_ARENA_MAX="3") == ("False", 3)


def test_a_count_below_one_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="count must be at least 1, not 0"):
        limit_arenas(0)


FREEZE = """
import gc, json
from greenroom._malloc import freeze_startup_heap
import greenroom.daemon, greenroom.chat  # a daemon's imports
frozen = freeze_startup_heap()
thresholds = gc.get_threshold()
before = len(gc.get_objects())
made = [[index] for index in range(1000)]  # the work's own objects
after = len(gc.get_objects())
print(json.dumps([frozen, gc.get_freeze_count(), before, after - before, thresholds]))
"""


def test_a_frozen_startup_heap_is_left_out_of_later_collections() -> None:
    """``greenroom run`` freezes what exists once it serves: the collector then tracks only
    what the work makes (``gc.get_objects`` lists what it would walk), with the daemon's
    thresholds."""
    done = subprocess.run([sys.executable, "-c", FREEZE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    frozen, count, before, made, thresholds = json.loads(done.stdout)
    assert frozen == count > 10_000  # the imports' objects, all frozen
    assert before < 1_000  # none of them left for a collection to walk
    assert made >= 1000  # the work's objects are collected as usual
    assert thresholds == [10_000, 20, 20]  # young collections every 10,000 new containers
