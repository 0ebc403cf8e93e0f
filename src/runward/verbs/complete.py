"""runward _complete runs|targets: the names runward.toml defines, one a line, for the
completion scripts (`runward completion`). Hidden from the help; quiet on any error: a
broken runward.toml must not print into someone's command line as they type."""

from __future__ import annotations


def add_arguments(p) -> None:
    p.add_argument("what", choices=["runs", "targets"], help="which names to list")


def run(args, out) -> int:
    from ..errors import RunwardError
    from ._common import load_config
    try:
        cfg = load_config(args)
    except RunwardError:
        return 0
    names = sorted(cfg.runs if args.what == "runs" else cfg.targets)
    out.doc({"ok": True, "command": "_complete", "result": {args.what: names}})
    if names:
        out.say("\n".join(names))
    return 0
