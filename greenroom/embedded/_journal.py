"""``GraphFiles``: the embedded task graph on disk, a snapshot plus an fsynced journal.

``tasks.graph.json`` is a snapshot ``{"format", "seq", "tasks"}``; ``tasks.graph.journal``
holds one JSON line per committed batch, ``{"seq", "tasks": [changed tasks]}``. The
graph is the snapshot with every journal batch of a higher ``seq`` laid over it, task
by task. A batch is durable once its line is fsynced, so a reply sent after
:meth:`append` never loses its change. When the journal outgrows the snapshot, the
snapshot is rewritten (temp file, fsync, rename, fsync of the dir) and the journal
emptied; a crash between the two leaves batches the new snapshot already holds,
which the ``seq`` skips. A torn end of the journal (a crash mid-write: bytes after the
last newline) is cut off when the owner loads, and reported; a read-only load skips it and
changes nothing. A complete line that does not validate is never cut: it stops the load,
naming the line, with the files untouched (it is damage to look at, not a torn write).

All methods block: the file task store calls them in a worker thread (``anyio.to_thread``,
or ``_threads.run_blocking`` for the commit).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import msgspec

from .._errors import DataError, storage_error
from .._files import (
    append_durably,
    open_for_append,
    read_lines,
    replace_durably,
    truncate_durably,
)
from ..messages import AgentTask, GraphEvent, RecordError, TaskStatus
from ..messages._codec import decode_json, prepare_types
from ..store import find_cycle
from ._outbox import OutboxBatch

logger = logging.getLogger("greenroom.supervisor")


class GraphFileError(DataError):
    """The task graph on disk cannot be loaded; the files were left exactly as found."""


FORMAT = "greenroom.tasks/1"
GRAPH_FILE = "tasks.graph.json"

ArchiveLookup = Callable[[list[str]], dict[str, TaskStatus]]
"""Task ids -> the final status of those that are archived (a blocking call)."""
JOURNAL_FILE = "tasks.graph.journal"


class PendingEvents(msgspec.Struct, forbid_unknown_fields=True):
    """Outbox events of batch ``seq`` (from position ``first``) the event log had not
    confirmed when the journal holding them was folded into the snapshot."""

    seq: int
    first: int
    events: list[GraphEvent]


class GraphFile(msgspec.Struct, forbid_unknown_fields=True):
    format: str
    seq: int
    tasks: list[AgentTask]
    outbox: list[PendingEvents] = []


class JournalBatch(msgspec.Struct, forbid_unknown_fields=True):
    seq: int
    tasks: list[AgentTask]
    events: list[GraphEvent] = []
    """The events these transitions caused (the outbox): the event log follows the
    journal, so a transition and its events are one durable fact."""
    archived: list[str] = []
    """Finished tasks that left the graph for the archive (written there first)."""


class LoadReport(msgspec.Struct):
    journal_batches: int = 0
    torn_bytes: int = 0
    """Bytes cut off the end of the journal: the remains of a write a crash interrupted."""


_encoder = msgspec.json.Encoder()
prepare_types(GraphFile, JournalBatch)  # decoded in worker threads


class GraphFiles:
    """``tasks.graph.json`` and ``tasks.graph.journal`` of one data dir."""

    def __init__(self, data_dir: Path, *, compact_min_bytes: int = 1 << 20) -> None:
        self.data_dir = data_dir
        self.graph_path = data_dir / GRAPH_FILE
        self.journal_path = data_dir / JOURNAL_FILE
        self.compact_min_bytes = compact_min_bytes
        self.seq = 0
        self.snapshot_bytes = 0
        self.journal_bytes = 0
        self.outbox: list[OutboxBatch] = []
        self.archived_deps: dict[str, TaskStatus] = {}
        """The final status of the archived tasks live ones depend on (as loaded)."""
        """The outbox as loaded: the snapshot's unconfirmed events, then the events of
        every journal batch (the supervisor sends the log what it lacks)."""
        self._fd: int | None = None

    # -- loading ----------------------------------------------------------------------

    def load(
        self, *, owner: bool = True, archived: ArchiveLookup | None = None
    ) -> tuple[list[AgentTask], LoadReport]:
        """Read snapshot and journal. Raises :class:`GraphFileError` naming the file and
        the problem; then nothing on disk has been changed. Only the ``owner`` (the
        process holding the graph's lock) cuts a torn journal end and removes an
        interrupted compaction's temp file; ``owner=False`` never writes.

        ``archived``: how to find the final status of archived tasks that live ones
        depend on (a dependency in neither is damage); kept in ``archived_deps``."""
        report = LoadReport()
        tasks: dict[str, AgentTask] = {}
        seq = 0
        try:
            data = self.graph_path.read_bytes()
        except FileNotFoundError:
            data = None
        except OSError as error:
            raise GraphFileError(f"cannot read {self.graph_path}: {error.strerror or error}") from None
        if data is not None:
            try:
                snapshot = decode_json(data, GraphFile, "task graph")
            except RecordError as error:
                raise GraphFileError(f"{self.graph_path} is not a valid task graph: {error}") from None
            if snapshot.format != FORMAT:
                raise GraphFileError(
                    f"{self.graph_path}: unsupported format {snapshot.format!r} (expected {FORMAT!r})"
                )
            seq = snapshot.seq
            self.outbox = [OutboxBatch(p.seq, p.first, p.events) for p in snapshot.outbox if p.events]
            for task in snapshot.tasks:
                if task.id in tasks:
                    raise GraphFileError(f"{self.graph_path}: task id {task.id!r} appears twice")
                tasks[task.id] = task
            self.snapshot_bytes = len(data)
        try:
            lines, good_end, tail = read_lines(self.journal_path)
        except OSError as error:
            raise GraphFileError(f"cannot read {self.journal_path}: {error.strerror or error}") from None
        torn = len(tail)
        for number, line in enumerate(lines, 1):
            try:
                batch = decode_json(line, JournalBatch, "journal batch")
            except RecordError as error:
                raise GraphFileError(
                    f"{self.journal_path}, line {number}: {error} (a complete line, so not a torn "
                    "write; nothing was changed: restore the file or remove the line by hand)"
                ) from None
            if batch.seq <= seq:
                continue  # already in the snapshot (a crash between compaction's two steps)
            if batch.seq != seq + 1:
                raise GraphFileError(
                    f"{self.journal_path}, line {number}: batch {batch.seq} follows batch {seq}; "
                    f"batches are missing (is {self.graph_path.name} missing or older than the journal?)"
                )
            seq = batch.seq
            report.journal_batches += 1
            for task in batch.tasks:
                tasks[task.id] = task
            for task_id in batch.archived:
                tasks.pop(task_id, None)
            if batch.events:
                self.outbox.append(OutboxBatch(batch.seq, 0, batch.events))
        missing = sorted({dep for task in tasks.values() for dep in task.depends_on} - tasks.keys())
        self.archived_deps = archived(missing) if archived is not None and missing else {}
        check_loaded_graph(tasks, self.graph_path, self.archived_deps)
        if torn and owner:
            logger.warning(
                "%s: cut %d bytes of a torn last batch (a write interrupted by a crash; it was never "
                "acknowledged)",
                self.journal_path,
                torn,
            )
            truncate_durably(self.journal_path, good_end)
        report.torn_bytes = torn
        self.seq = seq
        self.journal_bytes = good_end
        leftover = self.graph_path.with_name(self.graph_path.name + ".tmp")
        if owner and leftover.exists():
            leftover.unlink()  # an interrupted compaction's temp file, never renamed into place
        return list(tasks.values()), report

    # -- writing ----------------------------------------------------------------------

    def append(
        self,
        changed: list[AgentTask],
        events: list[GraphEvent] | None = None,
        archived: list[str] | None = None,
    ) -> int:
        """Write one batch of changed tasks, and the events they caused (or the ids of
        tasks that left for the archive), durably (one fsync). Returns the batch's ``seq``."""
        if self._fd is None:
            self._fd = open_for_append(self.journal_path)
        line = _encoder.encode(JournalBatch(self.seq + 1, changed, events or [], archived or [])) + b"\n"
        try:
            append_durably(self._fd, line)
        except OSError as error:
            raise storage_error(self.journal_path, error) from None
        self.seq += 1
        self.journal_bytes += len(line)
        return self.seq

    @property
    def wants_compaction(self) -> bool:
        return self.journal_bytes > max(self.compact_min_bytes, self.snapshot_bytes)

    def compact(self, tasks: list[AgentTask], outbox: list[OutboxBatch] | None = None) -> None:
        """Replace the snapshot with ``tasks`` (the whole graph as of ``seq``) and the
        outbox events the log has not confirmed, and empty the journal. Costs O(graph)
        but runs once per journal the size of the snapshot, so O(1) per change on
        average."""
        pending = [PendingEvents(b.seq, b.first, b.events) for b in outbox or ()]
        data = _encoder.encode(GraphFile(FORMAT, self.seq, tasks, pending))
        try:
            replace_durably(self.graph_path, data)
        except OSError as error:
            raise storage_error(self.graph_path, error) from None
        self.snapshot_bytes = len(data)
        self.close()
        if self.journal_path.exists():
            truncate_durably(self.journal_path, 0)
        self.journal_bytes = 0
        self.outbox = []

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def check_loaded_graph(
    tasks: dict[str, AgentTask], where: Path, archived: Mapping[str, TaskStatus] | None = None
) -> None:
    """Refuse a graph no submission could have made (a file edited by hand, or damaged):
    a missing or self dependency, a cycle (its tasks would stay PENDING forever), an
    ``attempt`` above ``max_attempts``. Raises :class:`GraphFileError` naming the task,
    the field and the value."""
    for task in tasks.values():
        for dep in task.depends_on:
            if dep == task.id:
                raise GraphFileError(f"{where}: task {task.id!r} field 'depends_on' names the task itself")
            if dep not in tasks and dep not in (archived or {}):
                raise GraphFileError(
                    f"{where}: task {task.id!r} field 'depends_on' names {dep!r}, which is not in the "
                    "graph (was the file edited by hand?)"
                )
        if task.attempt > task.max_attempts:
            raise GraphFileError(
                f"{where}: task {task.id!r} field 'attempt' is {task.attempt}, above its max_attempts "
                f"({task.max_attempts})"
            )
    cycle = find_cycle(tasks)
    if cycle is not None:
        raise GraphFileError(
            f"{where}: task {cycle[0]!r} field 'depends_on' names {cycle[1]!r}, which closes a dependency "
            "cycle (its tasks could never run)"
        )
