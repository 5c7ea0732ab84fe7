"""``python -m benchmarks plot FILE.json -o out.png``: benchmark results drawn by
matplotlib. The tests read what each chart plots (its bars, their colours and labels, its
lines), then check the PNG the command writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from matplotlib.colors import to_hex
from matplotlib.image import imread

from benchmarks._plot import BLUE, GREY, ORANGE, figure, ratios

ROOT = Path(__file__).resolve().parent.parent


def bars(chart: Any) -> list[tuple[str, float]]:
    """Each bar of a chart's one panel, top to bottom: its colour and its length."""
    (axes,) = chart.axes
    found = [(patch.get_y(), to_hex(patch.get_facecolor()), patch.get_width()) for patch in axes.patches]
    return [(colour, width) for _, colour, width in sorted(found)]


def test_each_ratio_is_a_bar_as_long_as_its_value_coloured_by_event_loop_its_name_whole() -> None:
    document = {
        "asyncio": {"ping": {"ratio": 1.0}, "vs_procrastinate_at_four_processes": {"ratio": 2.0}},
        "trio": {"ping": {"ratio": 0.5}},
    }
    chart = figure(document)
    assert bars(chart) == [(BLUE, 1.0), (BLUE, 2.0), (ORANGE, 0.5)]
    labels = [label.get_text() for label in chart.axes[0].get_yticklabels()]
    assert labels == [
        "asyncio ping ratio",
        "asyncio vs_procrastinate_at_four_processes ratio",
        "trio ping ratio",
    ]
    assert [line.get_xdata()[0] for line in chart.axes[0].lines] == [1.0]  # 1.0x marked


def test_the_ratios_are_the_named_figures_and_not_a_spreads_ends() -> None:
    result = {"trio": {"log": {"ratio": 8.0, "ratio_min": 5.0, "limit_share": 0.2, "naive": 9000.0,
                               "iterations": 10, "overhead_per_iteration": 0.001},
                       "chat": [{"latency_ms": 50, "throughput_vs_plain_at_max": 1.4}]}}  # fmt: skip
    assert ratios(result) == [
        ("trio", "log ratio", 8.0),
        ("trio", "log limit_share", 0.2),
        ("trio", "chat latency ms 50 throughput_vs_plain_at_max", 1.4),
    ]


def test_a_soak_curve_draws_rss_and_disk_against_tasks() -> None:
    curve = [[tasks, 100 + tasks / 100, 20 + tasks / 200] for tasks in range(0, 10_001, 1000)]
    chart = figure({"asyncio": {"backend": "asyncio", "tasks_target": 10_000, "curve": curve}})
    rss, disk = chart.axes
    (rss_line,), (disk_line,) = rss.lines, disk.lines
    assert list(rss_line.get_xdata()) == [point[0] for point in curve]
    assert list(rss_line.get_ydata()) == [point[1] for point in curve]
    assert list(disk_line.get_ydata()) == [point[2] for point in curve]
    assert (rss.get_ylabel(), disk.get_xlabel()) == ("daemon RSS (MB)", "tasks processed")


def test_chat_draws_a_panel_per_loop_and_model_latency() -> None:
    def row(latency: int, concurrency: int) -> dict[str, object]:
        timing = {"p50": 0.01 * concurrency, "p99": 0.02 * concurrency, "per_second": 1.0}
        return {"latency_ms": latency, "concurrency": concurrency, "plain": timing, "greenroom": timing}

    one = figure({"asyncio": {"rows": [row(0, 1), row(0, 100)]}})
    four = figure(
        {b: {"rows": [row(0, 1), row(0, 100), row(50, 1), row(50, 100)]} for b in ("asyncio", "trio")}
    )
    assert len(one.axes) == 1 and len(four.axes) == 4
    assert [axes.get_title() for axes in four.axes][-1] == "trio, model latency 50 ms"
    p99 = next(line for line in one.axes[0].lines if line.get_label() == "greenroom p99")
    assert list(p99.get_ydata()) == pytest.approx([20.0, 2000.0])  # seconds drawn as ms


def _plot(tmp_path: Path, content: str, *extra: str) -> subprocess.CompletedProcess[str]:
    source = tmp_path / "result.json"
    source.write_text(content)
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", "plot", str(source), "-o", str(tmp_path / "out.png"), *extra],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def test_the_command_writes_a_png_of_a_results_file(tmp_path: Path) -> None:
    done = _plot(tmp_path, json.dumps({"asyncio": {"pipeline": {"ratio": 0.7}}}))
    assert done.returncode == 0, done.stderr
    height, width, _ = imread(tmp_path / "out.png").shape
    assert width == 1000 and height > 100


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ("{", "is not JSON"),
        ("[1, 2]", "a benchmark result is a JSON object, not list"),
        ('{"asyncio": {"rounds": 3}}', "nothing to plot"),
    ],
)
def test_a_file_with_nothing_to_draw_is_refused_by_name(tmp_path: Path, content: str, said: str) -> None:
    (tmp_path / "out.png").write_bytes(b"kept")
    done = _plot(tmp_path, content)
    assert done.returncode == 1 and said in done.stderr and "result.json" in done.stderr
    assert (tmp_path / "out.png").read_bytes() == b"kept"  # nothing overwritten


def test_before_and_after_draws_each_ratio_under_its_earlier_value(tmp_path: Path) -> None:
    from benchmarks._plot import comparison_figure

    before = [("asyncio", "ping ratio", 1.0), ("asyncio", "fan ratio", 2.0)]
    after = [("asyncio", "ping ratio", 2.0), ("asyncio", "fan ratio", 1.0), ("asyncio", "new ratio", 1.0)]
    chart = comparison_figure("t", before, after)
    assert bars(chart) == [
        (GREY, 1.0),
        (BLUE, 2.0),
        (GREY, 2.0),
        (BLUE, 1.0),
        (BLUE, 1.0),
    ]  # "new": none before
    (tmp_path / "old.json").write_text(json.dumps({"asyncio": {"ping": {"ratio": 1.0}}}))
    done = _plot(
        tmp_path, json.dumps({"asyncio": {"ping": {"ratio": 2.0}}}), "--before", str(tmp_path / "old.json")
    )
    assert done.returncode == 0, done.stderr
    assert imread(tmp_path / "out.png").shape[1] == 1000
