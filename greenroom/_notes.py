"""``NoteLog``: steps a process keeps at once, one ``O_APPEND`` line each, for the next
process on the same data dir to fold into its step store.

A harness notes a writing call's release and its result from its own task, the moment
they happen (``StepStore.note``): one ``write`` of one line — the kernel has it once the
call returns, so a SIGKILL cannot lose it (a power loss can, until the journal's sync) —
with no batch of other tasks' steps to wait behind. The step store also writes the step
the usual way; the log only matters when the process dies first. The next process on the
data dir folds the log into its store before its first read; a running one folds when the
log grows past :data:`FOLD_AT` (set aside by a rename between two notes, written, removed).

Used on the event loop's thread only (each call a system call or two: no thread hop).
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from ._errors import storage_error
from .store import Step, encoded_body

FOLD_AT = 1 << 20
"""Bytes of notes past which a running process folds them into its store."""

_Line = tuple[str, str, str, str, str, int, float, int]


class NoteLog:
    """The notes of one data dir's step store, in ``path`` (see the module doc)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.aside = path.with_name(path.name + ".folding")
        """Notes set aside to be folded (a fold cut short leaves them: folded first)."""
        self._fd: int | None = None
        self.size = 0
        """Bytes noted since the log was last set aside."""

    def append(self, step: Step) -> None:
        """Note ``step``: one ``write`` (a line whole or not at all). ``StorageError``
        naming the file if it cannot be written."""
        line: _Line = (
            step.task_id,
            step.key,
            step.kind,
            step.fingerprint,
            encoded_body(step).decode(),
            step.attempt,
            step.at,
            step.token,
        )
        data = msgspec.json.encode(line) + b"\n"
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            os.write(self._fd, data)
        except OSError as error:
            raise storage_error(self.path, error) from None
        self.size += len(data)

    def set_aside(self) -> Path | None:
        """The notes to fold now: the log, renamed aside (the next note starts a fresh
        one) — or what an earlier fold left aside, the log staying for the next fold.
        ``None``: nothing to fold."""
        if self.aside.exists():
            return self.aside
        self.close()
        try:
            os.replace(self.path, self.aside)
        except FileNotFoundError:
            return None
        self.size = 0
        return self.aside

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


FACTS = frozenset({"tool_released", "tool_running"})
"""Notes that say an effect may have started: folded in whatever became of their attempt
(unfenced — their token is dropped), since leaving one out would let the call run again.
A result noted by a stale attempt is refused as any stale write (then asked about)."""


def read_notes(path: Path) -> list[Step]:
    """The steps noted in ``path`` (a file set aside), in the order noted, those in
    :data:`FACTS` without their token; a last line a crash cut short is skipped.
    Blocking: for a worker thread."""
    steps = []
    for line in path.read_bytes().split(b"\n"):
        try:
            task_id, key, kind, fingerprint, body, attempt, at, token = msgspec.json.decode(line)
        except (msgspec.DecodeError, ValueError):
            continue
        steps.append(
            Step(
                task_id=task_id,
                key=key,
                kind=kind,
                fingerprint=fingerprint,
                encoded=body.encode(),
                attempt=attempt,
                at=at,
                token=0 if kind in FACTS else token,
            )
        )
    return steps
