"""Plot a long soak's RSS and bytes on disk against tasks processed, as a PNG:
``python benchmarks/plot_soak.py soak.json docs/soak.png``.

``soak.json`` is what ``greenroom bench soak --tasks N --json`` prints (its ``curve``:
tasks, RSS MB and disk MB at each hundredth of the run). Pure Python (zlib and a 5x7
bitmap font), so it needs nothing the project does not install.
"""

from __future__ import annotations

import json
import struct
import sys
import zlib
from pathlib import Path

WIDTH, HEIGHT = 960, 560
WHITE, BLACK, GREY = (255, 255, 255), (40, 40, 40), (215, 215, 215)
BLUE, ORANGE = (31, 99, 180), (214, 104, 24)

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


def panel(canvas: Canvas, box: tuple[int, int, int, int], points: list[tuple[float, float]], title: str,
          colour: tuple[int, int, int], x_max: float) -> None:  # fmt: skip
    left, top, right, bottom = box
    y_max = _nice(max(y for _, y in points) * 1.1)
    for k in range(6):  # grid and the y axis's labels
        y = bottom - (bottom - top) * k // 5
        canvas.line(left, y, right, y, GREY)
        canvas.text(left - 70, y - 7, f"{y_max * k / 5:.0f}")
    for k in range(11):
        x = left + (right - left) * k // 10
        canvas.line(x, top, x, bottom, GREY)
        value = x_max * k / 10
        label = f"{value / 1e6:.3g}M" if value >= 1e6 else f"{value / 1000:.3g}K" if value else "0"
        canvas.text(x - 6 * len(label), bottom + 8, label)
    canvas.line(left, bottom, right, bottom, BLACK)
    canvas.line(left, top, left, bottom, BLACK)
    canvas.text(left, top - 24, title, colour)
    previous = None
    for tasks, value in points:
        x = left + round((right - left) * min(tasks, x_max) / x_max)  # the last may pass the target
        here = (x, bottom - round((bottom - top) * value / y_max))
        if previous is not None:
            canvas.line(*previous, *here, colour, width=2)
        previous = here


def plot(figures: dict, out: Path) -> None:
    curve = figures["curve"]
    x_max = float(figures.get("tasks_target") or _nice(max(point[0] for point in curve)))
    canvas = Canvas(WIDTH, HEIGHT)
    canvas.text(
        90, 12, f"GREENROOM SOAK: {figures['tasks_target']:,} TASKS, {figures['backend']}".replace(",", " ")
    )
    panel(canvas, (90, 70, WIDTH - 40, 250), [(p[0], p[1]) for p in curve], "DAEMON RSS (MB)", BLUE, x_max)
    panel(
        canvas, (90, 320, WIDTH - 40, 500), [(p[0], p[2]) for p in curve], "BYTES ON DISK (MB)", ORANGE, x_max
    )
    canvas.text(WIDTH // 2 - 100, HEIGHT - 30, "TASKS PROCESSED")
    out.write_bytes(canvas.png())


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    document = json.loads(Path(argv[0]).read_text())
    figures = next(iter(document.values())) if "curve" not in document else document  # per event loop
    if "curve" not in figures:
        print(f"{argv[0]}: no 'curve' (run greenroom bench soak --tasks N --json)", file=sys.stderr)
        return 2
    plot(figures, Path(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
