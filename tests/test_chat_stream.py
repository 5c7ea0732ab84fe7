"""A chat answer as it is made: ``AgentRunner.stream`` (embedded) and ``POST /v1/chat`` with
``"stream": true`` (Server-Sent Events), on both loops; against the offline model and a
real model server on 127.0.0.1 (both HTTP clients), whose stream a hung-up client closes."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
from _support import eventually
from test_service import running

from greenroom.chat import (
    CHAT_DECISION,
    CHAT_TOOL,
    AgentContext,
    ReplyDelta,
    ToolFinished,
    ToolStarted,
    open_assistant,
)
from greenroom.chat import _replies as replies
from greenroom.daemon._config import ChatConfig, LLMConfig
from greenroom.embedded import read_events
from greenroom.llm import RuleBasedModel
from greenroom.llm._http import OriginClient
from greenroom.llm._openai import CLIENTS
from greenroom.llm._rules import GREETING
from greenroom.testing import ModelServer, Respond, completion

pytestmark = pytest.mark.anyio


def shown(events: list[Any]) -> str:
    """The text a client shows: deltas appended, a ``replace`` one instead of the rest."""
    text = ""
    for event in events:
        if isinstance(event, ReplyDelta):
            text = event.text if event.replace else text + event.text
    return text


async def say(assistant: Any, conversation: str, message: str) -> tuple[list[Any], Any]:
    async with assistant.say_streamed("alice", conversation, message) as events:
        seen = [event async for event in events]
    return seen, events.result


async def test_a_text_reply_streams_word_by_word_and_adds_up_to_the_answer(tmp_path: Path) -> None:
    async with open_assistant(tmp_path, model=RuleBasedModel(token_latency=0.001)) as assistant:
        conversation = await assistant.runner.new_conversation("alice")
        events, result = await say(assistant, conversation, "hello")
    deltas = [e for e in events if isinstance(e, ReplyDelta)]
    assert len(deltas) > 5 and not any(d.replace for d in deltas)  # the model's words, as made
    assert result.response == GREETING == shown(events)


async def test_tools_show_as_they_run_and_their_outcome_comes_whole(tmp_path: Path) -> None:
    async with open_assistant(tmp_path, model=RuleBasedModel()) as assistant:
        conversation = await assistant.runner.new_conversation("alice")
        events, result = await say(assistant, conversation, "add buy milk")
        _, listing = await say(assistant, conversation, "show my tasks")
    assert events[0] == ToolStarted("add_task")
    assert isinstance(events[1], ToolFinished) and events[1].tool == "add_task" and events[1].success
    assert events[2:] == [ReplyDelta(result.response, replace=True)]
    assert result.response.startswith("Got it! Added 'buy milk' to your list.")
    assert "alice" not in repr(events)  # a tool event names the tool, never the user
    assert listing.response.startswith("Here are your tasks")


async def test_a_confirmation_is_never_half_streamed(tmp_path: Path) -> None:
    async with open_assistant(tmp_path, model=RuleBasedModel(token_latency=0.001)) as assistant:
        conversation = await assistant.runner.new_conversation("alice")
        await say(assistant, conversation, "add call mom")
        asking, asked = await say(assistant, conversation, "delete call mom")
        confirming, confirmed = await say(assistant, conversation, "yes delete")
    assert [e for e in asking if isinstance(e, ReplyDelta)] == [ReplyDelta(asked.response, replace=True)]
    assert "Reply 'yes delete' to confirm" in asked.response
    assert [e for e in confirming if isinstance(e, ReplyDelta)] == [
        ReplyDelta(confirmed.response, replace=True)
    ]
    assert confirmed.response == "I've removed 'call mom' from your tasks."


async def test_a_streamed_request_keeps_the_decision_and_tool_logs(tmp_path: Path) -> None:
    async with open_assistant(tmp_path, model=RuleBasedModel()) as assistant:
        conversation = await assistant.runner.new_conversation("alice")
        await say(assistant, conversation, "add buy milk")
    events = read_events(tmp_path / "events.jsonl")
    assert [e.payload["decision_type"] for e in events if e.type == CHAT_DECISION] == [
        "PENDING",
        "INVOKE_TOOL",
    ]
    (tool,) = [e.payload for e in events if e.type == CHAT_TOOL]
    assert tool["tool_name"] == "add_task" and tool["success"] is True


async def test_bad_input_is_refused_before_any_event(tmp_path: Path) -> None:
    from greenroom._errors import InvalidInput

    async with open_assistant(tmp_path, model=RuleBasedModel()) as assistant:
        conversation = await assistant.runner.new_conversation("alice")
        with pytest.raises(InvalidInput, match="message"):
            async with assistant.runner.stream(AgentContext.from_request("alice", conversation, []), "  "):
                pass
        with pytest.raises(TypeError, match="AgentContext"):
            async with assistant.runner.stream("alice", "hi"):  # type: ignore[arg-type]
                pass
        history = await assistant.store.load_history("alice", conversation, 10)
    assert history == []


# -- over HTTP ------------------------------------------------------------------------------


async def read_sse(response: httpx2.Response) -> list[tuple[str, Any]]:
    events: list[tuple[str, Any]] = []
    kind, data = "message", []
    async for line in response.aiter_lines():
        if not line:
            if data:
                events.append((kind, json.loads("\n".join(data))))
            kind, data = "message", []
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
    return events


async def test_post_chat_streams_deltas_tool_events_then_exactly_the_json_answer(tmp_path: Path) -> None:
    async with running(tmp_path) as daemon, daemon.http("alice") as http:
        body = {"message": "hello", "conversation_id": "c-1", "stream": True}
        async with http.stream("POST", "/v1/chat", json=body) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            events = await read_sse(response)
        plain = (
            await http.post("/v1/chat", json={"message": "add buy milk", "conversation_id": "c-2"})
        ).json()
        async with http.stream("POST", "/v1/chat", json={**body, "message": "add oat milk"}) as response:
            tooled = await read_sse(response)
    kinds = [kind for kind, _ in events]
    # the offline model makes its reply at once: one piece (word by word over HTTP: below)
    assert kinds[-1] == "done" and set(kinds[:-1]) == {"delta"}
    done = events[-1][1]
    assert "".join(data["text"] for kind, data in events if kind == "delta") == done["response"] == GREETING
    assert set(done) == set(plain) == {"conversation_id", "success", "response", "error", "tool_calls"}
    assert done["conversation_id"] == "c-1" and done["success"] is True
    started, finished = [data for kind, data in tooled if kind == "tool"]
    assert started == {"tool": "add_task", "state": "started"}
    assert finished["state"] == "finished" and finished["success"] is True
    last = tooled[-1][1]
    assert tooled[-2] == ("delta", {"text": last["response"], "replace": True})
    assert last["tool_calls"][0]["tool"] == "add_task" == plain["tool_calls"][0]["tool"]
    assert "alice" not in json.dumps(tooled[:-1])


async def test_post_chat_refuses_a_bad_stream_field_or_message_with_its_status(tmp_path: Path) -> None:
    async with running(tmp_path) as daemon, daemon.http("alice") as http:
        bad = await http.post("/v1/chat", json={"message": "hi", "stream": "yes"})
        empty = await http.post("/v1/chat", json={"message": " ", "stream": True, "conversation_id": "c-3"})
        taken = await http.post("/v1/chat", json={"message": "hi", "conversation_id": "c-4"})
    async with running(tmp_path) as daemon, daemon.http("bob") as http:
        other = await http.post("/v1/chat", json={"message": "hi", "conversation_id": "c-4", "stream": True})
    assert bad.status_code == 400 and bad.json()["error"]["field"] == "stream"
    assert bad.json()["error"]["value"] == "'yes'"  # shown as a repr
    assert empty.status_code == 400 and empty.json()["error"]["field"] == "message"
    assert taken.status_code == 200
    assert other.status_code in (400, 404) and "text/event-stream" not in other.headers["content-type"]


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    with ModelServer().running() as server:
        yield server


@asynccontextmanager
async def daemon_on(
    tmp_path: Path, server: ModelServer, client: str, timeout: float = 30.0
) -> AsyncIterator[Any]:
    llm = LLMConfig(base_url=server.url, model="m", api_key_env=None, client=client, max_retries=0)
    async with running(tmp_path, llm=llm, chat=ChatConfig(model="m", timeout=timeout)) as daemon:
        yield daemon


@pytest.mark.parametrize("client", CLIENTS)
async def test_a_client_that_hangs_up_cancels_its_request_and_the_models_stream(
    tmp_path: Path, model_server: ModelServer, client: str
) -> None:
    model_server.add(Respond(body=completion(" ".join(["word"] * 300)), token_delay=0.05))
    async with daemon_on(tmp_path, model_server, client) as daemon, daemon.http("alice") as http:
        body = {"message": "talk to me", "conversation_id": "c-9", "stream": True}
        headers = [(b"authorization", f"Bearer {daemon.tokens['alice']}".encode()),
                   (b"content-type", b"application/json")]  # fmt: skip
        client = OriginClient(daemon.url)  # greenroom's own: it hangs up when told, leaving nothing behind
        async with client.stream("/v1/chat", json.dumps(body).encode(), headers) as answer:
            assert answer.status == 200
            received = b""
            while b"event: delta" not in received:
                received += await answer.receive()
        await client.aclose()  # the first piece arrived: hung up
        await eventually(model_server.disconnected.is_set, timeout=10)
        history = (await http.get("/v1/chat/conversations/c-9")).json()["messages"]
    assert model_server.pieces_sent < 100  # of 300: the server stopped generating
    assert history == []  # an interrupted request stores nothing of the turn


@pytest.mark.parametrize("client", CLIENTS)
async def test_a_stream_past_the_deadline_ends_in_an_error_event(
    tmp_path: Path, model_server: ModelServer, client: str
) -> None:
    model_server.add(Respond(body=completion(" ".join(["slow"] * 100)), token_delay=0.1))
    async with daemon_on(tmp_path, model_server, client, timeout=1.0) as daemon, daemon.http("alice") as http:
        body = {"message": "talk", "conversation_id": "c-10", "stream": True}
        async with http.stream("POST", "/v1/chat", json=body) as response:
            events = await read_sse(response)
    assert events[0][0] == "delta"
    kind, data = events[-1]
    assert kind == "error" and data["error"]["status"] == 504 and data["error"]["code"] == "timeout"
    await eventually(model_server.disconnected.is_set, timeout=10)


@pytest.mark.parametrize("client", CLIENTS)
async def test_a_model_stream_broken_mid_way_ends_in_the_failure_reply(
    tmp_path: Path, model_server: ModelServer, client: str
) -> None:
    model_server.add(Respond(body=completion("this will not be whole at all"), break_after=3))
    async with daemon_on(tmp_path, model_server, client) as daemon, daemon.http("alice") as http:
        body = {"message": "talk", "conversation_id": "c-11", "stream": True}
        async with http.stream("POST", "/v1/chat", json=body) as response:
            events = await read_sse(response)
    texts = [data for kind, data in events if kind == "delta"]
    assert "".join(t["text"] for t in texts[:-1]) == "this will not "  # what arrived was shown...
    assert texts[-1] == {"text": replies.LLM_FAILED, "replace": True}  # ...then replaced by the failure
    kind, done = events[-1]
    assert kind == "done" and done["success"] is False and done["response"] == replies.LLM_FAILED
