"""runward lint 'SHELL COMMAND': self-kill and wrong-filesystem hazards (docs/lint.md)."""

from __future__ import annotations

import sys


def add_arguments(p) -> None:
    p.add_argument("command_line", metavar="'SHELL COMMAND'", help="the command, or - for stdin")
    p.add_argument("--interactive", action="store_true",
                   help="the command is typed at a prompt (no enclosing `bash -c` carries its text)")


def run(args, out) -> int:
    from .. import lint as _lint
    text = sys.stdin.read() if args.command_line == "-" else args.command_line
    findings = _lint.lint(text, assume_shell=not args.interactive)
    code = 1 if any(f.severity == "error" for f in findings) else 0
    out.doc({"ok": code == 0, "command": "lint", "result": {"command": text,
                                                              "findings": [f.to_dict() for f in findings]}})
    if not out.json:
        out.say(_lint.format_findings(text, findings) if findings else "no findings")
    return code
