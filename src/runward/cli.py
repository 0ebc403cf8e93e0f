"""runward's command line: the verb table, the common flags, the parser of the verb named on
the command line, dispatch to that verb's module (verbs/), and errors mapped to exit codes.

Kept light: only os and sys are imported at first. `runward --help`, `--version` and a bare
`runward` are answered from the verb table without argparse (views/tophelp.py); anything else
imports argparse (cliparser.py) and only the named verb's module, so every call starts fast
(check: python -X importtime -m runward --help). The layout is described in
docs/architecture.md.
"""

from __future__ import annotations

import importlib
import os
import sys

from .views import tophelp
from .views.tophelp import EXIT_CODES  # noqa: F401  (cli.EXIT_CODES, where callers read it)

TYPE_CHECKING = False  # typing itself imports re: the help would pay for it
if TYPE_CHECKING:
    import argparse

    from .cliparser import BadArguments


# Each verb, its one-line help, and its module under runward/verbs/ (mcp: runward/mcp/verb.py).
VERBS = (
    ("start", "start a run; verified alive after settling", "start"),
    ("stop", "stop a run; verified dead (the whole tree)", "stop"),
    ("restart", "verified stop, then verified start with the last spec", "restart"),
    ("status", "state of runs: running, exited, stray, lost, orphaned", "status"),
    ("logs", "tail and follow a run's log (across restarts)", "logs"),
    ("rm", "remove a stopped run's records (its log kept unless --logs)", "rm"),
    ("prune", "remove the stopped runs that ended longer ago than --older-than", "prune"),
    ("exec", "run a command on a target; exit code, signal, output, diagnosis", "exec"),
    ("push", "send files through the hop chain; atomic, sha256-checked", "push"),
    ("pull", "bring files back through the hop chain; streamed, sha256-checked, atomic here", "pull"),
    ("deploy", "push the run's files (runward.toml) to where it runs", "deploy"),
    ("doctor", "what works on a target, hop by hop", "doctor"),
    ("gpus", "each GPU: memory, utilization, and the processes on it mapped to their runs", "gpus"),
    ("stacks", "the Python stacks of a run's processes on every node, grouped by frame and rank (py-spy)", "stacks"),
    ("ps", "safe pgrep -af: never lists itself, its ancestors or its own session", "ps"),
    ("kill", "safe pkill -f: shows what it would signal; --yes to do it, verified", "kill"),
    ("history", "every attempt of a run: how it ended, steps, throughput, loss, what changed", "history"),
    ("compare", "two attempts side by side: what changed, throughput and loss at common steps", "compare"),
    ("watch", "follow a run's health; exit 1 on the first alert", "watch"),
    ("top", "a live view of runs and GPUs; keys to read a log and stop a run (needs runward[top])", "top"),
    ("plot", "draw a run's metrics to a PNG (needs matplotlib)", "plot"),
    ("mcp", "serve the verbs as MCP tools over stdio, for coding agents (needs runward[mcp])", "mcp"),
    ("lint", "find self-kill and wrong-filesystem hazards in a shell command", "lint"),
    ("demo", "the whole story on this machine with the example job", "demo"),
    ("completion", "print a bash or zsh completion script (verbs, flags, run and target names)", "completion"),
)
# Verbs left out of the help: `_complete` lists runward.toml's names for the completion
# scripts, fast (it reads runward.toml and nothing else).
HIDDEN = (("_complete", "names from runward.toml for shell completion", "complete"),)
HERE_ONLY = ("lint", "demo", "completion", "_complete", "mcp")  # verbs that act on this machine alone: no --on


def _add_common(p: argparse.ArgumentParser, on: bool = True) -> None:
    from .cliparser import OnAction
    p.add_argument("--json", action="store_true", help="print exactly one JSON document on stdout")
    p.add_argument("--config", metavar="PATH", help="runward.toml to use (default: found in . or a parent)")
    if on:
        # a verb that takes --on parses a target, so the grammar is loaded anyway; the top-level
        # --help, which takes none, loads none of it
        from .targets import ENGINES
        p.add_argument("--on", metavar="TARGET", action=OnAction,
                       help="local, ssh://[user@]host[:port], KIND:NAME, ssh://host/pct:200, "
                            + "".join(f"{m.FORM}, " for m in ENGINES.values()) + "or a name from runward.toml"
                            "; start/stop/status/logs/watch/gpus/deploy: repeat it for a run over several nodes")
        p.set_defaults(nodes=[])


MULTI_NODE_VERBS = ("start", "stop", "status", "logs", "watch", "gpus", "deploy", "stacks")


def _verb_module(module: str):
    if module == "mcp":  # a front end beside the verbs (it serves them all as tools): mcp/'s own
        return importlib.import_module("runward.mcp.verb")
    return importlib.import_module(f"{__package__}.verbs.{module}")


def build_parser(only: str | None = None, bare: bool = False) -> argparse.ArgumentParser:
    """The whole parser; with `only`, just that verb's subparser (a call parses one verb,
    and building all sixteen costs more start-up than argparse itself); with `bare`, the
    verbs as a list of names and one-line helps (all the top-level help and a bad verb's
    error need)."""
    from .cliparser import Parser
    ap = Parser(prog="runward", description=tophelp.DESCRIPTION, epilog=tophelp.EXIT_CODES)
    ap.add_argument("--version", action="version", version=tophelp.VERSION)
    if bare:
        ap.description = tophelp.commands(VERBS)
        ap.epilog = tophelp.EPILOG
        ap.add_argument("cmd", nargs="?", metavar="COMMAND", choices=[name for name, _, _ in VERBS],
                        help=tophelp.COMMAND_HELP)
        return ap
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND", parser_class=Parser)
    for name, help_, module in VERBS + HIDDEN:
        if only is None and (name, help_, module) not in HIDDEN or name == only:
            p = sub.add_parser(name, help=help_)
            # `runward completion` reads every verb's flags; a verb never imports cli (test_layout)
            p.set_defaults(verb_parsers=verb_parsers)
            _add_common(p, on=name not in HERE_ONLY)
            _verb_module(module).add_arguments(p)
    return ap


def verb_parsers() -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, one-line help, its own parser) of each verb in the help."""
    out = []
    for name, help_, _ in VERBS:
        sub = build_parser(only=name)._subparsers._group_actions[0]
        out.append((name, help_, sub.choices[name]))
    return out


def _verb_in(argv: list[str]) -> str | None:
    """The verb a command line names: its first word that is not an option (runward's own
    options take no value), if that word is a verb."""
    for a in argv:
        if not a.startswith("-"):
            return a if any(a == v[0] for v in VERBS + HIDDEN) else None
    return None


# ---------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:
        # `runward status | head -1`: the reader is gone. Like git, die of SIGPIPE without a
        # word (the shell sees 141); a broken pipe to a hop's child is not ours to hide.
        if not output_closed():
            raise
        exit_on_closed_output()


def _main(argv: list[str]) -> int:
    # Everything after the first `--` is the job's command, verbatim: argparse must not read
    # `python train.py --lr 3e-4` as runward's own options.
    tail = None
    if "--" in argv:
        i = argv.index("--")
        argv, tail = argv[:i], argv[i + 1:]
    if tail is None and _answered_without_argparse(argv):
        return 2  # a bare `runward`: the help, and 2 as argparse's path says it
    from .cliparser import BadArguments
    verb = _verb_in(argv)
    try:
        ap = build_parser(only=verb) if verb else build_parser(bare=True)
        args = ap.parse_args(argv)
        if tail is not None and not hasattr(args, "command"):
            ap.error(f"`runward {args.cmd}` takes no command after --")
        if len(getattr(args, "nodes", None) or ()) > 1 and args.cmd not in MULTI_NODE_VERBS:
            ap.error(f"`runward {args.cmd}` acts on one target: give --on once "
                     f"(several nodes: {', '.join(MULTI_NODE_VERBS)})")
    except BadArguments as e:
        return _bad_arguments(e, verb, "--json" in argv)
    if tail is not None:
        args.command = tail
    if not args.cmd:
        ap.print_help()
        return 2
    from .errors import RunwardError
    from .verbs._common import Out
    from .transport.inprocess import ON
    ON[:] = [serve_agent_here]  # this process is the CLI's: a local read-only call may be answered here
    out = Out(getattr(args, "json", False))
    if args.cmd != "mcp":  # the MCP server's client ends it as it likes
        _terminal_signals_as_ctrl_c()
    module = None
    from .verbs._common import OutputLost
    try:
        module = _verb_module(next(m for n, _, m in VERBS + HIDDEN if n == args.cmd))
        return module.run(args, out)
    except OutputLost as e:
        return _output_lost(args.cmd, e)
    except RunwardError as e:
        from .operations.common import suggest_for
        suggest_for(args, e)
        return _fail(out, args, e)
    except KeyboardInterrupt:
        # a verb that knows what an interruption leaves says it (its INTERRUPTED); a verb
        # whose Ctrl-C needs the target asked (start, stop, restart) raises Interrupted itself
        from .errors import Interrupted
        said = getattr(module, "INTERRUPTED", None) or "interrupted"
        return _fail(out, args, Interrupted(said))


def serve_agent_here(stdin, stdout) -> None:
    """The agent's serve() in this process, for transport/inprocess.py's local read-only calls.
    The CLI hands it in because the choice to host the agent is the CLI's alone (the library and
    the MCP server spawn one per call); its import waits for the first such call, so `--help` and
    the other verbs load no agent code."""
    from .agent import main as agent_main
    agent_main.serve(stdin, stdout)


def _terminal_signals_as_ctrl_c() -> None:
    """SIGTERM (`timeout`, a process manager) and SIGHUP (the terminal closed) are taken as a
    Ctrl-C: by default they end the CLI at once and silently, while the target goes on (a
    start over ssh has launched its job, and nothing, not even --json's document, says so); so
    the verb says what the interruption left, as for Ctrl-C (exit 130); a second one stops its
    waiting as a second Ctrl-C does. A signal set to be ignored (nohup) stays ignored."""
    import signal

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:
            signal.signal(sig, interrupt)


def _answered_without_argparse(argv: list[str]) -> bool:
    """`runward --help`, `-h`, `--version` and a bare `runward`, as argparse says them, with
    none of its import (views/tophelp.py): help and version leave as argparse's exit does
    (SystemExit 0, the output left to the interpreter's flush); a bare `runward` is True
    (its help printed, exit 2). False, and nothing printed, for any other command line, or
    where the help's layout is argparse's to make (tophelp.text)."""
    if argv == ["--version"]:
        _say(tophelp.VERSION + "\n")
        sys.exit(0)
    if argv not in ([], ["--help"], ["-h"]):
        return False
    text = tophelp.text(VERBS)
    if text is None:
        return False
    _say(text)
    if argv:
        sys.exit(0)
    return True


def _say(text: str) -> None:
    """Print as argparse prints its help (ArgumentParser._print_message): to stderr where
    there is no stdout (fd 1 closed: sys.stdout is None), and an error writing it dropped (a
    closed reader ends `runward --help` with 0 and no word, as argparse's own print)."""
    try:
        (sys.stdout or sys.stderr).write(text)
    except (AttributeError, OSError):
        pass


# Verbs whose positional words after the options are the job's command: a word argparse
# cannot place there (an option of the job's) means the `--` was forgotten.
_TAKES_COMMAND = ("start", "exec")


def _bad_arguments(e: BadArguments, verb: str | None, json_mode: bool) -> int:
    hint = None
    if e.message.startswith("unrecognized arguments") and verb in _TAKES_COMMAND:
        hint = (f"put the command after --: runward {verb} {'NAME ' if verb == 'start' else ''}"
                "[OPTIONS] -- COMMAND [ARG]...")
    elif "unknown signal" in e.message:  # --stop-signal's check (verbs/_common.signal_arg)
        from .spec.signals import HINT
        hint = HINT
    elif e.message.startswith("argument --"):  # a declared option's check (spec/options.py)
        from .spec.options import hint_for
        hint = hint_for(e.message)
    if json_mode:
        import json
        doc = {"ok": False, "command": verb, "error": {"type": "BadInput", "message": e.message, "exit_code": 2}}
        if hint:
            doc["error"]["hint"] = hint
        doc["result"] = None  # as every other error document (cli._fail, the library's, MCP's)
        from .verbs._common import OutputLost, write_out
        try:
            write_out(json.dumps(doc) + "\n")
        except OutputLost as lost:
            lost.verdict = 2
            print(f"runward: error: {e.message}", file=sys.stderr)  # the error itself is not lost
            return _output_lost(verb or "runward", lost)
    else:
        e.parser.print_usage(sys.stderr)
        print(f"{e.parser.prog}: error: {e.message}" + (f"\n  hint: {hint}" if hint else ""), file=sys.stderr)
    return 2


def output_closed() -> bool:
    """Whether stdout or stderr is a pipe whose reader has gone (poll says POLLERR)."""
    import select
    try:
        poller = select.poll()
        for fd in (1, 2):
            poller.register(fd, select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


def exit_on_closed_output() -> None:
    """End as git does when its reader is gone: killed by SIGPIPE, so a shell's pipeline sees
    141 and nothing is printed (Python ignores SIGPIPE, hence the BrokenPipeError)."""
    import signal
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)  # the interpreter's last flush then has somewhere to go
        os.dup2(devnull, 2)
    except OSError:
        pass
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)
    os._exit(128 + signal.SIGPIPE)  # SIGPIPE blocked: the same status, said as an exit code


def _output_lost(verb: str, e) -> int:
    """stdout could not be written (`runward status > /dev/full`): one line on stderr, never a
    second try at stdout, and EXIT_OUTPUT_LOST (docs/cli.md, exit 74). What the verb did was done:
    the line says the exit code it had (a stop that stopped is not undone by a full disk)."""
    from .verbs._common import EXIT_OUTPUT_LOST
    had = f"; {verb} itself ended with exit code {e.verdict}" if e.verdict is not None else ""
    try:
        print(f"runward {verb}: error: could not write the output to stdout: {e}{had}", file=sys.stderr, flush=True)
    except OSError:
        pass  # stderr is no better: the exit code alone says it
    return EXIT_OUTPUT_LOST


def _fail(out, args: argparse.Namespace, e) -> int:
    if out.json:
        from .verbs._common import OutputLost
        try:
            out.doc({"ok": False, "command": args.cmd, "error": e.to_dict(), "result": e.result})
        except OutputLost as lost:
            lost.verdict = e.exit_code
            from .views.render import render_error
            print(render_error(args.cmd, e), file=sys.stderr)  # the error itself is not lost
            return _output_lost(args.cmd, lost)
    else:
        from .views.render import render_error
        print(render_error(args.cmd, e), file=sys.stderr)
    return e.exit_code


if __name__ == "__main__":
    sys.exit(main())
