"""The ``greenroom`` command.

greenroom --version
greenroom bench actors [--backend asyncio|trio|both] [--runs N] [--workload NAME ...] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from . import __version__


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    from .bench.actors import WORKLOADS

    parser = argparse.ArgumentParser(
        prog="greenroom", description=__doc__.split("\n")[0] if __doc__ else None
    )
    parser.add_argument("--version", action="version", version=f"greenroom {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    bench = commands.add_parser("bench", help="run a benchmark against in-run baselines")
    suites = bench.add_subparsers(dest="suite", metavar="SUITE")
    actors = suites.add_parser("actors", help="Savina-style actor workloads vs plain queues")
    actors.add_argument("--backend", choices=["asyncio", "trio", "both"], default="both")
    actors.add_argument("--runs", type=_positive_int, default=5, help="timed runs per figure (median)")
    actors.add_argument(
        "--workload", action="append", choices=WORKLOADS, dest="workloads", help="only these (repeatable)"
    )
    actors.add_argument("--json", action="store_true", help="print the figures as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.command != "bench" or getattr(args, "suite", None) != "actors":
        parser.print_help(sys.stderr)
        return 2
    from .bench import actors

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
