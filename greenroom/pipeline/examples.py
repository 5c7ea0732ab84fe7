"""The example pipeline (``example.toml`` beside this file): planner → executor → critic,
where the critic can send the work back once. Offline: the planner and the critic are
mock handlers, the executor runs real (in-memory) tools.

    greenroom pipeline run --example --input "Write release notes for 0.2"
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ._envelope import Envelope

EXAMPLE = Path(__file__).with_name("example.toml")


def plan(env: Envelope) -> dict[str, Any]:
    """Split the request into steps; a second pass (after the critic) adds a review step."""
    words = env.raw_input.split()
    steps: list[dict[str, Any]] = [
        {"tool": "draft", "parameters": {"topic": env.raw_input}},
        {"tool": "count_words", "parameters": {"text": env.raw_input}},
    ]
    if env.get_output("critic"):
        steps.append({"tool": "draft", "parameters": {"topic": f"{env.raw_input} (revised)"}})
    return {"steps": steps, "reasoning": f"{len(words)} words to cover in {len(steps)} steps"}


def critique(env: Envelope) -> dict[str, Any]:
    """Ask for one more pass the first time, then approve."""
    passes = sum(1 for record in env.history if record.stage == "critic")
    if passes == 0:
        return {"verdict": "redo", "notes": "add a revised draft"}
    return {"verdict": "ok", "notes": "good"}


class ExampleTools:
    """In-memory tools: ``draft`` (makes a title) and ``count_words``."""

    def __init__(self) -> None:
        self.drafts: list[str] = []

    async def execute(self, tool_name: str, params: dict[str, Any]) -> Any:
        if tool_name == "draft":
            title = f"Draft: {params.get('topic', '')}".strip()
            self.drafts.append(title)
            return {"status": "success", "data": {"title": title}}
        if tool_name == "count_words":
            return {"words": len(str(params.get("text", "")).split())}
        return {"status": "error", "error": f"no tool {tool_name!r}"}
