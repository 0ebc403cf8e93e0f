"""runward push --on TARGET LOCAL:REMOTE...: files through the hop chain, sha256-checked."""

from __future__ import annotations

from ._common import emit, load_config, target_of


def add_arguments(p) -> None:
    p.add_argument("specs", nargs="+", metavar="LOCAL:REMOTE")


def run(args, out) -> int:
    from .. import files as _files
    cfg = load_config(args)
    target = target_of(args, cfg)
    res = _files.push(target, args.specs, progress=not out.json)
    text = "\n".join(f"pushed {f.get('local', '?')} -> {target}:{f['remote']}  sha256 {f['sha256'][:12]} verified"
                     for f in res["files"] if f.get("sha256"))
    return emit(out, "push", target, res, text or "nothing to push")
