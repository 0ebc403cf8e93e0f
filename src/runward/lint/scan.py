"""One linting pass over a command line: the findings so far, and what later rules need to
know about earlier commands (kills, starts, background launches, checks, copies)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from .processes import Proc
from .queries import Query
from .report import RULES, Finding

# Bracket-trick suggestions are verified by linting the fixed line again: a bounded number
# of times, so that a long script with many kills stays fast.
MAX_VERIFICATIONS = 16


@dataclass
class KillEvent:
    query: Query
    domain: tuple
    span: tuple[int, int]
    text: str


@dataclass
class StartEvent:
    proc: Proc
    domain: tuple
    text: str


@dataclass
class Launch:
    seq: int
    domain: tuple
    span: tuple[int, int]
    text: str


@dataclass
class Copy:
    domain: tuple
    paths: frozenset
    text: str
    where: str


@dataclass
class Scan:
    """The state of one pass. seq numbers the simple commands in the order they run."""

    command: str
    assume_shell: bool
    relint: Callable[[str], list[Finding]]  # lint another line the same way, no suggestions
    suggest: bool = True
    verifications_left: int = MAX_VERIFICATIONS
    findings: list[Finding] = field(default_factory=list)
    seq: int = 0
    kills: list[KillEvent] = field(default_factory=list)
    starts: list[StartEvent] = field(default_factory=list)
    launches: list[Launch] = field(default_factory=list)
    checks: list[tuple[int, tuple]] = field(default_factory=list)
    copies: list[Copy] = field(default_factory=list)
    reported_copies: set[int] = field(default_factory=set)
    # the directory a shell has `cd`-ed to, per shell (filesystem.shell_key): a relative path
    # used after `cd /root &&` names /root/... in that shell's filesystem
    cwd: dict = field(default_factory=dict)

    def add(self, rule: str, span: tuple[int, int], message: str, why: str, fix: str) -> None:
        self.findings.append(Finding(rule, RULES[rule], span[0], span[1], message, why, fix))
