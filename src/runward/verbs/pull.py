"""runward pull --on TARGET REMOTE:LOCAL...: files back through the hop chain, sha256-checked here."""

from __future__ import annotations

from ._common import emit, load_config, target_of


def add_arguments(p) -> None:
    p.add_argument("specs", nargs="+", metavar="REMOTE:LOCAL",
                   help="a remote file or directory (recursive) and where it goes here; "
                        "into an existing directory or a LOCAL ending in / it keeps its name "
                        "(DIR/:LOCAL copies what is in DIR, as rsync)")


def run(args, out) -> int:
    from .. import files as _files
    cfg = load_config(args)
    target = target_of(args, cfg)
    res = _files.pull(target, args.specs)
    text = "\n".join(f"pulled {target}:{f['remote']} -> {f['local']}  sha256 {f['sha256'][:12]} verified"
                     if f["type"] == "file" else f"linked {f['local']} -> {f['target']}"
                     for f in res["files"])
    if res.get("skipped"):
        text += "\n" + "\n".join(f"skipped {p} (neither file, directory nor link)" for p in res["skipped"])
    return emit(out, "pull", target, res, text or "nothing to pull")
