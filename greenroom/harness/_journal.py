"""Durable phases: the step journal a task's harness records into and replays from.

``StepJournalActor`` owns a process's :class:`~greenroom.store.StepStore` and writes the
steps every harness records in batches (one transaction for whatever arrived while the
last one was written; the disk syncs on a lane of their own, so a step is the store's —
safe from this process's death — a commit after it was put), answering each
``RecordSteps`` only once it is durable. Harnesses
of its own event loop record through its :class:`StepSink` instead (a group commit: one
message per batch, not per step; each writer waits for its batch to be durable).
Messages sent before ``stop()`` are written and answered; messages sent after are refused.

``TaskJournal`` is one task's view: what its earlier attempts recorded, keyed by place
(``p<phase>/<context label>/m<model call>`` and ``.../t<tool call>``), never by attempt.
A harness given one answers each step already recorded from it — no model request, no
tool call, no budget spent — and records each new one as it happens. It waits for what
it recorded to be durable before anything acts on it: before a tool that is not read-only
runs (its "begun" step is written after everything before it), and before the phase
returns to the agent or parks the task. A model request or a read-only tool may start
while the step before it is still being written (a millisecond): a crash then loses at
most the steps in flight, as it would anyway. A step asked
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
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import msgspec

from .._commit import Batch, Batcher
from .._errors import DataError, GreenroomError
from .._process import alive, boot_id
from .._request import Request
from ..actors import Actor, ActorRef, ActorStopped, PendingReply
from ..store import Refused, Step, StepStore

logger = logging.getLogger("greenroom.harness")

_encoder = msgspec.json.Encoder(order="deterministic")


class RecordSteps(msgspec.Struct, Request[None], frozen=True):
    """Write ``steps`` durably; answered (``None``) once they are. ``at_once``: in a durable
    write of their own batch (``StepStore.write(durable=True)``), so they are visible only
    once durable — not handed first and synced after."""

    steps: tuple[Step, ...]
    at_once: bool = False


class ReadSteps(msgspec.Struct, Request[list[Step]], frozen=True):
    """What the journal holds for one task, in the order it was recorded."""

    task_id: str


class OpenTaskJournal(msgspec.Struct, Request["tuple[list[Step], StepSink]"], frozen=True):
    """What the journal holds for one task, and the :class:`StepSink` its harness records
    new steps through."""

    task_id: str


class _Batch:
    """Steps put into a sink since the journal last took them, and who waits for them."""

    __slots__ = ("done", "error", "handed", "refused", "steps")

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self.handed = anyio.Event()
        """Set once the store has the batch (this process dying loses none of it)."""
        self.done = anyio.Event()
        """Set once the batch is durable (or could not be written: ``error``)."""
        self.error: BaseException | None = None
        self.refused: Refused = {}
        """The attempts whose steps the store refused (fenced off), known once handed."""

    def succeed(self, value: object) -> None:
        """Durable: every waiter goes on."""
        self._end(None)

    def fail(self, error: BaseException) -> None:
        """Not written (or not synced): every waiter gets ``error``."""
        self._end(error)

    def _end(self, error: BaseException | None) -> None:
        if not self.done.is_set():
            self.error = error
            self.handed.set()
            self.done.set()


class _Flush:
    __slots__ = ()


_FLUSH = _Flush()


class StepSink:
    """The journal's group commit, for the harnesses of its own event loop: a step put
    here joins the batch the :class:`StepJournalActor` writes next (it is told once per
    batch, not once per step), and ``wait_written`` returns once that batch is durable.

    A caller cancelled while waiting leaves its step in the batch: it is written (as a
    message already sent would be). After the journal stops, ``put`` raises
    ``ActorStopped``; the steps put before it stopped are written first.
    """

    __slots__ = ("_open", "_ref", "closed", "incarnation", "note", "notes_identity")

    def __init__(
        self,
        ref: ActorRef,
        incarnation: str | None = None,
        note: Callable[[Step], Awaitable[None]] | None = None,
        notes_identity: str | None = None,
    ) -> None:
        self._ref = ref
        self._open = _Batch()
        self.closed = False
        self.incarnation = incarnation
        """The store's (``StepStore.incarnation``), asked once when the journal started."""
        self.note = note
        """The store's ``note``: a step kept at once, from the caller's task (a result)."""
        self.notes_identity = notes_identity
        """The store's notes (PostgreSQL's ``notes_identity``), folded as the journal began."""

    def put(self, step: Step) -> _Batch:
        """Put ``step`` in the next batch, at once; the batch says when it is durable
        (``await wait_written(batch)``)."""
        if self.closed:
            raise ActorStopped(self._ref)
        batch = self._open
        if not batch.steps:
            self._ref.tell(_FLUSH)  # the first step of a batch wakes the journal
        batch.steps.append(step)
        return batch

    def _take(self) -> _Batch:
        batch, self._open = self._open, _Batch()
        return batch


async def wait_written(batch: _Batch, task_id: str | None = None, token: int = 0) -> None:
    """Return once ``batch`` is durable; raise the store's error if it could not be, and
    ``Fenced`` if the steps of ``task_id``'s attempt ``token`` in it were refused."""
    if not batch.done.is_set():
        await batch.done.wait()
    if batch.error is not None:
        raise batch.error
    refusal = batch.refused.get((task_id, token)) if task_id is not None and token else None
    if refusal is not None:
        raise refusal


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


def _writer() -> str | None:
    """This process, as a step's ``writer``: ``<boot>:<pid>`` (``None`` where the boot
    cannot be read: then no later process can tell it is gone)."""
    boot = boot_id()
    return None if boot is None else f"{boot}:{os.getpid()}"


def _writer_gone(writer: object) -> bool:
    """Whether the process ``writer`` names has ended: one of this machine, since its last
    boot, that no longer exists. Unknown (another machine, a pid taken again, no name) is
    not gone."""
    if not isinstance(writer, str):
        return False
    boot, _, pid = writer.rpartition(":")
    return boot_id() is not None and boot == boot_id() and pid.isdigit() and not alive(int(pid))


def fingerprint(value: Any) -> str:
    """A short digest of what was asked (a request, a tool and its arguments)."""
    return hashlib.sha256(_encoder.encode(value)).hexdigest()[:32]


class _Synced:
    """The syncer's answer: every write before ``batch`` was taken for the sync lane is
    durable, or ``error`` says why it could not be made so."""

    __slots__ = ("batch", "error")

    def __init__(self, batch: Batch[None], error: BaseException | None = None) -> None:
        self.batch = batch
        self.error = error


class _WalSyncer(Actor):
    """The journal's second lane: ``sync`` the store while the journal goes on committing.
    Told a batch of the sync lane (the waiters of writes already handed to the store), it
    answers (told) once they are durable."""

    def __init__(self, store: StepStore) -> None:
        self.store = store

    async def receive(self, message: Any) -> None:
        assert isinstance(message, Batch)
        parent = self.context.parent
        assert parent is not None
        try:
            await self.store.sync()
        except Exception as error:  # the journal fails the waiters with it; cancellation propagates
            parent.tell(_Synced(message, error))
        else:
            parent.tell(_Synced(message))


class StepJournalActor(Actor):
    """Writes every harness's steps through one ``StepStore``, in batches, on two lanes.

    A batch is handed to the store as soon as it is taken (``write(durable=False)``: a
    commit that does not wait for the disk — once it returns, this process dying loses none
    of it), and a child syncs the store beside it (one sync in flight; what was committed
    meanwhile goes with the next). A step is answered (its ``RecordSteps``, its sink's
    ``wait_written``) once it is durable. So a step is the store's about a commit after it
    was put — not a disk sync after the sync in flight — and a crash leaves few steps
    behind: only a tool call running when it landed can come back as "it may have run".
    """

    def __init__(self, store: StepStore, *, max_batch: int = 1024) -> None:
        self.store = store
        self.max_batch = max_batch
        self._writes: Batcher[tuple[Sequence[Step], bool]] = Batcher(
            max_batch=max_batch, owner="StepJournalActor"
        )
        """The write lane: steps (and whether to write them durably) and who waits for them."""
        self._syncs: Batcher[None] = Batcher(max_batch=2**62, owner="StepJournalActor")
        """The sync lane: who waits for a write handed to the store to be synced; one sync
        in flight, what is handed meanwhile goes with the next."""
        self._syncing: Batch[None] | None = None
        self._reads: list[tuple[str, PendingReply | None, bool]] = []
        self._sink: StepSink | None = None
        self._syncer: ActorRef | None = None
        self.written = 0

    async def on_start(self) -> None:
        incarnation = await self.store.incarnation()  # (a store folds its notes in first)
        notes = getattr(self.store, "notes_identity", None)  # where releases are database writes
        self._sink = StepSink(self.context.ref, incarnation, self.store.note, notes)
        self._syncer = await self.context.spawn(lambda: _WalSyncer(self.store), name="sync")

    async def receive(self, message: Any) -> Any:
        """Writes and reads wait while more messages are queued, then go together: every
        write of the batch in one transaction, then every read in one query (a read sees
        the writes before it)."""
        if message is _FLUSH:
            self._take_sink()
        elif isinstance(message, RecordSteps):
            self._writes.add(self.context.reply_later(), (message.steps, message.at_once))
        elif isinstance(message, ReadSteps):
            self._reads.append((message.task_id, self.context.reply_later(), False))
        elif isinstance(message, OpenTaskJournal):
            self._reads.append((message.task_id, self.context.reply_later(), True))
        elif isinstance(message, _Synced):
            self._synced(message)
        elif isinstance(message, DropSteps):
            await self._settle()
            return await self.store.drop(message.task_ids)
        else:
            raise TypeError(f"StepJournalActor does not handle {type(message).__name__} messages")
        if self.context.queued == 0 or len(self._writes) + len(self._reads) >= self.max_batch:
            await self._settle()
        return None

    def _take_sink(self) -> None:
        sink = self._sink
        if sink is not None and sink._open.steps:
            batch = sink._take()
            self._writes.add(batch, (batch.steps, False))

    async def _settle(self) -> None:
        self._take_sink()  # what harnesses put since: in this batch too
        while self._writes:
            await self._flush()
        if self._reads:
            await self._read()

    async def _read(self) -> None:
        reads, self._reads = self._reads, []
        try:
            found = await self.store.read_many([task_id for task_id, _, _ in reads])
        except BaseException as error:
            for _, pending, _ in reads:
                if pending is not None:
                    pending.fail(error)
            raise
        for task_id, pending, with_sink in reads:
            if pending is not None:
                pending.succeed((found[task_id], self._sink) if with_sink else found[task_id])

    async def _flush(self) -> None:
        """Hand the write lane's batch to the store; its waiters go to the sync lane (or, a
        durable write, are answered at once)."""

        refused: Refused = {}

        async def write(values: list[tuple[Sequence[Step], bool]]) -> None:
            steps = [step for batch_steps, _ in values for step in batch_steps]
            durable = any(at_once for _, at_once in values)
            refused.update(await self.store.write(steps, durable=durable))
            self.written += len(steps)

        batch = await self._writes.commit(write, stopped=lambda: ActorStopped(self.context.ref), answer=False)
        if batch is None:
            return
        if refused:
            self._fence(batch, refused)
        for pending in batch.owed:
            if isinstance(pending, _Batch):
                pending.handed.set()
        if any(at_once for _, at_once in batch.values):
            # durable, and so is every write before it: their waiters need no sync
            for waiting in self._syncs.drain():
                self._syncs.done(waiting)
                waiting.answer()
            batch.answer([None] * len(batch))
            return
        for pending in batch.owed:
            self._syncs.add(pending, None)
        self._sync_soon()

    def _fence(self, batch: Batch[tuple[Sequence[Step], bool]], refused: Refused) -> None:
        """The store refused some steps (their attempt was fenced off): a sink's batch
        carries the refusals for its waiters to find; an ask is failed with its own now,
        and owes nothing more."""
        for index, (pending, (steps, _)) in enumerate(batch):
            hits = {(step.task_id, step.token) for step in steps} & refused.keys()
            if not hits:
                continue
            if isinstance(pending, _Batch):
                pending.refused = {hit: refused[hit] for hit in hits}
            elif pending is not None:
                pending.fail(refused[next(iter(hits))])
                batch.owed[index] = None
            logger.warning("journal: %s", refused[next(iter(hits))])

    def _sync_soon(self) -> None:
        """Ask the syncer to make what was handed to the store durable, unless a sync is in
        flight (its answer asks for the rest)."""
        if self._syncing is not None or self._syncer is None:
            return
        batch = self._syncs.take()
        if batch is None:
            return
        try:
            self._syncer.tell(batch)
        except ActorStopped:  # stopping: on_stop syncs what is left
            self._syncer = None
            self._syncs.put_back(batch)
            return
        self._syncing = batch

    def _synced(self, message: _Synced) -> None:
        batch = message.batch
        self._syncing = None
        self._syncs.done(batch)
        if message.error is None:
            batch.answer()
        else:
            logger.error("journal: steps written could not be synced: %s", message.error)
            batch.fail(message.error)
        self._sync_soon()

    async def on_stop(self) -> None:
        """Write what was taken before the stop and sync it; from now on the sink refuses.
        A store that cannot write (a full disk) fails the waiters of the last batch with
        its error and is said in one line: the failure that stopped the process was said
        already."""
        if self._sink is not None:
            self._sink.closed = True
        self._syncer = None  # stopped before its parent: the last sync is made here
        outcome: BaseException | None = ActorStopped(self.context.ref)  # cancelled on the way
        waiting: list[Batch[None]] = []
        try:
            await self._settle()
            waiting = self._unsynced()
            await self.store.sync()
            outcome = None
        except (DataError, OSError) as error:
            logger.error("journal: the last steps taken were not written: %s", error)
            outcome = error
        finally:
            for batch in waiting + self._unsynced():  # nobody is told durable what is not
                if outcome is None:
                    batch.answer()
                else:
                    batch.fail(outcome)
            if self._writes:
                self._writes.fail_all(outcome or ActorStopped(self.context.ref))
            await self.store.aclose()

    def _unsynced(self) -> list[Batch[None]]:
        """Every batch of the sync lane not answered yet (the one in flight too: its sync
        will not answer now), taken."""
        batches = self._syncs.drain()
        if self._syncing is not None:
            batches.insert(0, self._syncing)
            self._syncing = None
        return batches


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
        sink: StepSink | None = None,
        token: int = 0,
    ) -> None:
        self.task_id = task_id
        self.token = token
        """The attempt's fencing token: every step names it (``0``: not fenced)."""
        self.sink = sink
        """Where new steps go (the writer's group commit); ``None``: a ``RecordSteps`` ask each."""
        self.incarnation = sink.incarnation if sink is not None else None
        """The store's incarnation (``StepStore.incarnation``); ``None``: unknown."""
        self.decisions = dict(decisions or {})
        """People's decisions on the task's calls, by step (from the task)."""
        self.attempt = attempt
        self.writer = writer
        self._recorded: dict[str, Step] = {f"{step.key}\x00{step.kind}": step for step in steps}
        self.replayed = 0
        """Steps answered from the journal in this attempt."""
        self.recorded = 0
        """Steps this attempt wrote."""
        self._phases = 0
        self._unsynced: list[_Batch] = []
        self._written: set[str] = set()

    @classmethod
    async def load(
        cls,
        task_id: str,
        attempt: int,
        writer: ActorRef,
        decisions: dict[str, dict[str, Any]] | None = None,
        token: int = 0,
    ) -> TaskJournal:
        """The journal of ``task_id`` as recorded so far (a request to the writer), with
        the decisions people made on its calls (``AgentTask.decisions``); ``token``: the
        attempt's fencing token, named by every step it records."""
        steps, sink = await writer.ask(OpenTaskJournal(task_id), timeout=None)
        return cls(task_id, attempt, steps, writer, decisions, sink, token)

    def next_phase(self) -> int:
        """The place of the next phase of this attempt (0, 1, ...)."""
        phase, self._phases = self._phases, self._phases + 1
        return phase

    def get(self, key: str, kind: str, asked: str, what: str) -> Step | None:
        """The step recorded at ``key`` (of ``kind``), checked against what is asked now
        (``asked``: its fingerprint; ``what``: how to name it); ``None`` if none is."""
        step = self._recorded.get(f"{key}\x00{kind}")
        if step is None:
            return None
        if step.fingerprint != asked:
            shown = step.body.get("asked", step.fingerprint) if kind != "model" else step.fingerprint
            raise ReplayDiverged(self.task_id, key, f"{shown!s:.120}", f"{what:.120}")
        self.replayed += 1
        return step

    def has(self, key: str, kind: str) -> bool:
        place = f"{key}\x00{kind}"
        return place in self._recorded or place in self._written

    def may_have_run(self, key: str) -> bool:
        """Whether the call at ``key``, begun in an earlier attempt and left without a
        result, may have run: it was let run (``tool_released``), or whether it was cannot
        be known. A call begun and never released did not run — known when the process
        that began it is gone (a dead process of this machine: it cannot release it later,
        as a live attempt whose lease ran out could) and the store cannot have lost the
        release since (the same incarnation, or a durable release). A step from before
        releases, or from another machine, is a question."""
        begun = self._recorded.get(f"{key}\x00tool_started")
        if begun is None or f"{key}\x00tool" in self._recorded:
            return False
        released = self._recorded.get(f"{key}\x00tool_released")
        if released is not None:
            # released by a database write: it ran only if it was noted running — known
            # when its process is gone and this one folded that process's notes
            notes = released.body.get("notes")
            folded = notes is not None and notes == (self.sink.notes_identity if self.sink else None)
            return (
                not folded
                or f"{key}\x00tool_running" in self._recorded
                or not _writer_gone(begun.body.get("writer"))
            )
        if not _writer_gone(begun.body.get("writer")):
            return True
        release = begun.body.get("release")
        return not (release == "durable" or (release is not None and release == self.incarnation))

    async def begin(self, key: str, asked: str, what: str, *, release: bool = True) -> None:
        """Before a call that changes things runs: its ``tool_started`` step, durable (a
        crash from now on knows it may have begun), then — ``release`` — its
        ``tool_released`` step, which the store has before this returns. After a crash, a
        call begun without a release, by a process now gone, did not run (see
        :meth:`may_have_run`), so only calls that were running come back as a question.
        Where the store's incarnation is known, the release needs no disk sync (a reboot,
        the one thing that could lose it, changes the incarnation); where it is not, the
        release is the durable write and the beginning goes with it."""
        trusted = self.incarnation
        if not self.has(key, "tool_started"):
            body = {
                "asked": what,
                "release": trusted if trusted is not None else "durable",
                "writer": _writer(),
            }
            if trusted is None and release and self.sink is not None:
                self.record_soon(key, "tool_started", asked, _encoder.encode(body))
            else:
                await self.record(key, "tool_started", asked, body)
        if not release or self.has(key, "tool_released"):
            return
        if trusted is not None and self.sink is not None and self.sink.note is not None:
            # noted from this task, the tool runs right after: no batch of other tasks'
            # releases stands between them, so a crash asks only about calls it cut short
            await self.handed()  # its beginning (and all before) is the store's first
            self._check_fenced()
            await self.note(key, "tool_released", asked, b"{}")
            self.record_soon(key, "tool_released", asked, b"{}")
            return
        if trusted is not None and self.record_soon(key, "tool_released", asked, b"{}"):
            await self.handed()
            self._check_fenced()  # the store has the release, or refused it: a stale owner runs nothing
        else:  # visible only once durable (its beginning goes in the same or an earlier write)
            notes = self.sink.notes_identity if self.sink is not None else None
            step = self._step(key, "tool_released", asked, {} if notes is None else {"notes": notes}, b"")
            await self.writer.ask(RecordSteps((step,), at_once=True), timeout=None)
            self._written.add(f"{key}\x00tool_released")
            self.recorded += 1
            if notes is not None:  # the instant before the tool is invoked: a crash before it ran nothing
                running = _encoder.encode({"writer": _writer()})
                await self.note(key, "tool_running", asked, running)
                self.record_soon(key, "tool_running", asked, running)

    async def record(self, key: str, kind: str, asked: str, body: dict[str, Any] | None = None) -> None:
        """Write a step and remember it; return once it — and every step recorded before
        it — is durable."""
        step = self._step(key, kind, asked, body or {}, b"")
        if self.sink is None:
            await self.writer.ask(RecordSteps((step,)), timeout=None)
        else:
            batch = self.sink.put(step)
            await self.sync()
            await wait_written(batch, self.task_id, self.token)
        self._written.add(f"{key}\x00{kind}")  # its place only: the step itself goes with its batch
        self.recorded += 1

    def record_soon(self, key: str, kind: str, asked: str, encoded: bytes) -> bool:
        """Put a step (its body already encoded as a JSON object) in the journal's next
        batch, at once, and remember it; :meth:`sync` waits until it is durable (steps
        are written in the order they are recorded: a step durable has every step before
        it durable too). ``False`` (nothing done) with no group commit to put it in: then
        :meth:`record` it."""
        sink = self.sink
        if sink is None:
            return False
        batch = sink.put(self._step(key, kind, asked, {}, encoded))
        unsynced = self._unsynced
        if not unsynced or unsynced[-1] is not batch:
            unsynced.append(batch)
        self._written.add(f"{key}\x00{kind}")
        self.recorded += 1
        return True

    async def note(self, key: str, kind: str, asked: str, encoded: bytes) -> bool:
        """Keep a step at once from this task (``StepStore.note``): this process dying
        from now on cannot lose it, whatever the journal's batches wait behind. ``False``
        (nothing done) with no store to note in. ``Fenced`` if the attempt is stale."""
        sink = self.sink
        if sink is None or sink.note is None:
            return False
        await sink.note(self._step(key, kind, asked, {}, encoded))
        return True

    def _step(self, key: str, kind: str, asked: str, body: dict[str, Any], encoded: bytes) -> Step:
        return Step(
            task_id=self.task_id, key=key, kind=kind,  # type: ignore[arg-type]
            fingerprint=asked, body=body, encoded=encoded, attempt=self.attempt, at=time.time(),
            token=self.token,
        )  # fmt: skip

    async def handed(self) -> None:
        """Return once every step recorded so far is the store's: this process dying loses
        none of them (a power loss still may, until :meth:`sync`). Raises nothing: a step
        that could not be written is :meth:`sync`'s to report."""
        if self._unsynced:
            batch = self._unsynced[-1]
            if not batch.handed.is_set():
                await batch.handed.wait()

    async def sync(self) -> None:
        """Return once every step recorded so far is durable (the store's error if one
        could not be written)."""
        while self._unsynced:
            await wait_written(self._unsynced[0], self.task_id, self.token)
            del self._unsynced[0]

    def _check_fenced(self) -> None:
        """Raise ``Fenced`` if the store refused a step of this attempt already handed."""
        for batch in self._unsynced:
            refusal = batch.refused.get((self.task_id, self.token)) if self.token else None
            if refusal is not None:
                raise refusal
