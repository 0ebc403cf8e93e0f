"""lint: self-kill and wrong-filesystem hazards in a shell command line, before it runs
(docs/lint.md). On this machine alone: no target, so its document has none."""

from __future__ import annotations

from ..errors import EXIT_FAILED, EXIT_OK
from . import Options, Outcome


class LintOptions(Options):
    """What `runward lint` takes (verbs/lint.py's arguments; `-` for stdin is the CLI's, read
    there: the MCP server's stdin is its protocol, never a command line)."""
    command_line: str | None = None
    interactive: bool = False
    config: str | None = None  # the common flag: lint reads no runward.toml


def lint(opts: LintOptions) -> Outcome:
    from .. import lint as _lint
    text = opts.command_line
    if not isinstance(text, str):  # a list would lint as nothing: "no findings", a false all-clear
        from ..errors import BadInput
        raise BadInput(f"invalid command_line {text!r}: not a string",
                       "give the shell command line as one string, e.g. \"pkill -f train\"")
    findings = _lint.lint(text, assume_shell=not opts.interactive)
    code = EXIT_FAILED if any(f.severity == "error" for f in findings) else EXIT_OK
    return Outcome("lint", code, {"ok": code == EXIT_OK, "command": "lint", "result": {
        "command": text, "findings": [f.to_dict() for f in findings]}},
        lambda: _lint.format_findings(text, findings) if findings else "no findings")
