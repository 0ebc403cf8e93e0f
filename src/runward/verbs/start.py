"""runward start NAME [--on TARGET] ... -- COMMAND [ARG]...: verified alive after settling."""

from __future__ import annotations

import sys

from .. import options
from ..errors import BadInput
from ..render import render_start
from ._common import did_you_mean, emit, gpu_list, load_config, old_spelling, on_runs, target_of


def add_arguments(p) -> None:
    p.add_argument("name", nargs="?", help="the run (or --all)")
    p.add_argument("--all", action="store_true",
                   help="every run in runward.toml, each on its own target, in parallel; exit code: the worst run's")
    p.add_argument("--env", action="append", metavar="K=V|NAME",
                   help="environment for the job (repeatable); a bare NAME passes NAME from this shell's "
                        "environment, and its value is never stored on the target")
    p.add_argument("--env-file", action="append", metavar="PATH",
                   help="KEY=VALUE lines (docker's format); values are passed, never stored; restart reads the file again")
    for name in ("cwd", "log", "settle", "ready", "ready_timeout"):
        options.add(p, name)
    p.add_argument("--replace", action="store_true", help="stop the live attempt first (verified)")
    p.add_argument("--replace-grace", type=float, metavar="SECONDS",
                   help="with --replace: the old attempt's grace (default: the grace it was started with)")
    options.add(p, "lock_timeout")
    p.add_argument("--gpus", metavar="0,1", help="sets CUDA_VISIBLE_DEVICES and records the GPUs")
    p.add_argument("--wait-gpus-free", action="store_true", help="wait until --gpus are free, else refuse")
    p.add_argument("--gpu-wait-timeout", type=float, metavar="SECONDS",
                   help="with --wait-gpus-free: how long to wait for the GPUs (default 300)")
    old_spelling(p, "--timeout", "gpu_wait_timeout", type=float)
    p.add_argument("--log-max", metavar="SIZE",
                   help="rotate the log past SIZE (e.g. 2G), no line lost: log -> log.1 -> ... (runward.toml: log_max)")
    options.add(p, "log_keep")
    p.add_argument("--max-used", type=float, metavar="MiB", help="a GPU using at most this counts as free (default 1024)")
    options.add(p, "stop_signal")
    options.add(p, "grace")
    p.add_argument("--sh", metavar="STRING", help="run one shell command line instead of an argv")
    options.add(p, "master_addr")
    options.add(p, "nproc_per_node")
    p.add_argument("--on-node-failure", choices=("stop", "continue"),
                   help="several nodes: when one node's job fails, stop the others (default) or let them run")
    from ..supervision import add_arguments as supervision_arguments
    supervision_arguments(p)
    from ..stallopts import add_arguments as stall_arguments
    stall_arguments(p)
    p.add_argument("command", nargs="*", help="-- COMMAND [ARG]... (everything after --)")


def start_kwargs_from_config(run: dict, name: str = "NAME") -> dict:
    """api.start's keyword arguments from a [runs.NAME] table of runward.toml."""
    kw = {}
    if "command" in run:
        kw["argv"] = list(run["command"])
    if "sh" in run:
        kw["sh"] = run["sh"]
    for k in ("cwd", "env", "log", "settle", "ready", "ready_timeout", "stop_signal", "grace", "log_keep"):
        if k in run:
            kw[k] = run[k]
    if "log_max" in run:
        from ..api import parse_size
        kw["log_max"] = parse_size(run["log_max"])
    if "gpus" in run:
        kw["gpus"] = gpu_list(run["gpus"])
    if "snapshots" in run:  # the bounds of the text kept for compare (docs/history.md)
        from ..snapbounds import parse
        kw["snapshots"] = parse(run["snapshots"], name)
    if run.get("wait_gpus_free"):   # true, or {timeout = S, max_used_mib = MiB}
        w = run["wait_gpus_free"]
        kw["wait_gpus_free"] = {"timeout": 300.0, "max_used_mib": 1024.0, **(w if isinstance(w, dict) else {})}
    from ..supervision import policy
    if policy(run):
        kw["supervise"] = policy(run)
    if run.get("files"):
        kw["hash_files"] = [f.split(":", 1)[1] for f in run["files"] if ":" in f]
        kw["files"] = list(run["files"])
    return kw


def run(args, out) -> int:
    cfg = load_config(args)
    if args.all:
        if args.command or args.sh is not None:
            raise BadInput("a command with --all", "--all starts each run with the command runward.toml gives it")
        return on_runs(args, cfg, out, "start", lambda name, t: _start(args, cfg, name, t), _render_any)
    if not args.name:
        raise BadInput("no run named", "runward start NAME -- COMMAND..., or --all for every run in runward.toml")
    from .. import multinode
    nodes = multinode.nodes_of(args, cfg, args.name)
    if nodes:
        return _start_nodes(args, cfg, nodes, out)
    target = target_of(args, cfg, args.name)
    started: dict = {}
    try:
        res = _start(args, cfg, args.name, target, on_event=lambda ev: started.update(ev.get("started") or {}))
    except KeyboardInterrupt:
        return interrupted(out, "start", target, args.name, started, args.on)
    return emit(out, "start", target, res, render_start(res))


def _render_any(res: dict) -> str:
    from .. import multinode
    return multinode.render(res, "start") if "nnodes" in res else render_start(res)


def _start_nodes(args, cfg, nodes, out) -> int:
    """A run over several nodes, all or nothing (multinode.py, docs/multinode.md)."""
    from .. import multinode
    run_cfg = cfg.runs.get(args.name, {})
    pick = lambda flag, key, default: flag if flag is not None else run_cfg.get(key, default)  # noqa: E731
    if args.on_node_failure is None and run_cfg.get("on_node_failure") not in (None, *multinode.POLICIES):
        raise BadInput(f"[runs.{args.name}] on_node_failure = {run_cfg['on_node_failure']!r}", "use \"stop\" or \"continue\"")
    kw = _kw(args, cfg, args.name)
    refuse_node_restarts(args.name, kw)
    res, code = multinode.start(nodes, args.name, kw,
                                master_addr=pick(args.master_addr, "master_addr", None),
                                nproc_per_node=pick(args.nproc_per_node, "nproc_per_node", None),
                                on_node_failure=pick(args.on_node_failure, "on_node_failure", "stop"))
    return multinode.emit(out, "start", res, code)


def _start(args, cfg, name, target, on_event=None) -> dict:
    """One run's start: runward.toml's definition, the command line over it (a run with
    nodes, under --all: over its nodes, all or nothing)."""
    from .. import api
    if args.all and cfg.runs.placement(name).get("nodes"):
        from .. import multinode
        from ..errors import OperationFailed
        run_cfg = cfg.runs[name]
        kw = _kw(args, cfg, name)
        refuse_node_restarts(name, kw)
        res, code = multinode.start([cfg.target(t) for t in run_cfg["nodes"]], name, kw,
                                    master_addr=run_cfg.get("master_addr"), nproc_per_node=run_cfg.get("nproc_per_node"),
                                    on_node_failure=run_cfg.get("on_node_failure", "stop"))
        if code:
            e = OperationFailed(res.get("message") or "start failed on a node", result=res)
            e.exit_code = code
            raise e
        return res
    return api.start(target, name, on_event=on_event, **_kw(args, cfg, name))


def refuse_node_restarts(name: str, kw: dict) -> None:
    """A restart policy on one node of a multi-node run would bring back one rank alone into
    a rendezvous its peers have left (they stop when a node fails): refused until restarts
    of the whole run are built. Health actions and notify are a node's own and stay."""
    mode = (kw.get("supervise") or {}).get("restart", "never")
    if mode != "never":
        raise BadInput(f"restart = {mode!r} on the multi-node run {name}",
                       "a multi-node run restarts as a whole: leave restart at \"never\" and use "
                       "`runward stop` then `runward start` (docs/multinode.md)")


def _kw(args, cfg, name) -> dict:
    """api.start's keyword arguments: runward.toml's definition, the command line over it."""
    kw = _over_config(args, start_kwargs_from_config(cfg.runs.get(name, {}), name))
    if args.wait_gpus_free:
        if kw.get("gpus") is None:
            raise BadInput("--wait-gpus-free needs --gpus", "e.g. --gpus 0,1 --wait-gpus-free")
        kw["wait_gpus_free"] = {"timeout": args.gpu_wait_timeout if args.gpu_wait_timeout is not None else 300.0,
                                "max_used_mib": args.max_used if args.max_used is not None else 1024.0}
    kw["replace"] = args.replace
    kw["replace_grace"] = args.replace_grace
    kw["lock_timeout"] = args.lock_timeout
    from ..supervision import policy
    sup = policy(cfg.runs.get(name), args)
    if sup:
        kw["supervise"] = sup
    from ..stallopts import options
    stall = options(cfg.runs.get(name), args, name)
    if stall:
        kw["stall"] = stall  # stall_after, straggler_ratio: kept in the attempt (agent/stall.py)
    if not kw.get("argv") and kw.get("sh") is None:
        close = did_you_mean(name, cfg) if name not in cfg.runs else None
        raise BadInput(f"no command for run {name!r}", (f"{close} Or: " if close else "")
                       + f"runward start {name} -- COMMAND [ARG]..., --sh 'LINE', or define [runs.{name}] in runward.toml")
    return kw


def _ask(target, name: str) -> dict:
    """{"attempt", "pid"} of NAME if the target says it runs now (one status call, 5 s at most;
    a second Ctrl-C gives up on it), else {}."""
    from .. import api
    from ..errors import RunwardError
    try:
        res = api.status(target, [name], timeout=5.0)
    except (RunwardError, KeyboardInterrupt, OSError):
        return {}
    st = (res.get("runs") or [{}])[0]
    if st.get("state") in ("running", "starting") and st.get("pid"):
        return {"attempt": st.get("attempt"), "pid": st.get("pid")}
    return {}


def interrupted(out, cmd: str, target, name: str, started: dict, on: str | None) -> int:
    """Ctrl-C while a start waited: the job, in its own session, was not interrupted with us;
    say whether it was launched (the agent's {"started"} event came) and how to look."""
    now = {} if started else _ask(target, name)  # the launch may have come just before its event
    if started:
        msg = (f"interrupted; {name} attempt {started.get('attempt')} is running, pid {started.get('pid')} "
               f"(its settle period was not watched to the end)")
    elif now:
        msg = (f"interrupted before this start was seen to launch {name}; the target says {name} attempt "
               f"{now.get('attempt')} is running now, pid {now.get('pid')}")
    else:
        msg = f"interrupted before {name} was launched: nothing was started, or its start was cut short"
    hint = f"see `runward status {name}" + (f" --on {on}`" if on else "`")
    # a program reads the attempt the same way whichever said it: the event, or the target asked
    seen = dict(started, name=name, seen_by="started event") if started else \
        dict(now, name=name, seen_by="status") if now else None
    out.doc({"ok": False, "command": cmd, "target": str(target), "result": seen,
             "error": {"type": "Interrupted", "message": msg, "hint": hint, "exit_code": 130}})
    if not out.json:
        print(f"runward {cmd}: {msg}, {hint}", file=sys.stderr)
    return 130


def _over_config(args, kw: dict) -> dict:
    """The command line over runward.toml's kw: the command (after -- or --sh, which
    replaces the config's either way), the env entries added, then each option given."""
    from ..api import read_env
    command = list(args.command or [])
    if command and command[0] == "--":
        command = command[1:]
    if command and args.sh is not None:
        raise BadInput("both --sh and a command after -- were given", "use one of them")
    if command:
        kw["argv"] = command
        kw.pop("sh", None)
    if args.sh is not None:
        kw["sh"], kw["argv"] = args.sh, None
    values, sources = read_env(args.env, args.env_file)
    kw["env"] = {**kw.get("env", {}), **values}
    kw["env_from"] = sources
    kw["env_overrides"] = [k for k in values if k not in sources]
    for opt in ("cwd", "log", "settle", "ready", "ready_timeout", "stop_signal", "grace", "log_keep"):
        v = getattr(args, opt)
        if v is not None:
            kw[opt] = v
    if args.log_max is not None:
        from ..api import parse_size
        kw["log_max"] = parse_size(args.log_max)
    if kw.get("log_keep") is not None and not kw.get("log_max"):
        raise BadInput("--log-keep without --log-max", "rotation is by size: give --log-max SIZE too")
    if args.gpus is not None:
        kw["gpus"] = gpu_list(args.gpus)
    return kw
