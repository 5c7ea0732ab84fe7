"""greenroom's own benchmarks (``python -m benchmarks SUITE``, ``python dev.py bench``):
each compares against baselines measured in the same run, so the ratios survive a noisy
machine. They live beside the package, never in it (as pgbench ships beside its server):
the installed greenroom holds what users run.

The suites start helper processes with ``python -m benchmarks._...``: this package's
parent is put on ``PYTHONPATH`` for them, so they find it from any working directory."""

import os
import threading
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any


def time_threads(target: Callable[..., None], args: list[tuple[Any, ...]]) -> float:
    """Run ``target(*a)`` for each ``a`` in its own thread, all at once; seconds taken.

    The clock starts when every thread has started and they are released together, so
    the threads' start-up is not charged to the baseline."""
    gate = threading.Barrier(len(args) + 1)

    def run(*a: Any) -> None:
        gate.wait()
        target(*a)

    threads = [threading.Thread(target=run, args=a) for a in args]
    try:
        for thread in threads:
            thread.start()
    except BaseException:
        gate.abort()  # the started ones leave the barrier (BrokenBarrierError) instead of waiting forever
        raise
    gate.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    return time.perf_counter() - started


def report_per_backend(
    backend: str, as_json: bool, measure: Callable[[str], dict[str, Any]], format_table: Callable[..., str]
) -> int:
    """Measure on ``backend`` (``"both"``: asyncio, then trio); print each table as it is
    ready, or all the figures as one JSON object at the end."""
    import msgspec

    backends = ["asyncio", "trio"] if backend == "both" else [backend]
    results = {}
    for name in backends:
        results[name] = measure(name)
        if not as_json:
            print(format_table(results[name]), flush=True)
    if as_json:
        print(msgspec.json.encode(results).decode())
    return 0


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The repository's root: where ``benchmarks`` is importable from."""
if ROOT not in os.environ.get("PYTHONPATH", "").split(os.pathsep):  # the helper processes find us
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))

from . import chat, entities, graph, harness, log, pauses, pipeline, soak, stream  # noqa: E402 -- they import the helpers above

SUITES: dict[str, ModuleType] = {
    "graph": graph,
    "log": log,
    "harness": harness,
    "chat": chat,
    "pipeline": pipeline,
    "soak": soak,
    "stream": stream,
    "entities": entities,
    "pauses": pauses,
}
