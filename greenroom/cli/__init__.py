"""The ``greenroom`` command.

greenroom --version                       greenroom --debug COMMAND ...   (tracebacks of bugs)
greenroom run [--data-dir D] [--config F] [--until-idle] [--seed-example [N]] [--backend B]
              [--listen HOST:PORT | --no-api]
greenroom tasks add (--file F | --type T [--id ID] [--priority N] [--input JSON] [--depends-on ID ...])
greenroom tasks list [--status S] [--type T] [--json]      greenroom tasks show ID [--json]
greenroom tasks cancel ID [--reason TEXT]                  greenroom status [--json]    greenroom stop
greenroom tasks retry ID [--reason TEXT]
greenroom events tail [--follow] [--after SEQ] [--last N] [--json]
greenroom tokens add --user U --scope chat|tasks|metrics|admin   greenroom tokens list | revoke ID
greenroom chat [--user U] [--conversation ID] [--message TEXT ...] [--base-url URL --model M] [--store URL]
               [--max-tokens N] [--temperature T] [--context-window N] [--backend B]
greenroom mcp serve                                         (the task tools, MCP over stdio)
greenroom pipeline run (PIPELINE.toml | --example) (--input TEXT ... | --inputs FILE) [--json]

The data dir defaults to $STREAMING_LLM_DATA_DIR, else ~/.local/share/greenroom. The
tasks, events, status and stop commands go through the API of the daemon serving the data
dir when one runs, and work on the files when none does (same output); --url and --token
(or $GREENROOM_TOKEN) reach a daemon elsewhere.

Exit codes: 0 done; 1 an error the user can act on (bad input, a busy or damaged data
dir, an OS error such as a read-only or full disk), said in one line; 2 a bad flag;
70 a bug in greenroom (one line; the traceback with --debug); 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .. import __version__
from . import _cmd_budgets, _cmd_chat, _cmd_load, _cmd_pipeline, _cmd_run, _cmd_tasks, _cmd_tokens
from ._errors import report_error

__all__ = ["main", "report_error"]

GROUPS = (_cmd_run, _cmd_tasks, _cmd_budgets, _cmd_tokens, _cmd_chat, _cmd_pipeline, _cmd_load)
"""The command groups, one module each: ``add_parsers(commands)`` describes its commands
and sets each one's ``handler``; a handler imports what it needs when it runs."""


def _parser() -> argparse.ArgumentParser:
    """The command line's parser: every command group's (greenroom's own benchmarks are not
    a command: they are ``python -m benchmarks`` in the repository)."""
    parser = argparse.ArgumentParser(
        prog="greenroom", description=__doc__.split("\n")[0] if __doc__ else None
    )
    parser.add_argument("--version", action="version", version=f"greenroom {__version__}")
    parser.add_argument(
        "--debug", action="store_true", help="show the traceback when greenroom fails with a bug"
    )
    parser.set_defaults(handler=None)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for group in GROUPS:
        group.add_parsers(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` names (default: ``sys.argv[1:]``); return its exit code."""
    return run(_parser(), sys.argv[1:] if argv is None else list(argv))


def run(parser: argparse.ArgumentParser, words: list[str]) -> int:
    """Parse ``words`` with ``parser`` and run the ``handler`` it set; its exit code: 2 for a
    bad flag or no command, 130 interrupted, else what :func:`report_error` says of an
    error (``--debug`` or ``$GREENROOM_DEBUG``: with the traceback of a bug)."""
    args = parser.parse_args(words)
    if args.handler is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        code: int = args.handler(args)
        return code
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # the one place an error becomes an exit code (nothing awaits here)
        debug = getattr(args, "debug", False) or bool(os.environ.get("GREENROOM_DEBUG"))
        return report_error(error, debug=debug)
