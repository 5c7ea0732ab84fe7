"""``HarnessSetup``: how an agent's harness is built for each run."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from .._errors import InvalidInput
from ..actors import ActorContext, ActorRef, ActorSystem
from ..llm import ChatModel, Price
from ..llm._price import price_of
from ._budget import TokenBudget
from ._handle import Harness
from ._sandbox import Sandbox
from ._stop import StopSignal
from ._timings import CallTimings
from ._tools import Tool


class HarnessSetup:
    """The model, tools, sandbox and budget an agent's harnesses are built from.

    ``budget``: one budget shared by every run of every agent given this setup (a team
    budget; it may be in tokens, in money, or both). Without it, ``tokens_per_run`` and
    ``cost_per_run`` give each run a fresh budget of that many tokens / that much money
    (``None``: unlimited, still counted). ``price``: what the model's tokens cost
    (default: the model's own ``price``), needed for a budget in money. ``sandbox`` is
    shared by every run, and so are its rate limits. ``call_timeout``: seconds per model
    call.

    The setup does not own the model: whoever made an ``OpenAIChatModel`` closes it
    (``await model.aclose()``) once every agent using it is done.
    """

    def __init__(
        self,
        model: ChatModel,
        *,
        tools: Iterable[Tool] = (),
        tool_allowlist: Iterable[str] | None = None,
        sandbox: Sandbox | None = None,
        budget: TokenBudget | None = None,
        tokens_per_run: int | None = None,
        cost_per_run: float | None = None,
        call_timeout: float | None = None,
        price: Price | None = None,
    ) -> None:
        if budget is not None and (tokens_per_run is not None or cost_per_run is not None):
            raise InvalidInput(
                "HarnessSetup takes budget (shared) or tokens_per_run / cost_per_run (per run), not both",
                field="budget",
                value=budget,
            )
        self.model = model
        self.tools = tuple(tools)
        self.tool_allowlist = None if tool_allowlist is None else frozenset(tool_allowlist)
        self.sandbox = sandbox if sandbox is not None else Sandbox()
        self.budget = budget
        # checked here so that a bad value fails when the setup is made, not mid-run
        self.tokens_per_run = None if tokens_per_run is None else TokenBudget(tokens_per_run).limit
        self.cost_per_run = None if cost_per_run is None else TokenBudget(cost_limit=cost_per_run).cost_limit
        self.call_timeout = call_timeout
        self.price = price if price is not None else price_of(model)
        (budget or TokenBudget(cost_limit=self.cost_per_run)).check_priced("HarnessSetup", self.price)
        self.usage = budget if budget is not None else TokenBudget()
        """Tokens and calls spent by every run given this setup (the shared budget itself,
        when there is one): what a status page reports."""
        self.timings = CallTimings()
        """Times to first token and tokens per second of every run's streamed model calls."""

    def add_tools(self, tools: Iterable[Tool], *, allow: bool = True) -> None:
        """Give later runs ``tools`` beside the setup's own (``allow``: and let them past
        the allowlist, if the setup has one). ``InvalidInput`` naming ``tools`` for a name
        the setup has already (nothing is added then). Harnesses already spawned keep
        their tools."""
        added = tuple(tools)
        have = {tool.name for tool in self.tools}
        for tool in added:
            if tool.name in have:
                raise InvalidInput(
                    f"HarnessSetup already has a tool named {tool.name!r}", field="tools", value=tool.name
                )
            have.add(tool.name)
        self.tools = (*self.tools, *added)
        if allow and self.tool_allowlist is not None:
            self.tool_allowlist = self.tool_allowlist | {tool.name for tool in added}

    def use_model(self, model: ChatModel, price: Price | None = None) -> None:
        """Run later phases on ``model``, priced by ``price`` (default: the model's own).
        Raises ``ValueError`` when a budget in money would have no price to count by
        (nothing changes then). Harnesses already spawned keep their model."""
        price = price if price is not None else price_of(model)
        (self.budget or TokenBudget(cost_limit=self.cost_per_run)).check_priced("HarnessSetup", price)
        self.model = model
        self.price = price

    def budget_for_run(self) -> TokenBudget:
        if self.budget is not None:
            return self.budget
        return TokenBudget(self.tokens_per_run, cost_limit=self.cost_per_run, counts_into=self.usage)

    async def spawn(
        self,
        spawner: ActorSystem | ActorContext,
        *,
        system_prompt: str = "",
        stop: StopSignal | None = None,
        agent_id: str = "harness",
        task_id: str | None = None,
        summary_path: str | os.PathLike[str] | None = None,
        log: ActorRef | None = None,
        **extra: Any,
    ) -> Harness:
        """A new harness actor for one run (see :meth:`Harness.spawn`)."""
        return await Harness.spawn(
            spawner,
            self.model,
            stop=stop,
            system_prompt=system_prompt,
            tools=self.tools,
            tool_allowlist=self.tool_allowlist,
            sandbox=self.sandbox,
            budget=self.budget_for_run(),
            agent_id=agent_id,
            task_id=task_id,
            summary_path=summary_path,
            log=log,
            call_timeout=self.call_timeout,
            price=self.price,
            timings=self.timings,
            **extra,
        )
