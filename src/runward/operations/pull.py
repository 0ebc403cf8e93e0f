"""pull: files back through the hop chain, each sha256-checked here, then renamed in."""

from __future__ import annotations

from . import Outcome, Targeted, single
from .common import load_config, target_of


class PullOptions(Targeted):
    """What `runward pull` takes: REMOTE:LOCAL specs (verbs/pull.py's flags)."""
    specs: list = []


def pull(opts: PullOptions) -> Outcome:
    from .. import files as _files
    cfg = load_config(opts)
    target = target_of(opts, cfg)
    res = _files.pull(target, list(opts.specs))
    return single("pull", target, res, lambda: render(res, target))


def render(res: dict, target) -> str:
    text = "\n".join(f"pulled {target}:{f['remote']} -> {f['local']}  sha256 {f['sha256'][:12]} verified"
                     if f["type"] == "file" else f"linked {f['local']} -> {f['target']}"
                     for f in res["files"])
    if res.get("skipped"):
        text += "\n" + "\n".join(f"skipped {p} (neither file, directory nor link)" for p in res["skipped"])
    return text or "nothing to pull"
