"""The chat runner (specs 001 and 002) end to end: runner actor, request actors, the
engine, the MCP task tools, the SQLite store and the logs — on asyncio and trio."""

from __future__ import annotations

import logging
import random
import string
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from _support import eventually, file_log

from greenroom import ActorRef, ActorSystem
from greenroom._errors import InvalidInput
from greenroom.chat import (
    CHAT_DECISION,
    CHAT_TOOL,
    CONSTITUTION,
    AgentContext,
    AgentEngineConfig,
    AgentRunner,
    ChatStore,
    LLMAgentEngine,
    MCPToolExecutor,
    ToolResult,
    task_server,
)
from greenroom.chat import _replies as replies
from greenroom.embedded import SQLiteRecordStore, read_events
from greenroom.harness import Harness, RiskLevel, Sandbox, StopSignal, TokenBudget
from greenroom.llm import ChatModel, Price, RateLimited, RuleBasedModel, ScriptedModel, Unavailable
from greenroom.messages import ChatMessage, ChatReply, ChatRequest, Flush, ModelToolCall, ToolOutcome, Usage


class FilesChatStore(ChatStore):
    """The chat's data on a data dir's records (``records.sqlite3`` beside ``path``), as a
    daemon on the files keeps it."""

    def __init__(self, path: Path, *, clock: Any = time.time) -> None:
        super().__init__(SQLiteRecordStore(Path(path).parent / "records.sqlite3"), shared=False, clock=clock)


pytestmark = pytest.mark.anyio


@dataclass
class Chat:
    runner: AgentRunner
    store: FilesChatStore
    tools: MCPToolExecutor
    system: ActorSystem
    log: ActorRef
    data_dir: Path
    clock: list[float]

    async def say(self, user: str, conversation: str, message: str) -> Any:
        return await self.runner.run(AgentContext.from_request(user, conversation, []), message)


def open_chat(
    tmp_path: Path,
    model: ChatModel | None = None,
    *,
    config: AgentEngineConfig | None = None,
    timeout: float | None = None,
    store_class: type[FilesChatStore] = FilesChatStore,
    **engine_options: Any,
) -> Any:
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def opened() -> AsyncIterator[Chat]:
        now = [1_000_000.0]
        store = store_class(tmp_path / "chat.sqlite3", clock=lambda: now[0])
        try:
            async with MCPToolExecutor(task_server(store)) as tools, ActorSystem() as system:
                log = await system.spawn(lambda: file_log(tmp_path), name="log")
                engine = LLMAgentEngine(
                    model or RuleBasedModel(),
                    tools,
                    config=config,
                    log=log,
                    clock=lambda: now[0],
                    **engine_options,
                )
                runner = await AgentRunner.spawn(system, engine, store, timeout=timeout, clock=lambda: now[0])
                yield Chat(runner, store, tools, system, log, tmp_path, now)
                await runner.aclose()
                await log.stop()
        finally:
            await store.aclose()

    return opened()


async def test_a_conversation_end_to_end_in_the_specs_words(tmp_path: Path) -> None:
    async with open_chat(tmp_path) as chat:
        c = await chat.runner.new_conversation("alice")
        said = [
            (await chat.say("alice", c, message)).response
            for message in (
                "add buy milk",
                "add call mom",
                "show my tasks",
                "done buy milk",
                "show my tasks",
                "rename buy milk to buy oat milk",
            )
        ]
    assert said == [
        "Got it! Added 'buy milk' to your list. Anything else?",
        "Got it! Added 'call mom' to your list. Anything else?",
        "Here are your tasks:\n1. ☐ buy milk\n2. ☐ call mom",
        "Great! I've marked 'buy milk' as complete.",
        "Here are your tasks:\n1. ✓ buy milk\n2. ☐ call mom",
        "Updated! 'buy oat milk' now has a new title.",
    ]


async def test_greetings_questions_and_off_topic_use_no_tools(tmp_path: Path) -> None:
    async with open_chat(tmp_path) as chat:
        c = await chat.runner.new_conversation("alice")
        hello = await chat.say("alice", c, "hello")
        weather = await chat.say("alice", c, "what's the weather like?")
        bare = await chat.say("alice", c, "add")
    assert hello.success and not hello.has_tool_calls and hello.response.startswith("Hi!")
    assert not weather.has_tool_calls and "only help with your tasks" in weather.response
    assert not bare.has_tool_calls and bare.response.endswith("?")


async def test_every_decision_type_comes_from_what_the_model_means_not_punctuation(
    tmp_path: Path,
) -> None:
    """A greeting that ends in "?" is a reply (RESPOND_ONLY); a question is the model
    calling ``ask_clarification`` or a tool result that needs one ("which one?")."""
    async with open_chat(tmp_path) as chat:
        c = await chat.runner.new_conversation("alice")
        said = {}
        for message in (
            "hello",
            "add call mom",
            "add call dad",
            "add",
            "done call",
            "delete call mom",
        ):
            said[message] = (await chat.say("alice", c, message)).response
        await chat.log.ask(Flush())
    decided = [
        e.payload["decision_type"]
        for e in read_events(tmp_path / "events.jsonl")
        if e.type == CHAT_DECISION and e.payload["decision_type"] != "PENDING"
    ]
    assert decided == [
        "RESPOND_ONLY",
        "INVOKE_TOOL",
        "INVOKE_TOOL",
        "ASK_CLARIFICATION",
        "ASK_CLARIFICATION",
        "REQUEST_CONFIRMATION",
    ]
    assert said["hello"].endswith("?")  # a greeting with a question mark is still a reply
    assert said["add"] == "What should the task be called?"
    assert said["done call"].startswith("I found multiple tasks")


async def test_delete_asks_first_and_yes_delete_runs_exactly_once(tmp_path: Path) -> None:
    async with open_chat(tmp_path) as chat:
        c = await chat.runner.new_conversation("alice")
        await chat.say("alice", c, "add call mom")
        await chat.say("alice", c, "add call dad")
        asked = await chat.say("alice", c, "delete call mom")
        assert asked.response == "Do you really want to delete 'call mom'? Reply 'yes delete' to confirm."
        assert not asked.has_tool_calls and len(await chat.store.list_tasks("alice")) == 2
        done = await chat.say("alice", c, "yes delete")
        again = await chat.say("alice", c, "yes delete")
        left = [t.title for t in await chat.store.list_tasks("alice")]
    assert done.response == "I've removed 'call mom' from your tasks."
    assert [r.tool_name for r in done.tool_calls] == ["delete_task"]
    assert again.response == replies.NOTHING_PENDING and not again.has_tool_calls
    assert left == ["call dad"]


async def test_two_concurrent_yes_delete_delete_once(tmp_path: Path) -> None:
    async with open_chat(tmp_path) as chat:
        c = await chat.runner.new_conversation("alice")
        for title in ("one", "two", "three"):
            await chat.say("alice", c, f"add {title}")
        await chat.say("alice", c, "delete two")
        results: list[Any] = []
        async with anyio.create_task_group() as tg:
            for _ in range(2):

                async def confirm() -> None:
                    results.append(await chat.say("alice", c, "yes delete"))

                tg.start_soon(confirm)
        titles = sorted(t.title for t in await chat.store.list_tasks("alice"))
    assert titles == ["one", "three"]
    assert sum(r.has_tool_calls for r in results) == 1


async def test_a_bulk_delete_asks_with_its_own_phrase_and_removes_exactly_what_it_named(
    tmp_path: Path,
) -> None:
    """Spec 001's bulk operation: "That's a big action. Confirm with '[phrase]'." The
    confirmation is bound to the tasks completed when it was asked, and runs once."""
    async with open_chat(tmp_path) as chat:
        c = await chat.runner.new_conversation("alice")
        for title in ("buy milk", "call mom", "write report"):
            await chat.say("alice", c, f"add {title}")
        await chat.say("alice", c, "done buy milk")
        await chat.say("alice", c, "done call mom")
        asked = await chat.say("alice", c, "delete all completed tasks")
        (report,) = [t for t in await chat.store.list_tasks("alice") if t.title == "write report"]
        await chat.store.complete_task("alice", report.id)  # completed after the question
        reflex = await chat.say("alice", c, "yes delete")  # not the phrase: it is said, still asked
        confirmed: list[Any] = []
        async with anyio.create_task_group() as tg:
            for _ in range(2):

                async def confirm() -> None:
                    confirmed.append(await chat.say("alice", c, "Yes delete 2 tasks."))

                tg.start_soon(confirm)
        left = [t.title for t in await chat.store.list_tasks("alice")]
        none_left = await chat.say("alice", c, "clear completed")
    assert asked.response == (
        "This removes your 2 completed tasks: 'buy milk', 'call mom'. "
        "That's a big action. Confirm with 'yes delete 2 tasks'."
    )
    assert not asked.has_tool_calls
    assert reflex.response == "To confirm, reply 'yes delete 2 tasks'. Anything else cancels it."
    done = [r for r in confirmed if r.has_tool_calls]
    assert len(done) == 1 and done[0].response == "I've removed 2 completed tasks from your list."
    assert [r.response for r in confirmed if not r.has_tool_calls] == [replies.NOTHING_PENDING]
    assert left == ["write report"]  # completed after the question: not removed
    assert none_left.response == (
        "This removes your 1 completed task: 'write report'. "
        "That's a big action. Confirm with 'yes delete 1 task'."
    )


async def test_a_bulk_delete_with_nothing_completed_says_so(tmp_path: Path) -> None:
    async with open_chat(tmp_path) as chat:
        c = await chat.runner.new_conversation("alice")
        await chat.say("alice", c, "add buy milk")
        said = await chat.say("alice", c, "delete all completed tasks")
        tasks = await chat.store.list_tasks("alice")
    assert said.response == "You have no completed tasks to remove." and len(tasks) == 1


async def test_any_other_reply_cancels_and_a_confirmation_expires(tmp_path: Path) -> None:
    async with open_chat(tmp_path, config=AgentEngineConfig(confirmation_seconds=60)) as chat:
        c = await chat.runner.new_conversation("alice")
        await chat.say("alice", c, "add keep me")
        await chat.say("alice", c, "delete keep me")
        await chat.say("alice", c, "show my tasks")  # anything else cancels the pending delete
        cancelled = await chat.say("alice", c, "yes delete")
        await chat.say("alice", c, "delete keep me")
        chat.clock[0] += 61  # past the confirmation's expiry
        expired = await chat.say("alice", c, "yes delete")
        titles = [t.title for t in await chat.store.list_tasks("alice")]
    assert cancelled.response == replies.NOTHING_PENDING
    assert expired.response == replies.NOTHING_PENDING
    assert titles == ["keep me"]


class Intruder:
    """A model that tries to reach another user's tasks by naming them in its arguments."""

    def __init__(self, victim: str) -> None:
        self.victim = victim
        self.seen: list[ChatRequest] = []

    async def chat(self, request: ChatRequest, *, timeout: float | None = None) -> ChatReply:
        self.seen.append(request)
        if request.messages[-1].role == "tool":
            return ChatReply(text="done")
        return ChatReply(
            tool_calls=(
                ModelToolCall("a", "list_tasks", {"status": "all", "user_id": self.victim}),
                ModelToolCall("b", "complete_task", {"title": "secret plan", "user_id": self.victim}),
            )
        )

    async def aclose(self) -> None:
        pass


async def test_a_model_cannot_reach_another_users_tasks(tmp_path: Path) -> None:
    intruder = Intruder("alice")
    async with open_chat(tmp_path, intruder) as chat:
        await chat.store.add_task("alice", "secret plan")
        c = await chat.runner.new_conversation("mallory")
        result = await chat.say("mallory", c, "show everything")
        alice = await chat.store.list_tasks("alice")
        events = read_events(tmp_path / "events.jsonl")
    specs = intruder.seen[0].tools
    assert specs and all("user_id" not in str(spec.parameters) for spec in specs)  # never offered
    assert [r.tool_name for r in result.tool_calls] == ["list_tasks", "complete_task"]
    assert result.tool_calls[0].result["data"] == []  # mallory's own (empty) list
    assert result.tool_calls[1].result["error_code"] == "NOT_FOUND"
    assert all("user_id" not in r.parameters for r in result.tool_calls)
    assert not alice[0].completed
    assert not any("alice" in str(e.payload) or "mallory" in str(e.payload) for e in events)


async def test_a_hundred_concurrent_users_never_mix(tmp_path: Path) -> None:
    async with open_chat(tmp_path) as chat:
        conversations = {f"user{i}": await chat.runner.new_conversation(f"user{i}") for i in range(100)}

        async def user(name: str) -> None:
            for n in range(3):
                await chat.say(name, conversations[name], f"add {name} errand {n}")

        async with anyio.create_task_group() as tg:
            for name in conversations:
                tg.start_soon(user, name)
        for name in conversations:
            titles = sorted(t.title for t in await chat.store.list_tasks(name))
            assert titles == [f"{name} errand {n}" for n in range(3)]
        listed = await chat.say("user7", conversations["user7"], "show my tasks")
    assert listed.response.count("user7 errand") == 3 and "user8" not in listed.response


class CallsForever:
    """A model that asks for ``per_turn`` add_task calls every turn, until refused tools."""

    def __init__(self, per_turn: int) -> None:
        self.per_turn = per_turn
        self.tool_free_turns = 0
        self.n = 0

    async def chat(self, request: ChatRequest, *, timeout: float | None = None) -> ChatReply:
        if not request.tools:
            self.tool_free_turns += 1
            return ChatReply(text="I did a lot.")
        calls = []
        for _ in range(self.per_turn):
            self.n += 1
            calls.append(ModelToolCall(f"c{self.n}", "add_task", {"title": f"item {self.n}"}))
        return ChatReply(tool_calls=tuple(calls))

    async def aclose(self) -> None:
        pass


async def test_the_eleventh_tool_call_is_refused_and_the_model_answers_without_tools(tmp_path: Path) -> None:
    model = CallsForever(per_turn=4)
    async with open_chat(tmp_path, model, config=AgentEngineConfig(max_iterations=10)) as chat:
        c = await chat.runner.new_conversation("alice")
        result = await chat.say("alice", c, "add a dozen things")
        kept = await chat.store.list_tasks("alice")
    assert len(result.tool_calls) == 10 and len(kept) == 10  # what was done is kept
    assert model.tool_free_turns == 1
    assert replies.TOO_MANY_CALLS in result.response and len(result.response) <= replies.MAX_REPLY


async def test_max_iterations_ends_with_the_specs_message(tmp_path: Path) -> None:
    model = ScriptedModel(lambda request: ChatReply(tool_calls=(ModelToolCall("x", "list_tasks", {}),)))
    async with open_chat(tmp_path, model, config=AgentEngineConfig(max_iterations=3)) as chat:
        c = await chat.runner.new_conversation("alice")
        result = await chat.say("alice", c, "keep going")
    assert len(model.requests) == 3
    assert result.response.endswith(replies.TOO_COMPLEX) and not result.success


@pytest.mark.parametrize(
    ("error", "text"),
    [(RateLimited("429 from the provider"), replies.RATE_LIMITED), (Unavailable("503"), replies.LLM_FAILED)],
)
async def test_model_failures_end_in_the_specs_texts(tmp_path: Path, error: Exception, text: str) -> None:
    def fail(request: ChatRequest) -> ChatReply:
        raise error

    async with open_chat(tmp_path, ScriptedModel(fail)) as chat:
        c = await chat.runner.new_conversation("alice")
        result = await chat.say("alice", c, "add milk")
        history = await chat.store.load_history("alice", c, 10)
    assert (result.success, result.response, result.error) == (False, text, text)
    assert [m.role for m in history] == ["user", "assistant"]  # the conversation stays consistent
    assert "429" not in result.response and "503" not in result.response


async def test_malformed_tool_arguments_get_a_question_not_a_crash(tmp_path: Path) -> None:
    model = ScriptedModel(
        [
            ChatReply(tool_calls=(ModelToolCall("x", "add_task", {}, arguments_error="not JSON: {title"),)),
            "ok",
        ]
    )
    async with open_chat(tmp_path, model) as chat:
        c = await chat.runner.new_conversation("alice")
        result = await chat.say("alice", c, "add something")
    assert result.response.startswith("Could you provide more details about")
    assert "JSON" not in result.response and not result.has_tool_calls


async def test_a_nul_character_in_a_model_reply_never_reaches_the_user_or_the_store(tmp_path: Path) -> None:
    async with open_chat(tmp_path, ScriptedModel(["hello\x00world"])) as chat:
        c = await chat.runner.new_conversation("alice")
        result = await chat.say("alice", c, "hi")
        stored = await chat.store.load_history("alice", c, 10)
    assert result.response == "hello\ufffdworld"  # as a text decoder shows a character it cannot
    assert [m.content for m in stored] == ["hi", "hello\ufffdworld"]


class BrokenTools:
    """A tool executor whose tools raise or answer garbage (through the real engine)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    async def execute(self, tool_name: str, parameters: dict[str, Any], user_id: str) -> ToolResult:
        if self.mode == "raise":
            raise RuntimeError("database is on fire at /srv/db line 42")
        return ToolResult(success=True, data="\x00garbage")

    def get_available_tools(self) -> list[str]:
        return ["add_task"]


@pytest.mark.parametrize("mode", ["raise", "garbage"])
async def test_a_tool_that_raises_or_returns_garbage_is_a_friendly_reply(tmp_path: Path, mode: str) -> None:
    store = FilesChatStore(tmp_path / "chat.sqlite3")
    async with ActorSystem() as system:
        engine = LLMAgentEngine(RuleBasedModel(), BrokenTools(mode))
        runner = await AgentRunner.spawn(system, engine, store)
        c = await runner.new_conversation("alice")
        result = await runner.run(AgentContext.from_request("alice", c, []), "add milk")
    await store.aclose()
    assert result.response in (replies.SYSTEM_ERROR, replies.LLM_FAILED)
    assert "fire" not in result.response and "RuntimeError" not in result.response
    assert "garbage" not in result.response


async def test_a_mcp_tool_that_raises_is_a_system_error_result(tmp_path: Path) -> None:
    class FailingStore(FilesChatStore):
        async def add_task(self, user_id: str, title: str, description: str = "", **_: Any) -> Any:
            raise RuntimeError("disk I/O error in the tool")

    store = FailingStore(tmp_path / "chat.sqlite3")
    async with MCPToolExecutor(task_server(store)) as tools:
        result = await tools.execute("add_task", {"title": "x"}, "alice")
    await store.aclose()
    assert (result.success, result.error_code) == (False, "SYSTEM_ERROR")
    assert "disk" not in (result.error or "")


async def test_a_tool_argument_with_a_nul_character_is_refused_naming_the_field(tmp_path: Path) -> None:
    store = FilesChatStore(tmp_path / "chat.sqlite3")
    async with MCPToolExecutor(task_server(store)) as tools:
        refused = await tools.execute("add_task", {"title": "milk", "description": "a\x00b"}, "alice")
        listed = await tools.execute("list_tasks", {}, "alice")
    await store.aclose()
    assert (refused.success, refused.error_code) == (False, "INVALID_INPUT")
    assert refused.data == {"field": "description"} and "NUL" in (refused.error or "")
    assert listed.data == []  # nothing stored


async def test_a_malformed_hold_in_a_tool_call_is_refused_naming_it_and_changes_nothing(
    tmp_path: Path,
) -> None:
    """The request's hold travels in the call's ``_meta`` as ``[conversation id, token]``;
    any other shape (from a caller that is not greenroom's executor) is refused by name —
    a write made under a hold nobody can check would not be fenced."""
    from mcp.client.client import Client

    from greenroom.chat._tools import HOLD_META, USER_META

    store = FilesChatStore(tmp_path / "chat.sqlite3")
    try:
        async with Client(task_server(store), cache=None) as client:
            answers = []
            for hold in ("c1", ["c1"], ["c1", "2"], ["", 2], ["c1", 0], {"c1": 2}):
                result = await client.call_tool(
                    "add_task", {"title": "milk"}, meta={USER_META: "alice", HOLD_META: hold}
                )
                answers.append(result.structured_content)
            fine = await client.call_tool(
                "add_task", {"title": "eggs"}, meta={USER_META: "alice", HOLD_META: ["c1", 2]}
            )
        for answer in answers:
            assert answer["success"] is False and answer["error_code"] == "INVALID_INPUT", answer
            assert HOLD_META in answer["error"], answer
        assert fine.structured_content["success"] is True
        assert [t.title for t in await store.list_tasks("alice")] == ["eggs"]  # the malformed changed nothing
    finally:
        await store.aclose()


async def test_replies_never_show_ids_tool_names_or_traces(tmp_path: Path) -> None:
    rng = random.Random(11)
    async with open_chat(tmp_path) as chat:
        for i in range(300):  # another user's rows: this user's ids are all >= 301
            await chat.store.add_task("filler", f"filler {i}")
        c = await chat.runner.new_conversation("alice")
        shown: list[str] = []
        titles: list[str] = []
        for _ in range(12):
            title = " ".join(
                "".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 12))) for _ in range(2)
            )
            titles.append(title)
            shown.append((await chat.say("alice", c, f"add {title}")).response)
        shown.append((await chat.say("alice", c, "show my tasks")).response)
        shown.append((await chat.say("alice", c, f"done {titles[0]}")).response)
        shown.append((await chat.say("alice", c, f"rename {titles[1]} to {titles[1]} again")).response)
        shown.append((await chat.say("alice", c, f"delete {titles[2]}")).response)
        shown.append((await chat.say("alice", c, "yes delete")).response)
        shown.append((await chat.say("alice", c, "done zzzz nothing")).response)
        await chat.say("alice", c, f"add {titles[3]} copy")
        shown.append((await chat.say("alice", c, f"done {titles[3].split()[0]}")).response)  # ambiguous
        ids = {t.id for t in await chat.store.list_tasks("alice")}
    assert "Which one:" in shown[-1] and "couldn't find" in shown[-2]
    for text in shown:
        assert len(text) <= replies.MAX_REPLY
        assert not any(
            name in text for name in ("add_task", "list_tasks", "complete_task", "delete_task", "update_task")
        )
        assert "Traceback" not in text and "Error" not in text
        numbers = {int(token) for token in text.replace(".", " ").split() if token.isdigit()}
        assert not numbers & ids


async def test_one_conversation_runs_one_request_at_a_time(tmp_path: Path) -> None:
    seen_histories: list[list[str]] = []
    in_flight = [0, 0]  # now, most at once

    async def slow(request: ChatRequest) -> ChatReply:
        in_flight[0] += 1
        in_flight[1] = max(in_flight[1], in_flight[0])
        seen_histories.append([m.content or "" for m in request.messages if m.role == "user"])
        await anyio.sleep(0.05)
        in_flight[0] -= 1
        return ChatReply(text="noted")

    class Slow:
        async def chat(self, request: ChatRequest, *, timeout: float | None = None) -> ChatReply:
            return await slow(request)

        async def aclose(self) -> None:
            pass

    async with open_chat(tmp_path, Slow()) as chat:
        c = await chat.runner.new_conversation("alice")
        async with anyio.create_task_group() as tg:
            tg.start_soon(chat.say, "alice", c, "first")
            await eventually(lambda: in_flight[0] == 1)
            tg.start_soon(chat.say, "alice", c, "second")
    assert in_flight[1] == 1
    assert seen_histories == [["first"], ["first", "second"]]  # the second saw the whole first turn


async def test_different_conversations_run_in_parallel(tmp_path: Path) -> None:
    both = anyio.Event()
    waiting = [0]

    class Meets:
        async def chat(self, request: ChatRequest, *, timeout: float | None = None) -> ChatReply:
            waiting[0] += 1
            if waiting[0] == 2:
                both.set()
            await both.wait()  # only returns once the other conversation is in flight too
            return ChatReply(text="hi")

        async def aclose(self) -> None:
            pass

    async with open_chat(tmp_path, Meets()) as chat:
        first = await chat.runner.new_conversation("alice")
        second = await chat.runner.new_conversation("bob")
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(chat.say, "alice", first, "hello")
                tg.start_soon(chat.say, "bob", second, "hello")


async def test_the_deadline_interrupts_the_request_and_stores_nothing(tmp_path: Path) -> None:
    model = RuleBasedModel(latency=30)
    async with open_chat(tmp_path, model, timeout=0.2) as chat:
        c = await chat.runner.new_conversation("alice")
        with pytest.raises(TimeoutError, match=r"longer than 0\.2s"):
            await chat.say("alice", c, "add never")
        runner_cell = chat.runner.ref._cell
        await eventually(lambda: not runner_cell.children)  # the request actor is gone
        history = await chat.store.load_history("alice", c, 10)
        tasks = await chat.store.list_tasks("alice")
    assert model.calls == 0  # the model call was cancelled, never answered
    assert history == [] and tasks == []


async def test_a_crashing_request_actor_is_counted_and_the_caller_gets_a_friendly_reply(
    tmp_path: Path,
) -> None:
    class BrokenHistory(FilesChatStore):
        async def load_conversation(self, user_id: str, conversation_id: str, limit: int) -> Any:
            raise RuntimeError("corrupt row")

    store = BrokenHistory(tmp_path / "chat.sqlite3")
    async with ActorSystem() as system:
        engine = LLMAgentEngine(RuleBasedModel(), BrokenTools("garbage"))
        runner = await AgentRunner.spawn(system, engine, store)
        c = await runner.new_conversation("alice")
        result = await runner.run(AgentContext.from_request("alice", c, []), "hello")
        actor = runner.ref._cell.actor
        assert actor is not None and actor.crashes == 1  # type: ignore[attr-defined]
    await store.aclose()
    assert (result.success, result.response) == (False, replies.SYSTEM_ERROR)


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda c: ("alice", c, ""), "message"),
        (lambda c: ("alice", c, "x" * 5000), "message"),
        (lambda c: ("alice", c, "hi\x00there"), "message"),  # no store keeps a NUL as text
        (lambda c: ("bob", c, "hi"), "conversation_id"),  # alice's conversation
    ],
)
async def test_bad_requests_are_refused_naming_the_field_and_are_no_crash(
    tmp_path: Path,
    build: Callable[[str], tuple[str, str, str]],
    field: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with open_chat(tmp_path) as chat:
        c = await chat.runner.new_conversation("alice")
        await chat.say("alice", c, "add keep me")
        before = await chat.store.load_history("alice", c, 100)
        user, conversation, message = build(c)
        with pytest.raises(InvalidInput) as refused:
            await chat.say(user, conversation, message)
        assert refused.value.field == field
        assert await chat.store.load_history("alice", c, 100) == before
        actor = chat.runner.ref._cell.actor
        assert actor is not None and actor.crashes == 0  # type: ignore[attr-defined]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_conversation_id_the_caller_names_is_opened_on_first_use(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Spec 001's integration: the chat API owns its conversation ids and passes them in;
    user ids are what identity providers issue."""
    async with open_chat(tmp_path) as chat:
        user, thread = "auth0|65f1c2ab", "thread/2026-11-23#7"
        first = await chat.say(user, thread, "add buy milk")
        second = await chat.say(user, thread, "show my tasks")
        email = await chat.say("ann+work@example.com", "f47ac10b-58cc-4372-a567-0e02b2c3d479", "hello")
        history = await chat.store.load_history(user, thread, 10)
        with pytest.raises(InvalidInput) as refused:  # the id is now auth0|65f1c2ab's
            await chat.say("mallory", thread, "show my tasks")
        actor = chat.runner.ref._cell.actor
        assert actor is not None and actor.crashes == 0  # type: ignore[attr-defined]
    assert first.success and second.response == "Here are your tasks:\n1. ☐ buy milk"
    assert email.success and email.response.startswith("Hi!")
    assert [m.role for m in history] == ["user", "assistant"] * 2
    assert refused.value.field == "conversation_id"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_a_conversation_served_before_is_not_opened_again_and_one_forgotten_is_opened_anew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runner skips the read that opens a conversation it served this user before
    (an owner never changes; the request's own load checks again), remembering the most
    recent few; another user is still refused, and a conversation retention forgot since
    is opened anew, as on its first message."""
    from greenroom.chat import _runner

    monkeypatch.setattr(_runner, "SERVED_REMEMBERED", 2)
    opened: list[tuple[str, str]] = []

    class Counting(FilesChatStore):
        async def open_conversation(self, user_id: str, conversation_id: str, *, create: bool) -> None:
            opened.append((user_id, conversation_id))
            await super().open_conversation(user_id, conversation_id, create=create)

    async with open_chat(tmp_path, store_class=Counting) as chat:
        await chat.say("ann", "t1", "add buy milk")
        second = await chat.say("ann", "t1", "show my tasks")
        assert second.response == "Here are your tasks:\n1. ☐ buy milk"
        assert opened == [("ann", "t1")]  # once, on the first message
        with pytest.raises(InvalidInput) as refused:
            await chat.say("mallory", "t1", "show my tasks")
        assert refused.value.field == "conversation_id" and opened[-1] == ("mallory", "t1")

        # retention forgets it: the next message opens it anew, with a history of its own
        assert await chat.store.forget_idle(chat.clock[0] + 1) == 1
        again = await chat.say("ann", "t1", "hello")
        assert again.success and again.response.startswith("Hi!")
        history = await chat.store.load_history("ann", "t1", 10)
        assert [m.content for m in history] == ["hello", again.response]
        assert opened.count(("ann", "t1")) == 2  # the load found it gone and opened it

        # the runner remembers the most recent two: t1 is pushed out by t2 and t3
        await chat.say("ann", "t2", "hello")
        await chat.say("ann", "t3", "hello")
        await chat.say("ann", "t3", "hello")
        before = len(opened)
        await chat.say("ann", "t1", "hello")
        assert opened[before:] == [("ann", "t1")]
        await chat.say("ann", "t3", "hello")  # still remembered
        assert len(opened) == before + 1


def test_a_context_takes_the_ids_and_times_a_chat_api_has() -> None:
    context = AgentContext.from_request(
        "google-oauth2|1029384756",
        "conv:42",
        [
            {"role": "user", "content": "hi", "timestamp": "2026-11-23T10:00:00Z"},
            {"role": "assistant", "content": "hello", "timestamp": "2026-11-23T10:00:01.250+01:00"},
            {"role": "user", "content": "and?", "timestamp": "2026-11-23T10:00:02"},  # no zone: UTC
        ],
    )
    stamps = [m.timestamp for m in context.message_history]
    assert [s.isoformat() for s in stamps] == [
        "2026-11-23T10:00:00+00:00",
        "2026-11-23T10:00:01.250000+01:00",
        "2026-11-23T10:00:02+00:00",
    ]
    assert AgentContext.from_request("Ann Lee", "c", []).user_id == "Ann Lee"


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("", "c1", []), "user_id"),
        (("alice\nbob", "c1", []), "user_id"),
        ((" alice", "c1", []), "user_id"),
        (("alice\u200bbob", "c1", []), "user_id"),  # a zero-width space: a format character
        (("a" * 257, "c1", []), "user_id"),
        (("alice", "c\x001", []), "conversation_id"),
        (("alice", "c\u20281", []), "conversation_id"),
        (("alice", 7, []), "conversation_id"),
        (
            ("alice", "c1", [{"role": "user", "content": "x", "timestamp": "yesterday"}]),
            "messages[0].timestamp",
        ),
        (
            ("alice", "c1", [{"role": "user", "content": "x", "timestamp": 1700000000}]),
            "messages[0].timestamp",
        ),
        (("alice", "c1", [{"role": "system", "content": "x"}]), "messages[0].role"),
        (("alice", "c1", [{"role": "user", "content": 5}]), "messages[0].content"),
        (("alice", "c1", ["hello"]), "messages[0]"),
    ],
)
def test_a_bad_context_is_refused_naming_the_field(args: tuple[Any, ...], field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        AgentContext.from_request(*args)
    assert refused.value.field == field


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"max_iterations": 0}, "max_iterations"),
        ({"temperature": 3}, "temperature"),
        ({"timeout_seconds": True}, "timeout_seconds"),
    ],
)
def test_a_bad_engine_config_is_refused_naming_the_field(options: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        AgentEngineConfig(**options)
    assert refused.value.field == field


def test_the_engine_config_defaults_and_the_constitution_are_the_specs() -> None:
    config = AgentEngineConfig()
    assert (
        config.max_iterations,
        config.include_history_messages,
        config.temperature,
        config.timeout_seconds,
    ) == (
        5,
        10,
        0.0,
        30,
    )
    assert CONSTITUTION.startswith("You are a helpful task management assistant.")
    assert "For delete requests, always confirm before proceeding" in CONSTITUTION


async def test_the_decision_and_tool_logs_go_through_the_log_actor(tmp_path: Path) -> None:
    async with open_chat(tmp_path) as chat:
        c = await chat.runner.new_conversation("alice")
        await chat.say("alice", c, "add buy milk")
        await chat.log.ask(Flush())
        events = read_events(tmp_path / "events.jsonl")
    decisions = [e for e in events if e.type == CHAT_DECISION]
    tools = [e for e in events if e.type == CHAT_TOOL]
    assert [d.payload["decision_type"] for d in decisions] == ["PENDING", "INVOKE_TOOL"]
    assert (
        decisions[0].payload["decision_id"]
        == decisions[1].payload["decision_id"]
        == tools[0].payload["decision_id"]
    )
    assert tools[0].payload["tool_name"] == "add_task" and tools[0].payload["success"] is True
    assert tools[0].payload["result"]["title"] == "buy milk"  # spec 002's result: the tool's data
    assert all(e.visibility == "internal" and "alice" not in str(e.payload) for e in decisions + tools)


async def test_a_long_tool_result_is_summarised_in_its_event(tmp_path: Path) -> None:
    async with open_chat(tmp_path) as chat:
        for n in range(200):
            await chat.store.add_task("alice", f"task number {n} with a longish title")
        c = await chat.runner.new_conversation("alice")
        await chat.say("alice", c, "show my tasks")
        await chat.log.ask(Flush())
        events = read_events(tmp_path / "events.jsonl")
    (listed,) = [e.payload for e in events if e.type == CHAT_TOOL]
    assert listed["result"]["truncated"] is True and listed["result"]["items"] == 200
    assert listed["result"]["bytes"] > 8192


async def test_the_openai_path_against_a_real_chat_completions_server(tmp_path: Path) -> None:
    import json

    from greenroom.llm import OpenAIChatModel
    from greenroom.testing import ModelServer, Respond, completion

    server = ModelServer()
    server.add(
        Respond(
            body=completion(
                tool_calls=[("call_1", "add_task", json.dumps({"title": "buy milk", "user_id": "eve"}))]
            )
        ),
        Respond(body=completion(text="All set!")),
    )
    with server.running() as running:
        model = OpenAIChatModel("test-model", base_url=running.url, api_key="sk-test-secret")
        try:
            async with open_chat(tmp_path, model) as chat:
                c = await chat.runner.new_conversation("alice")
                result = await chat.say("alice", c, "please add buy milk")
                tasks = await chat.store.list_tasks("alice")
                eve = await chat.store.list_tasks("eve")
        finally:
            await model.aclose()
    assert result.response == "Got it! Added 'buy milk' to your list. Anything else?"
    assert [t.title for t in tasks] == ["buy milk"] and eve == []
    first = server.seen[0].body
    assert first["messages"][0] == {"role": "system", "content": CONSTITUTION}
    assert {tool["function"]["name"] for tool in first["tools"]} == {
        "add_task",
        "list_tasks",
        "update_task",
        "complete_task",
        "delete_task",
        "delete_completed_tasks",
        "ask_clarification",
    }
    assert "user_id" not in json.dumps(first["tools"])
    second = server.seen[1].body
    assert second["messages"][-1]["role"] == "tool" and "buy milk" in second["messages"][-1]["content"]


# -- what real OpenAI-compatible servers do (the test server plays them) --------------------


@asynccontextmanager
async def chat_on_server(tmp_path: Path, *, config: AgentEngineConfig | None = None) -> AsyncIterator[Any]:
    """A chat whose model is an ``OpenAIChatModel`` on the strict test server."""
    from greenroom.llm import OpenAIChatModel
    from greenroom.testing import ModelServer

    with ModelServer().running() as server:
        model = OpenAIChatModel("test-model", base_url=server.url, max_retries=1, max_retry_wait=0.05)
        try:
            async with open_chat(tmp_path, model, config=config) as chat:
                yield server, chat
        finally:
            await model.aclose()


def overflow(limit: int = 512, requested: int = 900) -> dict[str, Any]:
    from greenroom.testing import error_body

    body = error_body(
        f"This model's maximum context length is {limit} tokens. However, you requested {requested} "
        "tokens. Please reduce the length of the messages or completion."
    )
    body["error"]["code"] = "context_length_exceeded"
    return body


async def test_a_tool_round_trip_works_on_a_server_that_refuses_null_content(tmp_path: Path) -> None:
    from greenroom.testing import Respond, completion

    async with chat_on_server(tmp_path) as (server, chat):
        server.add(
            Respond(body=completion(tool_calls=[("c1", "add_task", '{"title": "buy milk"}')])),
            Respond(body=completion("Done!")),
        )
        c = await chat.runner.new_conversation("alice")
        result = await chat.say("alice", c, "add buy milk")
    assert result.success and result.response == replies.ADDED.format(title="buy milk")
    after_tool = server.seen[1].body["messages"]
    assert [m["role"] for m in after_tool][-2:] == ["assistant", "tool"]
    assert after_tool[-2]["content"] == ""  # never null
    first = server.seen[0].body
    assert (first["temperature"], first["max_tokens"]) == (0.0, 1024)  # spec 002's setting; bounded replies


async def test_a_model_failure_after_a_tool_ran_says_what_was_done_then_that_the_rest_failed(
    tmp_path: Path,
) -> None:
    from greenroom.testing import Respond, completion, error_body

    async with chat_on_server(tmp_path) as (server, chat):
        server.add(
            Respond(body=completion(tool_calls=[("c1", "add_task", '{"title": "buy milk"}')])),
            *[Respond(502, error_body("bad gateway", "server_error"), headers={"Retry-After": "0"})] * 2,
        )
        c = await chat.runner.new_conversation("alice")
        result = await chat.say("alice", c, "add buy milk")
        tasks = await chat.store.list_tasks("alice")
        await chat.log.ask(Flush())
    assert [t.title for t in tasks] == ["buy milk"]  # the add happened ...
    assert result.response.startswith(replies.ADDED.format(title="buy milk"))  # ... and the user is told so
    assert "couldn't finish the rest" in result.response and "check your list" in result.response
    assert "try again" not in result.response.lower()  # a retry would add it twice
    assert not result.success and result.error == replies.LLM_FAILED and result.has_tool_calls
    decision = [e for e in read_events(tmp_path / "events.jsonl") if e.type == CHAT_DECISION][-1]
    assert decision.payload["outcome_category"] == "ERROR" and "HTTP 502" in decision.payload["reason"]


async def test_a_context_overflow_is_sent_again_with_the_history_fitted_to_the_window(
    tmp_path: Path,
) -> None:
    from greenroom.testing import Respond, completion

    long = "word " * 700  # ~900 estimated tokens: more than the 512-token window
    async with chat_on_server(tmp_path) as (server, chat):
        c = await chat.runner.new_conversation("alice")
        await chat.store.save_turn(
            "alice",
            c,
            [
                ChatMessage("user", "hello", at=1.0),
                ChatMessage("assistant", "Hi! How can I help?", at=1.0),
                ChatMessage("user", long, at=2.0),
                ChatMessage("assistant", "That is a lot.", at=2.0),
            ],
            None,
        )
        server.add(Respond(400, overflow(limit=2000)), Respond(body=completion("Sure.")))
        result = await chat.say("alice", c, "what can you do")
        server.add(Respond(body=completion("Again.")))
        later = await chat.say("alice", c, "and now?")
    assert result.success and result.response == "Sure."
    first, second, third = (seen.body["messages"] for seen in server.seen)
    assert len(first) == 6 and len(second) == 3  # system, the newest history message that fits, user
    assert second[1]["content"] == "That is a lot." and second[-1]["content"] == "what can you do"
    # the window it learned fits every later turn at once: the long message is never sent again
    assert all(long not in m["content"] for m in third) and len(server.seen) == 3
    assert later.response == "Again."


async def test_a_message_too_long_for_the_model_is_told_plainly_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from greenroom.testing import Respond

    caplog.set_level(logging.WARNING, "greenroom.chat")
    async with chat_on_server(tmp_path) as (server, chat):
        c = await chat.runner.new_conversation("alice")
        server.add(Respond(400, overflow()))
        result = await chat.say("alice", c, "add " + "x" * 3000)
        await chat.log.ask(Flush())
    assert len(server.seen) == 1  # no history to drop: nothing to send again
    assert (result.success, result.response) == (False, replies.TOO_LONG)
    assert "try again" not in result.response.lower()
    assert any("does not fit the model" in r.getMessage() and "512" in r.getMessage() for r in caplog.records)
    decision = [e for e in read_events(tmp_path / "events.jsonl") if e.type == CHAT_DECISION][-1]
    assert decision.payload["reason"].startswith("context_length_exceeded:")


async def test_the_history_sent_is_trimmed_to_a_token_budget_not_only_a_count(tmp_path: Path) -> None:
    model = ScriptedModel(lambda request: "ok")
    config = AgentEngineConfig(max_history_tokens=200)
    async with open_chat(tmp_path, model, config=config) as chat:
        c = await chat.runner.new_conversation("alice")
        await chat.say("alice", c, "hello")
        await chat.say("alice", c, "a " * 1000)  # one long message
        await chat.say("alice", c, "short one")
        await chat.say("alice", c, "and another")
    sent = [[m.content for m in request.messages[1:-1]] for request in model.requests]
    assert sent[1] == ["hello", "ok"]
    assert sent[2] == ["ok"]  # the long message (and what came before it) no longer fits
    assert sent[3] == ["ok", "short one", "ok"]


@pytest.mark.parametrize(
    ("reply", "text"),
    [(ChatReply(text=""), replies.NO_ANSWER), (ChatReply(text=" ", finish_reason="length"), replies.CUT_OFF)],
)
async def test_an_empty_model_reply_is_said_as_it_is_not_as_trouble(
    tmp_path: Path, reply: ChatReply, text: str
) -> None:
    async with open_chat(tmp_path, ScriptedModel([reply])) as chat:
        c = await chat.runner.new_conversation("alice")
        result = await chat.say("alice", c, "hmm")
        await chat.log.ask(Flush())
    assert result.response == text and "trouble" not in result.response
    decision = [e for e in read_events(tmp_path / "events.jsonl") if e.type == CHAT_DECISION][-1]
    assert "empty" in decision.payload["reason"]


# -- the command, and tools from another process --------------------------------------------


def run_greenroom(*args: str, stdin: str = "") -> Any:
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "greenroom", *args], input=stdin, capture_output=True, text=True, timeout=100
    )


def test_greenroom_chat_works_offline_and_resumes_a_conversation(tmp_path: Path) -> None:
    first = run_greenroom(
        "chat",
        "--data-dir",
        str(tmp_path),
        "--user",
        "alice",
        stdin="add buy milk\nadd call mom\ndelete call mom\n",
    )
    assert first.returncode == 0, first.stderr
    assert "Got it! Added 'buy milk' to your list." in first.stdout
    assert "Do you really want to delete 'call mom'? Reply 'yes delete' to confirm." in first.stdout
    conversation = first.stderr.split("new conversation ")[1].split()[0]
    second = run_greenroom(
        "chat", "--data-dir", str(tmp_path), "--user", "alice", "--conversation", conversation,
        "-m", "yes delete", "-m", "show my tasks",
    )  # fmt: skip
    assert second.returncode == 0, second.stderr
    assert "I've removed 'call mom' from your tasks." in second.stdout  # the pending delete was stored
    assert second.stdout.endswith("assistant> Here are your tasks:\n1. ☐ buy milk\n")
    events = read_events(tmp_path / "events.jsonl")
    assert any(e.type == CHAT_TOOL for e in events)  # greenroom events tail shows them


def test_greenroom_chat_sends_its_max_tokens_and_temperature_to_the_server(tmp_path: Path) -> None:
    from greenroom.testing import ModelServer, Respond, completion

    with ModelServer().running() as server:
        server.add(
            Respond(body=completion(tool_calls=[("c1", "add_task", '{"title": "buy milk"}')])),
            Respond(body=completion("ok")),
        )
        done = run_greenroom(
            "chat", "--data-dir", str(tmp_path), "--base-url", server.url, "--model", "small",
            "--max-tokens", "50", "--temperature", "0.3", "-m", "add buy milk",
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Got it! Added 'buy milk' to your list." in done.stdout
    assert [(seen.body["max_tokens"], seen.body["temperature"]) for seen in server.seen] == [(50, 0.3)] * 2


def test_greenroom_chat_prints_the_reply_as_the_model_makes_it(tmp_path: Path) -> None:
    """The first words are on screen while the model is still making the rest."""
    import subprocess
    import sys
    import time

    from greenroom.testing import ModelServer, Respond, completion

    words = " ".join(f"word{n}" for n in range(40))
    with ModelServer().running() as server:
        server.add(Respond(body=completion(words), token_delay=0.1))  # 4 s in all
        process = subprocess.Popen(
            [sys.executable, "-m", "greenroom", "chat", "--data-dir", str(tmp_path), "--base-url", server.url,
             "--model", "small", "-m", "talk to me"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert process.stdout is not None
        shown = b""
        deadline = time.monotonic() + 60
        while b"word2 " not in shown and time.monotonic() < deadline:
            shown += process.stdout.read1(4096)  # blocks until the CLI prints more
        sent_then = server.pieces_sent
        rest, errors = process.communicate(timeout=60)
    assert shown.startswith(b"assistant> word0 word1 word2 ")
    assert sent_then < 40  # printed before the model was done
    assert process.returncode == 0, errors
    assert (shown + rest).decode().rstrip("\n") == f"assistant> {words}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--user", " a"], "--user must not start or end with a space"),
        (["--conversation", "nope"], "--conversation 'nope' is not a conversation of user 'me'"),
        (["--mcp-url", "ftp://x"], "--mcp-url must be an http(s) URL"),
        (["--timeout", "0"], "argument --timeout: must be a number of seconds > 0"),
        (["--max-tokens", "0"], "argument --max-tokens: must be a whole number from 1 to 1000000, got '0'"),
        (["--temperature", "hot"], "argument --temperature: must be a number from 0 to 2, got 'hot'"),
        (["--context-window", "8"], "argument --context-window: must be a whole number from 16"),
    ],
)
def test_greenroom_chat_refuses_bad_flags_in_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    done = run_greenroom("chat", "--data-dir", str(tmp_path), *args, "-m", "hello")
    assert done.returncode in (1, 2)
    assert message in done.stderr and "Traceback" not in done.stderr


async def test_tools_from_an_mcp_server_in_another_process_keep_users_apart(tmp_path: Path) -> None:
    import sys

    from mcp.client.stdio import StdioServerParameters

    server = StdioServerParameters(
        command=sys.executable, args=["-m", "greenroom", "mcp", "serve", "--data-dir", str(tmp_path)]
    )
    async with MCPToolExecutor(server) as tools:
        assert tools.get_available_tools() == sorted(
            [
                "add_task",
                "list_tasks",
                "update_task",
                "complete_task",
                "delete_task",
                "delete_completed_tasks",
            ]
        )
        added = await tools.execute("add_task", {"title": "alice's", "user_id": "bob"}, "alice")
        bobs = await tools.execute("list_tasks", {}, "bob")
        alices = await tools.execute("list_tasks", {}, "alice")
    assert added.success and bobs.data == [] and [t["title"] for t in alices.data] == ["alice's"]


def test_making_the_task_server_leaves_the_root_logger_alone(tmp_path: Path) -> None:
    import logging

    root = logging.getLogger()
    saved = (root.handlers[:], root.level)
    root.handlers[:] = []  # as in an app that configured nothing: basicConfig would act
    root.setLevel(logging.WARNING)
    try:
        task_server(FilesChatStore(tmp_path / "chat.sqlite3"))
        assert (root.handlers, root.level) == ([], logging.WARNING)
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


async def test_the_deadline_cancels_a_tool_call_in_flight(tmp_path: Path) -> None:
    started = anyio.Event()
    cancelled: list[bool] = []

    class SlowStore(FilesChatStore):
        async def add_task(self, user_id: str, title: str, description: str = "", **_: Any) -> Any:
            started.set()
            try:
                await anyio.sleep(30)
            except anyio.get_cancelled_exc_class():
                cancelled.append(True)
                raise
            return await super().add_task(user_id, title, description)

    store = SlowStore(tmp_path / "chat.sqlite3")
    async with MCPToolExecutor(task_server(store)) as tools, ActorSystem() as system:
        engine = LLMAgentEngine(RuleBasedModel(), tools)
        runner = await AgentRunner.spawn(system, engine, store, timeout=1.0)
        c = await runner.new_conversation("alice")
        with pytest.raises(TimeoutError):
            await runner.run(AgentContext.from_request("alice", c, []), "add slow thing")
        assert started.is_set()
        await eventually(lambda: cancelled == [True])  # the tool's handler was cancelled too
        assert await store.load_history("alice", c, 10) == [] and await store.list_tasks("alice") == []
    await store.aclose()


@pytest.mark.parametrize("server_backend", ["asyncio", "trio"])
async def test_tools_from_an_mcp_server_over_streamable_http(tmp_path: Path, server_backend: str) -> None:
    import socket
    import subprocess
    import sys

    with socket.socket() as probe:  # a free port on loopback
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = await anyio.open_process(
        [sys.executable, "-m", "greenroom", "mcp", "serve", "--data-dir", str(tmp_path),
         "--http", f"127.0.0.1:{port}", "--backend", server_backend],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:

        async def listening() -> bool:
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                return False
            await stream.aclose()
            return True

        await eventually(listening, timeout=30)
        async with MCPToolExecutor(f"http://127.0.0.1:{port}/mcp") as tools:
            added = await tools.execute("add_task", {"title": "over http", "user_id": "dave"}, "carol")
            daves = await tools.execute("list_tasks", {}, "dave")
            carols = await tools.execute("list_tasks", {}, "carol")
    finally:
        process.terminate()
        with anyio.fail_after(30):
            await process.wait()
        await process.aclose()
    assert added.success and daves.data == [] and [t["title"] for t in carols.data] == ["over http"]


# -- one tool loop: the harness's budget, stop signal and sandbox ---------------------------

SPENT = Usage(prompt_tokens=100, completion_tokens=50)


def hello_at(price: Price | None = None) -> ScriptedModel:
    return ScriptedModel(lambda request: ChatReply(text="Hi! How can I help?", usage=SPENT), price=price)


@pytest.mark.parametrize("kind", ["tokens", "money"])
async def test_a_spent_budget_refuses_the_next_model_call_and_says_so(tmp_path: Path, kind: str) -> None:
    # each call: 100 * 2 + 50 * 4 per million = 0.0004
    budget = TokenBudget(150) if kind == "tokens" else TokenBudget(cost_limit=0.0004)
    model = hello_at(Price(input=2.0, output=4.0))
    async with open_chat(tmp_path, model, budget=budget) as chat:
        c = await chat.runner.new_conversation("alice")
        first = await chat.say("alice", c, "hello")
        refused = await chat.say("alice", c, "hello again")
        await chat.log.ask(Flush())
        engine = chat.runner.engine
    assert first.success and first.response == "Hi! How can I help?"
    assert not refused.success and refused.response == replies.BUDGET_SPENT
    assert len(model.requests) == 1  # the refused request never reached the model
    assert (budget.spent, budget.cost) == (150, pytest.approx(0.0004))
    assert engine.spend.as_dict() == {
        "llm_calls": 1,
        "prompt_tokens": 100,
        "completion_tokens": 50,
        "total_tokens": 150,
        "cost": 0.0004,
    }
    decisions = [e.payload for e in read_events(tmp_path / "events.jsonl") if e.type == CHAT_DECISION]
    outcomes = [d for d in decisions if d["decision_type"] != "PENDING"]
    assert [(d["llm_calls"], d["total_tokens"], d["cost"]) for d in outcomes] == [(1, 150, 0.0004), (0, 0, 0)]
    assert outcomes[1]["reason"] == "budget_exhausted" and outcomes[1]["outcome_category"] == "ERROR"


async def test_chat_and_a_harness_share_one_budget(tmp_path: Path) -> None:
    budget = TokenBudget(200)
    async with open_chat(tmp_path, hello_at(), budget=budget) as chat:
        c = await chat.runner.new_conversation("alice")
        assert (await chat.say("alice", c, "hello")).success  # 150 spent
        worker = ScriptedModel(lambda request: ChatReply(text="done", usage=Usage(70, 30)))
        harness = await Harness.spawn(chat.system, worker, budget=budget)
        first = await harness.run_bounded("work")  # 150 + 150 > 200, nothing in flight: alone
        second = await harness.run_bounded("more work")
        refused = await chat.say("alice", c, "hello again")
        await harness.aclose()
    assert (first.stop_reason, second.stop_reason) == ("done", "budget_exhausted")
    assert refused.response == replies.BUDGET_SPENT
    assert (budget.spent, budget.calls) == (250, 2)


async def test_a_stop_before_a_request_starts_nothing(tmp_path: Path) -> None:
    stop = StopSignal()
    model = hello_at()
    async with open_chat(tmp_path, model, stop=stop) as chat:
        c = await chat.runner.new_conversation("alice")
        stop.request()
        stopped = await chat.say("alice", c, "add buy milk")
        history = await chat.store.load_history("alice", c, 10)
    assert not stopped.success and stopped.response == replies.STOPPED
    assert model.requests == [] and history == []


async def test_a_graceful_stop_lets_the_running_turn_finish_and_ends_before_the_next_model_call(
    tmp_path: Path,
) -> None:
    stop = StopSignal()

    def add_then_stop(request: ChatRequest) -> ChatReply:
        stop.request()  # arrives while the model answers: this turn's tool still runs
        return ChatReply(tool_calls=(ModelToolCall("a", "add_task", {"title": "buy milk"}),), usage=SPENT)

    model = ScriptedModel(add_then_stop)
    async with open_chat(tmp_path, model, stop=stop) as chat:
        c = await chat.runner.new_conversation("alice")
        result = await chat.say("alice", c, "add buy milk")
        tasks = await chat.store.list_tasks("alice")
    assert len(model.requests) == 1 and [t.title for t in tasks] == ["buy milk"]
    assert not result.success and "buy milk" in result.response  # what was done, said first
    assert result.response.endswith(replies.REST_FAILED.format(cause=replies.brief(replies.STOPPED)))


class Stuck:
    """A model whose call never ends by itself."""

    def __init__(self) -> None:
        self.started = anyio.Event()
        self.cancelled = False

    async def chat(self, request: ChatRequest, *, timeout: float | None = None) -> ChatReply:
        self.started.set()
        try:
            await anyio.sleep(60)
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise
        raise AssertionError("not reached")

    async def aclose(self) -> None:
        pass


async def test_an_immediate_stop_interrupts_a_chat_request_in_flight(tmp_path: Path) -> None:
    stop = StopSignal()
    model = Stuck()
    got: list[Any] = []
    async with open_chat(tmp_path, model, stop=stop) as chat:
        c = await chat.runner.new_conversation("alice")

        async def ask() -> None:
            got.append(await chat.say("alice", c, "hello"))

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            with anyio.fail_after(10):
                await model.started.wait()
            stop.request(immediate=True)
        history = await chat.store.load_history("alice", c, 10)
        await eventually(lambda: not stop._harnesses)  # the request actor left the signal
    assert model.cancelled and history == []  # the unfinished turn is not stored
    assert not got[0].success and got[0].response == replies.STOPPED


async def test_chat_tools_pass_the_sandbox_by_the_risk_their_server_declares(tmp_path: Path) -> None:
    async with open_chat(tmp_path, sandbox=Sandbox(max_risk=RiskLevel.READ_ONLY)) as chat:
        risks = {name: chat.tools.tool_risk(name) for name in chat.tools.get_available_tools()}
        c = await chat.runner.new_conversation("alice")
        await chat.store.add_task("alice", "call mom")
        refused = await chat.say("alice", c, "add buy milk")
        listed = await chat.say("alice", c, "show my tasks")
        tasks = [t.title for t in await chat.store.list_tasks("alice")]
    assert risks == {
        "add_task": RiskLevel.WRITES,
        "complete_task": RiskLevel.WRITES,
        "delete_completed_tasks": RiskLevel.WRITES,
        "delete_task": RiskLevel.WRITES,
        "list_tasks": RiskLevel.READ_ONLY,
        "update_task": RiskLevel.WRITES,
    }
    assert tasks == ["call mom"]  # the write was refused
    record = refused.tool_calls[0]
    assert record.tool_name == "add_task" and record.result["error_code"] == "SYSTEM_ERROR"
    assert "risk" in record.result["error"]
    assert listed.success and "call mom" in listed.response  # reading is allowed


async def test_a_sandbox_rate_limit_bounds_chat_tool_calls(tmp_path: Path) -> None:
    sandbox = Sandbox(tool_rate_limits={"add_task": (1, 3600.0)})
    async with open_chat(tmp_path, sandbox=sandbox) as chat:
        c = await chat.runner.new_conversation("alice")
        await chat.say("alice", c, "add one")
        limited = await chat.say("alice", c, "add two")
        tasks = [t.title for t in await chat.store.list_tasks("alice")]
    assert tasks == ["one"]
    assert limited.tool_calls[0].result["error_code"] == "SYSTEM_ERROR"
    assert "rate limit" in limited.tool_calls[0].result["error"]


def test_a_tools_risk_comes_from_its_mcp_annotations() -> None:
    from mcp.types import ToolAnnotations

    from greenroom.harness import risk_of

    assert risk_of(None) is RiskLevel.WRITES  # unannotated: it may change things
    assert risk_of(ToolAnnotations(read_only_hint=True)) is RiskLevel.READ_ONLY
    assert risk_of(ToolAnnotations(read_only_hint=True, open_world_hint=True)) is RiskLevel.NETWORK
    assert risk_of(ToolAnnotations(destructive_hint=True)) is RiskLevel.WRITES


async def test_one_mcp_client_lists_a_servers_tools_with_their_risks_and_answers_a_call(
    tmp_path: Path,
) -> None:
    """Issue 50's one MCP client (``greenroom.harness.MCPClient``, under the chat's executor
    and load's workload tools): the task server's tools listed with their schemas (no
    title) and risks from their annotations; a call's structured answer; a tool that
    raises is a ``failed`` answer, not an exception; a closed client refuses to call."""
    from greenroom.chat._tools import TASK_TOOLS, USER_META
    from greenroom.harness import MCPClient

    store = FilesChatStore(tmp_path / "chat.sqlite3")
    try:
        async with MCPClient(task_server(store), call_timeout=5.0) as client:
            tools = client.tools
            assert set(tools) == set(TASK_TOOLS)
            assert tools["list_tasks"].risk is RiskLevel.READ_ONLY
            assert (
                tools["add_task"].risk is RiskLevel.WRITES and tools["delete_task"].risk is RiskLevel.WRITES
            )
            assert (
                "title" not in tools["add_task"].schema and "title" in tools["add_task"].schema["properties"]
            )
            answer = await client.call("add_task", {"title": "milk"}, meta={USER_META: "alice"})
            assert not answer.failed and answer.structured["data"]["title"] == "milk"
            broken = await client.call("update_task", {"task_id": "not a number"}, meta={USER_META: "alice"})
            assert broken.failed  # the server refused the arguments: an answer saying so
        with pytest.raises(RuntimeError, match="not open"):
            await client.call("list_tasks", {})
    finally:
        await store.aclose()


def test_an_engine_with_a_budget_in_money_needs_a_price() -> None:
    with pytest.raises(
        ValueError, match="LLMAgentEngine: the budget has a cost_limit, but the model has no price"
    ):
        LLMAgentEngine(RuleBasedModel(), BrokenTools("garbage"), budget=TokenBudget(cost_limit=1.0))
    engine = LLMAgentEngine(
        RuleBasedModel(), BrokenTools("garbage"), budget=TokenBudget(cost_limit=1.0), price=Price(1, 2)
    )
    assert engine.price == Price(1, 2)


async def test_retention_never_forgets_a_conversation_while_a_request_holds_it(tmp_path: Path) -> None:
    """Issue 48, point 13: a retention pass that forgets everything lands right after a
    new conversation was opened (before the request held it), and again while the model
    answers: the request succeeds, the first pass's deletion is opened anew, the second
    passes the held conversation by, and the turn is stored."""
    from _support import RetentionAtTheWorstMoment, forgetting_model

    class Racing(RetentionAtTheWorstMoment, FilesChatStore):
        forgotten: list[int] = []

    Racing.forgotten = []
    stores: list[Any] = []

    class Recorded(Racing):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            stores.append(self)

    async with open_chat(tmp_path, forgetting_model(lambda: stores[0]), store_class=Recorded) as chat:
        result = await chat.say("ann", "brand-new", "hello")
        assert result.success and result.response.startswith("Hi!"), result
        history = await chat.store.load_history("ann", "brand-new", 10)
        assert [m.content for m in history] == ["hello", result.response]
    assert Racing.forgotten[0] == 1  # it was forgotten between the open and the hold...
    assert Racing.forgotten[1:] and set(Racing.forgotten[1:]) == {0}  # ...and never once held


_OLD_CHAT_SCHEMA = """
CREATE TABLE tasks (user_id TEXT NOT NULL, id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL,
    description TEXT NOT NULL DEFAULT '', completed INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL,
    updated_at REAL NOT NULL);
CREATE TABLE conversations (id TEXT PRIMARY KEY, user_id TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE messages (conversation_id TEXT NOT NULL, seq INTEGER NOT NULL, role TEXT NOT NULL,
    content TEXT NOT NULL, tool_calls TEXT, created_at REAL NOT NULL, PRIMARY KEY (conversation_id, seq));
CREATE TABLE pending_actions (conversation_id TEXT PRIMARY KEY, tool_name TEXT NOT NULL,
    parameters TEXT NOT NULL, title TEXT NOT NULL, expires_at REAL NOT NULL);
INSERT INTO tasks VALUES ('alice', 3, 'milk', '2 l', 1, 100, 105), ('bob', 4, 'bread', '', 0, 100, 100);
INSERT INTO conversations VALUES ('c1', 'alice', 100), ('empty', 'bob', 50);
INSERT INTO messages VALUES ('c1', 1, 'user', 'add milk', NULL, 110),
    ('c1', 2, 'assistant', 'Added milk', '[{"tool_name": "add_task", "parameters": {"title": "milk"}}]', 111);
INSERT INTO pending_actions VALUES ('c1', 'delete_task', '{"task_id": 3}', 'Delete milk?', 9e9);
"""


def _old_chat_file(data_dir: Path) -> None:
    import sqlite3

    data_dir.mkdir()
    with sqlite3.connect(data_dir / "chat.sqlite3") as db:
        db.executescript(_OLD_CHAT_SCHEMA)


async def test_an_older_data_dirs_chat_file_is_folded_into_the_records_whole_and_once(tmp_path: Path) -> None:
    """A data dir from before the records: its ``chat.sqlite3`` — conversations, their
    messages (with tool calls) and pending confirmations, every user's to-dos — is read
    back through the chat store as it was, new to-do ids come after the old, and the file
    is renamed (opened again, nothing is folded twice)."""
    from greenroom.embedded import EmbeddedStore

    data = tmp_path / "data"
    await anyio.to_thread.run_sync(_old_chat_file, data)
    async with EmbeddedStore(data) as backend:
        chat = ChatStore(backend.records(), shared=backend.shared)
        try:
            pending, history = await chat.load_conversation("alice", "c1", 10)
            assert pending is not None and (pending.tool_name, pending.parameters) == (
                "delete_task",
                {"task_id": 3},
            )
            assert [(m.role, m.content, m.at) for m in history] == [
                ("user", "add milk", 110.0), ("assistant", "Added milk", 111.0)
            ]  # fmt: skip
            # the old tool-call dict, read back as the call's outcome (no result was kept)
            assert history[1].outcomes == (
                ToolOutcome(name="add_task", arguments={"title": "milk"}, ok=False, duration_ms=0),
            )
            assert [(t.id, t.title, t.completed) for t in await chat.list_tasks("alice")] == [
                (3, "milk", True)
            ]
            assert (await chat.add_task("bob", "jam")).id == 5
            assert await chat.forget_idle(120.0) == 2  # c1 (idle since 111) and the empty one (50)
        finally:
            await chat.aclose()
    assert not (data / "chat.sqlite3").exists() and (data / "chat.sqlite3.folded").exists()
    async with EmbeddedStore(data) as backend:
        chat = ChatStore(backend.records(), shared=backend.shared)
        try:
            assert [t.title for t in await chat.list_tasks("bob")] == ["bread", "jam"]  # not twice
        finally:
            await chat.aclose()
