"""``GET /metrics``: the daemon's figures in Prometheus's text exposition format.

Written by ``prometheus_client`` (its ``CollectorRegistry`` and ``generate_latest``), not
by hand: at each scrape a collector turns one status snapshot — the same ``DaemonStatus``
``GET /v1/status`` answers, so a scrape and the API always agree — into metric families,
reading its fields (a renamed field is a type error here, not a silently exported 0).
Nothing is kept between scrapes (no global registry: several daemons in one process, as
the tests run them, never share figures).

Counters (``_total``) count since this daemon started; gauges are the state at the scrape.
The tasks' counts are the graph's (every daemon's, on PostgreSQL); what this daemon did
is ``greenroom_tasks_completed_here_total`` and the per-agent-type counters.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..messages import Durations
from ..store import StoreSizes
from ._status import AgentPool, BudgetStatus, ChatStatus, DaemonStatus, Histogram

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def exposition(status: DaemonStatus) -> bytes:
    """The text a scrape answers, for ``status`` (``ServiceParts.status()``)."""
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StatusCollector(status))
    return generate_latest(registry)


def _gauge(name: str, documentation: str, labels: list[str] | None = None) -> Any:
    from prometheus_client.core import GaugeMetricFamily

    return GaugeMetricFamily(f"greenroom_{name}", documentation, labels=labels)


def _counter(name: str, documentation: str, labels: list[str] | None = None) -> Any:
    from prometheus_client.core import CounterMetricFamily

    return CounterMetricFamily(f"greenroom_{name}", documentation, labels=labels)


def _one(family: Any, value: float) -> Any:
    family.add_metric([], value)
    return family


class _StatusCollector:
    """One status snapshot as metric families (``prometheus_client``'s collector shape)."""

    def __init__(self, status: DaemonStatus) -> None:
        self.status = status

    def collect(self) -> Iterator[Any]:
        status, tasks = self.status, self.status.tasks
        info = _gauge("info", "This daemon: its version (always 1)", ["version"])
        info.add_metric([status.version], 1)
        yield info
        yield _one(_gauge("uptime_seconds", "Seconds since this daemon started"), status.uptime)
        by_status = _gauge("tasks", "Tasks in the live graph by status (every daemon's)", ["status"])
        for name, count in sorted(tasks.by_status.items()):
            by_status.add_metric([name], count)
        yield by_status
        by_type = _gauge(
            "tasks_by_type", "Tasks in the live graph by agent type and status", ["type", "status"]
        )
        for agent_type, counts in sorted(tasks.by_type.items()):
            for name, count in sorted(counts.items()):
                by_type.add_metric([agent_type, name], count)
        yield by_type
        yield _one(_gauge("tasks_live", "Tasks in the live graph (archived ones not counted)"), tasks.total)
        waiting = tasks.by_status.get("WAITING", 0)
        yield _one(_gauge("approvals_waiting", "Tasks WAITING for a person's decision"), waiting)
        runnable = _gauge("runnable_types", "Agent types with a task ready to claim (1 each)", ["type"])
        for agent_type in tasks.runnable_types:
            runnable.add_metric([agent_type], 1)
        yield runnable
        # what this daemon did since it started, one figure each
        yield _one(
            _counter("tasks_completed_here", "Tasks this daemon completed since it started"),
            tasks.completed_here,
        )
        yield _one(
            _counter("claims_granted_here", "Claims this daemon granted since it started (attempts begun)"),
            tasks.granted_here,
        )
        yield _one(
            _counter("attempts_failed_here", "Failed attempts reported to this daemon since it started"),
            tasks.failures_here,
        )
        yield _one(
            _counter("tasks_archived_here", "Finished tasks this daemon's retention moved to the archive"),
            tasks.archived_here,
        )
        yield _one(
            _counter("archive_dropped_here", "Archived tasks this daemon's retention dropped"),
            tasks.archive_dropped_here,
        )
        log = status.log
        appended = _counter("events_appended_here", "Events this daemon's log actor made durable")
        yield _one(appended, 0 if log is None else log.appended_here)
        yield _writes({"tasks": tasks.writes, "events": None if log is None else log.writes})
        yield from _agents(status.agents)
        mailboxes = _gauge("mailbox_depth", "Messages queued in an actor's mailbox", ["actor"])
        for actor, depth in sorted(status.mailboxes.items()):
            mailboxes.add_metric([actor], depth)
        yield mailboxes
        yield from _budgets(status.budgets)
        if status.chat is not None:
            yield from _chat(status.chat)
        yield from _storage(status.storage)


def _agents(agents: dict[str, AgentPool]) -> Iterator[Any]:
    from prometheus_client.core import HistogramMetricFamily

    families = {
        "configured": _gauge("agents", "Agent actors configured, per type", ["type"]),
        "alive": _gauge("agents_alive", "Agent actors alive, per type", ["type"]),
        "busy": _gauge("agents_busy", "Agent actors running a task, per type", ["type"]),
        "queued": _gauge("agent_queue_depth", "Messages queued for the agent actors of a type", ["type"]),
        "restarts": _counter("agent_restarts", "Agent actor restarts since start, per type", ["type"]),
    }
    by_model = {  # "own": the agent type's own model (no [llm] server), e.g. scripted
        "model_calls": _counter("model_calls", "Model calls the agents of a type made", ["type", "model"]),
        "tokens_spent": _counter("model_tokens", "Tokens the agents of a type spent", ["type", "model"]),
        "cost": _counter(
            "model_cost", "What the agents of a type spent (the price's unit)", ["type", "model"]
        ),
    }
    first_token = _gauge(
        "model_first_token_seconds", "Time to first token of the last streamed calls", ["type", "quantile"]
    )
    rate = _gauge(
        "model_tokens_per_second", "Output tokens per second of the last streamed calls", ["type", "quantile"]
    )
    histogram = HistogramMetricFamily(
        "greenroom_model_first_token_histogram_seconds",
        "Time to first token of every streamed call since start",
        labels=["type"],
    )
    calls = HistogramMetricFamily(
        "greenroom_model_call_seconds", "The whole time of every streamed call since start", labels=["type"]
    )
    for agent_type, pool in sorted(agents.items()):
        for key, family in families.items():
            family.add_metric([agent_type], getattr(pool, key))
        for key, family in by_model.items():
            family.add_metric([agent_type, pool.model or "own"], getattr(pool, key))
        timing = pool.model_timing
        for label, ms, per_second in (
            ("0.5", timing.first_token_ms.p50, timing.tokens_per_second.p50),
            ("0.99", timing.first_token_ms.p99, timing.tokens_per_second.p99),
        ):
            if ms is not None:
                first_token.add_metric([agent_type, label], ms / 1000)
            if per_second is not None:
                rate.add_metric([agent_type, label], per_second)
        for family, counted in (
            (histogram, timing.first_token_histogram),
            (calls, timing.duration_histogram),
        ):
            if counted is not None and counted.buckets:
                family.add_metric([agent_type], _buckets(counted), sum_value=counted.sum)
    yield calls
    yield from families.values()
    yield from by_model.values()
    yield first_token
    yield rate
    yield histogram


def _buckets(histogram: Histogram) -> list[tuple[str, float]]:
    return [
        (bound if isinstance(bound, str) else str(float(bound)), count) for bound, count in histogram.buckets
    ]


def _writes(parts: dict[str, Durations | None]) -> Any:
    """The store's durable writes per part (``Durations``) as one histogram."""
    from prometheus_client.core import HistogramMetricFamily

    histogram = HistogramMetricFamily(
        "greenroom_store_write_seconds",
        "Durable writes of this daemon's task store (a group commit's write, a transaction) and log",
        labels=["part"],
    )
    for part, durations in parts.items():
        if durations is None:
            continue
        cumulative, buckets = 0, []
        for bound, count in zip(
            [*(str(float(b)) for b in durations.bounds), "+Inf"], durations.counts, strict=True
        ):
            cumulative += count
            buckets.append((bound, cumulative))
        histogram.add_metric([part], buckets, sum_value=durations.sum)
    return histogram


def _budgets(budgets: dict[str, BudgetStatus]) -> Iterator[Any]:
    spent = _gauge("budget_spent_tokens", "Tokens spent against a named budget (every daemon's)", ["budget"])
    cost = _gauge("budget_spent_cost", "Cost spent against a named budget (every daemon's)", ["budget"])
    limit = _gauge("budget_limit_tokens", "A named budget's token limit (absent: none)", ["budget"])
    cost_limit = _gauge("budget_limit_cost", "A named budget's cost limit (absent: none)", ["budget"])
    exhausted = _gauge("budget_exhausted", "1 once a named budget is spent", ["budget"])
    for name, budget in sorted(budgets.items()):
        spent.add_metric([name], budget.tokens)
        cost.add_metric([name], budget.cost)
        if budget.limit is not None:
            limit.add_metric([name], budget.limit)
        if budget.cost_limit is not None:
            cost_limit.add_metric([name], budget.cost_limit)
        exhausted.add_metric([name], int(budget.exhausted))
    yield from (spent, cost, limit, cost_limit, exhausted)


def _chat(chat: ChatStatus) -> Iterator[Any]:
    yield _one(
        _counter("chat_model_calls", "Model calls the chat assistant made since start"), chat.llm_calls
    )
    yield _one(_counter("chat_tokens", "Tokens the chat assistant spent since start"), chat.total_tokens)
    yield _one(_counter("chat_cost", "What the chat assistant spent since start"), chat.cost)


def _storage(storage: StoreSizes) -> Iterator[Any]:
    size = _gauge("store_bytes", "Bytes on disk, per part of the store", ["part"])
    for part, count in sorted(storage.by_part.items()):
        size.add_metric([part], count)
    yield size
    yield _one(_gauge("store_bytes_total", "Bytes on disk in all"), storage.bytes)
    yield _one(_gauge("tasks_archived", "Finished tasks in the archive"), storage.archived_tasks)
    yield _one(
        _gauge("archive_parts", "The archive's segments (files) or days (PostgreSQL)"), storage.archive_parts
    )
    yield _one(
        _gauge("event_segments", "The event log's segments, the open one included"), storage.event_segments
    )
    yield _one(
        _gauge("events_dropped_through", "The last event seq retention dropped (0: none)"),
        storage.events_dropped_through,
    )
