"""``DaemonStatus``: the one snapshot of a daemon's state, typed.

The daemon makes it (``DaemonService.status``); ``GET /v1/status`` answers its JSON,
``GET /metrics`` reads its fields into metric families (a field renamed here is a type
error there, never a silently exported 0), the status page's charts sample it
(``History``), and the CLI and the page read the API's JSON of it. Its JSON is the
document ``/v1/status`` always answered: the field names are the document's keys.

Counts named ``*_here`` are what this daemon did since it started; the others are the
graph's (every daemon's, on PostgreSQL).
"""

from __future__ import annotations

import msgspec

from ..messages import Durations
from ..store import StoreSizes


class Quantiles(msgspec.Struct, frozen=True):
    """The median and the 99th percentile of the last calls kept (``None``: no call)."""

    p50: float | None = None
    p99: float | None = None


class Histogram(msgspec.Struct, frozen=True):
    """Every call counted into buckets: ``[upper bound in seconds (the last "+Inf"),
    calls at or below it]``, cumulative; ``sum``: their seconds together."""

    buckets: list[tuple[float | str, int]] = []
    sum: float = 0.0


class ModelTiming(msgspec.Struct, frozen=True, kw_only=True):
    """Streamed model calls of an agent type (``CallTimings.summary()``)."""

    calls: int = 0
    first_token_ms: Quantiles = Quantiles()
    tokens_per_second: Quantiles = Quantiles()
    first_token_histogram: Histogram | None = None
    duration_ms: Quantiles = Quantiles()
    duration_histogram: Histogram | None = None


class AgentPool(msgspec.Struct, kw_only=True):
    """The agent actors of one type in this daemon."""

    configured: int = 0
    alive: int = 0
    busy: int = 0
    """Running a task now."""
    queued: int = 0
    """Messages in their mailboxes."""
    restarts: int = 0
    tokens_spent: int = 0
    model_calls: int = 0
    cost: float = 0.0
    model: str | None = None
    """Their model on the ``[llm]`` server (``None``: the agent's own)."""
    model_timing: ModelTiming = ModelTiming()


class TaskFigures(msgspec.Struct, frozen=True, kw_only=True):
    total: int = 0
    """Tasks in the live graph (archived ones not counted)."""
    completed_here: int = 0
    granted_here: int = 0
    failures_here: int = 0
    by_status: dict[str, int] = {}
    by_type: dict[str, dict[str, int]] = {}
    """Per agent type, its tasks in each status (a status with none left out)."""
    runnable_types: list[str] = []
    archived_here: int = 0
    archive_dropped_here: int = 0
    writes: Durations | None = None
    """The task store's durable writes since it opened."""


class LogStatus(msgspec.Struct, frozen=True):
    appended_here: int
    writes: Durations


class ChatStatus(msgspec.Struct, frozen=True, kw_only=True):
    """What the chat assistant spent in this daemon's run, and its budget (``chat``:
    every run's and every daemon's)."""

    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cost: float = 0.0
    budget_spent_tokens: int = 0
    budget_spent_cost: float = 0.0
    budget_tokens: int | None = None
    budget_cost: float | None = None
    budget_exhausted: bool = False


class BudgetStatus(msgspec.Struct, frozen=True, kw_only=True):
    """A named budget: what every daemon of the store spent against it, as last read."""

    tokens: int = 0
    cost: float = 0.0
    limit: int | None = None
    cost_limit: float | None = None
    exhausted: bool = False


class DaemonStatus(msgspec.Struct, frozen=True, kw_only=True):
    """The ``/v1/status`` document (see the module doc)."""

    version: str
    pid: int
    data_dir: str
    uptime: float
    """Seconds since the daemon started."""
    stopping: bool = False
    tasks: TaskFigures = TaskFigures()
    log: LogStatus | None = None
    """``None`` while the log actor is stopping."""
    agents: dict[str, AgentPool] = {}
    chat: ChatStatus | None = None
    """``None`` with the chat assistant off."""
    mailboxes: dict[str, int] = {}
    """Messages queued in the supervisor's, the log's and the chat runner's mailboxes."""
    budgets: dict[str, BudgetStatus] = {}
    storage: StoreSizes = StoreSizes()
