"""``TokenBudget``: one budget across contexts, and across a team of harness actors."""

from __future__ import annotations

import anyio
import pytest

from greenroom import ActorSystem
from greenroom.harness import Admission, Harness, TokenBudget, Tool
from greenroom.llm import ScriptedModel
from greenroom.messages import ChatReply, ChatRequest, ModelToolCall, Usage

pytestmark = pytest.mark.anyio


def admitted(decision: Admission | bool | None) -> Admission:
    assert isinstance(decision, Admission), decision
    return decision


async def test_one_call_at_a_time_until_a_call_size_is_known() -> None:
    budget = TokenBudget(1000)
    first = admitted(budget.try_admit())
    assert budget.try_admit() is False  # nothing known about call sizes yet: wait
    first.spend(100)
    second = admitted(budget.try_admit())
    third = admitted(budget.try_admit())  # 100 + 2 * 100 reserved <= 1000: both fit
    assert (second.reserved, third.reserved) == (100, 100)
    second.spend(50)
    third.release()  # an error: nothing spent, the reservation is freed
    assert (budget.spent, budget.calls, budget.in_flight) == (150, 2, 0)


async def test_near_the_limit_only_one_call_runs_and_then_it_is_refused() -> None:
    budget = TokenBudget(250, reserve_per_call=100)
    a, b = admitted(budget.try_admit()), admitted(budget.try_admit())
    assert budget.try_admit() is False  # 0 + 200 + 100 > 250: wait for a running call
    a.spend(100)
    b.spend(100)
    last = admitted(budget.try_admit())  # 200 + 100 > 250, but nothing runs: admitted alone
    assert budget.try_admit() is False
    last.spend(120)  # the one call that may overshoot
    assert budget.spent == 320 and budget.exhausted
    assert budget.try_admit() is None


async def test_a_waiting_admission_is_woken_by_a_finishing_call_and_cancellation_admits_nothing() -> None:
    budget = TokenBudget(150, reserve_per_call=100)
    running = admitted(budget.try_admit())
    got: list[Admission | None] = []
    async with anyio.create_task_group() as tg:

        async def wait() -> None:
            got.append(await budget.admit())

        tg.start_soon(wait)
        await anyio.wait_all_tasks_blocked()
        assert got == []
        running.spend(60)
    assert isinstance(got[0], Admission) and budget.in_flight == 1
    with anyio.move_on_after(0.01) as waited:  # got[0] runs and 60 + 100 + 100 > 150: wait
        await budget.admit()
    assert waited.cancelled_caught and budget.in_flight == 1  # the cancelled wait took nothing
    got[0].spend(100)
    assert budget.exhausted and await budget.admit() is None


def test_bad_budget_values_are_refused() -> None:
    with pytest.raises(ValueError, match="TokenBudget limit must be an int >= 0, got -5"):
        TokenBudget(-5)
    with pytest.raises(ValueError, match=r"reserve_per_call must be an int >= 0, got 1\.5"):
        TokenBudget(10, reserve_per_call=1.5)  # type: ignore[arg-type]


async def test_an_unlimited_budget_still_counts() -> None:
    budget = TokenBudget()
    calls = [admitted(budget.try_admit()) for _ in range(5)]
    for call in calls:
        call.spend(7)
    assert budget.spent == 35 and not budget.exhausted and budget.remaining == float("inf")


CALL = Usage(prompt_tokens=70, completion_tokens=30)  # every call uses 100 tokens


def keep_working(request: ChatRequest) -> ChatReply:
    """Always asks for one more tool call: only the budget ends the phase."""
    turn = sum(1 for m in request.messages if m.role == "assistant")
    return ChatReply(tool_calls=(ModelToolCall(f"t{turn}", "note", {}),), usage=CALL)


@pytest.mark.parametrize("reserve", [0, 100])
async def test_100_harness_actors_sharing_one_budget_overspend_by_at_most_one_call(reserve: int) -> None:
    """The guarantee (see ``TokenBudget``): spent <= limit + one call's usage, when no
    call uses more than its reservation. Here every call uses exactly 100 tokens."""
    limit = 10_050
    budget = TokenBudget(limit, reserve_per_call=reserve)
    model = ScriptedModel(keep_working, latency=0.001)
    results = []
    async with ActorSystem() as system:
        harnesses = [
            await Harness.spawn(system, model, budget=budget, tools=[Tool("note", lambda: "ok")])
            for _ in range(100)
        ]

        async def work(harness: Harness) -> None:
            for label in ("first", "second"):  # the budget is global across contexts, too
                results.append(await harness.run_bounded("go", max_iterations=1000, context_label=label))

        async with anyio.create_task_group() as tg:
            for harness in harnesses:
                tg.start_soon(work, harness)
    assert budget.spent <= limit + 100
    assert budget.spent >= limit  # and it did not stop early
    assert len(model.requests) == budget.calls == budget.spent // 100
    assert {r.stop_reason for r in results} == {"budget_exhausted"} and len(results) == 200
    assert budget.in_flight == 0


async def test_a_budget_in_money_admits_by_the_largest_call_cost_and_refuses_once_spent() -> None:
    budget = TokenBudget(cost_limit=0.625)
    first = admitted(budget.try_admit())
    assert budget.try_admit() is False  # no call has cost anything yet: one at a time
    first.spend(100, 0.25)
    a = admitted(budget.try_admit())  # 0.25 + 0.25 reserved <= 0.625
    assert a.reserved_cost == 0.25
    assert budget.try_admit() is False  # 0.25 + 0.25 + 0.25 > 0.625: wait
    a.spend(100, 0.25)
    last = admitted(budget.try_admit())  # 0.5 + 0.25 > 0.625, nothing runs: admitted alone
    last.spend(100, 0.25)
    assert budget.cost == 0.75 and budget.exhausted and budget.remaining_cost == 0.0
    assert budget.try_admit() is None
    assert budget.spent == 300 and budget.remaining == float("inf")  # tokens: counted, no limit


async def test_tokens_and_money_together_the_first_limit_reached_refuses() -> None:
    budget = TokenBudget(1000, cost_limit=0.5)
    admitted(budget.try_admit()).spend(100, 0.5)  # cheap in tokens, the money is spent
    assert budget.exhausted and budget.try_admit() is None


def test_a_bad_cost_limit_or_price_is_refused_naming_the_field() -> None:
    from greenroom.harness import HarnessSetup
    from greenroom.llm import Price

    for bad in (-1, float("nan"), float("inf"), "5", True):
        with pytest.raises(ValueError, match=r"TokenBudget cost_limit must be a number >= 0"):
            TokenBudget(cost_limit=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"Price input must be a number >= 0 \(per million tokens\), got -2"):
        Price(input=-2, output=1)
    with pytest.raises(ValueError, match=r"Price output must be a number >= 0.*got 'x'"):
        Price(input=1, output="x")  # type: ignore[arg-type]
    assert Price(input=2.5, output=10).cost(Usage(1_000_000, 100_000)) == 3.5
    unpriced = ScriptedModel(["hi"])
    with pytest.raises(
        ValueError, match="HarnessSetup: the budget has a cost_limit, but the model has no price"
    ):
        HarnessSetup(unpriced, cost_per_run=1.0)
    with pytest.raises(ValueError, match="HarnessSetup: the budget has a cost_limit"):
        HarnessSetup(unpriced, budget=TokenBudget(cost_limit=1.0))
    setup = HarnessSetup(unpriced, cost_per_run=1.0, price=Price(1, 1))  # a price given: fine
    assert setup.budget_for_run().cost_limit == 1.0
    with pytest.raises(ValueError, match="the model has no price"):
        setup.use_model(ScriptedModel(["hi"]))  # nothing changes
    assert setup.model is unpriced and setup.price == Price(1, 1)
    setup.use_model(ScriptedModel(["hi"], price=Price(3, 4)))
    assert setup.price == Price(3, 4)
