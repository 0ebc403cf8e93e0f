"""What the verbs share: output (an operation's Outcome shown), old flag spellings, --stop-signal's
check; runward.toml, --on and `--all` come from the operations layer (operations/common.py)."""

from __future__ import annotations

import argparse
import sys

# what the CLI-only verbs (top, _complete) read: runward.toml, --on and a project's targets
from ..operations.common import config_targets, load_config, target_of  # noqa: F401



EXIT_OUTPUT_LOST = 74  # sysexits' EX_IOERR: stdout could not be written (docs/cli.md, exit 74)


class OutputLost(Exception):
    """stdout could not be written (a full disk: ENOSPC, EIO, a quota; `runward status >
    /dev/full`): cli.main says so on stderr in one line and exits EXIT_OUTPUT_LOST. verdict:
    the exit code the verb would have had (what was done was done: a stop still stopped)."""

    def __init__(self, error: OSError):
        super().__init__(error.strerror or str(error))
        self.error = error
        self.verdict: int | None = None


def write_out(text: str) -> None:
    """text on stdout, flushed. A write that fails is OutputLost, not an OSError traceback; a
    closed reader (BrokenPipeError) stays one: cli.main ends that by SIGPIPE, as git does."""
    if sys.stdout is None:
        return  # fd 1 closed at start: nothing said, as print() says nothing then
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as e:
        raise OutputLost(e) from None


class Out:
    """Human or JSON rendering; exactly one JSON document per command."""

    def __init__(self, json_mode: bool):
        self.json = json_mode
        self.tty = sys.stdout is not None and sys.stdout.isatty()  # None: started with fd 1 closed
        self.written = False  # the one JSON document is on stdout (or was begun there)

    def say(self, text: str = "") -> None:
        if not self.json:
            write_out(f"{text}\n")

    def doc(self, obj: dict) -> None:
        """The command's one JSON document, written whole: a Ctrl-C while a slow reader keeps
        the write blocked is held until the last byte is out (it then ends the command, which
        writes nothing more: else a second document would be glued onto a torn first)."""
        if not self.json or self.written or sys.stdout is None:
            return  # None: fd 1 closed at start; nothing said, as print() says nothing then
        import json
        text = json.dumps(obj, indent=None, sort_keys=False, default=str) + "\n"
        import _signal  # signal.py would import enum on a status's path for two calls
        self.written = True
        try:
            held = _signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGINT})
        except (AttributeError, OSError, ValueError):
            held = None
        try:
            write_out(text)
        finally:
            if held is not None:
                _signal.pthread_sigmask(_signal.SIG_SETMASK, held)  # a held Ctrl-C lands here


def old_spelling(p, flag: str, dest: str, **kw) -> None:
    """A renamed flag's old spelling: still read, for one release, and not shown in --help."""
    p.add_argument(flag, dest=dest, help=argparse.SUPPRESS, **kw)


def signal_arg(text: str) -> str:
    """A signal flag that is not the declared --stop-signal (its old spelling --signal,
    --checkpoint-signal, kill's --signal): checked as the flag is read by the declared
    option's own conversion (spec/options.py: signals.known, the target's own rule), so a bad one
    is exit 2 before any run is looked up or touched."""
    from ..spec import options
    return options.converter("stop_signal")(text)


def show(out, outcome) -> int:
    """An operation's Outcome printed: its one JSON document, or its human text. Where stdout
    cannot be written, OutputLost carries the code the verb would have had."""
    try:
        out.doc(outcome.document)
        if out.json:
            return outcome.code
        if outcome.notes:
            print(outcome.notes, file=sys.stderr, flush=True)
        if outcome.stderr is not None:
            print(f"runward {outcome.command}: {outcome.stderr}", file=sys.stderr)
        elif outcome.text is not None:
            out.say(outcome.render())
    except OutputLost as e:
        e.verdict = outcome.code
        raise
    return outcome.code

