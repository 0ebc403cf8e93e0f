"""runward exec --on TARGET -- COMMAND...: its exit code or signal, output, and a diagnosis. runward exits
with the command's own code (128+N for signal N), as ssh and docker exec do. The work:
operations/exec.py; passing the command's output on to this terminal is the CLI's."""

from __future__ import annotations

from ..spec import options

import sys

from ._common import OutputLost, write_out


# Ctrl-C (cli.main): the command runs in a session of its own on the target, which neither a
# terminal's Ctrl-C nor the end of our agent or ssh reaches (checked: it ran on after "interrupted")
INTERRUPTED = ("interrupted: the command may still be running on the target (it has a session of its "
               "own, and runward does not end it); find it with `runward ps PATTERN --on TARGET`")


def add_arguments(p) -> None:
    options.add(p, "sh", "exec")
    options.add(p, "force")
    p.add_argument("--cwd", metavar="DIR", help="working directory on the target (default: the target user's home)")
    options.add(p, "env", "exec")
    options.add(p, "timeout", "exec")
    p.add_argument("command", nargs="*", help="-- COMMAND [ARG]...")


def run(args, out) -> int:
    from ..operations.exec import ExecOptions, exec as exec_op
    from ..spec.inputs import parse_env
    outcome = exec_op(ExecOptions.from_args(args, env=parse_env(args.env)))
    try:
        out.doc(outcome.document)
        if not out.json:  # the command's own output passed on as it came, then what runward says of it
            write_out(outcome.document["result"]["stdout"])
    except OutputLost as e:
        e.verdict = outcome.code  # what the command did is told on stderr (cli._output_lost)
        raise
    if not out.json:
        sys.stderr.write(outcome.document["result"]["stderr"])
        said = outcome.render()
        if said:
            print(said, file=sys.stderr)
    return outcome.code
