"""What the verbs share: output (an operation's Outcome shown), old flag spellings, --stop-signal's
check; runward.toml, --on and `--all` come from the operations layer (operations/common.py)."""

from __future__ import annotations

import argparse
import sys

from ..errors import EXIT_OK, BadInput
# what the verbs not yet moved to the operations layer still read from here (issue 27)
from ..operations import common as _ops
from ..operations import single as _single
from ..operations.common import (ALL_RUNS_WORST_FIRST, all_runs_code, config_dir, config_targets,  # noqa: F401
                                 did_you_mean, gpu_list, load_config, suggest_for, target_of)



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


def signal_arg(text: str) -> str:
    """A signal flag that is not the declared --stop-signal (its old spelling --signal,
    --checkpoint-signal, kill's --signal): checked as the flag is read by the declared
    option's own conversion (options.py: signals.known, the target's own rule), so a bad one
    is exit 2 before any run is looked up or touched."""
    from .. import options
    return options.converter("stop_signal")(text)


def show(out, outcome) -> int:
    """An operation's Outcome printed: its one JSON document, or its human text."""
    out.doc(outcome.document)
    if out.json:
        return outcome.code
    if outcome.notes:
        print(outcome.notes, file=sys.stderr, flush=True)
    if outcome.stderr is not None:
        print(f"runward {outcome.command}: {outcome.stderr}", file=sys.stderr)
    elif outcome.text is not None:
        out.say(outcome.render())
    return outcome.code


def on_runs(args, cfg, out, command: str, one, render) -> int:
    return show(out, _ops.on_runs(args, cfg, command, one, render))


def on_all(cfg, out, command: str, op, render, *, failed, exit_code, targets=None) -> int:
    return show(out, _ops.on_all(cfg, command, op, render, failed=failed, exit_code=exit_code, targets=targets))


def emit(out, cmd: str, target, result: dict, text: str, code: int = EXIT_OK) -> int:
    """For the verbs not moved to the operations layer yet: one target's answer, as single()."""
    return show(out, _single(cmd, target, result, lambda: text, code))


def require_extra(module: str, verb: str, what: str, extra: str) -> None:
    """The optional library VERB needs (runward[EXTRA]), checked before anything else: its
    absence is bad input naming the extra to install, never an ImportError traceback."""
    import importlib
    try:
        importlib.import_module(module)
    except ImportError:
        raise BadInput(f"runward {verb} needs {what}", f"pip install 'runward[{extra}]'") from None

