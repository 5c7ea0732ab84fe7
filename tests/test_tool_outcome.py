"""One tool call, one shape: ``messages.ToolOutcome``, and the specs' names as its views."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from greenroom import InvalidInput
from greenroom.chat import ChatStore, MessageHistory, ToolCallRecord, ToolResult
from greenroom.messages import ChatMessage, ToolOutcome
from greenroom.pipeline import StandardToolResult, ToolStatus
from greenroom.testing import MemoryRecordStore

FOUND = ToolOutcome(
    name="list_tasks", arguments={"status": "open"}, ok=True, result={"tasks": []}, duration_ms=3
)
MISSING = ToolOutcome.failed("delete_task", {"task_id": 9}, "no such task", code="NOT_FOUND")


def test_the_model_is_shown_text_as_text_any_other_result_as_json_and_a_failure_as_an_error() -> None:
    said = ToolOutcome(name="echo", arguments={}, ok=True, result="hello")
    assert said.content() == "hello"
    assert FOUND.content() == '{"tasks":[]}'
    assert MISSING.content() == "error: no such task"


def test_a_result_that_is_not_json_is_shown_as_the_failure_saying_so() -> None:
    odd = ToolOutcome(name="odd", arguments={"a": 1}, ok=True, result=object(), id="c1")
    outcome, content = odd.shown()
    assert not outcome.ok and outcome.id == "c1" and outcome.arguments == {"a": 1}
    assert content.startswith("error: tool 'odd' returned a value that is not JSON")
    assert FOUND.shown() == (FOUND, FOUND.content())


def test_spec_003_s_record_has_the_result_or_the_error() -> None:
    assert FOUND.as_record() == {
        "id": None, "name": "list_tasks", "arguments": {"status": "open"}, "ok": True,
        "result": {"tasks": []}, "duration_ms": 3,
    }  # fmt: skip
    assert MISSING.as_record() == {
        "id": None, "name": "delete_task", "arguments": {"task_id": 9}, "ok": False,
        "error": "no such task", "error_code": "NOT_FOUND",
    }  # fmt: skip


def test_spec_002_s_tool_result_is_a_view_that_goes_both_ways() -> None:
    result = ToolResult.of(MISSING)
    assert result == ToolResult(success=False, error="no such task", error_code="NOT_FOUND")
    assert result.outcome("delete_task", {"task_id": 9}) == MISSING
    assert ToolResult.of(FOUND) == ToolResult(success=True, data={"tasks": []})
    odd = ToolOutcome.failed("t", {}, "boom", code="timeout")  # a code spec 002 does not have
    assert ToolResult.of(odd).error_code == "SYSTEM_ERROR"


def test_spec_001_s_tool_call_record_and_message_history_are_views_of_a_kept_message() -> None:
    record = ToolCallRecord.of(FOUND)
    assert record == ToolCallRecord(
        "list_tasks",
        {"status": "open"},
        {"success": True, "data": {"tasks": []}, "error": None, "error_code": None},
        3,
    )
    assert record.outcome() == FOUND
    kept = ChatMessage("assistant", "Nothing open.", at=120.0, outcomes=(FOUND,))
    history = MessageHistory.of(kept)
    assert history == MessageHistory(
        "assistant", "Nothing open.", datetime.fromtimestamp(120.0, UTC), [record.as_dict()]
    )
    assert MessageHistory.of(ChatMessage("user", "hi", at=1.0)).tool_calls is None


def test_spec_004_s_standard_tool_result_is_a_view() -> None:
    found = StandardToolResult.of(FOUND)
    assert found.status is ToolStatus.SUCCESS and found.data == {"tasks": []}
    found.validate()
    plain = StandardToolResult.of(ToolOutcome(name="n", arguments={}, ok=True, result=3))
    assert plain.data == {"result": 3}
    missing = StandardToolResult.of(MISSING)
    assert missing.status is ToolStatus.ERROR and missing.error is not None
    assert (missing.error.error_type, missing.error.message) == ("NOT_FOUND", "no such task")
    missing.validate()


@pytest.mark.anyio
@pytest.mark.parametrize("role", ["system", "tool"])
async def test_the_chat_store_keeps_only_the_user_s_and_the_assistant_s_messages(
    role: str,
) -> None:

    chat = ChatStore(MemoryRecordStore(), shared=False)
    try:
        await chat.open_conversation("alice", "c1", create=True)
        await chat.save_turn("alice", "c1", [ChatMessage("user", "kept", at=1.0)], None)
        with pytest.raises(InvalidInput, match=f"got role '{role}'") as refused:
            await chat.save_turn(
                "alice", "c1", [ChatMessage("user", "q", at=2.0), ChatMessage(role, "x")], None
            )  # type: ignore[arg-type]
        assert refused.value.field == "role"
        assert [m.content for m in await chat.load_history("alice", "c1", 10)] == ["kept"]  # nothing of it
    finally:
        await chat.aclose()
