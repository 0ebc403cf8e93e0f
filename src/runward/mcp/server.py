"""`runward mcp`: the verbs as MCP tools over stdio (the official `mcp` SDK, extra runward[mcp]).

One tool per verb. Each calls the Python API (library.py), which runs the verb's own code, so
a tool's result is the very document `runward VERB --json` prints: `verified` on success, the
error's type, hop and hint on failure (then the result is flagged isError). A call that waits
(start's settle, watch's window, stop's grace) reports progress once a second, or, for a client
that declares MCP's tasks extension, answers with a task handle at once (mcp/tasks.py).

What an agent may do is a policy (docs/agents.md): runward.toml's [mcp] `allow` (verbs) and
`targets`, or `runward mcp --allow` / `--targets`. By default every verb but exec and kill (a
start's own command, sh, env or cwd, and a restart's env, are exec: EXEC_ARGS),
and push only the pairs runward.toml's runs deploy (`files = ["LOCAL:REMOTE"]`, on the run's
own target, that LOCAL onto that REMOTE). A refused call is an error result naming the key that would allow it.

Imported only by mcp/verb.py's run: the SDK (pydantic, anyio, ...) is never loaded by any
other verb, nor by `runward --help`.
"""

import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import CallToolResult, TextContent

from .. import library
from ..spec.config import load as load_config
from . import args as mcpargs, tasks as mcptasks, tools as mcptools
from ..errors import EXIT_BAD_INPUT, RunwardError
from .tools import TOOLS

NOT_BY_DEFAULT = ("exec", "kill")  # and push beyond the runs' own files (Policy.push_anywhere)
# a verb's arguments that run a command of the caller's choosing, or change how one runs (a
# start's own command, shell line, env, cwd; a restart's env: LD_PRELOAD on a legitimate run):
# exec, whichever tool asks (design rule 16); without them a start runs what runward.toml defines
EXEC_ARGS = {"start": ("command", "sh", "env", "cwd"), "restart": ("env",)}
TARGETLESS = ("lint", "targets")

INSTRUCTIONS = """runward starts, stops, restarts and watches long-running jobs on local, SSH and \
container targets (ssh://host, ssh://host/pct:200, podman:NAME), and verifies every answer. \
Use these tools instead of a shell: stop (verified dead, whole tree) instead of pkill -f; push \
(through the hop chain, sha256-checked, into the filesystem the job sees) instead of scp; \
watch (a bounded window, a verdict) instead of sleep + tail. Each result is the JSON document \
`runward VERB --json` prints; on failure, error.type, error.hop and error.hint say what broke \
and what to do. `targets` lists the targets and runs runward.toml names."""


@dataclass(frozen=True)
class Policy:
    """Which tools and targets an agent may use. targets None: any; push_anywhere False:
    push only onto runward.toml's runs' files; source: where it was set (named in refusals)."""
    verbs: frozenset
    targets: tuple | None
    push_anywhere: bool
    source: str


def policy_from(cfg, allow: str | None = None, targets: str | None = None) -> Policy:
    """The policy: --allow / --targets (comma lists) over runward.toml's [mcp] allow / targets."""
    section = getattr(cfg, "mcp", None) or {}
    given = _words(allow) if allow is not None else section.get("allow")
    where = "--allow" if allow is not None else "runward.toml [mcp] allow"
    if given is None:
        verbs, anywhere = frozenset(TOOLS) - set(NOT_BY_DEFAULT), False
    else:
        given = [given] if isinstance(given, str) else list(given)
        verbs = frozenset(TOOLS) if "all" in given else frozenset(given)
        unknown = sorted(verbs - set(TOOLS))
        if unknown:
            from ..errors import BadInput
            raise BadInput(f"{where}: unknown tool(s) {', '.join(unknown)}", f"tools: all, {', '.join(TOOLS)}")
        anywhere = "push" in verbs
    tg = _words(targets) if targets is not None else section.get("targets")
    tg = tuple(str(cfg.target(t)) for t in ([tg] if isinstance(tg, str) else tg)) if tg is not None else None
    return Policy(verbs, tg, anywhere, "--allow" if allow is not None else "runward.toml [mcp]")


def _words(text: str) -> list[str]:
    return [w.strip() for w in text.split(",") if w.strip()]


def refusal(verb: str, on: str | None, name: str | None, args: dict, policy: Policy, cfg) -> dict | None:
    """The error document of a call the policy refuses, or None."""
    # an allow list is the whole set of tools allowed, never an addition to the defaults
    how = ("runward mcp --allow" if policy.source == "--allow" else "runward.toml: [mcp] allow = [...]") + (
        ", the whole list of tools allowed (\"all\": every one)")
    if verb not in policy.verbs:
        return _refused(verb, f"the {verb} tool is not allowed to agents here"
                        + (" (exec and kill are off by default)" if verb in NOT_BY_DEFAULT else ""),
                        f"a person can allow it: add \"{verb}\" to {how}", "mcp.allow")
    if verb in TARGETLESS:
        return None
    target = str(cfg.target(on, name))
    if policy.targets is not None and target not in policy.targets:
        return _refused(verb, f"target {target} is not among the targets agents may use here "
                        f"({', '.join(policy.targets) or 'none'})",
                        "a person can add it to runward.toml's [mcp] targets (or runward mcp --targets)", "mcp.targets")
    if verb == "push" and not policy.push_anywhere:
        return _push_refusal(args["files"], target, cfg, how)
    return _exec_refusal(verb, args, policy, how)


def _exec_refusal(verb: str, args: dict, policy: Policy, how: str) -> dict | None:
    """A start or restart given a command, shell line, env or cwd of the caller's own is exec:
    refused where exec is; where exec is allowed, a shell line is linted first, as exec's is."""
    given = [k for k in EXEC_ARGS.get(verb, ()) if args.get(k) not in (None, "", [], {})]
    if given and "exec" not in policy.verbs:
        return _refused(verb, f"{verb} with its own {', '.join(given)}: that runs a command of the caller's choosing, "
                        "which is exec, not allowed to agents here (exec and kill are off by default)",
                        f"{verb} a run runward.toml defines, as it defines it (its name only: the `targets` tool "
                        f"lists them); or a person allows exec: add \"exec\" to {how}", "mcp.allow")
    if verb == "start" and args.get("sh"):
        from .. import lint
        findings = lint.lint(args["sh"])
        errors = [f for f in findings if f.severity == "error"]
        if errors:
            return {"ok": False, "command": verb, "error": {
                "type": "BadInput", "exit_code": EXIT_BAD_INPUT,
                "message": "refusing to run: the linter found " + "; ".join(f.message for f in errors),
                "hint": "fix the shell line (the `lint` tool says why and how), or give the command as an argv",
                "details": {"findings": [f.to_dict() for f in findings]}}}
    return None


def _push_refusal(specs: list, target: str, cfg, how: str) -> dict | None:
    """A push is a read of the local file as much as a write of the remote one (rule 16): by
    default each LOCAL:REMOTE must be a pair a run of runward.toml deploys, on its own target,
    LOCAL the very file that pair reads (links and relative paths resolved as push reads them)."""
    base = os.path.dirname(cfg.path) if cfg.path else os.getcwd()
    pairs: dict = {}
    for run in cfg.runs:
        for f in cfg.runs.value(run, "files") or ():
            local, sep, remote = f.partition(":")
            if sep:
                pairs.setdefault((str(cfg.target(None, run)), remote), set()).add(_real(local, base))
    for spec in specs:
        local, _, remote = spec.partition(":")
        paired = pairs.get((target, remote))
        if paired is None:
            return _refused("push", f"push onto {remote} on {target}: not a file of a run in runward.toml "
                            "(agents push only the runs' own files by default)",
                            f"add it to a run's files = [\"LOCAL:REMOTE\"] (then `deploy` it), or a person adds "
                            f"\"push\" to {how}", "mcp.allow")
        if _real(local, os.getcwd()) not in paired:
            return _refused("push", f"push of {local} onto {remote} on {target}: runward.toml pairs {remote} with "
                            f"{', '.join(sorted(paired))}, not this file (agents push only the runs' own files, "
                            "from where runward.toml says)", f"push {sorted(paired)[0]} there (or `deploy` the run), "
                            f"or a person adds \"push\" to {how}", "mcp.allow")
    return None


def _real(local: str, base: str) -> str:
    return os.path.realpath(os.path.join(base, os.path.expanduser(local)))


def _refused(verb: str, message: str, hint: str, key: str) -> dict:
    return {"ok": False, "command": verb, "error": {"type": "Refused", "message": message, "hint": hint,
                                                    "exit_code": EXIT_BAD_INPUT, "details": {"config_key": key}}}


# --- the server -------------------------------------------------------------------------

class Server:
    """The policy, runward.toml, and the tools bound to them."""

    def __init__(self, config: str | None, policy: Policy):
        self.config = config
        self.policy = policy
        # start/stop/watch as MCP tasks, for clients that ask; a task id passes the policy as a call would
        self.tasks = mcptasks.Tasks(config, lambda verb, on, name: refusal(
            verb, on, name, {}, policy, load_config(config)))

    async def call(self, ctx: Context, verb: str, fn: Callable[[], library.Result], *, on: str | None = None,
                   name: str | None = None, args: dict | None = None, expect_s: float | None = None,
                   ready: str | None = None) -> CallToolResult:
        try:
            cfg = load_config(self.config)
            doc = refusal(verb, on, name, args or {}, self.policy, cfg)
        except RunwardError as e:
            doc = {"ok": False, "command": verb, "error": e.to_dict()}
        if doc is None:
            made = await self.tasks.create(verb, fn, on, name, expect_s, ready)
            if isinstance(made, dict):  # a task: the interceptor answers with its handle instead of this
                doc = {"ok": True, "command": verb, "task": made["taskId"]}
            else:
                doc = (made or await _with_progress(ctx, verb, fn, expect_s)).to_json()
        return CallToolResult(content=[TextContent(type="text", text=json.dumps(doc))],
                              structured_content=doc, is_error=not doc.get("ok"))


async def _with_progress(ctx: Context, verb: str, fn: Callable[[], library.Result], expect_s: float | None):
    """fn in a worker thread; meanwhile a progress notification each second (seconds waited,
    of expect_s when the wait has a known length: a watch window)."""
    done = anyio.Event()
    box: dict = {}

    async def work():
        try:
            box["res"] = await anyio.to_thread.run_sync(fn)
        finally:
            done.set()

    async def tick():
        t0 = time.monotonic()
        while not done.is_set():
            with anyio.move_on_after(1.0):
                await done.wait()
            if not done.is_set():
                waited = time.monotonic() - t0
                await ctx.report_progress(round(waited, 1), expect_s, f"{verb}: {waited:.0f}s")

    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        await work()
    return box["res"]


def build(config: str | None, policy: Policy) -> MCPServer:
    srv = Server(config, policy)
    server = mcpargs.CheckedServer("runward", instructions=INSTRUCTIONS, version=_version(), extensions=[srv.tasks])
    mcptools.register(server, srv)
    return server


def _version() -> str:
    from importlib import metadata
    try:
        return metadata.version("runward")
    except metadata.PackageNotFoundError:  # run from a source tree (PYTHONPATH=src)
        return ""


def serve(config: str | None, policy: Policy) -> None:
    build(config, policy).run("stdio")

