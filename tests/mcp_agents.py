"""An agent whose LLM phase calls whatever tools it is given — named in a daemon config as
``mcp_agents:LookupAgent`` with ``mcp = [...]``, so its tools come from an MCP server."""

from __future__ import annotations

from greenroom.agents import AgentRuntime, BaseAgent
from greenroom.harness import HarnessSetup
from greenroom.llm import ScriptedModel
from greenroom.messages import AgentResult, AgentTask, ChatReply, ChatRequest, ModelToolCall


def lookup_script(request: ChatRequest) -> ChatReply:
    """Looks the user's message up with the ``lookup`` tool, then answers with what came back."""
    last = request.messages[-1]
    if last.role == "tool":
        return ChatReply(text=f"answer: {last.content}")
    offered = [tool.name for tool in request.tools]
    if "lookup" not in offered:
        return ChatReply(text=f"no lookup tool (offered: {offered})")
    return ChatReply(tool_calls=(ModelToolCall("call-1", "lookup", {"query": last.content or ""}),))


class LookupAgent(BaseAgent):
    agent_type = "lookup"

    def __init__(self) -> None:
        # no tools of its own and an allowlist of none: what it calls, the config gave it
        super().__init__(llm=HarnessSetup(ScriptedModel(lookup_script), tool_allowlist=[]))

    async def handle_task(self, task: AgentTask, runtime: AgentRuntime) -> AgentResult:
        result = await self.run_phase(user_message=str(task.input.get("query", "")), max_iterations=3)
        return AgentResult(task.id, outcome="looked up", artifacts={"text": result.final_text})
