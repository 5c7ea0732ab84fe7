"""Spec 003, 2.1: ``PhaseResult`` carries operational output and no accounting."""

from __future__ import annotations

import dataclasses

import pytest

from greenroom.agents import PhaseResult as FromAgents
from greenroom.harness import STOP_REASONS, PhaseResult


def test_phase_result_can_be_constructed_with_the_three_fields() -> None:
    result = PhaseResult(final_text="outline", tool_calls=[{"name": "search"}], stop_reason="done")
    assert (result.final_text, result.tool_calls, result.stop_reason) == (
        "outline",
        [{"name": "search"}],
        "done",
    )
    assert [f.name for f in dataclasses.fields(PhaseResult)] == ["final_text", "tool_calls", "stop_reason"]
    assert FromAgents is PhaseResult


def test_phase_result_has_no_tokens_used_attribute() -> None:
    result = PhaseResult("", [], "done")
    with pytest.raises(AttributeError):
        result.tokens_used  # type: ignore[attr-defined]  # noqa: B018


def test_phase_result_has_no_cost_usd_attribute() -> None:
    result = PhaseResult("", [], "done")
    with pytest.raises(AttributeError):
        result.cost_usd  # type: ignore[attr-defined]  # noqa: B018


def test_all_valid_stop_reason_values_are_accepted() -> None:
    reasons = ["done", "max_iterations", "budget_exhausted", "stop_requested"]
    assert set(reasons) == STOP_REASONS
    assert [PhaseResult("", [], reason).stop_reason for reason in reasons] == reasons


def test_phase_result_refuses_attribute_injection_and_changes() -> None:
    result = PhaseResult("", [], "done")
    with pytest.raises((AttributeError, TypeError)):
        result.tokens_used = 5  # type: ignore[attr-defined]
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.stop_reason = "max_iterations"  # type: ignore[misc]
    assert not hasattr(result, "__dict__")


def test_an_unknown_stop_reason_is_refused_naming_the_value() -> None:
    with pytest.raises(ValueError, match=r"stop_reason must be one of .* got 'finished'"):
        PhaseResult("", [], "finished")
