"""Servers that expose a memory store: MCP (``memfrontier mcp``)."""
