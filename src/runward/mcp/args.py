"""The MCP server's arguments checked as the CLI checks its flags.

The SDK's MCPServer ignores an argument its tool does not declare (start with grace=600 or
stop_signal="INT" would start the job with the default grace and TERM, and say ok), and answers
a value its schema refuses (settle=-1, gpus=["x"], env={"A": 1}) with plain text, "Error executing
tool ...": no document, no exit_code. Both are the run's document here: BadInput, exit_code 2,
nothing started, the server still answering.

A string where the schema names no string (gpus "[1]", env '{"A": "1"}') is refused here too:
the SDK reads such a string as JSON before validating (for clients that send lists as text), so
gpus "[1]" would start on GPU 1 where `import runward` refuses gpus="[1]"."""

from __future__ import annotations

import json

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent
from pydantic import ValidationError

from ..errors import EXIT_BAD_INPUT

HINT = "give the tool only the arguments its input schema (tools/list) names, with values of its types"


def bad_input(tool: str, message: str, hint: str = HINT) -> CallToolResult:
    doc = {"ok": False, "command": tool, "error": {"type": "BadInput", "message": message,
                                                  "exit_code": EXIT_BAD_INPUT, "hint": hint}, "result": None}
    return CallToolResult(content=[TextContent(type="text", text=json.dumps(doc))], structured_content=doc,
                          is_error=True)


def _said(e: ValidationError) -> str:
    return "; ".join("invalid %s %r: %s" % (".".join(str(x) for x in err.get("loc", ())) or "arguments",
                                           err.get("input"), err.get("msg")) for err in e.errors())


def _types(prop: dict) -> set:
    """The JSON types a property's schema names (empty where it names none)."""
    return {t for t in [prop.get("type"), *(a.get("type") for a in prop.get("anyOf") or ())] if isinstance(t, str)}


class CheckedServer(MCPServer):
    async def call_tool(self, name, arguments, context=None):
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            props = (tool.parameters or {}).get("properties") or {}
            known = set(props)
            extra = sorted(set(arguments or {}) - known)
            if extra:
                return bad_input(name, f"tool {name} takes no argument {', '.join(map(repr, extra))}",
                                 f"its arguments: {', '.join(sorted(known))}")
            for key, value in (arguments or {}).items():
                types = _types(props.get(key) or {})
                if isinstance(value, str) and types and "string" not in types:
                    return bad_input(name, f"invalid {key} {value!r}: a string, where the tool takes "
                                           f"{' or '.join(sorted(types - {'null'}))}")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as e:
            if isinstance(e.__cause__, ValidationError):
                return bad_input(name, _said(e.__cause__))
            raise
