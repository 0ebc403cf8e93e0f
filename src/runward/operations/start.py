"""start: a run verified alive after settling, on one target, over the nodes of a multi-node
run (all or nothing), or for every run of runward.toml (--all)."""

from __future__ import annotations

import os

from ..errors import BadInput
from ..spec.options import AS_IS
from . import Outcome, Targeted, check, single, takes
from .common import did_you_mean, gpu_list, load_config, on_runs, target_of


@takes("start")
class StartOptions(Targeted):
    """What `runward start` takes: NAME or --all, the command, and each option options.TAKES
    gives start (verbs/start.py's flags); env and gpus as the verb makes them of the words."""
    name: str | None = None
    all: bool = False
    command: list | None = None
    env: dict | None = None       # NAME -> value, --env and --env-file's over runward.toml's
    env_from: dict | None = None  # NAME -> where its value was read ("environment", "file:PATH"): never stored
    gpus: list | None = None
    log_max: int | None = None    # bytes, as the verb reads --log-max SIZE
    # the restart policy's durations, in seconds, as the verb reads them (spec/supervision.py
    # checks them again with runward.toml's)
    restart_window: float | None = None
    min_uptime: float | None = None
    gpu_release_timeout: float | None = None


# StartOptions' fields that a verb gives as seconds where its flag says a duration
DURATIONS = ("restart_window", "min_uptime", "gpu_release_timeout")


def start_kwargs_from_config(run: dict, name: str = "NAME") -> dict:
    """api.start's keyword arguments from a [runs.NAME] table of runward.toml."""
    kw = {}
    if "command" in run:
        kw["argv"] = list(run["command"])
    if "sh" in run:
        kw["sh"] = run["sh"]
    for k in ("env", *AS_IS):
        if k in run:
            kw[k] = run[k]
    if "log_max" in run:
        from ..api import parse_size
        kw["log_max"] = parse_size(run["log_max"])
    if "gpus" in run:
        kw["gpus"] = gpu_list(run["gpus"])
    if "snapshots" in run:  # the bounds of the text kept for compare (docs/history.md)
        from ..spec.snapbounds import parse
        kw["snapshots"] = parse(run["snapshots"], name)
    if run.get("wait_gpus_free"):   # true, or {timeout = S, max_used_mib = MiB}
        w = run["wait_gpus_free"]
        kw["wait_gpus_free"] = {"timeout": 300.0, "max_used_mib": 1024.0, **(w if isinstance(w, dict) else {})}
    from ..spec.supervision import policy
    if policy(run):
        kw["supervise"] = policy(run)
    from ..spec.stallopts import from_config
    stall = from_config(dict(run.get("health") or {}), name)
    if stall:  # [health] stall_after, straggler_ratio: a restart's definition says them as start does
        kw["stall"] = stall
    if run.get("files"):
        kw["hash_files"] = [f.split(":", 1)[1] for f in run["files"] if ":" in f]
        kw["files"] = list(run["files"])
    return kw


def start(opts: StartOptions) -> Outcome:
    from ..views.render import render_start
    check(opts)
    cfg = load_config(opts)
    if opts.all:
        if opts.command or opts.sh is not None:
            raise BadInput("a command with --all", "--all starts each run with the command runward.toml gives it")
        return on_runs(opts, cfg, "start", lambda name, t: _start(opts, cfg, name, t), _render_any)
    if not opts.name:
        raise BadInput("no run named", "runward start NAME -- COMMAND..., or --all for every run in runward.toml")
    from . import nodes as on_nodes
    nodes = on_nodes.nodes_of(opts, cfg, opts.name)
    if nodes:
        return _start_nodes(opts, cfg, nodes)
    target = target_of(opts, cfg, opts.name)
    started: dict = {}
    try:
        res = _start(opts, cfg, opts.name, target, on_event=lambda ev: started.update(ev.get("started") or {}))
    except KeyboardInterrupt as ki:
        return interrupted("start", target, opts.name, started, opts.on, getattr(ki, "decision", None))
    return single("start", target, res, lambda: render_start(res))


def _render_any(res: dict) -> str:
    from ..views import nodesview
    from ..views.render import render_start
    return nodesview.render(res, "start") if "nnodes" in res else render_start(res)


def _start_nodes(opts, cfg, nodes) -> Outcome:
    """A run over several nodes, all or nothing (multinode/nodes.py, docs/multinode.md)."""
    from ..multinode import nodes as multinode
    from . import nodes as on_nodes
    run_cfg = cfg.runs.get(opts.name, {})
    pick = lambda flag, key, default: flag if flag is not None else run_cfg.get(key, default)  # noqa: E731
    if opts.on_node_failure is None and run_cfg.get("on_node_failure") not in (None, *multinode.POLICIES):
        raise BadInput(f"[runs.{opts.name}] on_node_failure = {run_cfg['on_node_failure']!r}", "use \"stop\" or \"continue\"")
    kw = _kw(opts, cfg, opts.name)
    refuse_node_restarts(opts.name, kw)
    res, code = multinode.start(nodes, opts.name, kw,
                                master_addr=pick(opts.master_addr, "master_addr", None),
                                nproc_per_node=pick(opts.nproc_per_node, "nproc_per_node", None),
                                on_node_failure=pick(opts.on_node_failure, "on_node_failure", "stop"))
    return on_nodes.outcome("start", res, code)


def _start(opts, cfg, name, target, on_event=None) -> dict:
    """One run's start: runward.toml's definition, the command line over it (a run with
    nodes, under --all: over its nodes, all or nothing)."""
    from .. import api
    if opts.all and cfg.runs.placement(name).get("nodes"):
        from ..multinode import nodes as multinode
        from ..errors import OperationFailed
        run_cfg = cfg.runs[name]
        kw = _kw(opts, cfg, name)
        refuse_node_restarts(name, kw)
        res, code = multinode.start([cfg.target(t) for t in run_cfg["nodes"]], name, kw,
                                    master_addr=run_cfg.get("master_addr"), nproc_per_node=run_cfg.get("nproc_per_node"),
                                    on_node_failure=run_cfg.get("on_node_failure", "stop"))
        if code:
            e = OperationFailed(res.get("message") or "start failed on a node", result=res)
            e.exit_code = code
            raise e
        return res
    return api.start(target, name, on_event=on_event, **_kw(opts, cfg, name, target.is_local))


def local_cwd(cfg, name) -> str:
    """Where a run on this machine starts when no cwd is given: the directory of the
    runward.toml that defines it, else the one runward is run from (as nohup and pm2 start a
    job: `runward start x -- python3 train.py` in a project runs its train.py). A remote
    target's default stays its user's home, said by the agent there."""
    if name in cfg.runs and cfg.path:
        return os.path.dirname(os.path.abspath(cfg.path))
    try:
        return os.getcwd()
    except FileNotFoundError:  # the shell's directory was removed under it
        raise BadInput("the current directory no longer exists: a run on this machine starts there",
                       "cd to an existing directory, or give --cwd DIR")


def toml_local_cwd(cfg, cwd):
    """runward.toml's cwd for a run on this machine: a relative one is read from that file's
    directory, as its files' local paths are and as the run's default cwd is, never from the
    directory runward happens to be run from (`cwd = "data"` run from the project's sub/ is
    the project's data/, not sub/data); "~/..." is the home's, as anywhere. A remote target reads
    it from its user's home."""
    if isinstance(cwd, str) and cwd and not os.path.isabs(cwd) and not cwd.startswith("~") and cfg.path:
        return os.path.join(os.path.dirname(os.path.abspath(cfg.path)), cwd)
    return cwd


def refuse_node_restarts(name: str, kw: dict) -> None:
    """A restart policy on one node of a multi-node run would bring back one rank alone into
    a rendezvous its peers have left (they stop when a node fails): refused until restarts
    of the whole run are built. A health action that stops or restarts is judged by one
    node's shim on its own rank's log, so it would end or restart that rank alone while the
    others run on: refused too. notify and stacks are a node's own and stay."""
    sup = kw.get("supervise") or {}
    mode = sup.get("restart", "never")
    if mode != "never":
        raise BadInput(f"restart = {mode!r} on the multi-node run {name}",
                       "a multi-node run restarts as a whole: leave restart at \"never\" and use "
                       "`runward stop` then `runward start` (docs/multinode.md)")
    acts = ((sup.get("health") or {}).get("actions") or {})
    whole = {k: v for k, v in acts.items() if {"stop", "restart"} & {x.strip() for x in v.split(",")}}
    if whole:
        said = ", ".join(f"{k} = {v!r}" for k, v in whole.items())
        raise BadInput(f"[runs.{name}.health] actions {said} on the multi-node run {name}: one node's shim "
                       "would stop or restart its own rank alone while the others run on",
                       "on a multi-node run a health action may only notify (e.g. nan = \"notify\" or "
                       "\"stacks,notify\"); stop or restart the whole run with `runward stop` / `runward restart` "
                       "(docs/multinode.md)")


def _kw(opts, cfg, name, local: bool = False) -> dict:
    """api.start's keyword arguments: runward.toml's definition, the command line over it;
    local: the target is this machine (the default cwd is then local_cwd's)."""
    kw = _over_config(opts, start_kwargs_from_config(cfg.runs.get(name, {}), name))
    if local and kw.get("cwd") is None:
        kw["cwd"] = local_cwd(cfg, name)
    elif local and opts.cwd is None:
        kw["cwd"] = toml_local_cwd(cfg, kw["cwd"])
    if opts.wait_gpus_free:
        if kw.get("gpus") is None:
            raise BadInput("--wait-gpus-free needs --gpus", "e.g. --gpus 0,1 --wait-gpus-free")
        kw["wait_gpus_free"] = {"timeout": opts.gpu_wait_timeout if opts.gpu_wait_timeout is not None else 300.0,
                                "max_used_mib": opts.max_used if opts.max_used is not None else 1024.0}
    kw["replace"] = opts.replace
    kw["replace_grace"] = opts.replace_grace
    kw["lock_timeout"] = opts.lock_timeout
    from ..spec.supervision import policy
    sup = policy(cfg.runs.get(name), opts)
    if sup:
        kw["supervise"] = sup
    from ..spec.inputs import refuse_idle_without_gpus
    refuse_idle_without_gpus(name, kw)
    from ..spec.stallopts import options
    stall = options(cfg.runs.get(name), opts, name)
    if stall:
        kw["stall"] = stall  # stall_after, straggler_ratio: kept in the attempt (agent/health/stall.py)
    if not kw.get("argv") and kw.get("sh") is None:
        close = did_you_mean(name, cfg) if name not in cfg.runs else None
        raise BadInput(f"no command for run {name!r}", (f"{close} Or: " if close else "")
                       + f"runward start {name} -- COMMAND [ARG]..., --sh 'LINE', or define [runs.{name}] in runward.toml")
    return kw


def _ask(target, name: str) -> dict:
    """{"attempt", "pid"} of NAME if the target says it runs now (one status call, 5 s at most;
    a second Ctrl-C gives up on it), {} if it says it does not, None where it could not be
    asked: not known, never "nothing runs there"."""
    from .. import api
    from ..errors import RunNotFound, RunwardError
    try:
        res = api.status(target, [name], timeout=5.0)
    except RunNotFound:
        return {}
    except (RunwardError, KeyboardInterrupt, OSError):
        return None
    st = (res.get("runs") or [{}])[0]
    if st.get("state") in ("running", "starting") and st.get("pid"):
        return {"attempt": st.get("attempt"), "pid": st.get("pid")}
    return {}


def interrupted(cmd: str, target, name: str, started: dict, on: str | None, decision: dict | None = None) -> Outcome:
    """Ctrl-C while a start waited: the job, in its own session, was not interrupted with us,
    nor was the far agent deciding whether to launch it. What is said is the target's own
    word: its "started" event (before the Ctrl-C, or in the bounded wait for it that
    exchange's decision is), its reply, or what it shows once its agent has ended; where none
    came, that it is not known, and how to find out. Never "nothing was started" on a guess."""
    decision = decision or {}
    reply = decision.get("reply") or {}
    if not started and decision.get("event"):
        started = dict(decision["event"].get("started") or {})
    if not started and reply.get("ok") and (reply.get("result") or {}).get("pid"):
        started = {k: reply["result"].get(k) for k in ("attempt", "pid")}
    hint = f"see `runward status {name}" + (f" --on {on}`" if on else "`")
    seen_by = "started event"
    # no word in time, or the link ended before one (the far agent goes on without it): what the
    # target shows now is its word (a launch already made), else unknown
    unsure = decision.get("waited") or decision.get("gave_up") or "lost" in decision
    now = _ask(target, name) if not started and not reply and unsure else {}
    from ..views.render import engine_job
    job = engine_job(started)  # an engine's job goes on without the CLI: how to end it is said too
    if started and job:
        hint += f"; `runward stop {name}" + (f" --on {on}`" if on else "`") + " ends it"
    if started and started.get("pid") is None and job:  # submitted, no process of it seen yet
        msg = (f"interrupted; {name} attempt {started.get('attempt')} was submitted as job {job}, no process of it "
               f"seen yet (its settle period was not watched to the end)")
    elif started:
        msg = (f"interrupted; {name} attempt {started.get('attempt')} is running, {_ident(started)} "
               f"(its settle period was not watched to the end)")
    elif reply and not reply.get("ok"):
        msg, launched = _refused(name, reply.get("error") or {})
        seen_by = "reply"
    elif unsure and not now:
        msg, seen_by = (f"interrupted before the target said whether it launched {name}"
                        + (f" (no word within {decision['waited']:g}s)" if decision.get("waited") else
                           f" (the link to it ended, exit {decision['lost']})" if "lost" in decision else "")
                        + ": not known; its start may still go on there"), None
        hint += " in a few seconds: a new attempt there is this start's"
    elif not now and (now := _ask(target, name)) is None:  # the target could not be asked: not known
        msg, seen_by = (f"interrupted before this start was seen to launch {name}, and the target could not "
                        "be asked whether it runs: not known"), None
    else:  # the far agent ended without a word of a launch (or the Ctrl-C came before the call)
        seen_by = "status"
        msg = (f"interrupted before this start was seen to launch {name}; the target says {name} attempt "
               f"{now.get('attempt')} is running now, {_ident(now)}" if now else
               f"interrupted before {name} was launched: " + (
                   "the target's agent ended without launching it, and nothing of it runs there"
                   if decision.get("ended") else "nothing of it runs on the target now"))
        if unsure:
            msg += "; this start had not answered, and whether it goes on to launch another is not known"
    # a program reads the attempt the same way whichever said it: the event, or the target asked
    seen = (dict(started, name=name, seen_by="started event") if started else
            dict(now, name=name, seen_by="status") if now else
            {"name": name, "launched": launched, "seen_by": "reply"} if seen_by == "reply" else
            {"name": name, "launched": None} if seen_by is None else None)
    return Outcome(cmd, 130, {"ok": False, "command": cmd, "target": str(target), "result": seen,
                              "error": {"type": "Interrupted", "message": msg, "hint": hint, "exit_code": 130}},
                   stderr=f"{msg}, {hint}")


def _ident(d: dict) -> str:
    """How a running attempt is named: its pid (and its engine's job), or, where none is known
    yet (an engine's job not placed), its job's id."""
    from ..views.render import engine_job
    job = engine_job(d)
    if d.get("pid") is not None:
        return f"pid {d['pid']}" + (f" (job {job})" if job else "")
    return f"job {job} (no process of it seen yet)" if job else "no process of it seen yet"


def _refused(name: str, err: dict) -> tuple[str, bool]:
    """The far side's own answer to an interrupted start: launched (and ended), or refused."""
    res = (err.get("details") or {}).get("result") or err.get("result") or {}
    if res.get("attempt") and res.get("pid"):
        return (f"interrupted; the target launched {name} attempt {res['attempt']}, and: {err.get('message')}",
                True)
    return f"interrupted; the target did not start {name}: {err.get('message')}: nothing was started", False


def _over_config(opts, kw: dict) -> dict:
    """The command line over runward.toml's kw: the command (after -- or --sh, which
    replaces the config's either way), the env entries added, then each option given."""
    command = list(opts.command or [])
    if command and command[0] == "--":
        command = command[1:]
    if command and opts.sh is not None:
        raise BadInput("both --sh and a command after -- were given", "use one of them")
    if command:
        kw["argv"] = command
        kw.pop("sh", None)
    if opts.sh is not None:
        kw["sh"], kw["argv"] = opts.sh, None
    values, sources = dict(opts.env or {}), dict(opts.env_from or {})
    kw["env"] = {**kw.get("env", {}), **values}
    kw["env_from"] = sources
    kw["env_overrides"] = [k for k in values if k not in sources]
    for opt in AS_IS:
        v = getattr(opts, opt)
        if v is not None:
            kw[opt] = v
    if opts.log_max is not None:
        kw["log_max"] = opts.log_max
    if kw.get("log_keep") is not None and not kw.get("log_max"):
        raise BadInput("--log-keep without --log-max", "rotation is by size: give --log-max SIZE too")
    if opts.gpus is not None:
        kw["gpus"] = list(opts.gpus)
    return kw
