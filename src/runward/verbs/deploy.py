"""runward deploy NAME: push the run's files (runward.toml) to where it runs."""

from __future__ import annotations

from ..errors import BadInput
from ._common import config_dir, did_you_mean, emit, load_config, target_of


def add_arguments(p) -> None:
    p.add_argument("name")


def run(args, out) -> int:
    from .. import files as _files
    cfg = load_config(args)
    target = target_of(args, cfg, args.name)
    run_cfg = cfg.runs.get(args.name)
    close = did_you_mean(args.name, cfg) if run_cfg is None else None
    if close:
        raise BadInput(f"no run {args.name!r} in runward.toml", close)
    if not run_cfg or not run_cfg.get("files"):
        raise BadInput(f"run {args.name!r} has no files in runward.toml",
                       f"add files = [\"LOCAL:REMOTE\"] to [runs.{args.name}]")
    res = _files.push(target, run_cfg["files"], run=args.name, progress=not out.json, base=config_dir(cfg))
    text = "\n".join(f"deployed {f.get('local', '?')} -> {target}:{f['remote']}  sha256 {f['sha256'][:12]} verified"
                     for f in res["files"] if f.get("sha256"))
    return emit(out, "deploy", target, res, text)
