"""``greenroom pipeline run``: inputs through a configured pipeline of stages (spec 004)."""

from __future__ import annotations

import argparse
from typing import Any

import anyio

from . import _args


def add_parsers(commands: Any) -> None:
    pipeline = commands.add_parser("pipeline", help="run inputs through a configured pipeline of stages")
    run = _args.actions(pipeline).add_parser("run", help="each input is an envelope; each stage is shown")
    _args.data_dir(run)
    run.add_argument("path", nargs="?", metavar="PIPELINE.toml")
    run.add_argument(
        "--example", action="store_true", help="the shipped planner -> executor -> critic example"
    )
    run.add_argument("--input", action="append", dest="inputs", metavar="TEXT", help="repeatable")
    run.add_argument("--inputs", dest="inputs_file", metavar="FILE", help="one input per line")
    run.add_argument("--json", action="store_true", help="one JSON object per envelope")
    _args.store(run, "the events in this PostgreSQL database")
    run.set_defaults(handler=run_pipeline)


def run_pipeline(args: argparse.Namespace) -> int:
    from . import _pipeline

    return anyio.run(
        lambda: _pipeline.run_pipeline(
            path=args.path,
            example=args.example,
            inputs=args.inputs,
            inputs_file=args.inputs_file,
            data_dir=args.data_dir,
            as_json=args.json,
            store=args.store,
        )
    )
