"""What the commands print and parse: task flags and files, tables, JSON, event lines.

Light on purpose (msgspec and the messages): ``tasks list`` and ``status`` import this and
nothing of the runtime's actors, the API server or the agents.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec

from .._errors import InvalidInput
from ..messages import AgentTask, Event, TaskStatus, convert


class CommandError(InvalidInput):
    """A failure to report as ``greenroom: error: ...`` with exit code 1."""


# -- greenroom tasks ----------------------------------------------------------------------


def parse_task_flags(
    *,
    task_type: str,
    task_id: str | None,
    priority: int,
    input_json: str | None,
    depends_on: list[str],
    max_attempts: int,
) -> AgentTask:
    raw: dict[str, Any] = {
        "id": task_id or f"task-{uuid.uuid4().hex[:12]}",
        "type": task_type,
        "priority": priority,
        "depends_on": depends_on,
        "max_attempts": max_attempts,
    }
    if input_json is not None:
        try:
            raw["input"] = json.loads(input_json)
        except json.JSONDecodeError as error:
            raise CommandError(f"--input is not valid JSON ({error.msg}) (got {input_json!r:.80})") from None
        except RecursionError:
            raise CommandError(f"--input is nested too deeply (got {input_json!r:.80})") from None
    try:
        return convert(raw, AgentTask, "task")
    except RecursionError:
        raise CommandError("--input is nested too deeply") from None


def parse_task_file(path: str) -> list[AgentTask]:
    try:
        data = Path(path).read_bytes()
    except OSError as error:
        raise CommandError(f"cannot read {path!r}: {error.strerror or error}") from None
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError as error:
        raise CommandError(f"{path!r} is not valid JSON: {error}") from None
    except RecursionError:
        raise CommandError(f"{path!r} is nested too deeply") from None
    if isinstance(raw, dict):
        raw = raw.get("tasks", raw)
    if not isinstance(raw, list):
        raise CommandError(f'{path!r}: expected a JSON list of tasks (or {{"tasks": [...]}})')
    try:
        return convert(raw, list[AgentTask], f"task file {path!r}")
    except RecursionError:
        raise CommandError(f"{path!r} is nested too deeply") from None


def task_table(tasks: list[AgentTask]) -> str:
    rows = [("ID", "TYPE", "STATUS", "PRI", "ATTEMPT", "OWNER")]
    for task in sorted(tasks, key=lambda t: t.order):
        rows.append(
            (task.id, task.type, task.status.value, str(task.priority), f"{task.attempt}/{task.max_attempts}",
             task.owner or "-")
        )  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows
    )


def to_json(value: Any) -> str:
    return msgspec.json.format(msgspec.json.encode(value).decode(), indent=2)


# -- greenroom events tail ----------------------------------------------------------------


def format_event(event: Event) -> str:
    when = time.strftime("%H:%M:%S", time.localtime(event.ts))
    who = f" {event.agent_id}" if event.agent_id else ""
    task = f" [{event.task_id}]" if event.task_id else ""
    payload = json.dumps(event.payload, separators=(",", ":"), sort_keys=True)
    if len(payload) > 160:
        payload = payload[:157] + "..."
    return f"{event.seq:>7} {when} {event.visibility:<8} {event.type}{task}{who} {payload}"


def decode_status(text: str) -> TaskStatus:
    try:
        return TaskStatus(text.upper())
    except ValueError:
        names = ", ".join(s.value for s in TaskStatus)
        raise CommandError(f"--status must be one of {names} (got {text!r})") from None
