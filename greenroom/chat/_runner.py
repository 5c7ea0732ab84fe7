"""``AgentRunner`` (spec 001): a short-lived actor per request, interrupted on its deadline.

A long-lived :class:`ChatRunnerActor` owns the requests. ``AgentRunner.run`` asks it for
a turn on the conversation (``Admit``): one request per conversation at a time, in
arrival order; different conversations run in parallel. The runner actor then spawns a
:class:`ChatRequestActor` as its child — interruptible, so the request's deadline (30 s by
default) interrupts it: the model call and the tool call in flight are cancelled, the
actor is stopped, and ``run`` raises ``TimeoutError``. A request actor that crashes is
stopped by the runner's strategy and counted (``ChatRunnerActor.crashes``); its caller
gets the system-error reply, never the exception.

A request: load the conversation's pending confirmation and history from the store
(stateless between requests), take the confirmation atomically if the message is
"yes delete" (so it runs exactly once), let the engine decide, then store the user's
message, the reply (with its tool calls) and any new pending confirmation in one
transaction. An interrupted request stores nothing of the conversation (a tool call it
already made is the one thing that happened).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from .. import _tracing
from .._errors import InvalidInput
from .._guard import NoPublicConstructor
from ..actors import Actor, ActorRef, ActorSystem, Directive, PendingReply, SupervisorStrategy
from ..messages import ChatMessage
from ..store import Fenced
from . import _replies as replies
from ._engine import LLMAgentEngine, confirmation_phrase, is_confirmation
from ._kept import ChatStore, ConversationHold, ConversationNotFound, TaskRow
from ._stream import ChatEvents, ReplyStreamer, _Ended
from ._tools import holding
from ._types import (
    AgentContext,
    AgentResult,
    DecisionContext,
    MessageHistory,
    PendingAction,
    ToolCallRecord,
    check_id,
    check_message,
)

logger = logging.getLogger("greenroom.chat")


class _Admit:
    __slots__ = ("conversation_id",)

    def __init__(self, conversation_id: str) -> None:
        self.conversation_id = conversation_id


class _Release:
    __slots__ = ("child", "conversation_id")

    def __init__(self, conversation_id: str, child: ActorRef | None) -> None:
        self.conversation_id = conversation_id
        self.child = child


STREAM_BUFFER = 64
"""Events of a streamed request held for a reader that lags, before the request waits."""

SERVED_REMEMBERED = 10_000
"""(user, conversation) pairs an :class:`AgentRunner` remembers serving (~1.5 MB): a
request on one of them skips the read that opens a conversation."""


class _Run:
    __slots__ = ("context", "hold", "message", "opened", "streamer")

    def __init__(
        self,
        context: AgentContext,
        message: str,
        opened: bool,
        streamer: ReplyStreamer | None,
        hold: int | None = None,
    ) -> None:
        self.context = context
        self.message = message
        self.streamer = streamer
        self.opened = opened
        """``False``: the runner skipped opening a conversation it served before."""
        self.hold = hold
        """The token of the request's hold on its conversation: every write names it."""


class _Refused:
    """The request was bad input (``error``): an answer for its caller, not a crash."""

    __slots__ = ("error",)

    def __init__(self, error: InvalidInput) -> None:
        self.error = error


class ChatRequestActor(Actor):
    """One request, then it is stopped. Interruptible: its deadline cuts it short.

    A request refused as bad input (another user's conversation) is answered as such
    (the caller gets the ``InvalidInput``); only a failure of greenroom's own is a crash."""

    interruptible = True

    def __init__(self, engine: LLMAgentEngine, store: ChatStore, clock: Any = time.time) -> None:
        self.engine = engine
        self.store = store
        self.clock = clock

    async def on_start(self) -> None:
        self.engine.stop._attach(self.context.ref)  # an immediate stop interrupts this request

    async def on_stop(self) -> None:
        self.engine.stop._detach(self.context.ref)

    def on_interrupted(self, message: Any) -> Any:
        """A request cut short by the engine's immediate stop answers that it was stopped
        (nothing of the unfinished turn is stored; a tool call that finished stays done);
        any other interruption (the deadline, a caller that left) raises ``Interrupted``."""
        if isinstance(message, _Run) and self.engine.stop.immediate:
            return AgentResult(False, replies.STOPPED, [], replies.STOPPED)
        return super().on_interrupted(message)

    async def receive(self, message: Any) -> Any:
        if not isinstance(message, _Run):
            raise TypeError(f"ChatRequestActor does not handle {type(message).__name__} messages")
        try:
            return await self._request(message)
        except InvalidInput as error:
            return _Refused(error)

    async def _request(self, message: _Run) -> AgentResult:
        context, text = message.context, message.message
        user, conversation = context.user_id, context.conversation_id
        if self.engine.stop.requested:  # nothing starts after a stop: no turn, no pending taken
            return AgentResult(False, replies.STOPPED, [], replies.STOPPED)
        store = self.store
        limit = max(self.engine.config.include_history_messages, 1)
        try:
            stored_pending, stored = await store.load_conversation(user, conversation, limit)  # one read
        except ConversationNotFound:
            # forgotten by retention before this request held it (served here before, or
            # even opened a moment ago): open it anew, as a first message does — another
            # user's is still refused by the open
            await store.open_conversation(user, conversation, create=True)
            stored_pending, stored = await store.load_conversation(user, conversation, limit)
        pending: PendingAction | None = None
        live = stored_pending is not None and stored_pending.expires_at >= self.clock()
        if (
            live
            and stored_pending is not None
            and is_confirmation(text)
            and not is_confirmation(text, stored_pending)
        ):  # "yes delete" to "confirm with 'yes delete 3 tasks'": say the phrase, keep it asked
            answer = replies.EXACT_PHRASE.format(phrase=confirmation_phrase(stored_pending))
            now = self.clock()
            await store.save_turn(
                user,
                conversation,
                [
                    ChatMessage("user", text, at=now),
                    ChatMessage("assistant", answer, at=now),
                ],
                stored_pending,
                hold=message.hold,
            )
            return AgentResult(True, answer, [], None)
        if (
            live
            and stored_pending is not None
            and is_confirmation(text, stored_pending)
            and await store.take_pending(user, conversation, stored_pending, hold=message.hold)  # one taker
        ):
            pending = stored_pending
        history = (
            tuple(MessageHistory.of(message) for message in stored) if stored else context.message_history
        )
        hold = None if message.hold is None else ConversationHold(conversation, message.hold)
        with holding(hold):  # the assistant's to-do writes are made under the request's hold
            decision = await self.engine.process_message(
                DecisionContext(user, text, conversation, history, pending), streamer=message.streamer
            )
        response = decision.response_text or decision.clarification_question or replies.SYSTEM_ERROR
        if pending is None and is_confirmation(text) and not decision.records:
            response = replies.NOTHING_PENDING
        # a model's reply may carry a NUL character, which no user wants to see and
        # PostgreSQL cannot store: it becomes U+FFFD, as in any text decoder
        response = response.replace("\x00", "\ufffd")
        now = self.clock()
        await store.save_turn(
            user,
            conversation,
            [
                ChatMessage("user", text, at=now),
                ChatMessage("assistant", response, at=now, outcomes=tuple(decision.records)),
            ],
            decision.pending_action,  # spec 002's PendingAction is what is stored
            hold=message.hold,
        )
        calls = [ToolCallRecord.of(outcome) for outcome in decision.records]  # spec 001's view
        return AgentResult(decision.error is None, response, calls, decision.error)


class ChatRunnerActor(Actor):
    """Admits one request per conversation at a time and owns the request actors."""

    def __init__(self, engine: LLMAgentEngine, store: ChatStore, clock: Any = time.time) -> None:
        self.engine = engine
        self.store = store
        self.clock = clock
        self.crashes = 0
        self._busy: set[str] = set()
        self._waiting: dict[str, deque[PendingReply]] = {}
        self.supervisor_strategy = SupervisorStrategy(decider=self._request_failed)  # type: ignore[misc]

    def _request_failed(self, error: Exception) -> Directive:
        self.crashes += 1
        logger.error("chat: a request actor failed (%s); it is stopped", type(error).__name__, exc_info=error)
        return Directive.STOP

    async def receive(self, message: Any) -> Any:
        if isinstance(message, _Admit):
            pending = self.context.reply_later()
            assert pending is not None, "Admit must be asked"
            conversation = message.conversation_id
            if conversation in self._busy:
                self._waiting.setdefault(conversation, deque()).append(pending)
                return None
            self._busy.add(conversation)
            await self._start(conversation, pending)
            return None
        if isinstance(message, _Release):
            if message.child is not None and message.child.is_alive:
                self.context.stop(message.child, now=True)
            await self._next(message.conversation_id)
            return None
        raise TypeError(f"ChatRunnerActor does not handle {type(message).__name__} messages")

    async def _start(self, conversation: str, pending: PendingReply) -> None:
        child = await self.context.spawn(
            lambda: ChatRequestActor(self.engine, self.store, self.clock), mailbox_size=4
        )
        pending.succeed(child, if_lost=lambda: self.context.ref.tell(_Release(conversation, child)))

    async def _next(self, conversation: str) -> None:
        queue = self._waiting.get(conversation)
        while queue:
            pending = queue.popleft()
            if pending.wanted:  # its caller may have given up while it waited
                if not queue:
                    del self._waiting[conversation]
                await self._start(conversation, pending)
                return
        self._waiting.pop(conversation, None)
        self._busy.discard(conversation)


class AgentRunner(metaclass=NoPublicConstructor):
    """Spec 001's runner: ``await runner.run(context, message) -> AgentResult``.

    Build it with :meth:`spawn` (a long-lived runner actor in ``system``; calling the class
    is a ``TypeError``: a handle over an actor is made where the actor is). ``timeout``:
    the request deadline in seconds (the engine config's ``timeout_seconds`` by default,
    30): waiting for the conversation's turn counts.
    """

    _made_by = "AgentRunner.spawn(system, engine, store) or open_assistant(...) builds one"

    def __init__(self, ref: ActorRef, engine: LLMAgentEngine, store: ChatStore, timeout: float) -> None:
        self.ref = ref
        self.engine = engine
        self.store = store
        self.timeout = timeout
        self.holder = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        """This runner's name when it holds a conversation in a shared store."""
        self._served: dict[tuple[str, str], None] = {}
        """(user, conversation) pairs this runner served, least recent first (bounded)."""

    @classmethod
    async def spawn(
        cls,
        system: ActorSystem,
        engine: LLMAgentEngine,
        store: ChatStore,
        *,
        name: str | None = "chat-runner",
        timeout: float | None = None,
        clock: Any = time.time,
    ) -> AgentRunner:
        """``clock``: the wall clock confirmations expire by (the engine's should match)."""
        ref = await system.spawn(lambda: ChatRunnerActor(engine, store, clock), name=name)
        deadline = float(engine.config.timeout_seconds) if timeout is None else timeout
        return cls._create(ref, engine, store, deadline)

    async def new_conversation(self, user_id: str) -> str:
        """Start a conversation for ``user_id``; returns its id. (``run`` also opens a
        conversation the caller names on its first message.)"""
        check_id("user_id", user_id)
        conversation = uuid.uuid4().hex
        await self.store.open_conversation(user_id, conversation, create=True)
        return conversation

    async def admit(self, context: AgentContext, message: str) -> None:
        """What :meth:`run` checks first, on its own: ``message`` (``InvalidInput`` naming
        it) and the conversation, opened for ``context.user_id`` if it is new
        (``ConversationNotFound`` if it is another user's). A caller that must refuse bad
        input before it answers — an HTTP stream, whose status goes out with its first
        byte — calls this, then :meth:`stream`."""
        if not isinstance(context, AgentContext):
            raise TypeError(f"AgentRunner.admit takes an AgentContext, got {type(context).__name__}")
        check_message(message)
        await self.store.open_conversation(context.user_id, context.conversation_id, create=True)

    async def history(self, user_id: str, conversation_id: str, limit: int) -> list[ChatMessage]:
        """The newest ``limit`` messages of ``user_id``'s conversation, oldest first
        (``InvalidInput`` for a bad id; ``ConversationNotFound`` for one the user does not
        have — another user's included: it is not said to exist)."""
        check_id("user_id", user_id)
        check_id("conversation_id", conversation_id)
        await self.store.open_conversation(user_id, conversation_id, create=False)
        return await self.store.load_history(user_id, conversation_id, limit)

    async def user_tasks(self, user_id: str) -> list[TaskRow]:
        """``user_id``'s tasks (the assistant's task list), in the order the user sees them."""
        check_id("user_id", user_id)
        return await self.store.list_tasks(user_id, "all")

    async def run(
        self, context: AgentContext, message: str, *, streamer: ReplyStreamer | None = None
    ) -> AgentResult:
        """Run one request: at most ``timeout`` seconds, then ``TimeoutError`` (the
        request actor is interrupted: the model and tool calls in flight are cancelled).

        The conversation is the caller's to name (spec 001: the chat API owns its ids): an
        id this store has not seen is opened for ``context.user_id`` on its first message.
        Raises ``InvalidInput`` for a bad message or another user's conversation (nothing
        stored changes; not counted as a crash). Every other failure is an ``AgentResult(success=False)`` with
        the spec's friendly text. Cancelling the caller interrupts the request the same
        way. ``streamer``: where the answer goes as it is made (see :meth:`stream`).
        """
        if not isinstance(context, AgentContext):
            raise TypeError(f"AgentRunner.run takes an AgentContext, got {type(context).__name__}")
        check_message(message)
        if _tracing.enabled:
            with _tracing.span("chat request", attributes={"greenroom.message_chars": len(message)}):
                return await self._run(context, message, streamer)
        return await self._run(context, message, streamer)

    @asynccontextmanager
    async def stream(self, context: AgentContext, message: str) -> AsyncIterator[ChatEvents]:
        """:meth:`run`, with the answer as it is made: ``async for event in events`` gives
        the reply's :class:`ReplyDelta` s and the tool calls' :class:`ToolStarted` /
        :class:`ToolFinished` (never the user id), then ``events.result`` is the
        ``AgentResult`` ``run`` returns. Bad input raises here, before any event; past
        the deadline, iterating raises ``TimeoutError``. Leaving the block before the
        events ended (or being cancelled) interrupts the request: the model's stream is
        closed (the server stops generating) and nothing of the turn is stored. A slow
        reader slows the request down (the events are not buffered without bound)."""
        if not isinstance(context, AgentContext):
            raise TypeError(f"AgentRunner.stream takes an AgentContext, got {type(context).__name__}")
        check_message(message)
        send, receive = anyio.create_memory_object_stream[Any](STREAM_BUFFER)
        streamer = ReplyStreamer(send.send)

        async def produce() -> None:
            async with send:
                try:
                    result = await self.run(context, message, streamer=streamer)
                    await streamer.settle(result.response)
                except anyio.get_cancelled_exc_class():
                    raise
                except Exception as error:  # the reader raises it
                    await send.send(_Ended(None, error))
                    return
                await send.send(_Ended(result, None))

        failure: Exception | None = None
        async with anyio.create_task_group() as tg, receive:
            tg.start_soon(produce)
            try:
                yield ChatEvents(receive)
            except Exception as error:  # the reader's (or the request's): raised as it is, below
                failure = error
            finally:
                tg.cancel_scope.cancel()
        if failure is not None:
            raise failure

    async def _run(
        self, context: AgentContext, message: str, streamer: ReplyStreamer | None = None
    ) -> AgentResult:
        conversation = context.conversation_id
        child: ActorRef | None = None
        held = False
        served = (context.user_id, conversation)
        try:
            with anyio.fail_after(self.timeout):
                # Opened before anything waits on it (a hold is taken on a stored
                # conversation) -- unless this runner served it to this user before: a
                # conversation's owner never changes, so that read would only repeat what the
                # request's own load checks again (and a conversation forgotten since is
                # opened anew by the hold and the load, below).
                opened = served not in self._served
                if opened:
                    await self.store.open_conversation(context.user_id, conversation, create=True)
                child = await self.ref.ask(_Admit(conversation), timeout=None)
                assert child is not None
                hold = await self._hold(context.user_id, conversation, opened)
                held = True
                run = _Run(context, message, opened, streamer, hold)
                result: AgentResult | _Refused = await child.ask(run, timeout=None)
                if isinstance(result, _Refused):
                    raise result.error
                self._remember(served)
                return result
        except TimeoutError:
            raise TimeoutError(
                f"the chat request took longer than {self.timeout:g}s and was stopped"
            ) from None
        except anyio.get_cancelled_exc_class():
            raise
        except Fenced as fenced:  # paused past its hold: another request has the conversation
            # (before InvalidInput, which it is: the caller's input was fine)
            logger.warning("chat: a request's turn was refused, nothing of it stored: %s", fenced)
            return AgentResult(False, replies.SYSTEM_ERROR, [], replies.SYSTEM_ERROR)
        except InvalidInput:
            raise
        except Exception as error:
            logger.error("chat: a request failed: %s", type(error).__name__, exc_info=error)
            return AgentResult(False, replies.SYSTEM_ERROR, [], replies.SYSTEM_ERROR)
        finally:
            if held:  # before the release: the runner admits its next request on it after
                with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                    try:
                        await self.store.let_go_conversation(conversation, self.holder)
                    except Exception as error:  # the store is away: the hold lapses at the deadline
                        logger.warning("chat: could not let go of a conversation: %s", error)
            if child is not None:
                try:
                    self.ref.tell(_Release(conversation, child))
                except Exception:  # the runner is stopping: its children stop with it
                    logger.debug("chat: the runner is gone; %r stops with it", child.name)

    async def _hold(self, user_id: str, conversation: str, opened: bool) -> int:
        """Wait (under the caller's deadline) until no other process sharing the store
        serves this conversation; that request is on another host, so nothing here can
        signal its end: the store is asked again every 50 ms. A refusal right after an
        open is a conversation another holder has; any other first opens it (a shared
        store holds stored conversations only, and one may have been forgotten since —
        by retention, even between this request's open and its hold). Once held,
        retention passes it by until the request lets go. Returns the hold's token."""
        while True:
            token = await self.store.hold_conversation(conversation, self.holder, self.timeout)
            if token:
                return token
            if not opened:
                await self.store.open_conversation(user_id, conversation, create=True)
                opened = True
                continue
            opened = False  # held elsewhere, or gone again: the next refusal opens it first
            await anyio.sleep(0.05)

    def _remember(self, served: tuple[str, str]) -> None:
        """Note a (user, conversation) served: the most recent ``SERVED_REMEMBERED``."""
        seen = self._served
        if seen.pop(served, False) is None or len(seen) < SERVED_REMEMBERED:
            seen[served] = None
            return
        del seen[next(iter(seen))]  # the least recently served
        seen[served] = None

    async def aclose(self) -> None:
        await self.ref.stop()
