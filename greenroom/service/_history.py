"""``History``: the daemon's figures over time, for the status page's charts.

Every ``every`` seconds a sample of the status snapshot (the document ``/v1/status``
answers) is kept, the last ``keep`` of them (an hour at the default 5 s): what this daemon
completed and the graph's failures so far (the page turns them into rates), the tasks
waiting and running, each agent type's queue (its PENDING tasks), the model's time to
first token and tokens per second, and each named budget's spend against its limit. In
memory only: a restart starts a new history (Prometheus, scraping ``/metrics``, is where
figures are kept for months).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from ._status import DaemonStatus

logger = logging.getLogger("greenroom.service")

MAX_TYPES = 20
"""Agent types a sample keeps the queue of (the first by name): a chart stays readable."""


def sample(status: DaemonStatus, at: float) -> dict[str, Any]:
    """The figures of one status snapshot that the charts draw."""
    tasks = status.tasks
    by_status = tasks.by_status
    timings = [pool.model_timing for pool in status.agents.values()]
    first_token = [t.first_token_ms.p99 for t in timings if t.first_token_ms.p99 is not None]
    first_token_p50 = [t.first_token_ms.p50 for t in timings if t.first_token_ms.p50 is not None]
    rates = [t.tokens_per_second.p50 for t in timings if t.tokens_per_second.p50 is not None]
    return {
        "at": at,
        "completed": tasks.completed_here,
        "failed": by_status.get("FAILED", 0) + by_status.get("DEPENDENCY_FAILED", 0),
        "pending": by_status.get("PENDING", 0),
        "in_progress": by_status.get("IN_PROGRESS", 0),
        "waiting": by_status.get("WAITING", 0),
        "queued_by_type": {  # the queue of each agent type: its PENDING tasks (at most 20 types)
            agent_type: counts.get("PENDING", 0)
            for agent_type, counts in sorted(tasks.by_type.items())[:MAX_TYPES]
        },
        "first_token_p50_ms": max(first_token_p50) if first_token_p50 else None,
        "first_token_p99_ms": max(first_token) if first_token else None,
        "tokens_per_second_p50": min(rates) if rates else None,
        "budgets": {
            name: {"tokens": budget.tokens, "limit": budget.limit} for name, budget in status.budgets.items()
        },
    }


class History:
    """The last ``keep`` samples, one every ``every`` seconds (see the module doc)."""

    def __init__(self, every: float = 5.0, keep: int = 720) -> None:
        self.every = every
        self.samples: deque[dict[str, Any]] = deque(maxlen=keep)

    def add(self, status: DaemonStatus, at: float | None = None) -> None:
        self.samples.append(sample(status, time.time() if at is None else at))

    def document(self) -> dict[str, Any]:
        """What ``GET /v1/history`` answers."""
        return {"every": self.every, "samples": list(self.samples)}

    async def run(self, status: Callable[[], Awaitable[DaemonStatus]]) -> None:
        """Sample ``status()`` now and every ``every`` seconds until cancelled. A snapshot
        that cannot be taken (the store away) is skipped and said; the next one is tried."""
        while True:
            try:
                self.add(await status())
            except Exception as error:  # cancellation is a BaseException: it ends the loop
                logger.warning("status page history: no sample this time: %s", error)
            await anyio.sleep(self.every)
