"""The MCP face: memory tools for agents over stdio and streamable HTTP, on the served champion."""
