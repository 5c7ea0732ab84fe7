"""Built-in example agents and an example graph, so ``greenroom run`` needs no code.

A small writing pipeline per topic: ``research`` -> ``write`` -> ``review``, one
``review`` of everything at the end, and a ``publish`` task after it whose tool call waits
for a person's approval (``greenroom tasks approve ID``). The agents are deterministic and offline: they
read their dependencies' results and take a few milliseconds, like a very fast model.
``ResearchAgent`` does its work in LLM phases on the scripted model (spec 003's
research pattern: one context per subtopic, then a synthesis in the primary context)
unless it is given another ``llm``.
"""

from __future__ import annotations

import hashlib
from typing import Any

import anyio
import msgspec

from ..harness import HarnessSetup, RiskLevel, Sandbox, Tool
from ..llm import ScriptedModel
from ..messages import AgentResult, AgentTask, ChatReply, ChatRequest, ModelToolCall
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


RESEARCH_PROMPT = "You research one topic at a time and report short, checkable points."


def _knowledge_base(query: str) -> list[str]:
    """The example's offline knowledge base: three deterministic points per query."""
    return [f"{query}: point {i}" for i in range(1, 4)]


def scripted_researcher(request: ChatRequest) -> ChatReply:
    """The scripted model behind the example ``ResearchAgent``: queries the knowledge
    base once per subtopic, then reports what came back; the synthesis lists points."""
    users = [m.content or "" for m in request.messages if m.role == "user"]
    last = request.messages[-1]
    if "SYNTHESIZE" in users[-1]:
        points = [line for line in users[-1].splitlines() if line.startswith("- ")]
        return ChatReply(text="\n".join(["Outline:", *points]))
    subtopic = users[-1].split("'")[1]
    if last.role == "tool":
        return ChatReply(text="; ".join(_json_list(last.content or "[]")))
    return ChatReply(
        tool_calls=(ModelToolCall(f"kb-{len(users)}", "query_knowledge_base", {"query": subtopic}),)
    )


def _json_list(text: str) -> list[str]:
    value = msgspec.json.decode(text)
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def research_setup() -> HarnessSetup:
    """The example research agent's LLM setup: the scripted model, offline."""
    return HarnessSetup(
        ScriptedModel(scripted_researcher, latency=0.002),
        tools=[
            Tool(
                "query_knowledge_base",
                _knowledge_base,
                description="Look up facts about a query (a topic or a question) in the knowledge base.",
            )
        ],
        tokens_per_run=50_000,
    )


class ResearchAgent(BaseAgent):
    agent_type = "research"

    def __init__(self, name: str | None = None, *, llm: HarnessSetup | None = None, **options: Any) -> None:
        super().__init__(name, llm=llm if llm is not None else research_setup(), **options)

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        topic = str(task.input.get("topic", task.id))
        findings: list[str] = []
        for subtopic in (f"{topic} / background", f"{topic} / practice"):
            result = await self.run_phase(
                system_prompt=RESEARCH_PROMPT,
                user_message=f"Phase: RESEARCH. Subtopic: '{subtopic}'.",
                tool_names=["query_knowledge_base"],
                max_iterations=3,
                context_label=f"subtopic:{subtopic}",
            )
            if result.stop_reason in ("budget_exhausted", "stop_requested"):
                break
            findings.extend(point for point in result.final_text.split("; ") if point)
        outline = await self.run_phase(
            user_message="Phase: SYNTHESIZE. Write the research outline from:\n"
            + "\n".join(f"- {point}" for point in findings),
            tool_names=[],
            context_label=None,
        )
        path = anyio.Path(await anyio.to_thread.run_sync(self._artifacts_dir)) / self._artifact_filename(
            f"{task.id} outline"
        )
        await path.write_text(outline.final_text + "\n")
        return AgentResult(
            task_id=task.id,
            outcome="researched",
            artifacts={"topic": topic, "facts": findings, "outline": str(path)},
        )


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


def _publish(title: str, words: int) -> str:
    """The example's publishing tool: offline, it only says what it would do."""
    return f"published {title!r} ({words} words)"


def scripted_publisher(request: ChatRequest) -> ChatReply:
    """Asks for ``publish`` once, then reports what the tool (or the person who denied
    it) said."""
    last = request.messages[-1]
    if last.role == "tool":
        return ChatReply(text=f"Publishing: {last.content}")
    title = (request.messages[-1].content or "").split("'")[1]
    return ChatReply(tool_calls=(ModelToolCall("pub-1", "publish", {"title": title, "words": 900}),))


class PublishAgent(BaseAgent):
    """Publishes the reviewed collection: its ``publish`` call waits for a person's
    approval (the task is WAITING until ``greenroom tasks approve ID`` / ``deny ID``)."""

    agent_type = "publish"

    def __init__(self, name: str | None = None, *, llm: HarnessSetup | None = None, **options: Any) -> None:
        setup = llm or HarnessSetup(
            ScriptedModel(scripted_publisher, latency=0.002),
            tools=[Tool("publish", _publish, description="Publish a text.", risk=RiskLevel.NETWORK,
                        requires_approval=True)],
            sandbox=Sandbox(max_risk=RiskLevel.NETWORK),
        )  # fmt: skip
        super().__init__(name, llm=setup, **options)

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        title = str(task.input.get("title", task.id))
        result = await self.run_phase(user_message=f"Publish '{title}'.", tool_names=["publish"])
        return AgentResult(task_id=task.id, outcome="published", notes=result.final_text)


AGENTS: dict[str, type[BaseAgent]] = {
    "research": ResearchAgent,
    "write": WriteAgent,
    "review": ReviewAgent,
    "publish": PublishAgent,
}


def example_graph(prefix: str, topics: int = 40) -> list[AgentTask]:
    """``topics`` research -> write -> review chains, a final review of all of them, and
    the publishing of that (which waits for a person's approval)."""
    tasks: list[AgentTask] = []
    reviews = []
    for i in range(topics):
        topic = f"{TOPICS[i % len(TOPICS)]} #{i + 1}"
        research, write, review = (f"{prefix}-{i + 1:03d}-{step}" for step in ("research", "write", "review"))
        tasks.append(AgentTask(id=research, type="research", input={"topic": topic}, priority=1))
        tasks.append(AgentTask(id=write, type="write", depends_on=[research]))
        tasks.append(AgentTask(id=review, type="review", depends_on=[write]))
        reviews.append(review)
    final = f"{prefix}-final-review"
    tasks.append(AgentTask(id=final, type="review", depends_on=reviews, priority=-1))
    tasks.append(
        AgentTask(
            id=f"{prefix}-publish", type="publish", depends_on=[final], input={"title": f"{prefix} notes"}
        )
    )
    return tasks
