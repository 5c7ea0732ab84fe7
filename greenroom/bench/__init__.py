"""Benchmarks shipped with greenroom (``greenroom bench ...``); each compares against
baselines measured in the same run, so the ratios survive a noisy machine."""

import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any


def time_threads(target: Callable[..., None], args: list[tuple[Any, ...]]) -> float:
    """Run ``target(*a)`` for each ``a`` in its own thread, all at once; seconds taken."""
    threads = [threading.Thread(target=target, args=a) for a in args]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


from . import graph, harness, log  # noqa: E402 -- they import time_threads from here

SUITES: dict[str, ModuleType] = {"graph": graph, "log": log, "harness": harness}
