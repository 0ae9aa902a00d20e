"""The MCP server: every tool in commands/, served over stdio or streamable HTTP."""

from mcp_server.server import build_server

__all__ = ["build_server"]
