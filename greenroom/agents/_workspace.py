"""Agent workspaces: ``<agents folder>/<agent name>/{artifacts,logs,memory}`` (spec 003, 2.3).

A name can never reach outside the agents folder: an agent name with a path
separator, ``..``, a leading ``.``, a NUL or an absolute path is refused; an artifact
name is sanitised to letters, digits, ``_`` and ``-``.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from pathlib import Path

from .._errors import InvalidInput

WORKSPACE_DIRS = ("artifacts", "logs", "memory")

_UNSAFE = re.compile(r"[^\w\-]")
_SUFFIX = re.compile(r"(\.[A-Za-z0-9_-]{1,16}){0,3}")


def check_agent_name(owner: str, name: object) -> str:
    """A name usable as one directory: ``ValueError`` naming the value otherwise."""
    if (
        not isinstance(name, str)
        or not name
        or len(name) > 100
        or name != name.strip()
        or name.startswith(".")
        or any(ch in name for ch in ("/", "\\", "\0", ":"))
    ):
        raise InvalidInput(
            f"{owner} name must be 1-100 characters with no path separator, ':' or NUL, "
            f"not starting with '.' or padded, got {name!r}",
            field="name",
            value=name,
        )
    return name


def ensure_agent_workspace(name: str, agents_folder: Path) -> Path:
    """Create (if absent) and return ``<agents_folder>/<name>`` and its subfolders."""
    root = agents_folder / check_agent_name("agent workspace", name)
    # resolved, the root must still sit directly in the agents folder (a symlinked
    # agent directory pointing elsewhere is refused, too)
    if root.resolve().parent != agents_folder.resolve():
        raise InvalidInput(
            f"agent workspace {root} resolves outside {agents_folder}", field="workspace", value=str(root)
        )
    for sub in WORKSPACE_DIRS:
        (root / sub).mkdir(parents=True, exist_ok=True)
    return root


def artifact_filename(name: str, suffix: str = ".md", *, now: datetime | None = None) -> str:
    """``<safe name>_<YYYYMMDD_HHMMSS><suffix>`` (UTC). Everything but letters, digits,
    ``_`` and ``-`` becomes ``_``, and leading/trailing ``_`` are stripped; a name with
    nothing left, or a suffix that is not like ``.md`` / ``.tar.gz``, is refused."""
    if not isinstance(name, str):
        raise InvalidInput(f"artifact name must be a string, got {name!r}", field="name")
    if not isinstance(suffix, str) or not _SUFFIX.fullmatch(suffix):
        raise InvalidInput(
            f"artifact suffix must look like '.md' or '.tar.gz' (or be empty), got {suffix!r}", field="suffix"
        )
    safe_name = _UNSAFE.sub("_", name).strip("_")
    if not safe_name:
        raise InvalidInput(f"artifact name has no usable characters, got {name!r}", field="name", value=name)
    timestamp = (now or datetime.now(UTC)).strftime("%Y%m%d_%H%M%S")
    return f"{safe_name}_{timestamp}{suffix}"
