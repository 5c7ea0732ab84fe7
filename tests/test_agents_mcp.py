"""Agents on MCP through the daemon's config: ``[mcp.<name>]`` servers (a real stdio MCP
server here, ``load_tools.py``) whose tools an ``[agents.<type>] mcp = [...]`` pool's LLM
phases are given, one client per server shared by every agent; bad configs refused by
name before anything runs."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest
from _support import wait_for_status

from greenroom.daemon import AgentHost
from greenroom.daemon._config import AgentPoolConfig, ConfigError, DaemonConfig, check_config
from greenroom.harness import MCPServerConfig
from greenroom.messages import AgentTask, Submit, TaskStatus

pytestmark = pytest.mark.anyio
HERE = Path(__file__).resolve().parent


def _tools_server(calls: Path, **fields: object) -> MCPServerConfig:
    return MCPServerConfig(
        command=sys.executable,
        args=(str(HERE / "load_tools.py"),),
        env={"LOAD_TOOL_CALLS": str(calls)},
        **fields,  # type: ignore[arg-type]
    )


def _config(calls: Path, *, concurrency: int = 2, **server: object) -> DaemonConfig:
    return DaemonConfig(
        agents={
            "lookup": AgentPoolConfig(agent="mcp_agents:LookupAgent", concurrency=concurrency, mcp=["tools"])
        },
        mcp={"tools": _tools_server(calls, **server)},
    )


def _read(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


async def test_an_agents_phases_call_the_tools_of_the_mcp_servers_its_pool_names(tmp_path: Path) -> None:
    calls = tmp_path / "calls.log"
    async with AgentHost(_config(calls, tools=("lookup",)), tmp_path / "data") as host:
        assert list(host.mcp) == ["tools"]  # one client, shared by both agents
        for agent, _ in host.agents:
            assert agent.llm is not None and [t.name for t in agent.llm.tools] == ["lookup"]
        await host.supervisor.ask(
            Submit([AgentTask(id=f"q{n}", type="lookup", input={"query": f"leases-{n}"}) for n in range(3)])
        )
        done = [await wait_for_status(host.supervisor, f"q{n}", TaskStatus.COMPLETED) for n in range(3)]
    assert [task.result.artifacts["text"] for task in done if task.result] == [
        f'answer: {{"result":"found leases-{n}"}}'
        for n in range(3)  # the server's structured answer
    ]
    assert sorted(await anyio.to_thread.run_sync(_read, calls)) == [f"lookup leases-{n}" for n in range(3)]


async def test_a_server_without_a_tool_the_config_names_stops_the_daemon_from_starting(
    tmp_path: Path,
) -> None:
    with pytest.raises(ConfigError, match=r"mcp\.tools\.tools: the server has no tool 'nope'"):
        async with AgentHost(_config(tmp_path / "calls.log", tools=("lookup", "nope")), tmp_path / "data"):
            pytest.fail("the daemon started without the tool")


async def test_an_agent_with_no_llm_phases_given_mcp_tools_is_refused_by_name(tmp_path: Path) -> None:
    config = DaemonConfig(
        agents={"write": AgentPoolConfig(agent="greenroom.agents.examples:WriteAgent", mcp=["tools"])},
        mcp={"tools": _tools_server(tmp_path / "calls.log")},
    )
    with pytest.raises(ConfigError, match=r"'write' \(WriteAgent\) has no LLM phases.*agents\.write\.mcp"):
        async with AgentHost(config, tmp_path / "data"):
            pytest.fail("the daemon started")


@pytest.mark.parametrize(
    ("agents_mcp", "servers", "field"),
    [
        (["other"], {"tools": MCPServerConfig(command="x")}, "agents.lookup.mcp' names 'other'"),
        (
            ["tools"],
            {"tools": MCPServerConfig(command="x"), "idle": MCPServerConfig(command="y")},
            "mcp.idle",
        ),
        (["tools"], {"tools": MCPServerConfig()}, "mcp.tools needs one of command"),
        (["tools"], {"tools": MCPServerConfig(url="ftp://x")}, "mcp.tools.url must be an http"),
        (["tools"], {"tools": MCPServerConfig(command="x", timeout_s=0)}, "mcp.tools.timeout_s"),
    ],
)
def test_a_bad_mcp_config_is_refused_naming_the_field(
    agents_mcp: list[str], servers: dict[str, MCPServerConfig], field: str
) -> None:
    config = DaemonConfig(
        agents={"lookup": AgentPoolConfig(agent="mcp_agents:LookupAgent", mcp=agents_mcp)}, mcp=servers
    )
    with pytest.raises(ConfigError) as refused:
        check_config(config, "greenroom.toml")
    assert field in str(refused.value)
