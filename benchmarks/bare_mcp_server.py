"""The baseline for mcp_cold_start.py: a bare one-tool MCP SDK server over stdio, so
the ratio says what the project's server adds on top of the SDK itself."""

from mcp.server.mcpserver import MCPServer

server = MCPServer(name="bare")


@server.tool()
def ping(text: str) -> str:
    """Returns its input."""
    return text


if __name__ == "__main__":
    server.run("stdio")
