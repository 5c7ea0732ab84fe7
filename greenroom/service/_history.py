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

logger = logging.getLogger("greenroom.service")

MAX_TYPES = 20
"""Agent types a sample keeps the queue of (the first by name): a chart stays readable."""


def sample(status: dict[str, Any], at: float) -> dict[str, Any]:
    """The figures of one status snapshot that the charts draw."""
    tasks = status.get("tasks") or {}
    by_status = tasks.get("by_status") or {}
    first_token: list[float] = []
    first_token_p50: list[float] = []
    rates: list[float] = []
    for entry in (status.get("agents") or {}).values():
        timing = entry.get("model_timing") or {}
        p99 = (timing.get("first_token_ms") or {}).get("p99")
        if p99 is not None:
            first_token.append(p99)
        median = (timing.get("first_token_ms") or {}).get("p50")
        if median is not None:
            first_token_p50.append(median)
        p50 = (timing.get("tokens_per_second") or {}).get("p50")
        if p50 is not None:
            rates.append(p50)
    return {
        "at": at,
        "completed": tasks.get("completed_here", 0),
        "failed": by_status.get("FAILED", 0) + by_status.get("DEPENDENCY_FAILED", 0),
        "pending": by_status.get("PENDING", 0),
        "in_progress": by_status.get("IN_PROGRESS", 0),
        "waiting": by_status.get("WAITING", 0),
        "queued_by_type": {  # the queue of each agent type: its PENDING tasks (at most 20 types)
            agent_type: counts.get("PENDING", 0)
            for agent_type, counts in sorted((tasks.get("by_type") or {}).items())[:MAX_TYPES]
        },
        "first_token_p50_ms": max(first_token_p50) if first_token_p50 else None,
        "first_token_p99_ms": max(first_token) if first_token else None,
        "tokens_per_second_p50": min(rates) if rates else None,
        "budgets": {
            name: {"tokens": budget.get("tokens", 0), "limit": budget.get("limit")}
            for name, budget in (status.get("budgets") or {}).items()
        },
    }


class History:
    """The last ``keep`` samples, one every ``every`` seconds (see the module doc)."""

    def __init__(self, every: float = 5.0, keep: int = 720) -> None:
        self.every = every
        self.samples: deque[dict[str, Any]] = deque(maxlen=keep)

    def add(self, status: dict[str, Any], at: float | None = None) -> None:
        self.samples.append(sample(status, time.time() if at is None else at))

    def document(self) -> dict[str, Any]:
        """What ``GET /v1/history`` answers."""
        return {"every": self.every, "samples": list(self.samples)}

    async def run(self, status: Callable[[], Awaitable[dict[str, Any]]]) -> None:
        """Sample ``status()`` now and every ``every`` seconds until cancelled. A snapshot
        that cannot be taken (the store away) is skipped and said; the next one is tried."""
        while True:
            try:
                self.add(await status())
            except Exception as error:  # cancellation is a BaseException: it ends the loop
                logger.warning("status page history: no sample this time: %s", error)
            await anyio.sleep(self.every)
