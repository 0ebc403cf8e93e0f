"""restart: verified stop, [deploy,] verified start with the run's definition (runward.toml's
when it has the run, else the last attempt's spec), and what changed; on one target, every
node of a multi-node run (all or nothing), or every run of runward.toml (--all). Every local
input is checked before anything is stopped (tests/test_restart_refusals.py)."""

from __future__ import annotations

from ..errors import BadInput, Interrupted
from ..spec.options import AS_IS, TAKES
from . import Checkpointed, Outcome, Targeted, check, single, takes
from .common import config_dir, load_config, on_runs, target_of
from .stop import checkpoint_of


# restart's options that are the new attempt's spec as they are (its --grace and --stop-signal are the stop's)
SPEC_OVER = tuple(n for n in TAKES["restart"] if n in AS_IS and n not in ("grace", "stop_signal"))


@takes("restart")
class RestartOptions(Targeted, Checkpointed):
    """What `runward restart` takes (verbs/restart.py's flags): each option options.TAKES gives
    restart, env as the verb makes it of the words, and the stop's own below."""
    name: str | None = None
    all: bool = False
    env: dict | None = None       # NAME -> value over the last spec's; None unsets NAME
    env_from: dict | None = None  # NAME -> where its value was read ("environment", "file:PATH"): never stored
    gpu_release_timeout: float | None = None
    deploy: bool | None = None  # True: deploy the run's files first; False: restart on the target's; None: as runward.toml says


def restart(opts: RestartOptions, progress: bool = False) -> Outcome:
    """PROGRESS: a deploy's per-file progress on stderr (a person's, never with --json or --all)."""
    check(opts)
    cfg = load_config(opts)
    if opts.all:
        return on_runs(opts, cfg, "restart", lambda name, t: _restart(opts, cfg, name, t, False), _render)
    if not opts.name:
        raise BadInput("no run named", "runward restart NAME, or --all for every run in runward.toml")
    if cfg.runs.placement(opts.name).get("nodes") and not opts.on:  # one --on: that node alone (refused)
        from ..views.nodesview import render_restart
        from . import nodes as on_nodes
        res, code = _restart_nodes(opts, cfg, opts.name)
        return on_nodes.outcome("restart", res, code, render_restart(res))
    target = target_of(opts, cfg, opts.name)
    began: list[str] = []
    try:
        res = _restart(opts, cfg, opts.name, target, progress, began)
    except KeyboardInterrupt as ki:
        raise interrupted(target, opts.name, began, opts.on, getattr(ki, "decision", None))
    return single("restart", target, res, lambda: _render(res))


def interrupted(target, name: str, began: list[str], on, decision: dict | None = None) -> Interrupted:
    """Ctrl-C during a restart: which step it was in, and what the run is now (in the start
    step, the target's own word on the launch: operations/start.interrupted)."""
    look = f"`runward status {name}" + (f" --on {on}`" if isinstance(on, str) else "`")
    step = began[-1] if began else None
    res: dict = {"name": name, "interrupted_in": (step or "checks").split(":")[0]}
    if step is None:
        msg = f"interrupted before anything was stopped: {name} runs on as it was"
    elif step == "stop":
        msg = (f"interrupted as the stop of {name} was sent, before the target said it had begun: the old attempt "
               f"may still run, or its stop may go on there; nothing will be started")
    elif step == "stop:begun":
        msg = (f"interrupted during the stop: the stop goes on on the target to its verified end; "
               f"{name} is stopped, not restarted: nothing will be started")
    elif step == "deploy":
        msg = (f"interrupted during the deploy: {name} is stopped (verified), not restarted; each file there is "
               f"its old or its new verified version, never torn; nothing was started")
    else:
        from .start import interrupted as start_interrupted
        said = start_interrupted("restart", target, name, {}, on, decision).document
        res.update({k: v for k, v in (said.get("result") or {}).items() if k != "name"})
        msg = ("interrupted during the start of the new attempt: the old one was stopped (verified); "
               + said["error"]["message"].replace("interrupted; ", "", 1))
    return Interrupted(msg, f"see {look}; restart again, or start it, when you are ready", result=res)


def _restart(opts, cfg, name, target, progress, began: list[str] | None = None) -> dict:
    from .. import api
    if cfg.runs.placement(name).get("nodes") and not opts.on:  # (--all too) every node, all or nothing
        from ..errors import OperationFailed
        res, code = _restart_nodes(opts, cfg, name)
        if code:
            e = OperationFailed(res.get("message") or "restart failed on a node", result=res)
            e.exit_code = code
            raise e
        return res
    from .start import start_kwargs_from_config
    run_cfg = cfg.runs.get(name)
    env, env_from = dict(opts.env or {}), dict(opts.env_from or {})
    overrides = {**{k: getattr(opts, k) for k in SPEC_OVER}, "env": env or None, "env_from": env_from,
                 "reuse_env": True}
    deploy, check = _files_step(opts, cfg, name, target, progress)
    definition = start_kwargs_from_config(run_cfg, name) if run_cfg else None
    if definition and target.is_local and definition.get("cwd"):
        from .start import toml_local_cwd
        definition["cwd"] = toml_local_cwd(cfg, definition["cwd"])
    return api.restart(target, name, overrides=overrides, grace=opts.grace, signal=opts.stop_signal,
                       deploy=deploy, lock_timeout=opts.lock_timeout, definition=definition, keep_env=opts.keep_env,
                       check=check, began=began, gpu_timeout=opts.gpu_release_timeout,
                       checkpoint=checkpoint_of(opts, cfg, name))


def _files_step(opts, cfg, name, target, progress):
    """(deploy, check) for api.restart. Deploying (--deploy, or runward.toml's
    deploy_on_restart): every local file it will send is read now, before the stop. Not
    deploying: check refuses, before the stop, a restart whose files differ locally from
    what was deployed (it would run the old code), unless --no-deploy says that is meant."""
    from .. import files as _files
    run_cfg = cfg.runs.get(name) or {}
    specs, base = run_cfg.get("files") or [], config_dir(cfg)
    if opts.deploy or (run_cfg.get("deploy_on_restart") and opts.deploy is not False):
        if not specs:
            raise BadInput(f"--deploy: run {name!r} has no files in runward.toml",
                           f"add files = [\"LOCAL:REMOTE\"] to [runs.{name}]")
        _files.check_sources(specs, base)

        def plan(last: dict) -> dict | None:
            # the deploy's own plan (one manifest round trip) before the stop: a destination it
            # cannot write (a directory where a file goes) is refused with the run untouched
            _files.push(target, specs, run=name, base=base, dry_run=True)
            # what the deploy (no --delete) leaves: files deleted locally, still on the target
            left = [d for d in _files.local_drift(last, specs, base=base)
                    if (d.get("change") or "").startswith("deleted locally")]
            return {"local_drift": left} if left else None
        return (lambda: _files.push(target, specs, run=name, progress=progress and not opts.all,
                                    base=base)), plan
    if not specs:
        return None, None

    def check(last: dict) -> dict | None:
        drift = _files.local_drift(last, specs, base=base) + _files.undeployed_drift(target, last, specs, base=base)
        if drift and opts.deploy is not False:
            raise BadInput(_drift_message(name, drift),
                           f"runward restart {name} --deploy to send them first, or --no-deploy to restart on "
                           f"what the target has (deploy_on_restart = true in [runs.{name}] deploys every time)",
                           result={"local_drift": drift})
        return {"local_drift": drift} if drift else None
    return None, check


def _drift_message(name: str, drift: list[dict]) -> str:
    """Files that differ (or may: unknown) from what the target has, each with its change."""
    known = [d for d in drift if not d.get("unknown")]
    each = lambda ds: ", ".join(f"{d['local']} -> {d['remote']}" + (f" ({d['change']})" if d.get("change") else "")  # noqa: E731
                                for d in ds)
    parts = [f"{len(known)} file(s) differ locally from what the target has, so a restart would run the old code: "
             + each(known)] if known else []
    if len(known) < len(drift):
        parts.append(f"whether {len(drift) - len(known)} file(s) match the target's is not known, so a restart "
                     "might run old code: " + each([d for d in drift if d.get("unknown")]))
    return f"{name}: " + "; ".join(parts)


def _restart_nodes(opts, cfg, name) -> tuple[dict, int]:
    """A run with nodes in runward.toml: every node, all or nothing (multideploy.restart), with
    runward.toml's definition and the command line's options over it; inputs read first."""
    from .. import api
    from ..multinode import deploy as multideploy
    from .start import refuse_node_restarts, start_kwargs_from_config
    run_cfg = cfg.runs[name]
    if opts.keep_env:
        raise BadInput(f"--keep-env with the multi-node run {name}",
                       "a multi-node restart takes runward.toml's definition: give the entries with --env")
    deploy = opts.deploy or (run_cfg.get("deploy_on_restart") and opts.deploy is not False)
    if deploy and not run_cfg.get("files"):
        raise BadInput(f"--deploy: run {name!r} has no files in runward.toml",
                       f"add files = [\"LOCAL:REMOTE\"] to [runs.{name}]")
    kw = start_kwargs_from_config(run_cfg, name)
    env, env_from = dict(opts.env or {}), dict(opts.env_from or {})
    kw["env"] = {k: v for k, v in {**(kw.get("env") or {}), **env}.items() if v is not None}  # None: unset
    kw.update(env_from=env_from, env_overrides=[k for k in env if k not in env_from], lock_timeout=opts.lock_timeout)
    for opt in SPEC_OVER:
        if getattr(opts, opt) is not None:
            kw[opt] = getattr(opts, opt)
    refuse_node_restarts(name, kw)
    nodes = [cfg.target(t) for t in run_cfg["nodes"]]
    if deploy:
        from .. import files as _files
        _files.check_sources(run_cfg["files"], config_dir(cfg))
    drift_specs = run_cfg.get("files") if not deploy and opts.deploy is not False else None
    _check_nodes(name, nodes, drift_specs, config_dir(cfg))
    return multideploy.restart(
        nodes, name, kw, specs=run_cfg["files"] if deploy else None,
        base=config_dir(cfg), stop_kw={"grace": opts.grace, "signal": opts.stop_signal, "lock_timeout": opts.lock_timeout,
                                                   "gpu_timeout": opts.gpu_release_timeout, "gpu_gate": True,
                                                   "checkpoint": checkpoint_of(opts, cfg, name)},
        start_kw={"master_addr": run_cfg.get("master_addr"), "nproc_per_node": run_cfg.get("nproc_per_node"),
                  "on_node_failure": run_cfg.get("on_node_failure", "stop")})


def _check_nodes(name, nodes, specs, base) -> None:
    """Before anything is stopped: every node answers (a node unreachable now would leave the
    others stopped and the run half down: refused, exit 3, nothing touched), and, as a
    one-node restart's check, local files that differ from what any node has deployed would
    restart the old code there (refused, exit 2)."""
    from .. import files as _files
    from .. import api
    from ..multinode import nodes as multinode
    from ..errors import RunwardError
    asked = multinode.each_node(nodes, lambda _, t: api.spec(t, name))
    for node, r in zip(nodes, asked):
        if not r["ok"] and r["error"]["type"] != "RunNotFound":
            from .. import errors
            cls = getattr(errors, r["error"]["type"], None)
            cls = cls if isinstance(cls, type) and issubclass(cls, RunwardError) else errors.OperationFailed
            raise cls(f"{name}: node {node.display()} did not answer before the restart: "
                      f"{r['error']['message']}; nothing was stopped on any node",
                      r["error"].get("hint") or "restart once every node is reachable", hop=r["error"].get("hop"))
    for node, r in zip(nodes, asked):
        if not specs or not r["ok"]:
            continue  # never started there: the start sends nothing, nothing to compare
        last = r["result"]
        drift = _files.local_drift(last, specs, base=base) + _files.undeployed_drift(node, last, specs, base=base)
        if drift:
            raise BadInput(f"{name}: {len(drift)} file(s) differ locally from what node {node.display()} has "
                           "(or may: not known), so a restart would run the old code: "
                           + ", ".join(f"{d['local']} -> {d['remote']}" + (f" ({d['change']})" if d.get("change") else "")
                                       for d in drift),
                           f"runward restart {name} --deploy to send them to every node first, or --no-deploy "
                           f"to restart on what the nodes have", result={"local_drift": drift, "node": node.display()})


def _render(res: dict) -> str:
    from ..views.render import render_start, render_stop
    if "nnodes" in res:
        from ..views.nodesview import render_restart
        return render_restart(res)
    return "\n".join([render_stop(res["steps"][0]["result"]),
                      *(["deployed: " + (", ".join(f["remote"] for f in s["result"].get("files", []))
                                         or "nothing changed") + f" ({len(s['result'].get('unchanged', []))} unchanged)"
                         for s in res["steps"] if s["step"] == "deploy"]),
                      render_changes(res),
                      *([_drift_left(res)] if res.get("local_drift") else []),
                      render_start(res["steps"][-1]["result"])])


def _drift_left(res: dict) -> str:
    files = ", ".join(d["remote"] for d in res["local_drift"])
    if any(s["step"] == "deploy" for s in res["steps"]):
        return (f"left on the target: {len(res['local_drift'])} file(s) deleted locally ({files}); "
                f"runward deploy {res['name']} --delete removes them")
    return f"not deployed (--no-deploy): {len(res['local_drift'])} file(s) differ locally: {files}"


def render_changes(res: dict) -> str:
    """One line per kind of change against the last attempt, under where the spec came from."""
    where = f"spec from {res['spec_from']}"
    ch = {k: v for k, v in (res.get("changed") or {}).items() if k != "code"}
    if not ch:
        return f"{where}: unchanged since attempt {res.get('last_attempt')}\n" + render_code(res)
    lines = [f"{where}: changed since attempt {res.get('last_attempt')}:"]
    env = ch.get("env") or {}
    parts = ([f"+{k}={v}" for k, v in (env.get("added") or {}).items()]
             + [f"{k}: {c['from']} -> {c['to']}" for k, c in (env.get("changed") or {}).items()]
             + [f"-{k} (unset)" for k in env.get("removed") or []])
    if parts:
        lines.append("  env: " + ", ".join(parts))
    for key in ("command", "cwd"):
        if key in ch:
            lines.append(f"  {key}: {ch[key]['from'] or '(default)'} -> {ch[key]['to'] or '(default)'}")
    if "files" in ch:
        lines.append("  files: " + ", ".join([f"+{f}" for f in ch["files"]["added"]]
                                             + [f"-{f}" for f in ch["files"]["removed"]]))
    shown = lambda v: "(default)" if v is None else str(v)  # noqa: E731
    lines += [f"  {k}: {shown(c['from'])} -> {shown(c['to'])}"
              for k, c in {**(ch.get("options") or {}), **(ch.get("engine") or {})}.items()]
    return "\n".join([*lines, render_code(res)])


def render_code(res: dict) -> str:
    """The code's line: each file whose sha256 differs from the last attempt's, or plainly none."""
    code, last = res.get("code") or {}, res.get("last_attempt")
    short = lambda h: h[:8] if h else "(none)"  # noqa: E731
    unknown = ("not known (no sha256 at either attempt: missing or unreadable there): "
               + ", ".join(code["unknown"])) if code.get("unknown") else ""
    if code.get("changed"):
        return f"code: changed since attempt {last}: " + ", ".join(
            f"{p} {short(c['from'])} -> {short(c['to'])}" for p, c in code["changed"].items()) + (
            "; " + unknown if unknown else "")
    if code.get("unchanged"):
        return (f"code: no file changed since attempt {last} (same sha256: "
                + ", ".join(code["unchanged"]) + ")" + ("; " + unknown if unknown else ""))
    if unknown:
        return "code: " + unknown
    return "code: no file hashed by either attempt (no script in the command, no files): changes not known"
