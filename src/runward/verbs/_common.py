"""What the verbs share: output, runward.toml and --on resolution, --gpus, and `--all`."""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import EXIT_OK, BadInput


class Out:
    """Human or JSON rendering; exactly one JSON document per command."""

    def __init__(self, json_mode: bool):
        self.json = json_mode
        self.tty = sys.stdout.isatty()

    def say(self, text: str = "") -> None:
        if not self.json:
            print(text, flush=True)

    def doc(self, obj: dict) -> None:
        if self.json:
            import json
            sys.stdout.write(json.dumps(obj, indent=None, sort_keys=False, default=str) + "\n")
            sys.stdout.flush()


def old_spelling(p, flag: str, dest: str, **kw) -> None:
    """A renamed flag's old spelling: still read, for one release, and not shown in --help."""
    p.add_argument(flag, dest=dest, help=argparse.SUPPRESS, **kw)


def load_config(args):
    from .. import config
    return config.load(getattr(args, "config", None))


def target_of(args, cfg, run: str | None = None):
    """--on, else the run's `on` in runward.toml, else local; runward.toml's [ssh] config
    applies unless RUNWARD_SSH_CONFIG already names one."""
    if cfg.ssh_config and not os.environ.get("RUNWARD_SSH_CONFIG"):
        os.environ["RUNWARD_SSH_CONFIG"] = cfg.ssh_config
    return cfg.target(getattr(args, "on", None), run)


def config_dir(cfg) -> str | None:
    """The directory runward.toml's relative LOCAL paths are read from."""
    return os.path.dirname(cfg.path) if cfg.path else None


def gpu_list(text: str | list | None) -> list[int] | None:
    if text is None:
        return None
    if isinstance(text, list):
        return [int(g) for g in text]
    try:
        gpus = [int(g) for g in str(text).split(",") if g.strip() != ""]
    except ValueError:
        raise BadInput(f"invalid --gpus {text!r}", "give GPU indices like 0,1,2")
    if any(g < 0 for g in gpus):
        raise BadInput(f"invalid --gpus {text!r}", "GPU indices are >= 0")
    return gpus


def config_targets(cfg) -> list:
    """Every target runward.toml names: its [targets], then each run's own (local for a run
    without `on`), each once."""
    seen: list = []
    for t in [*cfg.named_targets(), *(cfg.target(None, run) for run in cfg.runs)]:
        if t not in seen:
            seen.append(t)
    return seen


def did_you_mean(name: str, cfg, target=None) -> str | None:
    """"did you mean train?" for a run name that is neither in runward.toml nor on the
    target, from the names of both (the target's asked only when given: one status call)."""
    import difflib
    names = set(cfg.runs)
    if target is not None:
        from .. import api
        from ..errors import RunwardError
        try:
            names |= {r["name"] for r in api.status(target).get("runs") or []}
        except RunwardError:
            pass  # the suggestion is a courtesy: the error it goes with is the answer
    close = difflib.get_close_matches(name, sorted(names - {name}), n=3)
    return f"did you mean {' or '.join(close)}?" if close else None


def suggest_for(args, e) -> None:
    """A run that is not found (any verb naming one): add "did you mean ...?" to the hint."""
    name = getattr(args, "name", None)
    if e.kind != "RunNotFound" or not isinstance(name, str):
        return
    try:
        cfg = load_config(args)
        if name in cfg.runs:
            return  # defined, just not on the target (never started there): no other name is meant
        hint = did_you_mean(name, cfg, target_of(args, cfg, name))
    except BadInput:
        return
    if hint:
        e.hint = hint + (f" ({e.hint})" if e.hint else "")
        e.details["did_you_mean"] = hint


def emit(out, cmd: str, target, result: dict, text: str, code: int = EXIT_OK) -> int:
    out.doc({"ok": code == EXIT_OK, "command": cmd, "target": str(target), "result": result})
    out.say(text)
    return code


def on_all(cfg, out, command: str, op, render, *, failed, exit_code, targets=None) -> int:
    """`COMMAND --all`: op on every named target of runward.toml (or on targets) at once, one
    section each; a target's failure is labelled failed(error); the exit code is
    exit_code(the failed results, all results)."""
    from .. import api
    targets = cfg.named_targets() if targets is None else targets
    if not targets:
        raise BadInput("--all: no [targets] in runward.toml", "define named targets, or use --on")
    results = api.fan_out(targets, op)
    text = "\n".join(
        f"== {r['target']}\n" + (render(r) if r["ok"] else f"  {failed(r['error'])}: {r['error']['message']}" + (
            f"\n  hint: {r['error']['hint']}" if r["error"].get("hint") else ""))
        for r in results)
    failures = [r for r in results if not r["ok"]]
    code = exit_code(failures, results) if failures else EXIT_OK
    out.doc({"ok": code == EXIT_OK, "command": command, "targets": results})
    out.say(text)
    return code
