"""Built-in example agents and an example graph, so ``greenroom run`` needs no code.

A small writing pipeline per topic: ``research`` -> ``write`` -> ``review``, and one
``review`` of everything at the end. The agents are deterministic and offline: they
read their dependencies' results and take a few milliseconds, like a very fast model.
"""

from __future__ import annotations

import hashlib

import anyio

from ..messages import AgentResult, AgentTask
from ._base import BaseAgent
from ._runtime import AgentRuntime

TOPICS = (
    "actors", "mailboxes", "supervision", "backpressure", "leases", "heartbeats", "journals",
    "group commit", "cancellation", "structured concurrency", "dead letters", "death watch",
)  # fmt: skip


def _work_time(task: AgentTask) -> float:
    digest = hashlib.blake2b(task.id.encode(), digest_size=2).digest()
    return 0.002 + int.from_bytes(digest, "big") % 8 / 1000  # 2-9 ms, the same every run


async def _upstream(task: AgentTask, runtime: AgentRuntime) -> list[AgentTask]:
    return [await runtime.get_task(dep) for dep in task.depends_on]


class ResearchAgent(BaseAgent):
    agent_type = "research"

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        topic = str(task.input.get("topic", task.id))
        await anyio.sleep(_work_time(task))
        facts = [f"{topic}: point {i}" for i in range(1, 4)]
        return AgentResult(task_id=task.id, outcome="researched", artifacts={"topic": topic, "facts": facts})


class WriteAgent(BaseAgent):
    agent_type = "write"

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        facts = [
            fact
            for up in await _upstream(task, runtime)
            if up.result
            for fact in up.result.artifacts["facts"]
        ]
        await self.on_progress(task, runtime, "drafting", 0.5)
        await anyio.sleep(_work_time(task))
        draft = " ".join(f"{fact}." for fact in facts)
        return AgentResult(
            task_id=task.id, outcome="drafted", artifacts={"draft": draft, "words": len(draft.split())}
        )


class ReviewAgent(BaseAgent):
    agent_type = "review"

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        upstream = await _upstream(task, runtime)
        words = sum(int(up.result.artifacts.get("words", 0)) for up in upstream if up.result)
        await anyio.sleep(_work_time(task))
        return AgentResult(
            task_id=task.id,
            outcome="approved",
            artifacts={"reviewed": [up.id for up in upstream], "words": words},
            notes=f"{len(upstream)} input(s), {words} words",
        )


AGENTS: dict[str, type[BaseAgent]] = {
    "research": ResearchAgent,
    "write": WriteAgent,
    "review": ReviewAgent,
}


def example_graph(prefix: str, topics: int = 40) -> list[AgentTask]:
    """``topics`` research -> write -> review chains and a final review of all of them."""
    tasks: list[AgentTask] = []
    reviews = []
    for i in range(topics):
        topic = f"{TOPICS[i % len(TOPICS)]} #{i + 1}"
        research, write, review = (f"{prefix}-{i + 1:03d}-{step}" for step in ("research", "write", "review"))
        tasks.append(AgentTask(id=research, type="research", input={"topic": topic}, priority=1))
        tasks.append(AgentTask(id=write, type="write", depends_on=[research]))
        tasks.append(AgentTask(id=review, type="review", depends_on=[write]))
        reviews.append(review)
    tasks.append(AgentTask(id=f"{prefix}-final-review", type="review", depends_on=reviews, priority=-1))
    return tasks
