"""Other memory systems behind one save/search interface (Python, HTTP, MCP clients and built-in
third-party adapters), evaluated by the same harness as lab itself."""
