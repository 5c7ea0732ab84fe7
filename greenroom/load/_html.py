"""A load run as one self-contained HTML page: its figures and charts (a timeline of the
requests, the distributions of TTFT and ITL, and — for a sweep — percentiles against the
rate), drawn with matplotlib (the ``plot`` extra) as PNGs embedded in the page."""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from typing import Any

from .._errors import InvalidInput
from ._measure import LoadReport, RequestRecord


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # no screen: draw to files
        import matplotlib.pyplot as pyplot
    except ImportError:
        raise InvalidInput(
            "--html draws its charts with matplotlib: pip install 'greenroom[plot]'", field="--html"
        ) from None
    return pyplot


def _png(figure: Any) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def charts(report: LoadReport, records: Sequence[RequestRecord], sweep: dict[str, Any] | None) -> list[str]:
    """The report's charts, each a base64 PNG."""
    pyplot = _pyplot()
    drawn: list[str] = []
    start = min((r.scheduled for r in records), default=0.0)
    ok = [r for r in records if r.error is None and r.ttft is not None]
    figure, (timeline, flight) = pyplot.subplots(2, 1, figsize=(10, 6), sharex=True)
    timeline.scatter([r.scheduled - start for r in ok], [r.e2e * 1000 for r in ok], s=6, label="end to end")
    timeline.scatter(
        [r.scheduled - start for r in ok],
        [(r.ttft or 0) * 1000 for r in ok],
        s=6,
        label="time to first token",
    )
    failed = [r for r in records if r.error is not None]
    if failed:
        timeline.scatter([r.scheduled - start for r in failed], [r.e2e * 1000 for r in failed], s=12,
                         marker="x", color="red", label="failed")  # fmt: skip
    timeline.set_ylabel("ms from when it was due")
    timeline.set_title("each request, by when it was due")
    timeline.legend(loc="upper left")
    edges = sorted([(r.sent - start, 1) for r in records] + [(r.end - start, -1) for r in records])
    level, xs, ys = 0, [], []
    for at, step in edges:
        level += step
        xs.append(at)
        ys.append(level)
    flight.step(xs, ys, where="post")
    flight.set_ylabel("requests in flight")
    flight.set_xlabel("seconds into the run")
    drawn.append(_png(figure))
    pyplot.close(figure)
    figure, (first, gaps) = pyplot.subplots(1, 2, figsize=(10, 3.5))
    first.hist([(r.ttft or 0) * 1000 for r in ok], bins=40)
    first.set_title("time to first token (ms)")
    gaps.hist([gap * 1000 for r in ok for gap in r.itl] or [0], bins=40)
    gaps.set_title("inter-token latency (ms)")
    drawn.append(_png(figure))
    pyplot.close(figure)
    if sweep is not None and sweep["steps"]:
        steps = sorted(sweep["steps"], key=lambda step: step["rate"])
        figure, axis = pyplot.subplots(figsize=(10, 4))
        for quantile in ("p50", "p90", "p99"):
            axis.plot([s["rate"] for s in steps], [s["ttft_ms"][quantile] or 0 for s in steps], marker="o",
                      label=f"TTFT {quantile}")  # fmt: skip
        axis.set_xlabel("sessions per second offered")
        axis.set_ylabel("ms")
        axis.set_title("time to first token against the rate (the sweep's steps)")
        axis.legend()
        drawn.append(_png(figure))
        pyplot.close(figure)
    return drawn


def html_report(
    report: LoadReport, records: Sequence[RequestRecord], *, sweep: dict[str, Any] | None = None
) -> str:
    """The page: the figures of ``report`` in a table, then the charts. ``InvalidInput``
    when matplotlib (the ``plot`` extra) is not installed."""
    _pyplot()  # before anything else: the one thing that may be missing
    rows = []
    for key, figures in (("ttft_ms", report.ttft_ms), ("itl_ms", report.itl_ms), ("tpot_ms", report.tpot_ms),
                         ("e2e_ms", report.e2e_ms), ("send_lag_ms", report.send_lag_ms)):  # fmt: skip
        cells = "".join(
            f"<td>{'-' if value is None else f'{value:.1f}'}</td>"
            for value in (figures.p50, figures.p90, figures.p99, figures.mean)
        )
        rows.append(f"<tr><th>{html.escape(key)}</th>{cells}</tr>")
    r = report
    facts = [
        ("workload", r.workload),
        ("sessions (ok)", f"{r.sessions} ({r.sessions_ok})"),
        ("requests (errors)", f"{r.requests} ({r.errors})"),
        ("duration", f"{r.duration_s:.1f} s"),
        ("offered / achieved sessions/s", f"{r.offered_rate or '-'} / {r.achieved_rate}"),
        ("goodput (requests/s)", r.goodput),
        ("output tokens/s", r.output_tokens_per_s),
        ("client CPU", f"{r.client_cpu_s} s ({r.client_cpu_per_request_ms} ms/request)"),
        ("stopped early", r.stopped or "no"),
    ]
    if sweep is not None:
        facts.append(("highest rate meeting the objectives", sweep["rate"]))
    fact_rows = "".join(
        f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in facts
    )
    images = "".join(
        f'<p><img alt="chart" src="data:image/png;base64,{png}"></p>'
        for png in charts(report, records, sweep)
    )
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>greenroom load</title>"
        "<style>body{font:14px sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}th{text-align:left}"
        "</style></head><body>"
        f"<h1>greenroom load: {html.escape(str(report.workload))}</h1><table>{fact_rows}</table>"
        "<h2>latencies (ms, from when each request was due)</h2>"
        f"<table><tr><th></th><th>p50</th><th>p90</th><th>p99</th><th>mean</th></tr>{''.join(rows)}</table>"
        f"<h2>charts</h2>{images}</body></html>"
    )


def comparison_report(reports: Sequence[LoadReport], names: Sequence[str]) -> str:
    """One page comparing several runs' reports (``names``: where each came from; read
    with :func:`report_from`): percentiles and throughput against the concurrency (closed
    loops) and against the offered rate (open loops), and a table of every run.
    ``InvalidInput`` when matplotlib is missing."""
    pyplot = _pyplot()
    images: list[str] = []
    for axis_key, label in (("concurrency", "sessions at once (closed loop)"),
                            ("rate", "sessions per second offered (open loop)")):  # fmt: skip
        runs = sorted(
            (r for r in reports if (r.plan or {}).get(axis_key) is not None),
            key=lambda r: (r.plan or {})[axis_key],
        )
        if not runs:
            continue
        xs = [(r.plan or {})[axis_key] for r in runs]
        figure, (latency, throughput) = pyplot.subplots(1, 2, figsize=(11, 4))
        for spreads, name in (([r.ttft_ms for r in runs], "TTFT"), ([r.e2e_ms for r in runs], "end to end")):
            latency.plot(xs, [spread.p50 or 0 for spread in spreads], "-o", label=f"{name} p50")
            latency.plot(xs, [spread.p99 or 0 for spread in spreads], "--o", label=f"{name} p99")
        latency.set_xlabel(label)
        latency.set_ylabel("ms")
        latency.set_title("latency percentiles")
        latency.legend(fontsize=8)
        throughput.plot(xs, [r.requests_per_s for r in runs], "-o", label="requests/s")
        throughput.plot(xs, [r.goodput for r in runs], "--o", label="goodput (requests/s in the SLO)")
        tokens = throughput.twinx()
        tokens.plot(xs, [r.output_tokens_per_s for r in runs], ":s", color="gray", label="output tokens/s")
        tokens.set_ylabel("output tokens/s")
        throughput.set_xlabel(label)
        throughput.set_title("throughput")
        throughput.legend(loc="upper left", fontsize=8)
        images.append(_png(figure))
        pyplot.close(figure)
    header = "<tr><th>run</th><th>plan</th><th>requests</th><th>TTFT p50</th><th>TTFT p99</th>" \
        "<th>e2e p99</th><th>requests/s</th><th>goodput</th><th>output tokens/s</th></tr>"  # fmt: skip
    rows = "".join(
        f"<tr><th>{html.escape(name)}</th><td>{html.escape(_plan(r.plan or {}))}</td><td>{r.requests}</td>"
        f"<td>{_ms(r.ttft_ms.p50)}</td><td>{_ms(r.ttft_ms.p99)}</td><td>{_ms(r.e2e_ms.p99)}</td>"
        f"<td>{r.requests_per_s}</td><td>{r.goodput}</td><td>{r.output_tokens_per_s}</td></tr>"
        for name, r in zip(names, reports, strict=True)
    )
    pictures = "".join(f'<p><img alt="chart" src="data:image/png;base64,{png}"></p>' for png in images)
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>greenroom load: runs compared</title>"
        "<style>body{font:14px sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}th{text-align:left}"
        f"</style></head><body><h1>greenroom load: {len(reports)} runs compared</h1>"
        f"<table>{header}{rows}</table><h2>charts</h2>{pictures}</body></html>"
    )


def _plan(plan: dict[str, Any]) -> str:
    if plan.get("concurrency") is not None:
        return f"{plan['concurrency']} at once"
    return f"{plan.get('rate')} sessions/s ({plan.get('pattern')})"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
