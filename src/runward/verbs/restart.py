"""runward restart NAME: verified stop, [deploy,] verified start with the last spec."""

from __future__ import annotations

from ..errors import BadInput
from ..render import render_start, render_stop
from ._common import config_dir, emit, load_config, target_of


def add_arguments(p) -> None:
    p.add_argument("name")
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
    from .. import api
    cfg = load_config(args)
    target = target_of(args, cfg, args.name)
    overrides = {"settle": args.settle, "ready": args.ready}
    env, env_from = api.read_env(args.env, args.env_file)
    deploy = None
    if args.deploy:
        from .. import files as _files
        run_cfg = cfg.runs.get(args.name)
        if not run_cfg or not run_cfg.get("files"):
            raise BadInput(f"--deploy: run {args.name!r} has no files in runward.toml",
                           f"add files = [\"LOCAL:REMOTE\"] to [runs.{args.name}]")
        deploy = lambda: _files.push(target, run_cfg["files"], run=args.name, progress=not out.json,  # noqa: E731
                                     base=config_dir(cfg))
    res = api.restart(target, args.name, overrides={**overrides, "env": env or None, "env_from": env_from,
                                                        "reuse_env": True},
                      grace=args.grace, signal=args.signal, deploy=deploy, lock_timeout=args.lock_timeout)
    st = res["steps"][-1]["result"]
    text = "\n".join([render_stop(res["steps"][0]["result"]),
                      *(["deployed: " + ", ".join(f["remote"] for f in s["result"].get("files", []))
                         for s in res["steps"] if s["step"] == "deploy"]),
                      render_start(st)])
    return emit(out, "restart", target, res, text)
