"""`runward mcp`: the MCP server, its tools, its tasks and its argument checks (extra runward[mcp])."""
