"""``ScriptedModel``: deterministic replies, usage, latency, exhaustion."""

from __future__ import annotations

import anyio
import pytest

from greenroom.llm import ChatModel, ScriptedModel, ScriptExhausted, estimate_usage
from greenroom.messages import ChatMessage, ChatReply, ChatRequest, ModelToolCall, Usage

pytestmark = pytest.mark.anyio


def ask(text: str) -> ChatRequest:
    return ChatRequest((ChatMessage("user", text),))


async def test_replies_come_in_order_and_every_request_is_kept() -> None:
    tool_turn = ChatReply(tool_calls=(ModelToolCall("1", "search", {"q": "x"}),), usage=Usage(5, 2))
    async with ScriptedModel([tool_turn, "plain text"]) as model:
        assert isinstance(model, ChatModel)
        assert await model.chat(ask("a")) is tool_turn
        second = await model.chat(ask("b"))
        assert second.text == "plain text" and second.tool_calls == ()
        assert [r.messages[0].content for r in model.requests] == ["a", "b"]
        with pytest.raises(ScriptExhausted, match="has 2 replies; call 3 found none left"):
            await model.chat(ask("c"))
    assert model.closed


async def test_a_reply_without_usage_gets_a_deterministic_estimate() -> None:
    model = ScriptedModel(["x" * 40, "x" * 40])
    first, second = await model.chat(ask("y" * 100)), await model.chat(ask("y" * 100))
    assert first.usage == second.usage == estimate_usage(ask("y" * 100), ChatReply(text="x" * 40))
    assert first.usage == Usage(prompt_tokens=4 + 25, completion_tokens=10)


async def test_a_function_script_answers_from_the_request() -> None:
    model = ScriptedModel(lambda request: f"echo {request.messages[-1].content}")
    assert (await model.chat(ask("hi"))).text == "echo hi"
    assert model.remaining == 0


async def test_latency_is_simulated_and_cancellation_consumes_nothing() -> None:
    model = ScriptedModel(["kept"], latency=30)
    with anyio.move_on_after(0.01) as scope:
        await model.chat(ask("a"))
    assert scope.cancelled_caught
    assert model.remaining == 1 and model.requests == []


def test_bad_scripts_are_refused() -> None:
    with pytest.raises(TypeError, match="script\\[1\\] must be a ChatReply or a str, got 42"):
        ScriptedModel(["ok", 42])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="latency must be a number >= 0, got -1"):
        ScriptedModel([], latency=-1)
