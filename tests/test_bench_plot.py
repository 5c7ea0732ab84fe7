"""``greenroom bench plot FILE.json -o out.png``: benchmark results drawn as PNG."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from greenroom.bench._plot import BLUE, GREY, ORANGE, draw

Pixels = list[list[tuple[int, int, int]]]


def decode(png: bytes) -> Pixels:
    """The RGB rows of a PNG as greenroom writes them (8-bit RGB, filter 0 on every row)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    at, data, width, height = 8, b"", 0, 0
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, body = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        assert zlib.crc32(kind + body) == struct.unpack(">I", png[at + 8 + length : at + 12 + length])[0]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            data += body
        at += 12 + length
    raw = zlib.decompress(data)
    stride = width * 3 + 1
    rows = []
    for y in range(height):
        line = raw[y * stride : (y + 1) * stride]
        assert line[0] == 0
        rows.append([tuple(line[1 + 3 * x : 4 + 3 * x]) for x in range(width)])  # type: ignore[misc]
    return rows


def bar_widths(pixels: Pixels, colour: tuple[int, int, int]) -> list[int]:
    """The width of each run of rows holding ``colour``, top to bottom (one per bar)."""
    widths: list[int] = []
    inside = False
    for row in pixels:
        count = sum(pixel == colour for pixel in row)
        if count > 20:
            if not inside:
                widths.append(0)
            widths[-1] = max(widths[-1], count)
        inside = count > 20
    return widths


def test_each_ratio_is_a_bar_as_long_as_its_value_coloured_by_event_loop() -> None:
    document = {"asyncio": {"ping": {"ratio": 1.0}, "fan": {"ratio": 2.0}}, "trio": {"ping": {"ratio": 0.5}}}
    pixels = decode(draw(document))
    blue, orange = bar_widths(pixels, BLUE), bar_widths(pixels, ORANGE)
    assert len(blue) == 2 and len(orange) == 1
    assert abs(blue[1] - 2 * blue[0]) <= 2 and abs(orange[0] * 2 - blue[0]) <= 2


def test_the_ratios_are_the_named_figures_and_not_a_spreads_ends() -> None:
    from greenroom.bench._plot import ratios

    result = {"trio": {"log": {"ratio": 8.0, "ratio_min": 5.0, "limit_share": 0.2, "naive": 9000.0,
                               "iterations": 10, "overhead_per_iteration": 0.001},
                       "chat": [{"latency_ms": 50, "throughput_vs_plain_at_max": 1.4}]}}  # fmt: skip
    assert ratios(result) == [
        ("trio", "log ratio", 8.0),
        ("trio", "log limit_share", 0.2),
        ("trio", "chat latency ms 50 throughput_vs_plain_at_max", 1.4),
    ]


def test_a_soak_curve_draws_rss_and_disk_rising_left_to_right() -> None:
    curve = [[tasks, 100 + tasks / 100, 20 + tasks / 200] for tasks in range(0, 10_001, 1000)]
    pixels = decode(draw({"asyncio": {"backend": "asyncio", "tasks_target": 10_000, "curve": curve}}))
    for colour in (BLUE, ORANGE):
        points = [(x, y) for y, row in enumerate(pixels) for x, pixel in enumerate(row) if pixel == colour]
        left = max(y for x, y in points if x == min(px for px, _ in points))
        right = min(y for x, y in points if x == max(px for px, _ in points))
        assert right < left  # higher on the right: y grows downwards


def test_chat_draws_a_panel_per_loop_and_model_latency() -> None:
    def row(latency: int, concurrency: int) -> dict[str, object]:
        timing = {"p50": 0.01 * concurrency, "p99": 0.02 * concurrency, "per_second": 1.0}
        return {"latency_ms": latency, "concurrency": concurrency, "plain": timing, "greenroom": timing}

    one = decode(draw({"asyncio": {"rows": [row(0, 1), row(0, 100)]}}))
    four = decode(
        draw({b: {"rows": [row(0, 1), row(0, 100), row(50, 1), row(50, 100)]} for b in ("asyncio", "trio")})
    )
    assert len(four) > len(one) and any(BLUE in r for r in one)


def _plot(tmp_path: Path, content: str) -> subprocess.CompletedProcess[str]:
    source = tmp_path / "result.json"
    source.write_text(content)
    return subprocess.run(
        [sys.executable, "-m", "greenroom", "bench", "plot", str(source), "-o", str(tmp_path / "out.png")],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_command_writes_a_png_of_a_results_file(tmp_path: Path) -> None:
    done = _plot(tmp_path, json.dumps({"asyncio": {"pipeline": {"ratio": 0.7}}}))
    assert done.returncode == 0, done.stderr
    assert decode((tmp_path / "out.png").read_bytes())


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
    before = {"asyncio": {"ping": {"ratio": 1.0}, "fan": {"ratio": 2.0}}}
    after = {"asyncio": {"ping": {"ratio": 2.0}, "fan": {"ratio": 1.0}, "new": {"ratio": 1.0}}}
    (tmp_path / "old.json").write_text(json.dumps(before))
    (tmp_path / "new.json").write_text(json.dumps(after))
    out = tmp_path / "cmp.png"
    done = subprocess.run(
        [sys.executable, "-m", "greenroom", "bench", "plot", str(tmp_path / "new.json"),
         "--before", str(tmp_path / "old.json"), "-o", str(out)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    pixels = decode(out.read_bytes())
    grey, blue = bar_widths(pixels, GREY), bar_widths(pixels, BLUE)
    assert len(blue) == 3 and len(grey) == 2  # the new ratio has no earlier bar
    assert abs(blue[0] - 2 * grey[0]) <= 2 and abs(grey[1] - 2 * blue[1]) <= 2  # doubled, halved
