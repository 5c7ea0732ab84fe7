"""Charts of the benchmarks' JSON (``python -m benchmarks plot FILE.json -o out.png``),
drawn by matplotlib (the ``plot`` extra; the development extra has it). What is drawn
depends on what the file holds:

- a soak (``curve``): the daemon's RSS and bytes on disk against tasks processed;
- chat (``rows`` by concurrency): p50 and p99 latency per concurrency, greenroom and the
  plain loop, a panel per event loop and model latency;
- any other suite: every ratio against an in-run baseline (a figure whose name says
  ``ratio`` or ``vs``, or ends in ``_share``; not the ``_min``/``_max`` of a spread), one
  horizontal bar each, coloured by event loop, its whole name beside it and 1.0x marked;
- with ``--before OLD.json`` (any suite): each ratio beside the same ratio in ``OLD.json``
  (a grey bar above its own), so a change shows what it moved.

The ``*_figure`` functions return the matplotlib ``Figure`` (what the tests read); ``draw``
and ``draw_comparison`` its PNG. No pyplot: nothing global, no window, any thread.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from greenroom._errors import InvalidInput

if TYPE_CHECKING:
    from matplotlib.figure import Figure

BLUE, ORANGE, GREEN, PURPLE, GREY = "#1f63b4", "#d66818", "#2c963c", "#8246aa", "#b4b4b4"
LOOP_COLOURS = {"asyncio": BLUE, "trio": ORANGE}


def _figure(width: float, height: float) -> Figure:
    try:
        from matplotlib.figure import Figure
    except ImportError:  # pragma: no cover - the dev extra has it
        raise InvalidInput(
            "drawing needs matplotlib: pip install 'greenroom[plot]' (the dev extra has it)", field="plot"
        ) from None
    return Figure(figsize=(width, height), dpi=100, layout="constrained")


def _png(figure: Figure) -> bytes:
    out = io.BytesIO()
    figure.savefig(out, format="png")
    return out.getvalue()


# -- what a result holds ------------------------------------------------------------------


def ratios(document: dict[str, Any]) -> list[tuple[str, str, float]]:
    """Every ratio in a result: ``(event loop, name, value)``; the name is the figure's
    path (``workload ratio``), a list's entries named by their first text or number; a
    spread's ``_min`` / ``_max`` are left out (the median is drawn)."""
    found: list[tuple[str, str, float]] = []

    def walk(value: Any, backend: str, path: list[str]) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(inner, backend, [*path, str(key)])
        elif isinstance(value, list):
            for index, inner in enumerate(value):
                walk(inner, backend, [*path, _name_of(inner, index)])
        elif isinstance(value, int | float) and not isinstance(value, bool) and path:
            key = path[-1]
            spread = key.endswith(("ratio_min", "ratio_max", "share_min", "share_max"))  # not drawn
            if _named(key) and not spread:
                found.append((backend, " ".join(path), float(value)))

    for backend, result in document.items():
        walk(result, backend, [])
    return found


def _named(key: str) -> bool:
    words = key.split("_")  # "ratio" as a word: not in "iterations"
    return "ratio" in words or "vs" in words or key.endswith("_share")


def _name_of(item: Any, index: int) -> str:
    if isinstance(item, dict):
        for key in ("workload", "name", "processes", "concurrency", "latency_ms"):
            if key in item:
                return f"{key.replace('_', ' ')} {item[key]}"
    return str(index)


def _by_backend(document: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(document, dict) or not document:
        raise InvalidInput(f"a benchmark result is a JSON object, not {type(document).__name__}")
    if all(key in ("asyncio", "trio") and isinstance(value, dict) for key, value in document.items()):
        return document
    return {str(document.get("backend", "")): document}


# -- the charts ---------------------------------------------------------------------------


def soak_figure(figures: dict[str, Any]) -> Figure:
    """RSS and bytes on disk (MB) against tasks processed, from a long soak's ``curve``."""
    curve = figures["curve"]
    figure = _figure(9.6, 5.6)
    rss, disk = figure.subplots(2, 1, sharex=True)
    tasks = [point[0] for point in curve]
    rss.plot(tasks, [point[1] for point in curve], color=BLUE, linewidth=2)
    rss.set_ylabel("daemon RSS (MB)")
    disk.plot(tasks, [point[2] for point in curve], color=ORANGE, linewidth=2)
    disk.set_ylabel("bytes on disk (MB)")
    disk.set_xlabel("tasks processed")
    for axes in (rss, disk):
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
    target = f"{int(figures.get('tasks_target') or 0):,}"
    on = ", ".join(str(figures[key]) for key in ("backend", "store") if figures.get(key))
    figure.suptitle(f"greenroom soak: {target} tasks ({on})" if on else f"greenroom soak: {target} tasks")
    return figure


def chat_figure(results: dict[str, dict[str, Any]]) -> Figure:
    """p50 and p99 latency (ms) per concurrency, greenroom and the plain loop: one panel
    per event loop and model latency."""
    panels = [
        (backend, latency, [row for row in result["rows"] if row["latency_ms"] == latency])
        for backend, result in results.items()
        for latency in sorted({row["latency_ms"] for row in result["rows"]})
    ]
    figure = _figure(9.6, 1.0 + 2.6 * len(panels))
    grid = figure.subplots(len(panels), 1, squeeze=False)
    for axes, (backend, latency, rows) in zip(grid[:, 0], panels, strict=True):
        concurrency = [row["concurrency"] for row in rows]
        for who, p, colour, style in (
            ("greenroom", "p50", BLUE, "-"),
            ("greenroom", "p99", PURPLE, "--"),
            ("plain", "p50", ORANGE, "-"),
            ("plain", "p99", GREEN, "--"),
        ):
            axes.plot(
                concurrency,
                [row[who][p] * 1000 for row in rows],
                style,
                color=colour,
                marker="o",
                label=f"{who} {p}",
            )
        if min(concurrency) > 0 and max(concurrency) >= 50 * min(concurrency):
            axes.set_xscale("log")  # 1, 100, 1,000 at once: each step visible
        axes.set_title(f"{backend}, model latency {latency} ms")
        axes.set_ylabel("latency (ms)")
        axes.set_xlabel("concurrent conversations")
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
    figure.suptitle("greenroom chat: latency per concurrent conversations")
    return figure


Bars = list[tuple[float | None, str, str]]
"""A row's bars: (value or ``None`` for none, colour, legend label)."""


def _bar_figure(title: str, rows: list[tuple[str, Bars]]) -> Figure:
    """One row per label, its bars stacked in the row, on one scale from 0, with 1.0x
    marked and each bar's value written at its end. Labels are drawn whole."""
    per_row = max(len(bars) for _, bars in rows)
    figure = _figure(10.0, 1.2 + 0.32 * per_row * len(rows))
    axes = figure.subplots()
    height = 0.8 / per_row
    labelled: set[str] = set()
    top = max([1.0, *(value for _, bars in rows for value, _, _ in bars if value is not None)])
    for index, (_, bars) in enumerate(rows):
        for place, (value, colour, legend) in enumerate(bars):
            if value is None:
                continue
            y = index + (place - (per_row - 1) / 2) * height
            label = legend if legend not in labelled else None
            labelled.add(legend)
            axes.barh(y, value, height=height * 0.9, color=colour, label=label)
            axes.text(value + top * 0.01, y, f"{value:.2f}x", va="center", fontsize="small")
    axes.set_yticks(range(len(rows)), [label for label, _ in rows])
    axes.invert_yaxis()  # the first figure on top, as the file lists them
    axes.axvline(1.0, color="black", linewidth=1)
    axes.set_xlim(0, top * 1.15)
    axes.set_xlabel("ratio against the in-run baseline (1.0x: the same)")
    axes.grid(axis="x", alpha=0.3)
    axes.legend(fontsize="small", loc="lower right")
    figure.suptitle(title)
    return figure


def ratio_figure(title: str, found: list[tuple[str, str, float]]) -> Figure:
    """One bar per ratio, coloured by event loop."""
    rows: list[tuple[str, Bars]] = [
        (f"{backend} {name}".strip(), [(value, LOOP_COLOURS.get(backend, PURPLE), backend or "ratio")])
        for backend, name, value in found
    ]
    return _bar_figure(title, rows)


def comparison_figure(
    title: str, before: list[tuple[str, str, float]], after: list[tuple[str, str, float]]
) -> Figure:
    """Each ratio of ``after`` under the same one of ``before`` (grey; absent: no bar)."""
    old = {(backend, name): value for backend, name, value in before}
    rows: list[tuple[str, Bars]] = [
        (
            f"{backend} {name}".strip(),
            [
                (old.get((backend, name)), GREY, "before"),
                (value, LOOP_COLOURS.get(backend, PURPLE), backend or "after"),
            ],
        )
        for backend, name, value in after
    ]
    return _bar_figure(title, rows)


def figure(document: Any, suite: str = "") -> Figure:
    """The chart of a benchmark's JSON result (see the module docstring). Raises
    :class:`InvalidInput` when it holds nothing to draw."""
    results = _by_backend(document)
    first = next(iter(results.values()))
    if "curve" in first:
        return soak_figure(first)
    if "rows" in first and all(isinstance(row, dict) and "concurrency" in row for row in first["rows"]):
        return chat_figure(results)
    found = ratios(results)
    if not found:
        raise InvalidInput(
            "nothing to plot: no 'curve' (soak), no 'rows' by concurrency (chat) and no ratio "
            "(a number named '...ratio...' or '..._vs_...')"
        )
    return ratio_figure(f"greenroom {suite}: ratios against in-run baselines".replace("  ", " "), found)


def draw(document: Any, suite: str = "") -> bytes:
    """The PNG of :func:`figure`."""
    return _png(figure(document, suite))


def draw_comparison(before: Any, after: Any, suite: str = "") -> bytes:
    """The PNG of ``after``'s ratios beside ``before``'s (two results of one suite)."""
    found = ratios(_by_backend(after))
    if not found:
        raise InvalidInput("nothing to compare: the file holds no ratio ('...ratio...', '..._vs_...')")
    title = f"greenroom {suite}: ratios before and after".replace("  ", " ")
    return _png(comparison_figure(title, ratios(_by_backend(before)), found))
