"""runward's command line: parse, call an operation, render (human or --json).

Kept thin and light: only argparse and os are imported before a command runs, so
`runward --help` starts fast (check: python -X importtime -m runward --help).
"""

from __future__ import annotations

import argparse
import os
import sys

# argparse passes each of its strings through gettext, which looks for a .mo file of every
# variant of the locale's language on each call (and imports locale): 2 ms of a status call.
# Python ships no translation of argparse, so its strings are these either way.
argparse._ = lambda message: message
argparse.ngettext = lambda singular, plural, n: singular if n == 1 else plural

EXIT_CODES = """exit codes:
  0  done and verified          3  target unreachable (a hop failed)
  1  the operation failed       4  no such run
  2  bad input or config        5  done but not verified
"""


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """argparse sizes help to the terminal through shutil, which (with its compression
    modules) costs --help more than argparse itself; os.get_terminal_size is enough."""

    def __init__(self, prog, indent_increment=2, max_help_position=24, width=None):
        if width is None:
            try:
                width = int(os.environ.get("COLUMNS", "")) or os.get_terminal_size(sys.__stdout__.fileno()).columns
            except (ValueError, OSError, AttributeError):
                width = 80
            width -= 2
        super().__init__(prog, indent_increment, max_help_position, width)


def _add_common(p: argparse.ArgumentParser, on: bool = True) -> None:
    p.add_argument("--json", action="store_true", help="print exactly one JSON document on stdout")
    p.add_argument("--config", metavar="PATH", help="runward.toml to use (default: found in . or a parent)")
    if on:
        p.add_argument("--on", metavar="TARGET",
                       help="local, ssh://[user@]host[:port], KIND:NAME, ssh://host/pct:200, or a name from runward.toml")


def _args_start(p: argparse.ArgumentParser) -> None:
    _add_common(p)
    p.add_argument("name")
    p.add_argument("--env", action="append", metavar="K=V", help="environment for the job (repeatable)")
    p.add_argument("--cwd", metavar="DIR")
    p.add_argument("--log", metavar="PATH", help="log file on the target (appended; default under the run's dir)")
    p.add_argument("--settle", type=float, metavar="SECONDS", help="alive this long counts as started (default 3)")
    p.add_argument("--ready", metavar="REGEX", help="also wait for a log line matching REGEX")
    p.add_argument("--ready-timeout", type=float, metavar="SECONDS")
    p.add_argument("--replace", action="store_true", help="stop the live attempt first (verified)")
    p.add_argument("--gpus", metavar="0,1", help="sets CUDA_VISIBLE_DEVICES and records the GPUs")
    p.add_argument("--wait-gpus-free", action="store_true", help="wait until --gpus are free, else refuse")
    p.add_argument("--timeout", type=float, metavar="S", help="with --wait-gpus-free (default 300)")
    p.add_argument("--max-used", type=float, metavar="MiB", help="a GPU using at most this counts as free (default 1024)")
    p.add_argument("--stop-signal", metavar="SIG", help="signal `stop` sends first (default TERM; INT for torchrun)")
    p.add_argument("--grace", type=float, metavar="SECONDS", help="stop's grace before KILL (default 30)")
    p.add_argument("--sh", metavar="STRING", help="run one shell command line instead of an argv")
    p.add_argument("command", nargs="*", help="-- COMMAND [ARG]... (everything after --)")


def _args_stop(p: argparse.ArgumentParser) -> None:
    _add_common(p)
    p.add_argument("name")
    p.add_argument("--grace", type=float, metavar="SECONDS")
    p.add_argument("--signal", metavar="SIG")
    p.add_argument("--gpu-timeout", type=float, metavar="S", help="how long to wait for GPU memory release (default 60)")


def _args_restart(p: argparse.ArgumentParser) -> None:
    _add_common(p)
    p.add_argument("name")
    p.add_argument("--env", action="append", metavar="K=V", help="override/add environment entries")
    p.add_argument("--settle", type=float)
    p.add_argument("--ready", metavar="REGEX")
    p.add_argument("--grace", type=float)
    p.add_argument("--signal", metavar="SIG")
    p.add_argument("--deploy", action="store_true", help="deploy the run's files between stop and start")


def _args_status(p: argparse.ArgumentParser) -> None:
    _add_common(p)
    p.add_argument("name", nargs="?")
    p.add_argument("--all", action="store_true", help="every named target in runward.toml, in parallel")


def _args_logs(p: argparse.ArgumentParser) -> None:
    _add_common(p)
    p.add_argument("name")
    p.add_argument("-n", type=int, default=20, metavar="LINES")
    p.add_argument("-f", "--follow", action="store_true")
    p.add_argument("--for", dest="for_s", type=float, metavar="S", help="follow for S seconds, then exit")


def _args_exec(p: argparse.ArgumentParser) -> None:
    _add_common(p)
    p.add_argument("--sh", metavar="STRING", help="one shell command line (linted first)")
    p.add_argument("--force", action="store_true", help="run --sh even when the linter finds an error")
    p.add_argument("--cwd", metavar="DIR")
    p.add_argument("--env", action="append", metavar="K=V")
    p.add_argument("--timeout", type=float, metavar="S")
    p.add_argument("command", nargs="*", help="-- COMMAND [ARG]...")


def _args_push(p: argparse.ArgumentParser) -> None:
    _add_common(p)
    p.add_argument("specs", nargs="+", metavar="LOCAL:REMOTE")


def _args_deploy(p: argparse.ArgumentParser) -> None:
    _add_common(p)
    p.add_argument("name")


def _args_doctor(p: argparse.ArgumentParser) -> None:
    _add_common(p)


def _args_gpus(p: argparse.ArgumentParser) -> None:
    _add_common(p)
    p.add_argument("--all", action="store_true", help="every named target in runward.toml, in parallel")
    p.add_argument("--map", choices=("auto", "memory"), default="auto",
                   help="inside a container: auto reads the host's NSpid lines through the host hop; "
                        "memory attributes by the runs recorded on each GPU")


def _args_ps(p: argparse.ArgumentParser) -> None:
    _add_common(p)
    p.add_argument("pattern", help="extended regex against the full command line")


def _args_kill(p: argparse.ArgumentParser) -> None:
    _add_common(p)
    p.add_argument("pattern", help="extended regex against the full command line")
    p.add_argument("--signal", default="TERM", metavar="SIG")
    p.add_argument("--grace", type=float, default=10.0, metavar="SECONDS", help="before KILL (default 10)")
    p.add_argument("--tree", action="store_true", help="also every descendant of a match")
    p.add_argument("--yes", action="store_true", help="signal them (without it: a dry run)")
    p.add_argument("--max", type=int, default=32, help="refuse when more processes match (default 32)")


def _args_watch(p: argparse.ArgumentParser) -> None:
    _add_common(p)
    p.add_argument("name")
    p.add_argument("--for", dest="for_s", type=float, default=60.0, metavar="S", help="window (default 60)")
    p.add_argument("--min", action="append", metavar="METRIC=V", help="alert below this floor, e.g. tok_s=14500")
    p.add_argument("--max", action="append", metavar="METRIC=V", help="alert above this ceiling")
    p.add_argument("--stall", type=float, metavar="S", help="alert when the log is silent this long while alive")
    p.add_argument("--drop", type=float, metavar="FRACTION",
                   help="alert when throughput stays under FRACTION of its early median (default 0.5)")


def _args_plot(p: argparse.ArgumentParser) -> None:
    _add_common(p)
    p.add_argument("name")
    p.add_argument("--metric", action="append", metavar="M", help="metric(s) to draw (default: the main ones)")
    p.add_argument("-o", "--output", required=True, metavar="FILE.png")
    p.add_argument("--x", choices=("step", "time"), default="step")


def _args_lint(p: argparse.ArgumentParser) -> None:
    _add_common(p, on=False)
    p.add_argument("command_line", metavar="'SHELL COMMAND'", help="the command, or - for stdin")
    p.add_argument("--interactive", action="store_true",
                   help="the command is typed at a prompt (no enclosing `bash -c` carries its text)")


def _args_demo(p: argparse.ArgumentParser) -> None:
    _add_common(p, on=False)
    p.add_argument("--keep", action="store_true", help="keep the demo's state directory")


# Each verb, its one-line help, and the function that adds its arguments.
VERBS = (
    ("start", "start a run; verified alive after settling", _args_start),
    ("stop", "stop a run; verified dead (the whole tree)", _args_stop),
    ("restart", "verified stop, then verified start with the last spec", _args_restart),
    ("status", "state of runs: running, exited, lost, orphaned", _args_status),
    ("logs", "tail and follow a run's log (across restarts)", _args_logs),
    ("exec", "run a command on a target; exit code, signal, output, diagnosis", _args_exec),
    ("push", "send files through the hop chain; atomic, sha256-checked", _args_push),
    ("deploy", "push the run's files (runward.toml) to where it runs", _args_deploy),
    ("doctor", "what works on a target, hop by hop", _args_doctor),
    ("gpus", "each GPU: memory, utilization, and the processes on it mapped to their runs", _args_gpus),
    ("ps", "safe pgrep -af: never lists itself, its ancestors or its own session", _args_ps),
    ("kill", "safe pkill -f: shows what it would signal; --yes to do it, verified", _args_kill),
    ("watch", "follow a run's health; exit 1 on the first alert", _args_watch),
    ("plot", "draw a run's metrics to a PNG (needs matplotlib)", _args_plot),
    ("lint", "find self-kill and wrong-filesystem hazards in a shell command", _args_lint),
    ("demo", "the whole story on this machine with the example job", _args_demo),
)


def build_parser(only: str | None = None, bare: bool = False) -> argparse.ArgumentParser:
    """The whole parser; with `only`, just that verb's subparser (a call parses one verb,
    and building all sixteen costs more start-up than argparse itself); with `bare`, the
    verbs as a list of names and one-line helps (all the top-level help and a bad verb's
    error need)."""
    ap = argparse.ArgumentParser(
        prog="runward",
        description="Start, stop, restart and watch named runs on local, SSH and container targets. "
                    "Every answer is verified.",
        epilog=EXIT_CODES, formatter_class=_Formatter)
    ap.add_argument("--version", action="version", version="runward 0.1.0")
    if bare:
        w = max(len(name) for name, _, _ in VERBS)
        ap.description += "\n\ncommands:\n" + "\n".join(f"  {name:<{w}}  {help_}" for name, help_, _ in VERBS)
        ap.epilog = "`runward COMMAND --help` shows a command's options.\n\n" + EXIT_CODES
        ap.add_argument("cmd", nargs="?", metavar="COMMAND", choices=[name for name, _, _ in VERBS],
                        help="one of the commands above, then its own arguments")
        return ap
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=_parser_class())
    for name, help_, add_args in VERBS:
        if only is None or name == only:
            add_args(sub.add_parser(name, help=help_))
    return ap


def _verb_in(argv: list[str]) -> str | None:
    """The verb a command line names: its first word that is not an option (runward's own
    options take no value), if that word is a verb."""
    for a in argv:
        if not a.startswith("-"):
            return a if any(a == v[0] for v in VERBS) else None
    return None


# ---------------------------------------------------------------------------------------

def _parser_class():
    class Parser(argparse.ArgumentParser):
        def __init__(self, *a, **kw):
            kw.setdefault("formatter_class", _Formatter)
            super().__init__(*a, **kw)
    return Parser


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


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first `--` is the job's command, verbatim: argparse must not read
    # `python train.py --lr 3e-4` as runward's own options.
    tail = None
    if "--" in argv:
        i = argv.index("--")
        argv, tail = argv[:i], argv[i + 1:]
    verb = _verb_in(argv)
    ap = build_parser(only=verb) if verb else build_parser(bare=True)
    args = ap.parse_args(argv)
    if tail is not None:
        if not hasattr(args, "command"):
            ap.error(f"`runward {args.cmd}` takes no command after --")
        args.command = tail
    if not args.cmd:
        ap.print_help()
        return 2
    out = Out(getattr(args, "json", False))
    from .errors import RunwardError, BadInput
    from . import commands
    try:
        return getattr(commands, "cmd_" + args.cmd)(args, out)
    except RunwardError as e:
        return _fail(out, args, e)
    except KeyboardInterrupt:
        if out.json:
            out.doc({"ok": False, "command": args.cmd, "error": {"type": "Interrupted", "message": "interrupted"}})
        return 130


def _fail(out: Out, args: argparse.Namespace, e) -> int:
    if out.json:
        out.doc({"ok": False, "command": args.cmd, "error": e.to_dict(), "result": e.result})
    else:
        from .render import render_error
        print(render_error(args.cmd, e), file=sys.stderr)
    return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
