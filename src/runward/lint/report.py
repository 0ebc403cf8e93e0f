"""Findings, the rule table, and their text for people: the report with carets under each
span, and the quoting that messages use to show argvs and commands."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .lexer import Word


@dataclass(frozen=True)
class Finding:
    """One hazard: which rule, how bad, where in the command string, and what to do."""

    rule: str
    severity: str  # "error" | "warning" | "info"
    start: int  # span in the top-level command string
    end: int
    message: str
    why: str
    fix: str

    def to_dict(self) -> dict:
        return asdict(self)


#: rule id -> severity. docs/lint.md explains each one.
RULES = {
    "self-kill": "error",
    "self-kill-fragile": "warning",
    "self-kill-wrapper": "warning",
    "self-match-list": "warning",
    "kill-then-start": "warning",
    "host-path-in-container": "warning",
    "parse-error": "warning",
    "ssh-word-split": "error",
    "kill-everything": "error",
    "kill-by-name": "warning",
    "unverified-nohup": "info",
    "sleep-as-verification": "info",
}

SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}


def format_findings(command: str, findings: list[Finding]) -> str:
    """Human-readable report: one block per finding, with a caret line under its span."""
    if not findings:
        return "no findings"
    blocks = [format_one(command, f) for f in findings]
    counts = {sev: sum(f.severity == sev for f in findings) for sev in SEVERITY_RANK}
    summary = ", ".join(f"{n} {sev}{'s' if n != 1 and sev != 'info' else ''}"
                        for sev, n in counts.items() if n)
    return "\n\n".join(blocks) + f"\n\n{summary}"


def format_one(command: str, f: Finding) -> str:
    line, caret = caret_lines(command, f.start, f.end)
    return "\n".join([
        f"{f.severity}[{f.rule}] at {f.start}-{f.end}: {f.message}",
        f"  {line}",
        f"  {caret}",
        f"  why: {f.why}",
        f"  fix: {f.fix}",
    ])


def caret_lines(command: str, start: int, end: int, width: int = 100) -> tuple[str, str]:
    """The line of `command` holding `start`, windowed to `width`, and carets under the span."""
    start = max(0, min(start, len(command)))
    line_start = command.rfind("\n", 0, start) + 1
    line_end = command.find("\n", start)
    line_end = len(command) if line_end < 0 else line_end
    end = max(start + 1, min(end, line_end))
    left = max(line_start, start - 30) if line_end - line_start > width else line_start
    right = min(line_end, left + width)
    prefix = "..." if left > line_start else ""
    suffix = "..." if right < line_end else ""
    text = re.sub(r"[\x00-\x1f\x7f]", " ", command[left:right])
    carets = " " * (len(prefix) + start - left) + "^" * max(1, min(end, right) - start)
    return prefix + text + suffix, carets


def display_argv(argv: tuple[str, ...], limit: int = 60) -> str:
    shown = [a if len(a) <= limit else a[:limit - 3] + "..." for a in argv]
    return " ".join(quote(a) for a in shown)


def command_text(words: list[Word], limit: int = 80) -> str:
    text = " ".join(quote(w.value) for w in words)
    return text if len(text) <= limit else text[:limit - 3] + "..."


SAFE_WORD = re.compile(r"[A-Za-z0-9_@%+=:,./~-]+")


def quote(s: str) -> str:
    """POSIX single-quoting where needed, for display only."""
    return s if SAFE_WORD.fullmatch(s) else always_quote(s)


def always_quote(s: str) -> str:
    return "'" + s.replace("'", "'\"'\"'") + "'"
