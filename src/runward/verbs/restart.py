"""runward restart NAME: verified stop, [deploy,] verified start with the last spec."""

from __future__ import annotations

from ..errors import BadInput
from ..render import render_start, render_stop
from ._common import config_dir, emit, load_config, on_runs, target_of


def add_arguments(p) -> None:
    p.add_argument("name", nargs="?", help="the run (or --all)")
    p.add_argument("--all", action="store_true",
                   help="every run in runward.toml, each on its own target, in parallel; exit code: the worst run's")
    p.add_argument("--env", action="append", metavar="K=V|NAME",
                   help="override/add environment entries; a bare NAME passes NAME from this shell's environment")
    p.add_argument("--env-file", action="append", metavar="PATH", help="KEY=VALUE lines (docker's format), never stored")
    p.add_argument("--lock-timeout", type=float, metavar="SECONDS",
                   help="give up after this long if another verb holds the run (default 30)")
    p.add_argument("--settle", type=float)
    p.add_argument("--ready", metavar="REGEX")
    p.add_argument("--grace", type=float)
    p.add_argument("--signal", metavar="SIG")
    p.add_argument("--deploy", action="store_true", help="deploy the run's files between stop and start")


def run(args, out) -> int:
    cfg = load_config(args)
    if args.all:
        return on_runs(args, cfg, out, "restart", lambda name, t: _restart(args, cfg, name, t, out), _render)
    if not args.name:
        raise BadInput("no run named", "runward restart NAME, or --all for every run in runward.toml")
    target = target_of(args, cfg, args.name)
    res = _restart(args, cfg, args.name, target, out)
    return emit(out, "restart", target, res, _render(res))


def _restart(args, cfg, name, target, out) -> dict:
    from .. import api
    overrides = {"settle": args.settle, "ready": args.ready}
    env, env_from = api.read_env(args.env, args.env_file)
    deploy = None
    if args.deploy:
        from .. import files as _files
        run_cfg = cfg.runs.get(name)
        if not run_cfg or not run_cfg.get("files"):
            raise BadInput(f"--deploy: run {name!r} has no files in runward.toml",
                           f"add files = [\"LOCAL:REMOTE\"] to [runs.{name}]")
        deploy = lambda: _files.push(target, run_cfg["files"], run=name,  # noqa: E731
                                     progress=not out.json and not args.all, base=config_dir(cfg))
    return api.restart(target, name, overrides={**overrides, "env": env or None, "env_from": env_from,
                                                "reuse_env": True},
                       grace=args.grace, signal=args.signal, deploy=deploy, lock_timeout=args.lock_timeout)


def _render(res: dict) -> str:
    return "\n".join([render_stop(res["steps"][0]["result"]),
                      *(["deployed: " + ", ".join(f["remote"] for f in s["result"].get("files", []))
                         for s in res["steps"] if s["step"] == "deploy"]),
                      render_start(res["steps"][-1]["result"])])
