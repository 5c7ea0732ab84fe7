"""Durable phases: the step journal a task's harness records into and replays from.

``StepJournalActor`` owns a process's :class:`~greenroom.store.StepStore` and writes the
steps every harness records in batches (one transaction for whatever arrived while the
last one was written), answering each ``RecordSteps`` only once it is durable.
Messages sent before ``stop()`` are written and answered; messages sent after are refused.

``TaskJournal`` is one task's view: what its earlier attempts recorded, keyed by place
(``p<phase>/<context label>/m<model call>`` and ``.../t<tool call>``), never by attempt.
A harness given one answers each step already recorded from it — no model request, no
tool call, no budget spent — and records each new one before acting on it. A step asked
for differently than it was recorded (another request at the same place: changed code, a
prompt that is not deterministic) stops the attempt with :class:`ReplayDiverged`, naming
the place, never a quiet mix of old and new. A call that changes things is recorded as
begun before it runs; one found begun without a result (the process died during it) is
run again only if the tool takes an idempotency key, or a person says so
(:class:`ApprovalNeeded` parks the task on that question).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Sequence
from typing import Any

import msgspec

from .._errors import GreenroomError
from .._request import Request
from ..actors import Actor, ActorRef, PendingReply
from ..store import Step, StepStore

logger = logging.getLogger("greenroom.harness")

_encoder = msgspec.json.Encoder(order="deterministic")


class RecordSteps(msgspec.Struct, Request[None], frozen=True):
    """Write ``steps`` durably; answered (``None``) once they are."""

    steps: tuple[Step, ...]


class ReadSteps(msgspec.Struct, Request[list[Step]], frozen=True):
    """What the journal holds for one task, in the order it was recorded."""

    task_id: str


class DropSteps(msgspec.Struct, Request[int], frozen=True):
    """Forget the steps of final tasks; answers how many went."""

    task_ids: tuple[str, ...]


class ReplayDiverged(GreenroomError):
    """A replayed attempt asked, at a recorded place, for something other than what was
    recorded there. The attempt stops (it is not retried: it would diverge again)."""

    def __init__(self, task_id: str, key: str, recorded: str, asked: str) -> None:
        super().__init__(
            f"task {task_id!r}: replay diverged at step {key!r}: recorded {recorded}, asked {asked} "
            "(the agent's code or its prompts changed, or are not deterministic; see 'Durable work' "
            "in docs/architecture.md)"
        )
        self.task_id = task_id
        self.key = key


class ApprovalNeeded(GreenroomError):
    """A tool call needs a person's approval and none was given yet: the agent parks the
    task on ``call`` (its step, tool, arguments and risk) and takes other work."""

    def __init__(self, task_id: str, call: dict[str, Any]) -> None:
        super().__init__(
            f"task {task_id!r}: tool {call['tool']!r} (step {call['step']!r}) waits for approval"
        )
        self.task_id = task_id
        self.call = call


def fingerprint(value: Any) -> str:
    """A short digest of what was asked (a request, a tool and its arguments)."""
    return hashlib.sha256(_encoder.encode(value)).hexdigest()[:32]


class StepJournalActor(Actor):
    """Writes every harness's steps through one ``StepStore``, in batches."""

    def __init__(self, store: StepStore, *, max_batch: int = 1024) -> None:
        self.store = store
        self.max_batch = max_batch
        self._batch: list[Step] = []
        self._owed: list[PendingReply | None] = []
        self._reads: list[tuple[str, PendingReply | None]] = []
        self.written = 0

    async def receive(self, message: Any) -> Any:
        """Writes and reads wait while more messages are queued, then go together: every
        write of the batch in one transaction, then every read in one query (a read sees
        the writes before it)."""
        if isinstance(message, RecordSteps):
            self._batch.extend(message.steps)
            self._owed.append(self.context.reply_later())
        elif isinstance(message, ReadSteps):
            self._reads.append((message.task_id, self.context.reply_later()))
        elif isinstance(message, DropSteps):
            await self._settle()
            return await self.store.drop(message.task_ids)
        else:
            raise TypeError(f"StepJournalActor does not handle {type(message).__name__} messages")
        if self.context.queued == 0 or len(self._batch) + len(self._reads) >= self.max_batch:
            await self._settle()
        return None

    async def _settle(self) -> None:
        if self._batch:
            await self._flush()
        if self._reads:
            await self._read()

    async def _read(self) -> None:
        reads, self._reads = self._reads, []
        try:
            found = await self.store.read_many([task_id for task_id, _ in reads])
        except BaseException as error:
            for _, pending in reads:
                if pending is not None:
                    pending.fail(error)
            raise
        for task_id, pending in reads:
            if pending is not None:
                pending.succeed(found[task_id])

    async def _flush(self) -> None:
        batch, owed = self._batch, self._owed
        self._batch, self._owed = [], []
        try:
            await self.store.write(batch)
        except BaseException as error:
            for pending in owed:
                if pending is not None:
                    pending.fail(error)
            raise
        self.written += len(batch)
        for pending in owed:
            if pending is not None:
                pending.succeed(None)

    async def on_stop(self) -> None:
        await self._settle()
        await self.store.aclose()


class TaskJournal:
    """One task's recorded steps, and where its harness records new ones.

    ``writer``: the ``StepJournalActor``. ``steps``: what it held for the task when the
    attempt began (``TaskJournal.load``). Not shared between tasks or attempts.
    """

    def __init__(
        self,
        task_id: str,
        attempt: int,
        steps: Sequence[Step],
        writer: ActorRef,
        decisions: dict[str, dict[str, Any]] | None = None,
    ) -> None:
        self.task_id = task_id
        self.decisions = dict(decisions or {})
        """People's decisions on the task's calls, by step (from the task)."""
        self.attempt = attempt
        self.writer = writer
        self._recorded: dict[tuple[str, str], Step] = {(step.key, step.kind): step for step in steps}
        self.replayed = 0
        """Steps answered from the journal in this attempt."""
        self.recorded = 0
        """Steps this attempt wrote."""
        self._phases = 0

    @classmethod
    async def load(
        cls, task_id: str, attempt: int, writer: ActorRef, decisions: dict[str, dict[str, Any]] | None = None
    ) -> TaskJournal:
        """The journal of ``task_id`` as recorded so far (a request to the writer), with
        the decisions people made on its calls (``AgentTask.decisions``)."""
        return cls(task_id, attempt, await writer.ask(ReadSteps(task_id), timeout=None), writer, decisions)

    def next_phase(self) -> int:
        """The place of the next phase of this attempt (0, 1, ...)."""
        phase, self._phases = self._phases, self._phases + 1
        return phase

    def get(self, key: str, kind: str, asked: str, what: str) -> Step | None:
        """The step recorded at ``key`` (of ``kind``), checked against what is asked now
        (``asked``: its fingerprint; ``what``: how to name it); ``None`` if none is."""
        step = self._recorded.get((key, kind))
        if step is None:
            return None
        if step.fingerprint != asked:
            shown = step.body.get("asked", step.fingerprint) if kind != "model" else step.fingerprint
            raise ReplayDiverged(self.task_id, key, f"{shown!s:.120}", f"{what:.120}")
        self.replayed += 1
        return step

    def has(self, key: str, kind: str) -> bool:
        return (key, kind) in self._recorded

    async def record(self, key: str, kind: str, asked: str, body: dict[str, Any] | None = None) -> None:
        """Write a step durably (returns once it is) and remember it."""
        step = Step(
            task_id=self.task_id, key=key, kind=kind,  # type: ignore[arg-type]
            fingerprint=asked, body=body or {}, attempt=self.attempt, at=time.time(),
        )  # fmt: skip
        await self.writer.ask(RecordSteps((step,)), timeout=None)
        self._recorded[(key, kind)] = step
        self.recorded += 1
