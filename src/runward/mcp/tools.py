"""The MCP tools of `runward mcp`, one per verb (mcp/server.py serves them).

Their JSON Schemas come from these signatures: each parameter's type and its description
(Annotated[..., Field(description=...)]), each tool's description from its docstring. Each
calls the Python API (library.py) in a worker thread through Server.call, which checks the
policy first and reports progress while it waits.
"""

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, ToolAnnotations
from pydantic import Field, StrictFloat, StrictInt

from .. import library
from ..agent.core.runspec import DEFAULTS
from ..errors import RunwardError
from ..spec import options
from ..spec.config import load

TOOLS = ("start", "stop", "restart", "status", "logs", "watch", "push", "deploy", "gpus", "ps", "kill", "exec",
         "lint", "doctor", "targets", "history", "compare", "stacks")
_SRV = None  # the mcpserver.Server the tools act for (one per process)

On = Annotated[str | None, Field(description="target: local, ssh://[user@]host[:port], ssh://host/pct:200, "
                                             "podman:NAME, or a name from runward.toml (default: the run's own, "
                                             "else local); the `targets` tool lists them")]
Name = Annotated[str, Field(description="the run's name (letters, digits, . _ -)")]
Env = Annotated[dict[str, str] | None, Field(description="environment entries for the job, NAME: VALUE")]


# each kind's JSON type, as the MCP tool's schema says it (a switch is off unless given; any other not given: None).
# Every number and switch is validated strict (Field(strict=True), StrictInt/StrictFloat inside a list or
# dict): the SDK's lax mode made True, 1.0 and "0" GPU indices, "0.5" a settle and "yes" a switch, values
# `import runward` refuses; strict takes what the schema names (an int where a number is) and refuses the
# rest as BadInput (mcp/args.py), the schema itself unchanged.
_TYPES = {"seconds": float | None, "fraction": float | None, "ratio": float | None, "float": float | None,
          "count": int | None, "int": int | None, "flag": bool}


def _declared(name: str, verb: str | None = None):
    """A parameter declared once in spec/options.py: its type and description from there (VERB's
    words, where it says the option in its own)."""
    opt = options.OPTS[name]
    tp = _TYPES.get(opt.kind, str | None)  # regex, signal, text, choice, word: a string
    extra = {"ge": 0, "le": options.MAX_SECONDS} if opt.kind == "seconds" else {"ge": opt.least} if opt.kind == "count" else {}
    return Annotated[tp, Field(description=options.help(name, verb), strict=True,
                               **extra)]


Cwd = _declared("cwd")
Settle = _declared("settle")
Ready = _declared("ready")
Grace = _declared("grace")


def _asked(name: str, key: str, given):
    """What a start waits for, as the start will take it: the call's KEY, else runward.toml's
    [runs.NAME] KEY, else the agent's default. A task's handle carries it, so a server process
    that did not create the task judges the start against the settle it was given (a run
    defined with settle = 60 and started without one is not "alive after its settle" at 0 s)."""
    if given is not None:
        return given
    try:
        runs = load(_SRV.config).runs
        found = runs.value(name, key) if name in runs else None
    except RunwardError:  # the start itself says what is wrong with runward.toml
        found = None
    return found if found is not None else DEFAULTS.get(key)


async def start(ctx: Context, name: Name, command: Annotated[list[str] | None, Field(
        description="the job's argv, e.g. [\"python3\", \"train.py\"] (omit for a run runward.toml defines)")] = None,
        on: On = None, env: Env = None,
        sh: _declared("sh") = None,
        cwd: Cwd = None, settle: Settle = None, ready: Ready = None,
        replace: _declared("replace") = False,
        gpus: Annotated[list[StrictInt] | None, Field(description="GPU indices: sets CUDA_VISIBLE_DEVICES")] = None,
        wait_gpus_free: _declared("wait_gpus_free") = False,
        ) -> CallToolResult:
    """Start a run; verified alive after its settle period (an early exit comes back with its exit code and last log lines). By default only a run runward.toml defines, as defined: a command, sh, env or cwd of the caller's own is exec, allowed only where exec is (then sh is linted first)."""
    return await _SRV.call(ctx, "start", lambda: library.start(
        name, command, on=on, env=env, sh=sh, cwd=cwd, settle=settle, ready=ready, replace=replace, gpus=gpus,
        wait_gpus_free=wait_gpus_free, config=_SRV.config), on=on, name=name, expect_s=_asked(name, "settle", settle),
        ready=_asked(name, "ready", ready),
        args={"command": command, "sh": sh, "env": env, "cwd": cwd})


async def stop(ctx: Context, name: Name, on: On = None,
               grace: Grace = None,
               ) -> CallToolResult:
    """Stop a run: its whole process tree (escaped children too), verified dead; GPU memory verified released."""
    return await _SRV.call(ctx, "stop", lambda: library.stop(name, on=on, grace=grace, config=_SRV.config),
                           on=on, name=name, expect_s=grace)


async def restart(ctx: Context, name: Name, on: On = None,
                  env: Annotated[dict[str, str] | None, Field(
                      description="entries to add or change over the last attempt's; an empty value unsets one "
                                  "(exec's: allowed only where exec is)")] = None,
                  settle: Settle = None, deploy: Annotated[bool | None, Field(
                      description="true: push the run's files (runward.toml) between the stop and the start; "
                                  "false: restart on the files the target has; unset: runward.toml's "
                                  "deploy_on_restart, else refused (nothing stopped) when the local files "
                                  "differ from what was deployed", strict=True)] = None,
                  ) -> CallToolResult:
    """Restart a run: verified stop, optional deploy, verified start with the last attempt's spec (env overrides over it); a failed step ends the chain and says which. Every input is checked before the stop; a run whose local files differ from the deployed ones is not restarted on the old code unless deploy is false."""
    return await _SRV.call(ctx, "restart", lambda: library.restart(
        name, on=on, env=env, settle=settle, deploy=deploy, config=_SRV.config), on=on, name=name, args={"env": env})


async def status(ctx: Context, name: Annotated[str | None, Field(description="one run (default: every run on the target)")] = None,
                 on: On = None) -> CallToolResult:
    """State of runs on a target: running, exited (with exit code or signal), stray, lost, orphaned; health and code drift."""
    return await _SRV.call(ctx, "status", lambda: library.status(name, on=on, config=_SRV.config), on=on, name=name)


async def logs(ctx: Context, name: Name, on: On = None,
               lines: _declared("lines") = None,
               offset: _declared("offset") = None,
               grep: _declared("grep") = None,
               ) -> CallToolResult:
    """A run's log, bounded: the last N lines, or the lines since the offset a previous call returned (the result's `offset` is where to go on from)."""
    return await _SRV.call(ctx, "logs", lambda: library.logs(name, on=on, lines=lines, offset=offset, grep=grep,
                                                             config=_SRV.config), on=on, name=name)


async def watch(ctx: Context, name: Name, on: On = None,
                for_s: Annotated[float, Field(description="the window in seconds (bounded: at most 600)", gt=0,
                                              le=600, strict=True)] = 30.0,
                min: Annotated[dict[str, StrictFloat] | None, Field(
                    description="alert below these floors, e.g. {\"tok_s\": 14500}")] = None,
                max: Annotated[dict[str, StrictFloat] | None, Field(description="alert above these ceilings")] = None,
                stall: Annotated[float | None, Field(description="stall_after in seconds: alert `stall` when the step has not advanced this long (before the first step: log silence with the process tree using no CPU and no I/O)", gt=0, strict=True)] = None,
                ) -> CallToolResult:
    """Watch a run's health through a bounded window; returns the verdict: healthy, or the first alert (NaN loss, CUDA OOM, throughput under a floor or dropping, a stall (the step stopped advancing), a straggler rank, the job ended)."""
    return await _SRV.call(ctx, "watch", lambda: library.watch(name, on=on, for_s=for_s, min=min, max=max,
                                                               stall=stall, config=_SRV.config),
                           on=on, name=name, expect_s=for_s)


async def push(ctx: Context, files: Annotated[dict[str, str], Field(
        description="LOCAL path on this machine -> REMOTE path on the target")], on: On = None) -> CallToolResult:
    """Send files through the hop chain into the filesystem the job sees (a container's own, not its host's); atomic, sha256-checked. By default only runward.toml's runs' own files."""
    specs = [f"{k}:{v}" for k, v in files.items()]
    return await _SRV.call(ctx, "push", lambda: library.push(specs, on=on, config=_SRV.config),
                           on=on, args={"files": specs})


async def deploy(ctx: Context, name: Name, on: On = None) -> CallToolResult:
    """Push a run's files (its files = [...] in runward.toml) to where it runs; sha256-checked."""
    return await _SRV.call(ctx, "deploy", lambda: library.deploy(name, on=on, config=_SRV.config), on=on, name=name)


async def gpus(ctx: Context, on: On = None) -> CallToolResult:
    """Each GPU on the target: memory, utilization, and the processes on it mapped to their runs (through containers too)."""
    return await _SRV.call(ctx, "gpus", lambda: library.gpus(on=on, config=_SRV.config), on=on)


async def stacks(ctx: Context, name: Name, on: On = None, native: _declared("native") = False,
                 bring_py_spy: _declared("bring_py_spy") = False) -> CallToolResult:
    """The Python stacks of every process of a run (py-spy), grouped by frame and named by rank: which rank is stuck where (e.g. all_reduce while another sleeps); kept with the attempt. Says why when stacks cannot be read (py-spy missing: bring_py_spy brings runward's own; ptrace denied)."""
    return await _SRV.call(ctx, "stacks", lambda: _said_to_agents(library.stacks(
        name, on=on, native=native, bring_py_spy=bring_py_spy, config=_SRV.config)), on=on, name=name)


def _said_to_agents(res: library.Result) -> library.Result:
    """The far side's "py-spy missing" hint names the CLI's flag; an agent's names its own
    argument (the summary quotes the hint, on each node too)."""
    own = ("install py-spy on the target (a person: `pip install py-spy`), or call stacks again with "
           "bring_py_spy: true (this machine's py-spy, from runward[stacks], is pushed there; same architecture only)")
    doc = res.result if isinstance(res.result, dict) else {}
    for d in (doc, *(doc.get("nodes") or ())):
        said = d.get("hint")
        if d.get("error") == "py-spy missing" and isinstance(said, str):
            d["hint"] = own
            if isinstance(d.get("summary"), str):
                d["summary"] = d["summary"].replace(said, own)
    return res


async def ps(ctx: Context, pattern: Annotated[str, Field(description="extended regex against the full command line")],
             on: On = None) -> CallToolResult:
    """Safe pgrep -af: processes matching the pattern, never this call's own chain (the pattern travels on stdin)."""
    return await _SRV.call(ctx, "ps", lambda: library.ps(pattern, on=on, config=_SRV.config), on=on)


async def kill(ctx: Context, pattern: Annotated[str, Field(description="extended regex against the full command line")],
               on: On = None, confirm: Annotated[bool, Field(
                   description="false (default): a dry run listing what would be signalled; true: signal them, "
                               "verified dead", strict=True)] = False,
               tree: _declared("tree") = False,
               ) -> CallToolResult:
    """Safe pkill -f: shows what matches (never itself or its ancestors); signals them only with confirm: true, then verifies they are dead. Prefer stop for a run."""
    return await _SRV.call(ctx, "kill", lambda: library.kill(pattern, on=on, confirm=confirm, tree=tree,
                                                             config=_SRV.config), on=on)


async def exec(ctx: Context, command: Annotated[list[str] | None, Field(description="argv to run")] = None,
               on: On = None, sh: _declared("sh", "exec") = None,
               force: _declared("force") = False,
               timeout: _declared("timeout", "exec") = None,
               ) -> CallToolResult:
    """Run a command on a target: exit code, signal, output and a diagnosis of a failed hop. A shell line is linted first; a hazard (pkill -f self-match, wrong filesystem) refuses it unless force."""
    return await _SRV.call(ctx, "exec", lambda: library.exec(command, on=on, sh=sh, force=force, timeout=timeout,
                                                             config=_SRV.config), on=on, expect_s=timeout)


async def lint(ctx: Context, command_line: Annotated[str, Field(description="the shell command line to check")],
               ) -> CallToolResult:
    """Find self-kill (pkill -f matching its own shell) and wrong-filesystem (scp to a container's host) hazards in a shell command, before anything runs."""
    return await _SRV.call(ctx, "lint", lambda: library.lint_command(command_line))


async def doctor(ctx: Context, on: On = None) -> CallToolResult:
    """What works on a target, hop by hop: which hop is reached, python3, the agent, GPUs, clock skew; where the chain breaks and why."""
    return await _SRV.call(ctx, "doctor", lambda: library.doctor(on=on, config=_SRV.config), on=on)


async def targets(ctx: Context) -> CallToolResult:
    """The targets and runs runward.toml names (with each run's target and files)."""
    return await _SRV.call(ctx, "targets", lambda: library.named_targets(config=_SRV.config))


async def history(ctx: Context, name: Name, on: On = None) -> CallToolResult:
    """Every attempt of a run, oldest first: started, ran for, state/exit, steps reached, the main throughput (median after warm-up), the last loss, and what changed against the attempt before (files by short hash, env keys with secrets hidden, command, cwd)."""
    return await _SRV.call(ctx, "history", lambda: library.history(name, on=on, config=_SRV.config), on=on, name=name)


Attempt = Annotated[int | None, Field(description="an attempt number (give both a and b, or neither: the last two)", ge=1,
                                              strict=True)]


async def compare(ctx: Context, name: Name, a: Attempt = None, b: Attempt = None, on: On = None) -> CallToolResult:
    """Two attempts of a run side by side: what changed (unified diffs of changed text files, env and command), throughput and loss at the steps both reached, and a one-line verdict; too few points says so rather than a number."""
    return await _SRV.call(ctx, "compare", lambda: library.compare(name, a, b, on=on, config=_SRV.config),
                           on=on, name=name)


READ_ONLY = ("status", "logs", "watch", "gpus", "ps", "lint", "doctor", "targets", "history", "compare", "stacks")


def register(server, srv) -> None:
    """Add every tool, an agent's policy or not: one it may not use is listed with a note, and
    a call to it is refused with the reason (Server.call), rather than "unknown tool"."""
    global _SRV
    _SRV = srv
    for name in TOOLS:
        fn = globals()[name]
        doc = " ".join(fn.__doc__.split())
        if name not in srv.policy.verbs:
            doc += " NOT ALLOWED to agents here: calls are refused (a person can add it to runward.toml's [mcp] allow)."
        server.add_tool(fn, name=name, description=doc, annotations=ToolAnnotations(
            read_only_hint=name in READ_ONLY, destructive_hint=name in ("stop", "restart", "kill", "exec", "start")))
