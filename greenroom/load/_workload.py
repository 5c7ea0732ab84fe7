"""``Workload``: what one virtual user's agent session looks like — turns, lengths in
tokens, think time, the tools it calls — from a small file or a preset."""

from __future__ import annotations

import json
import random
import tomllib
from pathlib import Path
from typing import Any, Literal

import msgspec

from .._errors import InvalidInput
from ._dist import Dist, as_dist, fixed
from ._tools import McpServer, python_tool


class SyntheticTool(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A tool the sessions offer and really run: it takes ``latency_s`` (drawn per call)
    and answers ``result_tokens`` tokens of text."""

    name: str
    description: str = ""
    latency_s: Dist = fixed(0.05)
    result_tokens: Dist = fixed(100)


class Workload(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """One session: ``turns`` user messages of ``prompt_tokens`` each, a shared system
    prompt of ``system_prompt_tokens`` (the same text in every session, so a server's
    prefix cache meets it as real traffic), each answered by up to ``output_tokens``
    (the request's ``max_tokens``); when the model calls ``tools`` they run and it is asked
    again (at most ``max_tool_rounds`` times a turn); ``think_s`` between a reply and the
    next message. The context grows: every turn carries the ones before it."""

    name: str = "custom"
    system_prompt_tokens: int = 0
    turns: Dist = fixed(3)
    prompt_tokens: Dist = fixed(100)
    output_tokens: Dist = fixed(100)
    think_s: Dist = fixed(0)
    tools: tuple[SyntheticTool, ...] = ()
    tool_choice: Literal["auto", "required"] = "auto"
    max_tool_rounds: int = 3
    python_tools: tuple[str, ...] = ()
    """Your own tools, ``"package.module:function"`` (or a ``greenroom.harness.Tool``
    there), offered and run beside the synthetic ones (importable wherever the load runs)."""
    mcp: tuple[McpServer, ...] = ()
    """MCP servers whose tools are offered and really called."""


_DIST_FIELDS = ("turns", "prompt_tokens", "output_tokens", "think_s")
_FIELDS = {
    "name", "system_prompt_tokens", "tools", "tool_choice", "max_tool_rounds", "python_tools", "mcp",
    *_DIST_FIELDS,
}  # fmt: skip
_TOOL_FIELDS = {"name", "description", "latency_s", "result_tokens"}


def workload_from(raw: object, where: str = "workload") -> Workload:
    """A ``Workload`` from a decoded file (a table); ``InvalidInput`` naming the field and
    the value of the first thing wrong."""
    if not isinstance(raw, dict):
        raise InvalidInput(f"{where} must be a table of fields, got {raw!r:.80}", field=where)
    fields: dict[str, Any] = {}
    for key, value in raw.items():
        field = f"{where}.{key}"
        if key not in _FIELDS:
            raise InvalidInput(f"{field} is not a workload field ({', '.join(sorted(_FIELDS))})", field=field)
        try:
            if key in _DIST_FIELDS:
                fields[key] = as_dist(value, field)
            elif key == "tools":
                fields[key] = tuple(
                    _tool(item, f"{field}[{index}]") for index, item in enumerate(_list(value, field))
                )
            elif key in ("system_prompt_tokens", "max_tool_rounds"):
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1_000_000:
                    raise ValueError(f"{field} must be a whole number from 0 to 1000000, got {value!r}")
                fields[key] = value
            elif key == "python_tools":
                items = _list(value, field)
                for index, spec in enumerate(items):
                    python_tool(spec, f"{field}[{index}]")  # importable now, not mid-run
                fields[key] = tuple(items)
            elif key == "mcp":
                fields[key] = tuple(
                    _mcp(item, f"{field}[{index}]") for index, item in enumerate(_list(value, field))
                )
            elif key == "tool_choice":
                if value not in ("auto", "required"):
                    raise ValueError(f"{field} must be 'auto' or 'required', got {value!r}")
                fields[key] = value
            else:
                if not isinstance(value, str) or not value.strip():
                    raise ValueError(f"{field} must be a non-empty name, got {value!r}")
                fields[key] = value
        except ValueError as error:
            raise InvalidInput(str(error), field=field, value=value) from None
    return Workload(**fields)


def _list(value: object, field: str) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError(f"{field} must be a list, got {value!r}")
    return value


def _tool(raw: object, field: str) -> SyntheticTool:
    if not isinstance(raw, dict):
        raise ValueError(f"{field} must be a table, got {raw!r}")
    unknown = sorted(set(raw) - _TOOL_FIELDS)
    if unknown:
        raise ValueError(f"{field}.{unknown[0]} is not a tool field ({', '.join(sorted(_TOOL_FIELDS))})")
    name = raw.get("name")
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"{field}.name must be a name made of letters, digits and _, got {name!r}")
    return SyntheticTool(
        name,
        str(raw.get("description", "")),
        as_dist(raw.get("latency_s", 0.05), f"{field}.latency_s"),
        as_dist(raw.get("result_tokens", 100), f"{field}.result_tokens"),
    )


def _mcp(raw: object, field: str) -> McpServer:
    if not isinstance(raw, dict):
        raise ValueError(f"{field} must be a table (command and args, or url), got {raw!r}")
    try:
        server = msgspec.convert(raw, McpServer)
    except msgspec.ValidationError as error:
        raise ValueError(f"{field}: {error}") from None
    return server.check(field)


def load_workload(path: str | Path) -> Workload:
    """A workload file: TOML (``.toml``) or JSON (anything else); ``InvalidInput`` for a
    file that cannot be read or decoded, or a bad field (named, with its value)."""
    where = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise InvalidInput(
            f"--workload {where!r} cannot be read: {error}", field="--workload", value=where
        ) from None
    try:
        raw = tomllib.loads(data.decode()) if where.endswith(".toml") else json.loads(data)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError, UnicodeDecodeError) as error:
        raise InvalidInput(
            f"--workload {where!r} is not valid: {error}", field="--workload", value=where
        ) from None
    return workload_from(raw)


def _d(kind: str, **values: float) -> Dist:
    return Dist(kind, **values)  # type: ignore[arg-type]


PRESETS: dict[str, Workload] = {
    "single": Workload(
        "single", turns=fixed(1), prompt_tokens=fixed(100), output_tokens=fixed(100), think_s=fixed(0)
    ),
    "chat": Workload(
        "chat",
        system_prompt_tokens=200,
        turns=_d("uniform", low=2, high=6),
        prompt_tokens=_d("lognormal", mean=60, sd=30, low=4),
        output_tokens=_d("lognormal", mean=150, sd=60, low=8),
        think_s=_d("exponential", mean=5, high=30),
    ),
    "retrieval": Workload(
        "retrieval",
        system_prompt_tokens=400,
        turns=_d("uniform", low=1, high=4),
        prompt_tokens=_d("lognormal", mean=40, sd=20, low=4),
        output_tokens=_d("lognormal", mean=200, sd=80, low=16),
        think_s=_d("exponential", mean=8, high=60),
        tools=(
            SyntheticTool(
                "search",
                "Search the documents for passages about a query.",
                _d("uniform", low=0.1, high=0.3),
                _d("lognormal", mean=800, sd=300, low=50),
            ),
        ),
    ),
    "tool-heavy": Workload(
        "tool-heavy",
        system_prompt_tokens=600,
        turns=_d("uniform", low=3, high=8),
        prompt_tokens=_d("lognormal", mean=30, sd=15, low=4),
        output_tokens=_d("lognormal", mean=80, sd=40, low=8),
        think_s=_d("exponential", mean=2, high=20),
        tools=(
            SyntheticTool(
                "lookup", "Look a record up by id.", _d("uniform", low=0.01, high=0.05), fixed(120)
            ),
            SyntheticTool(
                "run_job", "Run a job and wait for its output.", _d("uniform", low=0.5, high=2.0), fixed(300)
            ),
            SyntheticTool(
                "fetch_page", "Fetch a web page's text.", _d("lognormal", mean=0.4, sd=0.3), fixed(900)
            ),
        ),
        max_tool_rounds=5,
    ),
    "coding": Workload(
        "coding",
        system_prompt_tokens=2000,
        turns=_d("uniform", low=4, high=10),
        prompt_tokens=_d("lognormal", mean=1500, sd=700, low=50),
        output_tokens=_d("lognormal", mean=400, sd=200, low=32),
        think_s=_d("exponential", mean=4, high=60),
        tools=(
            SyntheticTool(
                "read_file", "Read a file of the repository.", fixed(0.01), _d("lognormal", mean=1200, sd=600)
            ),
            SyntheticTool("run_tests", "Run the test suite.", _d("uniform", low=1, high=5), fixed(400)),
        ),
    ),
}
"""The workloads ``--preset`` names: ``single`` (one streamed request a session: the
serving benchmarks' own workload), ``chat``, ``retrieval``, ``tool-heavy``, ``coding`` (a
coding agent's long, growing context)."""


_WORDS = (
    "able",
    "acid",
    "aged",
    "also",
    "area",
    "army",
    "away",
    "baby",
    "back",
    "ball",
    "band",
    "bank",
    "base",
    "bath",
    "bear",
    "beat",
    "bell",
    "belt",
    "bend",
    "best",
    "bill",
    "bird",
    "blow",
    "blue",
    "boat",
    "body",
    "bomb",
    "bond",
    "bone",
    "book",
    "boom",
    "born",
    "boss",
    "both",
    "bowl",
    "bulk",
    "burn",
    "bush",
    "busy",
    "cake",
    "call",
    "calm",
    "came",
    "camp",
    "card",
    "care",
    "case",
    "cash",
    "cast",
    "cell",
    "chat",
    "chip",
    "city",
    "club",
    "coal",
    "coat",
    "code",
    "cold",
    "come",
    "cook",
    "cool",
    "cope",
    "copy",
    "core",
    "cost",
    "crew",
    "crop",
    "dark",
    "data",
    "date",
    "dawn",
    "days",
    "dead",
    "deal",
    "dean",
    "dear",
    "debt",
    "deep",
    "deny",
    "desk",
)


_POOL_WORDS = 1 << 16
_pool: tuple[str, list[int]] | None = None


def _word_pool() -> tuple[str, list[int]]:
    """A long text of random words (the same in every process) and where each word starts:
    a prompt is a slice of it, so making one costs a slice, not a draw per word."""
    global _pool
    if _pool is None:
        draw = random.Random(0x6C6F6164)
        words = [draw.choice(_WORDS) for _ in range(_POOL_WORDS)]
        starts, at = [], 0
        for word in words:
            starts.append(at)
            at += len(word) + 1
        starts.append(at)
        _pool = (" ".join(words) + " ", starts)
    return _pool


def prepare_text() -> None:
    """Make the word pool now (tens of milliseconds, once a process), so no request due
    later waits for it: a run calls it before its clock starts."""
    _word_pool()


def text_of(tokens: int, rng: random.Random) -> str:
    """About ``tokens`` tokens of text (a short word a token): a stretch of the word pool
    at a place drawn from ``rng`` (so sessions differ, and the same seed gives the same
    text), wrapping around for a text longer than the pool."""
    text, starts = _word_pool()
    tokens = max(1, tokens)
    if tokens >= _POOL_WORDS:
        whole, rest = divmod(tokens, _POOL_WORDS)
        return (text * (whole + 1))[: whole * starts[-1] + starts[rest] - 1]
    first = rng.randrange(_POOL_WORDS - tokens + 1)
    return text[starts[first] : starts[first + tokens] - 1]
