"""``greenroom load``: agent sessions as load against any OpenAI-compatible server."""

from __future__ import annotations

import argparse
from typing import Any

from . import _args


def add_parsers(commands: Any) -> None:
    load = commands.add_parser(
        "load", help="drive agent sessions against an OpenAI-compatible server and measure it"
    )
    load.add_argument("--base-url", help="the server (default: $OPENAI_BASE_URL); the key: $OPENAI_API_KEY")
    load.add_argument("--model", dest="model_name", help="the model name there (default: $OPENAI_MODEL)")
    arrivals = load.add_mutually_exclusive_group()
    arrivals.add_argument(
        "--concurrency",
        type=_args.int_between(1, 1_000_000),
        help="a closed loop: this many sessions at once",
    )
    arrivals.add_argument(
        "--rate", type=_args.positive_float, help="an open loop: sessions started per second"
    )
    load.add_argument(
        "--pattern", choices=["poisson", "bursty", "uniform"], default="poisson",
        help="how open-loop sessions arrive (default poisson)",
    )  # fmt: skip
    load.add_argument(
        "--ramp-up", type=_args.seconds_or_zero, default=0.0, help="seconds the rate climbs from 0"
    )
    load.add_argument(
        "--sessions", type=_args.int_between(1, 100_000_000), help="end after this many sessions"
    )
    load.add_argument("--duration", type=_args.seconds, help="end after this many seconds")
    shapes = load.add_mutually_exclusive_group()
    shapes.add_argument("--workload", metavar="FILE", help="the sessions' shape: a TOML or JSON file")
    shapes.add_argument("--preset", help="a named workload: single, chat, retrieval, tool-heavy, coding")
    load.add_argument(
        "--replay",
        metavar="TRACE.jsonl",
        help="send a recorded JSONL trace again, with its shapes and timing",
    )
    load.add_argument(
        "--replay-journal", action="store_true",
        help="send the step journals of --data-dir (or --store) again: their model calls' sizes and timing",
    )  # fmt: skip
    load.add_argument(
        "--on-daemons", action="store_true",
        help="run the sessions as tasks on the daemons of --data-dir / --store (their [agents.load] "
        "pools), several machines sharing PostgreSQL; one report from every daemon's records",
    )  # fmt: skip
    load.add_argument(
        "--run", dest="run_name", metavar="NAME", help="--on-daemons: the run's name (default: made up)"
    )
    _args.data_dir(load)
    _args.store(load, "--on-daemons: the daemons' PostgreSQL database; --replay-journal: read it there")
    load.add_argument(
        "--speed", type=_args.positive_float, default=1.0, help="replay this many times as fast"
    )
    load.add_argument(
        "--seed", type=_args.int_between(0, 2**31), default=0, help="the same seed, the same run"
    )
    load.add_argument(
        "--client", choices=["greenroom", "openai"], default="greenroom", help="the HTTP client"
    )
    load.add_argument(
        "--timeout", type=_args.seconds, default=300.0, help="seconds of silence a request may take"
    )
    load.add_argument(
        "--slo-ttft-ms", type=_args.positive_float, help="goodput: a request's TTFT at most this"
    )
    load.add_argument("--slo-itl-ms", type=_args.positive_float, help="goodput: its largest gap at most this")
    load.add_argument(
        "--slo-session-s", type=_args.positive_float, help="goodput: a session done within this"
    )
    load.add_argument(
        "--sweep", metavar="LOW:HIGH", type=_rates,
        help="find the highest rate (sessions/s) in LOW..HIGH meeting the --slo-* objectives",
    )  # fmt: skip
    load.add_argument(
        "--step-duration", type=_args.seconds, default=60.0, help="seconds of load per rate the sweep tries"
    )
    load.add_argument(
        "--compare", nargs="+", metavar="REPORT.json",
        help="no load: one --html page comparing earlier runs' --json reports (latency and throughput "
        "against the concurrency and the rate)",
    )  # fmt: skip
    load.add_argument("--csv", metavar="FILE", help="write a row per request to FILE")
    load.add_argument("--html", metavar="FILE", help="write a self-contained report with charts to FILE")
    load.add_argument("--json", action="store_true", help="print the report as JSON")
    load.add_argument("--quiet", action="store_true", help="no progress line")
    load.add_argument(
        "--processes", type=_args.int_between(1, 1024),
        help="generator processes sharing the run's schedule (default: this machine's cores); "
        "the same --seed gives the same sessions whatever the number",
    )  # fmt: skip
    load.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    load.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from ._load import run_command

    return run_command(args)


def _rates(text: str) -> tuple[float, float]:
    low, _, high = text.partition(":")
    try:
        bounds = (float(low), float(high))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be LOW:HIGH sessions per second, got {text!r}") from None
    if not 0 < bounds[0] < bounds[1] < 1e9:
        raise argparse.ArgumentTypeError(f"must be LOW:HIGH with 0 < LOW < HIGH, got {text!r}")
    return bounds
