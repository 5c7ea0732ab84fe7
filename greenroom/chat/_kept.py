"""``ChatStore``: the chat assistant's data — each user's to-do list, conversations and
pending confirmations — kept on the store's records, with no backend code of its own.

The records (``greenroom.store.RecordStore``, ``store.records()``), in four collections:

- ``chat/conversations``: one record per conversation (its user, when it was made and last
  spoken in, how many messages it has, the confirmation it waits for, and its hold) and,
  beside it, one per message, keyed ``<conversation>\\x1f<number>`` — so a request reads
  its conversation and its last messages in one read;
- ``chat/idle``: an index of conversations by the minute they were last spoken in
  (``<time>\\x1f<conversation>``), so retention finds the idle ones in order;
- ``chat/todo``: one per to-do item, keyed ``<user>\\x1fi<id>``, and the counter ids are
  drawn from (``\\x1fn``: an id names one to-do of one user, so another user's id finds
  nothing).
  (The demo to-do list is not the task graph: its items are "to-dos"
  here; spec 001/002's tools keep their names, ``add_task`` and the rest.)

Every change is one ``write`` of the records at the versions it read (a compare-and-set):
a turn's messages, its conversation's count and confirmation and the idle index are
written whole or not at all, and two writers at once never lose one another's change
(the later one reads again). Conversation and user ids are 1-256 characters with no
control character (``check_id``), so ``\\x1f`` never occurs in one.

**Holds.** On a store several processes share (``shared``: PostgreSQL), a request holds
its conversation for a while (:meth:`ChatStore.hold_conversation`): the hold's fencing
token is in the conversation's record, and a turn, a confirmation taken or a to-do write
made under an older token is refused (``Fenced``, nothing written) — the request paused
past its hold and another process took the conversation. Time is this process's clock,
as every daemon's hold deadline is its own. On a store one process owns (the files), its
runner already serves a conversation one request at a time: a hold is that process's
alone, always token 1, and only keeps retention off the conversation.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Literal

import anyio
import msgspec

from .._errors import InvalidInput, StorageError
from ..messages import ChatMessage, ToolOutcome
from ..store import Change, Conflict, Fenced, Put, RecordStore, Versioned
from ._types import PendingAction, ToolCallRecord

CONVERSATIONS = "chat/conversations"
MESSAGES = CONVERSATIONS
"""Messages are kept beside their conversation's record (one read fetches both)."""
KNOWN = 4096
"""Conversations whose last-read record a store remembers (its version and message count:
what the next read and write of that conversation start from)."""
IDLE = "chat/idle"
TODO = "chat/todo"
SEP = "\x1f"
_TRIES = 100
"""Writes tried before giving up, each lost to another writer that came first."""


class TaskRow(msgspec.Struct, frozen=True, kw_only=True):
    """One of a user's to-dos (spec 002's "task"). ``number`` is its position in the user's
    list (1-based), what a person sees; ``id`` is the store's key and is never shown."""

    id: int
    title: str
    description: str = ""
    completed: bool = False
    created_at: float = 0.0
    updated_at: float = 0.0


class ConversationHold(msgspec.Struct, frozen=True):
    """A request's hold on a conversation: its id and the token
    :meth:`ChatStore.hold_conversation` gave. A to-do write made under it (the assistant's
    tools, for the request) is refused with ``Fenced``, nothing changed, once another
    holder took the conversation — the request paused past its hold."""

    conversation_id: str
    token: int


class _OldMessage(msgspec.Struct, frozen=True, kw_only=True):
    """A message as kept before it was a :class:`ChatMessage` (read back, never written)."""

    role: Literal["user", "assistant"]
    content: str
    created_at: float
    tool_calls: list[dict[str, Any]] | None = None


def _message(body: bytes) -> ChatMessage:
    """A kept message (``ChatMessage``; one kept in the old shape, converted)."""
    try:
        return _new_message(body)
    except msgspec.ValidationError:
        old = _old_message(body)
    outcomes = tuple(_old_call(call) for call in old.tool_calls or ())
    return ChatMessage(old.role, old.content, at=old.created_at, outcomes=outcomes)


StoredPending = PendingAction
"""A confirmation the user was asked for, as stored: spec 002's :class:`PendingAction`
itself (one shape from the engine to the store; msgspec keeps the dataclass as it is)."""


class ConversationNotFound(InvalidInput):
    """No conversation with that id belongs to this user (nothing was changed)."""

    def __init__(self, conversation_id: str) -> None:
        super().__init__(
            f"no conversation {conversation_id!r} for this user",
            field="conversation_id",
            value=conversation_id,
        )


class _Conversation(msgspec.Struct, frozen=True, omit_defaults=True):
    """A conversation's record."""

    user: str
    created_at: float
    last_at: float
    count: int = 0
    pending: StoredPending | None = None
    holder: str | None = None
    hold_until: float = 0.0
    hold_token: int = 0


class _Todo(msgspec.Struct, frozen=True, omit_defaults=True):
    title: str
    description: str = ""
    completed: bool = False
    created_at: float = 0.0
    updated_at: float = 0.0


_encode = msgspec.json.Encoder().encode
_conversation = msgspec.json.Decoder(_Conversation).decode


def _old_call(call: dict[str, Any]) -> ToolOutcome:
    """A tool call kept in the old shape (spec 001's ``ToolCallRecord`` as a dict)."""
    result = call.get("result")
    parameters = call.get("parameters")
    record = ToolCallRecord(
        str(call.get("tool_name", "")),
        parameters if isinstance(parameters, dict) else {},
        result if isinstance(result, dict) else {},
        int(call.get("duration_ms") or 0),
    )
    return record.outcome()


_new_message = msgspec.json.Decoder(ChatMessage).decode
_old_message = msgspec.json.Decoder(_OldMessage).decode
_todo = msgspec.json.Decoder(_Todo).decode
_number = msgspec.json.Decoder(int).decode

Read = tuple[int, _Conversation]
"""A conversation's record as read: its version and what it holds."""


COUNTER = f"{SEP}n"
"""The to-do ids' counter in ``chat/todo``."""
ID_BLOCK = 64
"""To-do ids a store one process owns draws from the counter at a time."""


def _last_keys(conversation_id: str, count: int, limit: int) -> list[str]:
    return [message_key(conversation_id, n) for n in range(max(1, count - limit + 1), count + 1)]


def message_key(conversation_id: str, number: int) -> str:
    return f"{conversation_id}{SEP}{number:010d}"


IDLE_STEP = 60.0
"""The idle index's grain (seconds): a conversation's entry is the minute it was last
spoken in, rewritten only when a turn falls in a later minute — not at every turn."""


def idle_key(last_at: float, conversation_id: str) -> str:
    return f"{last_at // IDLE_STEP * IDLE_STEP:017.6f}{SEP}{conversation_id}"


def todo_key(user_id: str, todo_id: int) -> str:
    return f"{user_id}{SEP}i{todo_id:012d}"


def _row(key: str, record: Versioned) -> TaskRow:
    todo = _todo(record.body)
    return TaskRow(
        id=int(key.rpartition(SEP)[2][1:]),
        title=todo.title,
        description=todo.description,
        completed=todo.completed,
        created_at=todo.created_at,
        updated_at=todo.updated_at,
    )


def _todo_of(row: TaskRow) -> bytes:
    return _encode(_Todo(row.title, row.description, row.completed, row.created_at, row.updated_at))


class ChatStore:
    """The chat assistant's data on ``records`` (``store.records()``); ``shared``: several
    processes use the store at once (``store.shared``), so holds are real. ``clock``: the
    wall clock rows and holds are stamped with. Every call is one transaction of the
    records (a write that lost to another writer reads again and tries once more), and a
    user only ever reaches their own to-dos and conversations: another user's id finds
    nothing (``None``, ``[]``, :class:`ConversationNotFound`) and changes nothing.
    :meth:`aclose` closes ``records``."""

    def __init__(self, records: RecordStore, *, shared: bool, clock: Callable[[], float] = time.time) -> None:
        self.records = records
        self.shared = shared
        self.clock = clock
        self._held: dict[str, int] = {}
        """A store one process owns: the conversations this process holds now (a count)."""
        self._known: OrderedDict[str, Read] = OrderedDict()
        """The record each conversation had when last read or written here (at most
        :data:`KNOWN`, the least recently used forgotten first): a guess, never trusted —
        a write at its version is refused if another writer came first, and read again."""
        self._ids: tuple[int, int] | None = None
        """A store one process owns: the to-do ids drawn and not given yet, ``[next, end)``."""
        self._refill: anyio.Lock | None = None

    def _remember(self, conversation_id: str, read: Read | None) -> None:
        if read is None:
            self._known.pop(conversation_id, None)
            return
        self._known[conversation_id] = read
        self._known.move_to_end(conversation_id)
        if len(self._known) > KNOWN:
            self._known.popitem(last=False)

    # -- conversations ------------------------------------------------------------------------

    async def _read(self, conversation_id: str) -> Read | None:
        found = (await self.records.get(CONVERSATIONS, [conversation_id])).get(conversation_id)
        read = None if found is None else (found.version, _conversation(found.body))
        self._remember(conversation_id, read)
        return read

    async def _read_with_history(
        self, conversation_id: str, limit: int
    ) -> tuple[Read | None, list[ChatMessage]]:
        """The conversation's record and its last ``limit`` messages, in one read when its
        message count is known here (a second read for the messages otherwise)."""
        known = self._known.get(conversation_id)
        guess = [] if known is None else _last_keys(conversation_id, known[1].count, limit)
        found = await self.records.get(CONVERSATIONS, [conversation_id, *guess])
        kept = found.get(conversation_id)
        read = None if kept is None else (kept.version, _conversation(kept.body))
        self._remember(conversation_id, read)
        if read is None:
            return None, []
        keys = _last_keys(conversation_id, read[1].count, limit)
        missing = [key for key in keys if key not in found]
        if missing:
            found.update(await self.records.get(MESSAGES, missing))
        return read, [_message(found[key].body) for key in keys if key in found]

    async def _mine(self, user_id: str, conversation_id: str) -> Read:
        read = await self._read(conversation_id)
        if read is None or read[1].user != user_id:
            raise ConversationNotFound(conversation_id)
        return read

    def _stale(self, read: Read, token: int | None) -> bool:
        """A remembered record whose hold differs from the writer's: read it again before
        refusing (the writer's hold may be newer than what is remembered)."""
        return self.shared and token is not None and read[1].hold_token != token

    def _fenced(self, conversation_id: str, read: Read | None, token: int | None, action: str) -> None:
        """Refuse a write under hold ``token`` once another holder took the conversation."""
        if token is None or not self.shared:
            return
        current = None if read is None else read[1].hold_token
        if current != token:
            raise Fenced(
                f"conversation {conversation_id!r} ({action})", token, current, "another request holds it now"
            )

    async def open_conversation(self, user_id: str, conversation_id: str, *, create: bool) -> None:
        """Make sure the conversation is the user's: create it (``create``), or raise
        :class:`ConversationNotFound` (also for another user's conversation)."""
        for _ in range(_TRIES):
            read = await self._read(conversation_id)
            if read is not None:
                if read[1].user != user_id:
                    raise ConversationNotFound(conversation_id)
                return
            if not create:
                raise ConversationNotFound(conversation_id)
            now = self.clock()
            made = _Conversation(user_id, now, now)
            try:
                await self.records.write(
                    [
                        (CONVERSATIONS, Put(conversation_id, _encode(made), expect=0)),
                        (IDLE, Put(idle_key(now, conversation_id), b"")),
                    ]
                )
                return
            except Conflict:
                continue  # made at the same moment by another request: whose is it?
        raise StorageError(f"conversation {conversation_id!r}: could not be opened ({_TRIES} tries)")

    async def load_history(self, user_id: str, conversation_id: str, limit: int) -> list[ChatMessage]:
        """The conversation's last ``limit`` messages, oldest first (``[]``: not the user's)."""
        read, history = await self._read_with_history(conversation_id, limit)
        return [] if read is None or read[1].user != user_id else history

    async def load_conversation(
        self, user_id: str, conversation_id: str, limit: int
    ) -> tuple[StoredPending | None, list[ChatMessage]]:
        """What a request starts from: the pending confirmation (if any) and the last
        ``limit`` messages, oldest first. :class:`ConversationNotFound` if the
        conversation is not the user's."""
        read, history = await self._read_with_history(conversation_id, limit)
        if read is None or read[1].user != user_id:
            raise ConversationNotFound(conversation_id)
        return read[1].pending, history

    async def load_pending(self, user_id: str, conversation_id: str) -> StoredPending | None:
        """The confirmation the user was asked for in this conversation, if any."""
        read = await self._read(conversation_id)
        return None if read is None or read[1].user != user_id else read[1].pending

    async def save_turn(
        self,
        user_id: str,
        conversation_id: str,
        messages: list[ChatMessage],
        pending: StoredPending | None,
        *,
        hold: int | None = None,
    ) -> None:
        """Append a request's messages and set (or clear, with ``None``) its pending
        confirmation, all in one transaction; :class:`ConversationNotFound` if the
        conversation is not the user's. ``hold``: the token of the request's hold — the
        turn is refused whole (``Fenced``, nothing written) once another holder took the
        conversation."""
        for message in messages:
            if message.role not in ("user", "assistant") or message.content is None:
                raise InvalidInput(
                    f"a kept message is the user's or the assistant's text, got role {message.role!r}",
                    field="role",
                    value=message.role,
                )
        bodies = [_encode(message) for message in messages]
        read = self._known.get(conversation_id)
        for attempt in range(_TRIES):
            if read is None or read[1].user != user_id or (attempt == 0 and self._stale(read, hold)):
                read = await self._mine(user_id, conversation_id)
            version, conversation = read
            self._fenced(conversation_id, read, hold, "save a turn")
            # idle since its newest message (its making, until it has one)
            spoken = [m.at for m in messages] + ([conversation.last_at] if conversation.count else [])
            last_at = max(spoken) if spoken else conversation.last_at
            count = conversation.count
            changed = msgspec.structs.replace(
                conversation, count=count + len(messages), pending=pending, last_at=last_at
            )
            changes: list[Change] = [(CONVERSATIONS, Put(conversation_id, _encode(changed), expect=version))]
            changes += [
                (MESSAGES, Put(message_key(conversation_id, count + n), body))
                for n, body in enumerate(bodies, 1)
            ]
            old_entry, new_entry = (
                idle_key(conversation.last_at, conversation_id),
                idle_key(last_at, conversation_id),
            )
            if old_entry != new_entry:
                changes.append((IDLE, Put(old_entry, None)))
                changes.append((IDLE, Put(new_entry, b"")))
            try:
                written = await self.records.write(changes)
            except Conflict:
                read = None  # another write to the conversation came first: on what it left
                continue
            self._remember(conversation_id, (written[CONVERSATIONS, conversation_id], changed))
            return
        raise StorageError(f"conversation {conversation_id!r}: the turn lost {_TRIES} times to other writers")

    async def take_pending(
        self, user_id: str, conversation_id: str, expected: StoredPending, *, hold: int | None = None
    ) -> bool:
        """Remove the pending confirmation if it is still exactly ``expected``: ``True``
        for the one caller that took it (across every process sharing the store).
        ``hold``: refused with ``Fenced`` once another holder took the conversation."""
        for _ in range(_TRIES):
            read = await self._read(conversation_id)
            if read is None or read[1].user != user_id or read[1].pending != expected:
                return False
            self._fenced(conversation_id, read, hold, "take a confirmation")
            taken = msgspec.structs.replace(read[1], pending=None)
            try:
                await self.records.put(CONVERSATIONS, [Put(conversation_id, _encode(taken), expect=read[0])])
                return True
            except Conflict:
                continue
        return False

    async def hold_conversation(self, conversation_id: str, holder: str, seconds: float) -> int | None:
        """Take the conversation for one request for at most ``seconds`` across every
        process sharing the store: the hold's fencing token (``None``: another holder has
        it now, or there is no such conversation). The token stays while ``holder`` keeps a
        live hold, and grows when the conversation passes to another holder (or a lapsed
        hold is taken again). A store one process owns always answers 1."""
        if not self.shared:
            self._held[conversation_id] = self._held.get(conversation_id, 0) + 1
            return 1
        for _ in range(_TRIES):
            read = await self._read(conversation_id)
            if read is None:
                return None
            version, conversation = read
            now = self.clock()
            live = conversation.holder is not None and conversation.hold_until >= now
            if live and conversation.holder != holder:
                return None
            token = conversation.hold_token if live else conversation.hold_token + 1
            held = msgspec.structs.replace(
                conversation, holder=holder, hold_until=now + seconds, hold_token=token
            )
            try:
                versions = await self.records.put(
                    CONVERSATIONS, [Put(conversation_id, _encode(held), expect=version)]
                )
            except Conflict:
                continue
            self._remember(conversation_id, (versions[conversation_id], held))
            return token
        return None

    async def let_go_conversation(self, conversation_id: str, holder: str) -> None:
        """Give back a hold ``holder`` has (nothing if it has none). The holding ends: a
        write still on its way under its token is refused on a shared store."""
        if not self.shared:
            count = self._held.pop(conversation_id, 0) - 1
            if count > 0:
                self._held[conversation_id] = count
            return
        for _ in range(_TRIES):
            read = await self._read(conversation_id)
            if read is None or read[1].holder != holder:
                return
            free = msgspec.structs.replace(
                read[1], holder=None, hold_until=0.0, hold_token=read[1].hold_token + 1
            )
            try:
                await self.records.put(CONVERSATIONS, [Put(conversation_id, _encode(free), expect=read[0])])
                return
            except Conflict:
                continue

    async def forget_idle(self, before: float, *, limit: int = 1000) -> int:
        """Delete at most ``limit`` conversations with no turn since ``before`` (their
        messages and pending confirmation with them), never one held by a request now;
        how many went (``[retention] chat_for``). A user's to-do list is not touched."""
        now = self.clock()
        index = await self.records.scan(IDLE, limit=limit + len(self._held) + 64)
        idle: list[tuple[str, str]] = []
        for record in index:
            stamp, _, conversation_id = record.key.partition(SEP)
            if float(stamp) >= before:
                break
            idle.append((record.key, conversation_id))
        found = await self.records.get(CONVERSATIONS, [c for _, c in idle]) if idle else {}
        gone = 0
        stale: list[Put] = []  # index entries their conversation outlived: dropped together
        for key, conversation_id in idle:
            if gone >= limit:
                break
            kept = found.get(conversation_id)
            conversation = None if kept is None else _conversation(kept.body)
            own = None if conversation is None else idle_key(conversation.last_at, conversation_id)
            if kept is None or conversation is None or conversation.last_at >= before:
                if key != own:  # its conversation is gone, or was spoken in since (a newer entry stands)
                    stale.append(Put(key, None))
                continue
            if conversation_id in self._held or (
                conversation.holder is not None and conversation.hold_until >= now
            ):
                continue
            changes: list[Change] = [
                (CONVERSATIONS, Put(conversation_id, None, expect=kept.version)),
                (IDLE, Put(key, None)),
            ]
            if own is not None and own != key:  # an entry of another grain (written before)
                changes.append((IDLE, Put(own, None)))
            try:  # the conversation first (a turn racing it loses), then its messages
                await self.records.write(changes)
            except Conflict:
                continue  # spoken in, or held, since it was read: it stays
            self._remember(conversation_id, None)
            await self.records.drop(MESSAGES, conversation_id + SEP)
            gone += 1
        if stale:
            await self.records.put(IDLE, stale)
        return gone

    # -- to-dos -------------------------------------------------------------------------------

    async def _under(self, hold: ConversationHold | None, action: str) -> list[Change]:
        """What a to-do write carries so the hold is checked in its transaction: the
        conversation's record at the version read (on a shared store); ``Fenced`` at once
        if another holder has it already."""
        if hold is None or not self.shared:
            return []
        read = await self._read(hold.conversation_id)
        self._fenced(hold.conversation_id, read, hold.token, action)
        assert read is not None
        return [(CONVERSATIONS, Put(hold.conversation_id, _encode(read[1]), expect=read[0]))]

    async def add_task(
        self, user_id: str, title: str, description: str = "", *, hold: ConversationHold | None = None
    ) -> TaskRow:
        """A new to-do of the user's, not completed; its ``id`` is new in the store.
        ``hold`` (here and in every to-do write): the request's hold, checked in the same
        transaction — ``Fenced`` and nothing changed once another holder took it."""
        todo_id = await self._new_id()
        for _ in range(_TRIES):
            under = await self._under(hold, "add a task")
            now = self.clock()
            row = TaskRow(id=todo_id, title=title, description=description, created_at=now, updated_at=now)
            added = Put(todo_key(user_id, todo_id), _todo_of(row), expect=0)
            try:
                await self.records.write([*under, (TODO, added)])
            except Conflict:
                continue  # the hold's record moved on (a turn saved): check the hold again
            return row
        raise StorageError(f"user {user_id!r}: a to-do could not be added ({_TRIES} tries)")

    async def _new_id(self) -> int:
        """A to-do id never given before. On a shared store each is drawn from the counter
        as it is needed (ids follow the order to-dos were added, across processes); a store
        one process owns draws :data:`ID_BLOCK` at a time and gives them out here, so
        to-dos added at once never queue for the counter (a restart leaves a gap)."""
        if self.shared:
            return await self.records.bump(TODO, COUNTER)
        while True:
            block = self._ids
            if block is not None and block[0] < block[1]:
                self._ids = (block[0] + 1, block[1])
                return block[0]
            if self._refill is None:
                self._refill = anyio.Lock()
            async with self._refill:
                if self._ids is None or self._ids[0] >= self._ids[1]:
                    last = await self.records.bump(TODO, COUNTER, ID_BLOCK)
                    self._ids = (last - ID_BLOCK + 1, last + 1)

    async def list_tasks(self, user_id: str, status: str = "all") -> list[TaskRow]:
        """The user's to-dos (``"all"``, ``"pending"`` or ``"completed"``), oldest first."""
        found = await self.records.scan(TODO, f"{user_id}{SEP}i")
        rows = [_row(record.key, record) for record in found]
        if status == "pending":
            return [row for row in rows if not row.completed]
        if status == "completed":
            return [row for row in rows if row.completed]
        return rows

    async def _change(
        self,
        user_id: str,
        todo_id: int,
        change: Callable[[TaskRow], TaskRow | None],
        hold: ConversationHold | None,
        action: str,
    ) -> tuple[TaskRow, TaskRow | None] | None:
        """Apply ``change`` to one to-do (``None`` from it: delete); the to-do before and
        after, or ``None`` if it is not the user's."""
        key = todo_key(user_id, todo_id)
        for _ in range(_TRIES):
            under = await self._under(hold, action)
            kept = (await self.records.get(TODO, [key])).get(key)
            if kept is None:
                return None
            before = _row(key, kept)
            after = change(before)
            body = None if after is None else _todo_of(after)
            try:
                await self.records.write([*under, (TODO, Put(key, body, expect=kept.version))])
                return before, after
            except Conflict:
                continue
        raise StorageError(f"user {user_id!r}: to-do {todo_id} could not be changed ({_TRIES} tries)")

    async def update_task(
        self,
        user_id: str,
        task_id: int,
        *,
        title: str | None = None,
        description: str | None = None,
        hold: ConversationHold | None = None,
    ) -> TaskRow | None:
        """Change what is given; the to-do as it is now, or ``None`` (not the user's)."""
        now = self.clock()

        def change(row: TaskRow) -> TaskRow:
            return msgspec.structs.replace(
                row,
                title=row.title if title is None else title,
                description=row.description if description is None else description,
                updated_at=now,
            )

        done = await self._change(user_id, task_id, change, hold, "update a task")
        return None if done is None else done[1]

    async def complete_task(
        self, user_id: str, task_id: int, *, hold: ConversationHold | None = None
    ) -> TaskRow | None:
        """Mark it completed; the to-do, or ``None`` (not the user's)."""
        now = self.clock()
        done = await self._change(
            user_id,
            task_id,
            lambda row: msgspec.structs.replace(row, completed=True, updated_at=now),
            hold,
            "complete a task",
        )
        return None if done is None else done[1]

    async def delete_task(
        self, user_id: str, task_id: int, *, hold: ConversationHold | None = None
    ) -> TaskRow | None:
        """Remove it; the to-do as it was, or ``None`` (not the user's)."""
        done = await self._change(user_id, task_id, lambda row: None, hold, "delete a task")
        return None if done is None else done[0]

    async def delete_tasks(
        self,
        user_id: str,
        task_ids: Sequence[int],
        *,
        only_completed: bool = False,
        hold: ConversationHold | None = None,
    ) -> list[TaskRow]:
        """Remove those of ``task_ids`` that are the user's (and completed, with
        ``only_completed``), in one transaction; the to-dos removed, as they were, by id."""
        keys = {todo_id: todo_key(user_id, todo_id) for todo_id in sorted(set(task_ids))}
        for _ in range(_TRIES):
            under = await self._under(hold, "delete tasks")
            found = await self.records.get(TODO, list(keys.values())) if keys else {}
            rows = [_row(key, found[key]) for key in keys.values() if key in found]
            gone = [row for row in rows if row.completed or not only_completed]
            changes: list[Change] = [
                (TODO, Put(keys[row.id], None, expect=found[keys[row.id]].version)) for row in gone
            ]
            if not changes:
                return []
            try:
                await self.records.write([*under, *changes])
                return gone
            except Conflict:
                continue
        raise StorageError(f"user {user_id!r}: to-dos could not be deleted ({_TRIES} tries)")

    async def aclose(self) -> None:
        """Close the records."""
        await self.records.aclose()
