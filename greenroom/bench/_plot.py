"""Plots of the benchmarks' JSON as PNG (``greenroom bench plot FILE.json -o out.png``).

Pure Python (zlib and a 5x7 bitmap font): no plotting library to install, so CI and a
fresh machine draw the same pictures. What is drawn depends on what the file holds:

- a soak (``curve``): the daemon's RSS and bytes on disk against tasks processed;
- chat (``rows`` by concurrency): p50 and p99 latency per concurrency, greenroom and the
  plain loop, per model latency;
- any other suite: every ratio against an in-run baseline (a figure whose name says
  ``ratio`` or ``_vs_``, or ends in ``_share``; not the ``_min``/``_max`` of a spread),
  one bar each, per event loop, with 1.0x marked;
- with ``--before OLD.json`` (any suite): each ratio of the file beside the same ratio in
  ``OLD.json`` (a grey bar above its own), so a change shows what it moved.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

from .._errors import InvalidInput

WIDTH, HEIGHT = 960, 560
WHITE, BLACK, GREY = (255, 255, 255), (40, 40, 40), (215, 215, 215)
BLUE, ORANGE = (31, 99, 180), (214, 104, 24)
GREEN, PURPLE = (44, 150, 60), (130, 70, 170)

# 5x7 glyphs (rows top to bottom, "#" = ink) for the characters the labels use
_FONT = {
    "0": [".###.", "#...#", "#..##", "#.#.#", "##..#", "#...#", ".###."],
    "1": ["..#..", ".##..", "..#..", "..#..", "..#..", "..#..", ".###."],
    "2": [".###.", "#...#", "....#", "...#.", "..#..", ".#...", "#####"],
    "3": ["####.", "....#", "....#", ".###.", "....#", "....#", "####."],
    "4": ["...#.", "..##.", ".#.#.", "#..#.", "#####", "...#.", "...#."],
    "5": ["#####", "#....", "####.", "....#", "....#", "#...#", ".###."],
    "6": [".###.", "#....", "#....", "####.", "#...#", "#...#", ".###."],
    "7": ["#####", "....#", "...#.", "..#..", ".#...", ".#...", ".#..."],
    "8": [".###.", "#...#", "#...#", ".###.", "#...#", "#...#", ".###."],
    "9": [".###.", "#...#", "#...#", ".####", "....#", "....#", ".###."],
    ".": [".....", ".....", ".....", ".....", ".....", ".##..", ".##.."],
    ",": [".....", ".....", ".....", ".....", ".##..", "..#..", ".#..."],
    "(": ["...#.", "..#..", ".#...", ".#...", ".#...", "..#..", "...#."],
    ")": [".#...", "..#..", "...#.", "...#.", "...#.", "..#..", ".#..."],
    "-": [".....", ".....", ".....", "#####", ".....", ".....", "....."],
    ":": [".....", ".##..", ".##..", ".....", ".##..", ".##..", "....."],
    "/": ["....#", "...#.", "...#.", "..#..", ".#...", ".#...", "#...."],
    "+": [".....", "..#..", "..#..", "#####", "..#..", "..#..", "....."],
    "%": ["##..#", "##..#", "...#.", "..#..", ".#...", "#..##", "#..##"],
    " ": [".....", ".....", ".....", ".....", ".....", ".....", "....."],
}
_LETTERS = {
    "A": [".###.", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"],
    "B": ["####.", "#...#", "#...#", "####.", "#...#", "#...#", "####."],
    "C": [".###.", "#...#", "#....", "#....", "#....", "#...#", ".###."],
    "D": ["####.", "#...#", "#...#", "#...#", "#...#", "#...#", "####."],
    "E": ["#####", "#....", "#....", "####.", "#....", "#....", "#####"],
    "F": ["#####", "#....", "#....", "####.", "#....", "#....", "#...."],
    "G": [".###.", "#...#", "#....", "#.###", "#...#", "#...#", ".####"],
    "H": ["#...#", "#...#", "#...#", "#####", "#...#", "#...#", "#...#"],
    "I": [".###.", "..#..", "..#..", "..#..", "..#..", "..#..", ".###."],
    "K": ["#...#", "#..#.", "#.#..", "##...", "#.#..", "#..#.", "#...#"],
    "L": ["#....", "#....", "#....", "#....", "#....", "#....", "#####"],
    "M": ["#...#", "##.##", "#.#.#", "#.#.#", "#...#", "#...#", "#...#"],
    "N": ["#...#", "##..#", "#.#.#", "#..##", "#...#", "#...#", "#...#"],
    "O": [".###.", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."],
    "P": ["####.", "#...#", "#...#", "####.", "#....", "#....", "#...."],
    "R": ["####.", "#...#", "#...#", "####.", "#.#..", "#..#.", "#...#"],
    "S": [".####", "#....", "#....", ".###.", "....#", "....#", "####."],
    "T": ["#####", "..#..", "..#..", "..#..", "..#..", "..#..", "..#.."],
    "U": ["#...#", "#...#", "#...#", "#...#", "#...#", "#...#", ".###."],
    "W": ["#...#", "#...#", "#...#", "#.#.#", "#.#.#", "##.##", "#...#"],
    "X": ["#...#", "#...#", ".#.#.", "..#..", ".#.#.", "#...#", "#...#"],
    "Y": ["#...#", "#...#", ".#.#.", "..#..", "..#..", "..#..", "..#.."],
}
_FONT.update(_LETTERS)
_FONT.update(
    {
        "J": ["..###", "...#.", "...#.", "...#.", "#..#.", "#..#.", ".##.."],
        "Q": [".###.", "#...#", "#...#", "#...#", "#.#.#", "#..#.", ".##.#"],
        "V": ["#...#", "#...#", "#...#", "#...#", "#...#", ".#.#.", "..#.."],
        "Z": ["#####", "....#", "...#.", "..#..", ".#...", "#....", "#####"],
        "_": [".....", ".....", ".....", ".....", ".....", ".....", "#####"],
        "=": [".....", ".....", "#####", ".....", "#####", ".....", "....."],
        ">": [".#...", "..#..", "...#.", "....#", "...#.", "..#..", ".#..."],
        "<": ["...#.", "..#..", ".#...", "#....", ".#...", "..#..", "...#."],
    }
)


class Canvas:
    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.pixels = bytearray(WHITE * (width * height))

    def dot(self, x: int, y: int, colour: tuple[int, int, int]) -> None:
        if 0 <= x < self.width and 0 <= y < self.height:
            at = (y * self.width + x) * 3
            self.pixels[at : at + 3] = bytes(colour)

    def line(self, x0: int, y0: int, x1: int, y1: int, colour: tuple[int, int, int], width: int = 1) -> None:
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for i in range(steps + 1):
            x = round(x0 + (x1 - x0) * i / steps)
            y = round(y0 + (y1 - y0) * i / steps)
            for dx in range(width):
                for dy in range(width):
                    self.dot(x + dx, y + dy, colour)

    def text(self, x: int, y: int, words: str, colour: tuple[int, int, int] = BLACK, scale: int = 2) -> None:
        for index, char in enumerate(words.upper()):
            glyph = _FONT.get(char, _FONT[" "])
            for row, bits in enumerate(glyph):
                for col, bit in enumerate(bits):
                    if bit == "#":
                        for dx in range(scale):
                            for dy in range(scale):
                                self.dot(x + (index * 6 + col) * scale + dx, y + row * scale + dy, colour)

    def png(self) -> bytes:
        rows = b"".join(
            b"\x00" + bytes(self.pixels[y * self.width * 3 : (y + 1) * self.width * 3])
            for y in range(self.height)
        )

        def chunk(kind: bytes, data: bytes) -> bytes:
            return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (
            b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(rows, 9))
            + chunk(b"IEND", b"")
        )


def _nice(top: float) -> float:
    """A round axis maximum at or above ``top``."""
    for power in range(0, 12):
        for step in (1, 2, 2.5, 5):
            value = step * 10**power
            if value >= top:
                return float(value)
    return top


Series = tuple[str, tuple[int, int, int], list[tuple[float, float]]]
"""A line: its label, its colour and its ``(x, y)`` points."""


def _count(value: float) -> str:
    return (
        f"{value / 1e6:.3g}M" if value >= 1e6 else f"{value / 1000:.3g}K" if value >= 1000 else f"{value:.3g}"
    )


def lines(
    canvas: Canvas, box: tuple[int, int, int, int], series: list[Series], title: str, x_max: float
) -> None:
    """Line chart of ``series`` in ``box`` (left, top, right, bottom), y from 0."""
    left, top, right, bottom = box
    y_max = _nice(max((y for _, _, points in series for _, y in points), default=1.0) * 1.1 or 1.0)
    for k in range(6):  # grid and the y axis's labels
        y = bottom - (bottom - top) * k // 5
        canvas.line(left, y, right, y, GREY)
        canvas.text(left - 70, y - 7, _count(y_max * k / 5))
    for k in range(11):
        x = left + (right - left) * k // 10
        canvas.line(x, top, x, bottom, GREY)
        label = _count(x_max * k / 10)
        canvas.text(x - 6 * len(label), bottom + 8, label)
    canvas.line(left, bottom, right, bottom, BLACK)
    canvas.line(left, top, left, bottom, BLACK)
    canvas.text(left, top - 24, title)
    at = left + 12 * (len(title) + 2)
    for label, colour, points in series:
        canvas.text(at, top - 24, label, colour)
        at += 12 * (len(label) + 2)
        previous = None
        for x_value, y_value in points:
            x = left + round((right - left) * min(x_value, x_max) / x_max)  # the last may pass the target
            here = (x, bottom - round((bottom - top) * y_value / y_max))
            if previous is not None:
                canvas.line(*previous, *here, colour, width=2)
            previous = here


def soak_chart(figures: dict[str, Any]) -> Canvas:
    """RSS and bytes on disk against tasks processed, from a long soak's ``curve``."""
    curve = figures["curve"]
    x_max = float(figures.get("tasks_target") or _nice(max(point[0] for point in curve)))
    canvas = Canvas(WIDTH, HEIGHT)
    target = f"{int(figures.get('tasks_target') or 0):,}".replace(",", " ")
    on = ", ".join(str(figures[key]) for key in ("backend", "store") if figures.get(key))
    canvas.text(90, 12, f"GREENROOM SOAK: {target} TASKS, {on}")
    lines(
        canvas,
        (90, 70, WIDTH - 40, 250),
        [("", BLUE, [(p[0], p[1]) for p in curve])],
        "DAEMON RSS (MB)",
        x_max,
    )
    lines(
        canvas,
        (90, 320, WIDTH - 40, 500),
        [("", ORANGE, [(p[0], p[2]) for p in curve])],
        "BYTES ON DISK (MB)",
        x_max,
    )
    canvas.text(WIDTH // 2 - 100, HEIGHT - 30, "TASKS PROCESSED")
    return canvas


def chat_chart(results: dict[str, dict[str, Any]]) -> Canvas:
    """p50 and p99 latency (ms) per concurrency, greenroom and the plain loop: one panel
    per event loop and model latency."""
    panels = [
        (backend, latency, [row for row in result["rows"] if row["latency_ms"] == latency])
        for backend, result in results.items()
        for latency in sorted({row["latency_ms"] for row in result["rows"]})
    ]
    height = 60 + 240 * len(panels)
    canvas = Canvas(WIDTH, height)
    canvas.text(90, 12, "GREENROOM CHAT: LATENCY (MS) PER CONCURRENT CONVERSATIONS")
    for index, (backend, latency, rows) in enumerate(panels):
        top = 90 + 240 * index
        x_max = _nice(max(row["concurrency"] for row in rows))
        series: list[Series] = [
            (f"{who} {p}", colour, [(row["concurrency"], row[who][p] * 1000) for row in rows])
            for who, p, colour in (
                ("greenroom", "p50", BLUE),
                ("greenroom", "p99", PURPLE),
                ("plain", "p50", ORANGE),
                ("plain", "p99", GREEN),
            )
        ]
        lines(canvas, (90, top, WIDTH - 40, top + 170), series, f"{backend} {latency}MS", x_max)
    return canvas


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


Bars = list[tuple[float | None, tuple[int, int, int]]]


def _bar_chart(title: str, items: list[tuple[str, Bars]], legend: str = "") -> Canvas:
    """One row per item: its label, then each of its bars (a value and a colour; ``None``:
    no bar), on one scale from 0, with 1.0x marked."""
    bars_per_row = max(len(bars) for _, bars in items)
    bar, row = (16, 22) if bars_per_row == 1 else (14, 18 * bars_per_row + 4)
    left = min(max(len(label) for label, _ in items) * 12 + 20, WIDTH // 2) + 10
    right = WIDTH - 80
    top = 60 if legend else 50
    canvas = Canvas(WIDTH, top + 20 + row * len(items) + 40)
    canvas.text(10, 12, title)
    if legend:
        canvas.text(10, 32, legend)
    values = [value for _, bars in items for value, _ in bars if value is not None]
    scale = _nice(max(max(values), 1.0) * 1.05)
    one = left + round((right - left) / scale)
    for index, (label, bars) in enumerate(items):
        y = top + row * index
        canvas.text(10, y + 3 + (row - 22) // 2, label[: (left - 20) // 12])
        for place, (value, colour) in enumerate(bars):
            if value is None:
                continue
            bar_y = y + place * 18
            width = round((right - left) * max(value, 0.0) / scale)
            for dy in range(bar):
                canvas.line(left, bar_y + dy, left + width, bar_y + dy, colour)
            canvas.text(left + width + 6, bar_y + 3, f"{value:.2f}X")
    bottom = top + row * len(items)
    canvas.line(left, top - 4, left, bottom, BLACK)
    canvas.line(one, top - 4, one, bottom, BLACK)
    canvas.text(one - 24, bottom + 6, "1.0X")
    return canvas


_LOOP_COLOURS = {"asyncio": BLUE, "trio": ORANGE}


def ratio_chart(title: str, found: list[tuple[str, str, float]]) -> Canvas:
    """One bar per ratio (coloured by event loop), on one scale, with 1.0x marked."""
    items: list[tuple[str, Bars]] = [
        (f"{backend} {name}".strip(), [(value, _LOOP_COLOURS.get(backend, PURPLE))])
        for backend, name, value in found
    ]
    return _bar_chart(title, items)


def compare_chart(
    title: str, before: list[tuple[str, str, float]], after: list[tuple[str, str, float]]
) -> Canvas:
    """Each ratio of ``after`` under the same one of ``before`` (grey; absent: no bar)."""
    old = {(backend, name): value for backend, name, value in before}
    items: list[tuple[str, Bars]] = [
        (
            f"{backend} {name}".strip(),
            [(old.get((backend, name)), GREY), (value, _LOOP_COLOURS.get(backend, PURPLE))],
        )
        for backend, name, value in after
    ]
    return _bar_chart(title, items, legend="GREY: BEFORE   COLOUR: AFTER")


def draw_comparison(before: Any, after: Any, suite: str = "") -> bytes:
    """The PNG of ``after``'s ratios beside ``before``'s (two results of one suite)."""
    found = ratios(_by_backend(after))
    if not found:
        raise InvalidInput("nothing to compare: the file holds no ratio ('...ratio...', '..._vs_...')")
    title = f"GREENROOM {suite}: RATIOS BEFORE AND AFTER".replace("  ", " ")
    return compare_chart(title, ratios(_by_backend(before)), found).png()


def _by_backend(document: Any) -> dict[str, dict[str, Any]]:
    if not isinstance(document, dict) or not document:
        raise InvalidInput(f"a benchmark result is a JSON object, not {type(document).__name__}")
    if all(key in ("asyncio", "trio") and isinstance(value, dict) for key, value in document.items()):
        return document
    return {str(document.get("backend", "")): document}


def draw(document: Any, suite: str = "") -> bytes:
    """The PNG for a benchmark's JSON result (see the module docstring). Raises
    :class:`InvalidInput` when it holds nothing to draw."""
    results = _by_backend(document)
    first = next(iter(results.values()))
    if "curve" in first:
        return soak_chart(first).png()
    if "rows" in first and all(isinstance(row, dict) and "concurrency" in row for row in first["rows"]):
        return chat_chart(results).png()
    found = ratios(results)
    if not found:
        raise InvalidInput(
            "nothing to plot: no 'curve' (soak), no 'rows' by concurrency (chat) and no ratio "
            "(a number named '...ratio...' or '..._vs_...')"
        )
    return ratio_chart(f"GREENROOM {suite}: RATIOS AGAINST IN-RUN BASELINES".replace("  ", " "), found).png()
