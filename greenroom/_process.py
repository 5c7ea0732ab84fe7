"""This machine and its processes, as other processes of it see them: the boot (what a
power loss or a kernel crash changes) and whether a process still lives.

Blocking but cheap (a small ``/proc`` read, a signal-0 ``kill``): callers on the event loop
call :func:`boot_id` once (it is cached) and :func:`alive` rarely (at a replay, a command's
start)."""

from __future__ import annotations

import functools
import os


@functools.cache
def boot_id() -> str | None:
    """Linux's ``boot_id`` (new at every boot); ``None`` where it cannot be read."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            return boot.read().strip() or None
    except OSError:
        return None


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (someone else's counts). This process is alive."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, and is another user's
        return True
    return True
