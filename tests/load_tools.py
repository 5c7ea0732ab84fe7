"""Tools a load test's workload names: an MCP server run over stdio (``python
load_tools.py``, each call appended to the file ``$LOAD_TOOL_CALLS``, so a test sees it
ran in that process) and a Python function named ``load_tools:stock``."""

from __future__ import annotations

import os

from mcp.server.mcpserver import MCPServer

server = MCPServer("load-test-tools")


@server.tool()
def lookup(query: str) -> str:
    """Look a query up in the catalogue."""
    with open(os.environ["LOAD_TOOL_CALLS"], "a") as calls:
        calls.write(f"lookup {query}\n")
    return f"found {query}"


@server.tool()
def fail(query: str) -> str:
    """Always fails."""
    raise ValueError(f"no {query}")


def stock(sku: str) -> dict[str, object]:
    """How many of a product are in stock."""
    return {"sku": sku, "in_stock": len(sku)}


if __name__ == "__main__":
    server.run("stdio")
