"""``Outbox``: the embedded task graph's events on their way from its journal to the log.

On the files a transition and its events are one durable fact this way. The journal is
the source of truth: each committed batch carries the events its transitions caused
(``GraphEvent``). A data dir's task store (``FileTaskStore``) and event log
(``FileEventStore``) share one ``Outbox`` in the process (:func:`outbox_for`):

- the event store attaches it to its log actor when it opens, with the origin of the last
  journal event the log holds (its ``position``);
- the task store sends each durable batch's events to that actor as one ``AppendMany``
  with the batch's origin (waiting for mailbox room: never dropped), and keeps them here
  until the event store has them durably; on open it sends what its journal holds beyond
  the log's position. The snapshot keeps what is unconfirmed when the journal is
  compacted, so nothing in flight is folded away;
- the event store keeps the log whole and each event once: it skips an event whose origin
  it has; before the first journal event of a write it writes the unconfirmed ones that
  should come first (a batch its log lost in a failed write); when it opens it writes what
  is unconfirmed beyond its position.

Hence, after any crash, every committed transition has exactly one event, in commit
order. Until a log first opens on the data dir nothing is kept here: the events wait in the
journal (and are completed on the next start whose log opens first, as the daemon's does);
from then on they are kept until the log has them, across its restarts.
Both sides run on one event loop; nothing here is shared across threads.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

from ..messages import Append, AppendMany, GraphEvent

if TYPE_CHECKING:
    from ..actors import ActorRef

Origin = tuple[int, int]


class OutboxBatch:
    """Events of journal batch ``seq`` from position ``first`` on, not yet confirmed."""

    __slots__ = ("events", "first", "seq")

    def __init__(self, seq: int, first: int, events: list[GraphEvent]) -> None:
        self.seq = seq
        self.first = first
        self.events = events

    @property
    def last(self) -> Origin:
        return (self.seq, self.first + len(self.events) - 1)

    def message(self) -> AppendMany:
        """The ``AppendMany`` that takes these events to the log, with their origin."""
        appends = [Append(e.type, e.payload, e.task_id, e.agent_id) for e in self.events]
        return AppendMany(appends, origin=(self.seq, self.first))

    def __repr__(self) -> str:
        return f"OutboxBatch({self.seq}, {self.first}, {len(self.events)} events)"


class Outbox:
    """A data dir's unconfirmed journal events, in commit order, and the log they go to."""

    def __init__(self) -> None:
        self.log: ActorRef | None = None
        """The log actor writing ``events.jsonl`` (``None``: none is open)."""
        self.position: Origin | None = None
        """The origin of the last journal event durable in the log (``None``: none)."""
        self._unconfirmed: deque[OutboxBatch] = deque()
        self._followed = False
        """A log was open once: the events are kept for it (or its restart) until it has
        them. Never: nothing is kept here (they wait in the journal)."""

    def __len__(self) -> int:
        return len(self._unconfirmed)

    def unconfirmed(self) -> list[OutboxBatch]:
        """What a snapshot must keep: committed, not yet durable in the log."""
        return list(self._unconfirmed)

    # -- the task store's side -------------------------------------------------------------

    def restore(self, batches: list[OutboxBatch]) -> list[OutboxBatch]:
        """On the task store's open: ``batches`` are what its snapshot and journal hold.
        Returns what the log lacks, to send in order (nothing if no log ever opened)."""
        self._unconfirmed.clear()
        if not self._followed:
            return []
        self._unconfirmed.extend(batches)
        self._trim(self.position)
        return list(self._unconfirmed)

    def committed(self, seq: int, events: list[GraphEvent]) -> AppendMany | None:
        """Batch ``seq`` is durable in the journal: the message that takes its events to
        the log (``None``: no log ever opened; they wait in the journal). Kept here until
        the log has them — also while the log restarts: its next open writes them."""
        if not self._followed:
            return None
        batch = OutboxBatch(seq, 0, events)
        self._unconfirmed.append(batch)
        return batch.message()

    # -- the event store's side ------------------------------------------------------------

    def attach(self, log: ActorRef | None, position: Origin | None) -> list[OutboxBatch]:
        """The log opened, holding every journal event up to ``position``: returns the
        unconfirmed events beyond it, for the event store to write now."""
        self.log = log
        self._followed = True
        self.position = position
        self._trim(position)
        return list(self._unconfirmed)

    def detach(self) -> None:
        """The log closed: what it has not confirmed stays here for the next one."""
        self.log = None

    def between(self, after: Origin | None, origin: Origin) -> list[OutboxBatch]:
        """The unconfirmed events after ``after`` and before ``origin``: what must be written
        before the event at ``origin`` (normally nothing: the head batch is its own)."""
        missing: list[OutboxBatch] = []
        for batch in self._unconfirmed:
            if (batch.seq, batch.first) >= origin:
                break
            start = batch.first
            if after is not None and after[0] == batch.seq:
                start = max(start, after[1] + 1)
            elif after is not None and after[0] > batch.seq:
                continue
            end = batch.first + len(batch.events)
            if batch.seq == origin[0]:
                end = min(end, origin[1])
            if start < end:
                missing.append(
                    OutboxBatch(batch.seq, start, batch.events[start - batch.first : end - batch.first])
                )
        return missing

    def delivered(self, origin: Origin) -> None:
        """Every journal event up to ``origin`` is durable in the log."""
        if self.position is None or origin > self.position:
            self.position = origin
        self._trim(origin)

    def _trim(self, position: Origin | None) -> None:
        """Drop what the log has (up to ``position``), keeping the rest of a batch."""
        if position is None:
            return
        unconfirmed = self._unconfirmed
        while unconfirmed and unconfirmed[0].last <= position:
            unconfirmed.popleft()
        if unconfirmed and unconfirmed[0].seq == position[0] and unconfirmed[0].first <= position[1]:
            head = unconfirmed[0]
            unconfirmed[0] = OutboxBatch(
                head.seq, position[1] + 1, head.events[position[1] + 1 - head.first :]
            )


_OUTBOXES_LOCK = threading.Lock()
_OUTBOXES: weakref.WeakValueDictionary[Path, Outbox] = weakref.WeakValueDictionary()


def outbox_for(data_dir: Path) -> Outbox:
    """The outbox of ``data_dir`` (resolved: two spellings of one directory share it) in
    this process, shared by its task store and its event store, kept while either holds
    it. Blocking (it resolves the path): call it in a worker thread."""
    key = data_dir.resolve()
    with _OUTBOXES_LOCK:
        outbox = _OUTBOXES.get(key)
        if outbox is None:
            outbox = _OUTBOXES[key] = Outbox()
        return outbox
