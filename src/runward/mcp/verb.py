"""runward mcp: serve the verbs as MCP tools over stdio, for coding agents (docs/agents.md).

A front end beside verbs/, not one of them: it serves every verb as a tool through library.py,
so cli.py dispatches here directly and verbs/ stays off mcp/. The SDK is the optional extra
runward[mcp], imported only inside run (server.py): no other verb and not `runward --help`
or `runward mcp --help` ever loads it (tests/test_layout.py, tests/test_api.py)."""

from __future__ import annotations

from ..errors import BadInput
from ..operations.common import load_config, require_extra


def add_arguments(p) -> None:
    p.add_argument("--allow", metavar="TOOLS",
                   help="comma list of the tools agents may call, or `all` (default: runward.toml's [mcp] allow, "
                        "else every tool but exec and kill, push only onto the runs' files)")
    p.add_argument("--targets", metavar="TARGETS",
                   help="comma list of the targets agents may use (default: runward.toml's [mcp] targets, else any)")


def run(args, out) -> int:
    require_extra("mcp", "mcp", "the mcp package (the MCP Python SDK)", "mcp")
    if args.json:
        raise BadInput("runward mcp speaks MCP on stdout; it has no --json",
                       "register it with an MCP client (docs/agents.md)")
    cfg = load_config(args)
    from . import server as mcpserver
    policy = mcpserver.policy_from(cfg, args.allow, args.targets)
    mcpserver.serve(getattr(args, "config", None), policy)
    return 0
