"""What a load run measures: a :class:`RequestRecord` per model request, timed from its
scheduled instant (never after a client-side queue); a :class:`SessionRecord` per session;
the :class:`LoadReport` a run makes of them; and :class:`LoopWatch`, the generator watching
itself."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any, Literal

import anyio
import msgspec

from ..llm import UNREACHED


class RequestRecord(msgspec.Struct, frozen=True, gc=False):
    """One model request. Times are seconds on this machine's clock: ``scheduled`` (when
    it was due), ``sent`` (when the client began it), ``first`` (its first piece, or
    ``None``), ``end``. ``ttft`` and ``e2e`` count from ``scheduled``; ``itl``: the gaps
    between its pieces. ``error``: what went wrong, by kind (``"connection refused"``,
    ``"HTTP 500"``, ``"stream cut"``... :attr:`ModelError.kind`; ``None``: it succeeded),
    and ``detail`` its message. ``usage_estimated``: the server reported no usage (the
    token counts are the client's estimate)."""

    session: int
    turn: int
    scheduled: float
    sent: float
    first: float | None
    end: float
    tokens_in: int
    tokens_out: int
    itl: tuple[float, ...] = ()
    error: str | None = None
    tool_calls: int = 0
    detail: str | None = None
    usage_estimated: bool = False

    @property
    def ttft(self) -> float | None:
        return None if self.first is None else self.first - self.scheduled

    @property
    def e2e(self) -> float:
        return self.end - self.scheduled

    @property
    def tpot(self) -> float | None:
        """Time per output token after the first."""
        if self.first is None or self.tokens_out <= 1:
            return None
        return (self.end - self.first) / (self.tokens_out - 1)


class SessionRecord(msgspec.Struct, frozen=True, gc=False):
    """One session: its turns, requests, time in the model and in tools, start and end."""

    session: int
    scheduled: float
    end: float
    turns: int
    requests: int
    model_s: float
    tools_s: float
    tool_calls: int
    ok: bool
    error: str | None = None


def quantiles(values: Sequence[float], scale: float = 1000.0) -> dict[str, float | None]:
    """``p50``, ``p90``, ``p99`` (nearest rank) and ``mean`` of ``values`` times ``scale``
    (seconds to ms by default); ``None`` each when there is nothing to count."""
    if not values:
        return {"p50": None, "p90": None, "p99": None, "mean": None}
    ordered = sorted(values)
    count = len(ordered)

    def rank(fraction: float) -> float:
        return ordered[max(0, min(count - 1, math.ceil(fraction * count) - 1))] * scale

    return {
        "p50": round(rank(0.50), 3),
        "p90": round(rank(0.90), 3),
        "p99": round(rank(0.99), 3),
        "mean": round(sum(ordered) / count * scale, 3),
    }


class Slo(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """Service-level objectives a request (``ttft_s``, ``itl_s``: its largest gap) and a
    session (``session_s``) must meet to count as goodput; ``None``: not asked."""

    ttft_s: float | None = None
    itl_s: float | None = None
    session_s: float | None = None

    def met_by(self, record: RequestRecord) -> bool:
        if record.error is not None:
            return False
        ttft = record.ttft
        if self.ttft_s is not None and (ttft is None or ttft > self.ttft_s):
            return False
        return not (self.itl_s is not None and record.itl and max(record.itl) > self.itl_s)


class LoopWatch:
    """How late the event loop wakes a task that asked to sleep ``interval`` seconds: the
    generator's own lag (a loaded client delays every timer it reports)."""

    def __init__(self, interval: float = 0.05) -> None:
        self.interval = interval
        self.lags: list[float] = []

    async def run(self) -> None:
        """Until cancelled."""
        while True:
            before = anyio.current_time()
            await anyio.sleep(self.interval)
            self.lags.append(max(0.0, anyio.current_time() - before - self.interval))


class Spread(msgspec.Struct, frozen=True):
    """``p50``, ``p90``, ``p99`` (nearest rank) and ``mean`` of some figures (``None``
    each when there was nothing to count): :func:`quantiles` as a struct."""

    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    mean: float | None = None


class LoadReport(msgspec.Struct, kw_only=True):
    """A run's report: what ``greenroom load --json`` prints (its JSON keys are these
    fields) and ``--compare`` reads back — a report written by an older greenroom, with
    fewer fields, reads with the rest at their defaults (:func:`report_from`). Times in
    ``*_ms`` are milliseconds from when each request was due; ``*_s`` seconds."""

    requests: int = 0
    errors: int = 0
    errors_by_kind: dict[str, int] = {}
    """Failed requests by what happened (``"connection refused"``, ``"HTTP 500"``...)."""
    error_examples: dict[str, str] = {}
    """One message of each kind (naming the address)."""
    unreached: bool = False
    """No request reached the server."""
    usage_estimated: int = 0
    """Requests whose token counts are the client's estimate (the server said none)."""
    sessions: int = 0
    sessions_ok: int = 0
    duration_s: float = 0.0
    ttft_ms: Spread = Spread()
    itl_ms: Spread = Spread()
    tpot_ms: Spread = Spread()
    e2e_ms: Spread = Spread()
    session_s: Spread = Spread()
    tokens_in: int = 0
    tokens_out: int = 0
    output_tokens_per_s: float = 0.0
    tool_calls: int = 0
    time_in_tools_s: float = 0.0
    time_in_model_s: float = 0.0
    goodput: float = 0.0
    """Requests per second that met the run's objectives."""
    goodput_requests: int = 0
    goodput_sessions: int = 0
    offered_rate: float | None = None
    achieved_rate: float = 0.0
    requests_per_s: float = 0.0
    client_cpu_s: float = 0.0
    client_cpu_per_request_ms: float = 0.0
    send_lag_ms: Spread = Spread()
    loop_lag_ms: Spread = Spread()
    workload: str | None = None
    plan: dict[str, Any] | None = None
    """The run's ``LoadPlan`` as JSON."""
    tool_runs: dict[str, int] = {}
    bottleneck: Literal["client", "none"] = "none"
    """``"client"``: the generator's own timers ran late (p99 send or loop lag past 10 ms)."""
    stopped: str | None = None
    """Why the run ended early (saturated), or ``None``."""
    sessions_started: int = 0
    compatibility: list[str] = []
    """What the client changed in its requests because the server refused something."""
    run: str | None = None
    """A fleet run's id (``--on-daemons``)."""
    daemons: dict[str, int] = {}
    """A fleet run's sessions per daemon process."""
    tasks_failed: int = 0
    """A fleet run's load tasks that failed."""
    recorded_requests: int | None = None
    """A replay's requests in its recording."""
    generator_processes: int = 1
    """How many processes generated the load (``--processes``)."""
    processes: list[dict[str, Any]] = []
    """Each generator process's own figures (``part``, ``pid``, ``requests``, ``sessions``,
    ``cpu_s``, ``cpu_per_request_ms``, ``send_lag_p99_ms``, ``loop_lag_p99_ms``, ``died``)
    when there were several."""


def report_from(document: Any, where: str) -> LoadReport:
    """``document`` (a report's JSON, decoded) as a :class:`LoadReport`; ``InvalidInput``
    naming ``where`` if it is not one of ``greenroom load``'s."""
    from .._errors import InvalidInput

    if (
        not isinstance(document, dict)
        or not isinstance(document.get("plan"), dict)
        or "ttft_ms" not in document
    ):
        raise InvalidInput(
            f"--compare: {where!r} is not a report of greenroom load --json", field="--compare"
        )
    try:
        return msgspec.convert(document, LoadReport)
    except msgspec.ValidationError as error:
        raise InvalidInput(
            f"--compare: {where!r} is not a report of greenroom load --json: {error}", field="--compare"
        ) from None


def _spread(values: Sequence[float], scale: float = 1000.0) -> Spread:
    return Spread(**quantiles(values, scale))


def summary(
    requests: Sequence[RequestRecord],
    sessions: Sequence[SessionRecord],
    *,
    duration: float,
    offered_rate: float | None,
    client_cpu_s: float,
    loop_lags: Sequence[float],
    slo: Slo,
) -> LoadReport:
    """The report of a run's records (what ``--json`` prints; the caller adds the run's
    own fields: its workload, plan...)."""
    ok = [r for r in requests if r.error is None]
    errors: dict[str, int] = {}
    examples: dict[str, str] = {}
    for record in requests:
        if record.error is not None:
            errors[record.error] = errors.get(record.error, 0) + 1
            if record.error not in examples and record.detail:
                examples[record.error] = record.detail
    ttfts = [t for r in ok if (t := r.ttft) is not None]
    itls = [gap for r in ok for gap in r.itl]
    tpots = [t for r in ok if (t := r.tpot) is not None]
    good = sum(1 for r in requests if slo.met_by(r))
    done = [s for s in sessions if s.ok and (slo.session_s is None or s.end - s.scheduled <= slo.session_s)]
    span = max(duration, 1e-9)
    return LoadReport(
        requests=len(requests),
        errors=sum(errors.values()),
        errors_by_kind=errors,
        error_examples=examples,
        unreached=all(r.error in UNREACHED for r in requests) if requests else False,
        usage_estimated=sum(1 for r in ok if r.usage_estimated),
        sessions=len(sessions),
        sessions_ok=sum(1 for s in sessions if s.ok),
        duration_s=round(duration, 3),
        ttft_ms=_spread(ttfts),
        itl_ms=_spread(itls),
        tpot_ms=_spread(tpots),
        e2e_ms=_spread([r.e2e for r in ok]),
        session_s=_spread([s.end - s.scheduled for s in sessions], scale=1.0),
        tokens_in=sum(r.tokens_in for r in requests),
        tokens_out=sum(r.tokens_out for r in requests),
        output_tokens_per_s=round(sum(r.tokens_out for r in ok) / span, 3),
        tool_calls=sum(s.tool_calls for s in sessions),
        time_in_tools_s=round(sum(s.tools_s for s in sessions), 3),
        time_in_model_s=round(sum(s.model_s for s in sessions), 3),
        goodput=round(good / span, 3),
        goodput_requests=good,
        goodput_sessions=len(done),
        offered_rate=offered_rate,
        achieved_rate=round(len(sessions) / span, 3),
        requests_per_s=round(len(requests) / span, 3),
        client_cpu_s=round(client_cpu_s, 3),
        client_cpu_per_request_ms=round(client_cpu_s / max(1, len(requests)) * 1000, 3),
        send_lag_ms=_spread([r.sent - r.scheduled for r in requests]),
        loop_lag_ms=_spread(loop_lags),
    )


def shifted(record: Any, origin: float) -> Any:
    """A :class:`RequestRecord` or :class:`SessionRecord` with its instants counted from
    ``origin`` (a run's start: records of several processes, each on its own clock, on one
    time line)."""
    if isinstance(record, RequestRecord):
        return msgspec.structs.replace(
            record,
            scheduled=record.scheduled - origin,
            sent=record.sent - origin,
            first=None if record.first is None else record.first - origin,
            end=record.end - origin,
        )
    return msgspec.structs.replace(record, scheduled=record.scheduled - origin, end=record.end - origin)


def model_compatibility(model: object) -> list[str]:
    """What the model under load changed in its requests because the server refused
    something (an :class:`~greenroom.llm.OpenAIChatModel`'s ``compatibility``; other
    models change nothing): a report lists it, so no rewrite is silent."""
    said = getattr(model, "compatibility", None)
    return [str(line) for line in said] if isinstance(said, list) else []


def process_cpu() -> float:
    return time.process_time()
