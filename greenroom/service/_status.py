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


class WorkerStatus(msgspec.Struct, frozen=True, kw_only=True):
    """One worker process of a daemon run with ``--workers``: its slot, its process, when
    it started and how many times its slot was started again after a death."""

    slot: int
    pid: int
    started_at: float = 0.0
    restarts: int = 0


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
    workers: list[WorkerStatus] = []
    """``greenroom run --workers``: the worker processes (the figures above are then the
    whole machine's, whichever worker answered); empty for a daemon of one process."""


def _sum_durations(parts: list[Durations | None]) -> Durations | None:
    found = [part for part in parts if part is not None]
    if not found:
        return None
    bounds = found[0].bounds
    same = [part for part in found if part.bounds == bounds]
    counts = [sum(column) for column in zip(*(part.counts for part in same), strict=True)]
    return Durations(bounds, counts, sum(part.sum for part in same))


def _sum_histograms(parts: list[Histogram | None]) -> Histogram | None:
    found = [part for part in parts if part is not None]
    if not found:
        return None
    bounds = [bound for bound, _ in found[0].buckets]
    same = [part for part in found if [bound for bound, _ in part.buckets] == bounds]
    counts = [sum(column) for column in zip(*([n for _, n in part.buckets] for part in same), strict=True)]
    return Histogram(list(zip(bounds, counts, strict=True)), sum(part.sum for part in same))


def machine_status(
    own: DaemonStatus, live: list[DaemonStatus], retired: list[DaemonStatus], workers: list[WorkerStatus]
) -> DaemonStatus:
    """The whole machine's status, as the worker that answers (``own``, its live figures)
    sees it: the graph's figures (the same to every worker: the store's), the budgets and
    the storage are its own; what each worker did (``*_here``, spends, calls, restarts)
    is summed over ``own``, the other ``live`` workers' last snapshots and the ``retired``
    ones (workers that died, as they last said) — so a counter never goes down when a
    worker restarts; the state now (agents alive and busy, mailboxes) over the live ones."""
    alive = [own, *live]
    every = [*alive, *retired]
    tasks = own.tasks
    tasks = msgspec.structs.replace(
        tasks,
        completed_here=sum(s.tasks.completed_here for s in every),
        granted_here=sum(s.tasks.granted_here for s in every),
        failures_here=sum(s.tasks.failures_here for s in every),
        archived_here=sum(s.tasks.archived_here for s in every),
        archive_dropped_here=sum(s.tasks.archive_dropped_here for s in every),
        writes=_sum_durations([s.tasks.writes for s in every]),
    )
    logs = [s.log for s in every if s.log is not None]
    log = None
    if own.log is not None:
        writes = _sum_durations([entry.writes for entry in logs])
        log = LogStatus(sum(entry.appended_here for entry in logs), writes or own.log.writes)
    agents: dict[str, AgentPool] = {}
    for index, status in enumerate(every):
        now = index < len(alive)  # a live worker's state now; a retired one's counts only
        for name, pool in status.agents.items():
            into = agents.setdefault(name, AgentPool(model=pool.model))
            if now:
                into.configured += pool.configured
                into.alive += pool.alive
                into.busy += pool.busy
                into.queued += pool.queued
            into.restarts += pool.restarts
            into.tokens_spent += pool.tokens_spent
            into.model_calls += pool.model_calls
            into.cost = round(into.cost + pool.cost, 6)
            timing = into.model_timing
            other = pool.model_timing
            into.model_timing = ModelTiming(
                calls=timing.calls + other.calls,
                first_token_ms=(
                    own.agents[name].model_timing if name in own.agents else other
                ).first_token_ms,
                tokens_per_second=(
                    own.agents[name].model_timing if name in own.agents else other
                ).tokens_per_second,
                first_token_histogram=_sum_histograms(
                    [timing.first_token_histogram, other.first_token_histogram]
                ),
                duration_ms=(own.agents[name].model_timing if name in own.agents else other).duration_ms,
                duration_histogram=_sum_histograms([timing.duration_histogram, other.duration_histogram]),
            )
    chat = own.chat
    if chat is not None:
        chats = [s.chat for s in every if s.chat is not None]
        chat = msgspec.structs.replace(
            chat,
            llm_calls=sum(c.llm_calls for c in chats),
            prompt_tokens=sum(c.prompt_tokens for c in chats),
            completion_tokens=sum(c.completion_tokens for c in chats),
            total_tokens=sum(c.total_tokens for c in chats),
            cost=round(sum(c.cost for c in chats), 6),
        )
    mailboxes: dict[str, int] = {}
    for status in alive:
        for name, queued in status.mailboxes.items():
            mailboxes[name] = mailboxes.get(name, 0) + queued
    return msgspec.structs.replace(
        own, tasks=tasks, log=log, agents=agents, chat=chat, mailboxes=mailboxes, workers=workers
    )
