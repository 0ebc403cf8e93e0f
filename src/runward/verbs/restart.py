"""runward restart NAME: verified stop, [deploy,] verified start with the run's definition
(runward.toml's when it has the run, else the last attempt's spec), and what changed."""

from __future__ import annotations

from ..errors import BadInput
from ..render import render_start, render_stop
from ._common import config_dir, emit, load_config, old_spelling, on_runs, signal_arg, target_of


def add_arguments(p) -> None:
    p.add_argument("name", nargs="?", help="the run (or --all)")
    p.add_argument("--all", action="store_true",
                   help="every run in runward.toml, each on its own target, in parallel; exit code: the worst run's")
    p.add_argument("--env", action="append", metavar="K=V|NAME",
                   help="override/add environment entries; `K=` (empty) unsets K; a bare NAME passes NAME "
                        "from this shell's environment")
    p.add_argument("--env-file", action="append", metavar="PATH", help="KEY=VALUE lines (docker's format), never stored")
    p.add_argument("--keep-env", action="store_true",
                   help="keep the last attempt's --env K=V overrides (a run of runward.toml drops them by default)")
    p.add_argument("--cwd", metavar="DIR", help="working directory on the target for the new attempt")
    p.add_argument("--lock-timeout", type=float, metavar="SECONDS",
                   help="give up after this long if another verb holds the run (default 30)")
    p.add_argument("--settle", type=float, metavar="SECONDS", help="alive this long counts as started")
    p.add_argument("--ready", metavar="REGEX", help="also wait for a log line matching REGEX")
    p.add_argument("--ready-timeout", type=float, metavar="SECONDS",
                   help="with --ready: how long to wait for that line (default 600)")
    p.add_argument("--grace", type=float, metavar="SECONDS",
                   help="the old attempt's grace before KILL (default: the one it was started with)")
    p.add_argument("--stop-signal", metavar="SIG", type=signal_arg,
                   help="the signal that stops the old attempt (default: the one it was started with)")
    old_spelling(p, "--signal", "stop_signal", type=signal_arg)
    p.add_argument("--deploy", action="store_true", help="deploy the run's files between stop and start")


def run(args, out) -> int:
    cfg = load_config(args)
    if args.all:
        return on_runs(args, cfg, out, "restart", lambda name, t: _restart(args, cfg, name, t, out), _render)
    if not args.name:
        raise BadInput("no run named", "runward restart NAME, or --all for every run in runward.toml")
    if (cfg.runs.get(args.name) or {}).get("nodes") and not args.on:  # one --on: that node alone (refused)
        from .. import multideploy
        return multideploy.emit(out, "restart", *_restart_nodes(args, cfg, args.name))
    target = target_of(args, cfg, args.name)
    res = _restart(args, cfg, args.name, target, out)
    return emit(out, "restart", target, res, _render(res))


def _restart(args, cfg, name, target, out) -> dict:
    from .. import api
    if (cfg.runs.get(name) or {}).get("nodes") and not args.on:  # (--all too) every node, all or nothing
        from ..errors import OperationFailed
        res, code = _restart_nodes(args, cfg, name)
        if code:
            e = OperationFailed(res.get("message") or "restart failed on a node", result=res)
            e.exit_code = code
            raise e
        return res
    from .start import start_kwargs_from_config
    run_cfg = cfg.runs.get(name)
    env, env_from = api.read_env(args.env, args.env_file)
    # `--env K=` typed (not read from a file): unset K for the new attempt
    env = {k: None if v == "" and k not in env_from else v for k, v in env.items()}
    overrides = {"settle": args.settle, "ready": args.ready, "ready_timeout": args.ready_timeout, "cwd": args.cwd,
                 "env": env or None, "env_from": env_from, "reuse_env": True}
    deploy = None
    if args.deploy:
        from .. import files as _files
        if not run_cfg or not run_cfg.get("files"):
            raise BadInput(f"--deploy: run {name!r} has no files in runward.toml",
                           f"add files = [\"LOCAL:REMOTE\"] to [runs.{name}]")
        deploy = lambda: _files.push(target, run_cfg["files"], run=name,  # noqa: E731
                                     progress=not out.json and not args.all, base=config_dir(cfg))
    definition = start_kwargs_from_config(run_cfg) if run_cfg else None
    return api.restart(target, name, overrides=overrides, grace=args.grace, signal=args.stop_signal,
                       deploy=deploy, lock_timeout=args.lock_timeout, definition=definition, keep_env=args.keep_env)


def _restart_nodes(args, cfg, name) -> tuple[dict, int]:
    """A run with nodes in runward.toml: every node, all or nothing (multideploy.restart), with
    runward.toml's definition and the command line's options over it; inputs read first."""
    from .. import api, multideploy
    from .start import refuse_node_restarts, start_kwargs_from_config
    run_cfg = cfg.runs[name]
    if args.keep_env:
        raise BadInput(f"--keep-env with the multi-node run {name}",
                       "a multi-node restart takes runward.toml's definition: give the entries with --env")
    if args.deploy and not run_cfg.get("files"):
        raise BadInput(f"--deploy: run {name!r} has no files in runward.toml",
                       f"add files = [\"LOCAL:REMOTE\"] to [runs.{name}]")
    kw = start_kwargs_from_config(run_cfg)
    env, env_from = api.read_env(args.env, args.env_file)
    kw["env"] = {k: v for k, v in {**(kw.get("env") or {}), **env}.items()
                 if not (k in env and v == "" and k not in env_from)}  # `--env K=` typed: unset
    kw.update(env_from=env_from, env_overrides=[k for k in env if k not in env_from], lock_timeout=args.lock_timeout)
    for opt in ("cwd", "settle", "ready", "ready_timeout"):
        if getattr(args, opt) is not None:
            kw[opt] = getattr(args, opt)
    refuse_node_restarts(name, kw)
    return multideploy.restart(
        [cfg.target(t) for t in run_cfg["nodes"]], name, kw, specs=run_cfg["files"] if args.deploy else None,
        base=config_dir(cfg), stop_kw={"grace": args.grace, "signal": args.stop_signal, "lock_timeout": args.lock_timeout},
        start_kw={"master_addr": run_cfg.get("master_addr"), "nproc_per_node": run_cfg.get("nproc_per_node"),
                  "on_node_failure": run_cfg.get("on_node_failure", "stop")})


def _render(res: dict) -> str:
    if "nnodes" in res:
        from ..multideploy import render_restart
        return render_restart(res)
    return "\n".join([render_stop(res["steps"][0]["result"]),
                      *(["deployed: " + (", ".join(f["remote"] for f in s["result"].get("files", []))
                                         or "nothing changed") + f" ({len(s['result'].get('unchanged', []))} unchanged)"
                         for s in res["steps"] if s["step"] == "deploy"]),
                      render_changes(res),
                      render_start(res["steps"][-1]["result"])])


def render_changes(res: dict) -> str:
    """One line per kind of change against the last attempt, under where the spec came from."""
    where = f"spec from {res['spec_from']}"
    ch = res.get("changed") or {}
    if not ch:
        return f"{where}: unchanged since attempt {res.get('last_attempt')}"
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
    return "\n".join(lines)
