"""The processes alive around a command, where they live, and which signals harm them.

A kill pattern is only dangerous against something: here that is every process that
encloses the command (the shells, wrappers and hop clients), with its command line as
/proc/PID/cmdline shows it and the machine and PID namespace it lives in.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from .lexer import Word
from .parse import basename


SIGNALS = {"HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "TRAP": 5, "ABRT": 6, "IOT": 6, "BUS": 7,
           "FPE": 8, "KILL": 9, "USR1": 10, "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14,
           "TERM": 15, "STKFLT": 16, "CHLD": 17, "CLD": 17, "CONT": 18, "STOP": 19,
           "TSTP": 20, "TTIN": 21, "TTOU": 22, "URG": 23, "XCPU": 24, "XFSZ": 25,
           "VTALRM": 26, "PROF": 27, "WINCH": 28, "IO": 29, "POLL": 29, "PWR": 30, "SYS": 31}
SIGNAL_NAMES = {num: name for name, num in reversed(list(SIGNALS.items()))}
# Signals whose default action does nothing to a shell (0 only tests for existence).
HARMLESS_SIGNALS = {0, 17, 18, 23, 28}
UNCATCHABLE = {9, 19}
EXEC_SHELLS = {"bash", "zsh", "ksh", "ksh93", "mksh"}
SHELLS = EXEC_SHELLS | {"sh", "dash", "ash"}
CONTAINER_KINDS = {"pct", "lxc", "docker", "podman", "kubectl"}
LOOPBACK = {"localhost", "127.0.0.1", "::1", "[::1]", "ip6-localhost"}


@dataclass(frozen=True)
class Proc:
    """A process alive around a command, with its argv as /proc/PID/cmdline shows it."""

    argv: tuple[str, ...]
    domain: tuple  # the machine and PID namespace it lives in
    level: int
    role: str  # agent | interactive | shell | sshd-shell | wrapper | client | sibling
    where: str = ""
    family: str = ""  # for shells: bash, zsh, sh, ...
    state: str = "alive"  # alive | exec-lone | exec-last | exec: replaced by the command
    catches: bool = False  # catches ordinary signals (sudo, doas, timeout relay them)

    @cached_property
    def cmdline(self) -> str:
        return " ".join(self.argv)

    @cached_property
    def name(self) -> str:
        return basename(self.argv[0]) if self.argv else ""

    @cached_property
    def comm(self) -> str:
        # The kernel's comm: basename of the executed file, cut to 15 chars (TASK_COMM_LEN).
        return self.name.lstrip("-")[:15]


@dataclass(frozen=True)
class Ctx:
    """Where a command runs: the processes around it, its machine, its nesting level."""

    enclosing: tuple[Proc, ...] = ()
    domain: tuple = ()
    where: str = ""  # "" is this machine; "on root@host", "inside pct exec 200 on root@host"
    target: str | None = ""  # the runward --on spelling of the domain; None if there is none
    level: int = 0
    runner: int = -1  # index in enclosing of the shell reading the current script
    evaluated: int = -1  # the runner whose script is an `eval`'s: bash never execs from there
    depth: int = 0

    def with_runner_state(self, state: str) -> Ctx:
        if self.runner < 0:
            return self
        procs = list(self.enclosing)
        procs[self.runner] = replace(procs[self.runner], state=state)
        return replace(self, enclosing=tuple(procs))

    def push(self, *procs: Proc, **changes) -> Ctx:
        return replace(self, enclosing=self.enclosing + procs, depth=self.depth + 1, **changes)


def sees(viewer: tuple, target: tuple) -> bool:
    """Can a process in `viewer` see one in `target`? Hosts see into their containers."""
    if target[:len(viewer)] != viewer:
        return False
    return all(kind in CONTAINER_KINDS for kind, _ in target[len(viewer):])


def signal_number(spec: str | None) -> int | None:
    if spec is None:
        return None
    spec = spec.strip().upper()
    if spec.isdigit():
        return int(spec)
    return SIGNALS.get(spec[3:] if spec.startswith("SIG") else spec)


def take_signal_spec(words: list[Word]) -> tuple[int | None, list[Word]]:
    """pkill/killall accept `-9`, `-KILL`, `-SIGKILL` anywhere; remove and return it."""
    for k, w in enumerate(words):
        if w.value.startswith("-") and not w.value.startswith("--"):
            number = signal_number(w.value[1:])
            if number is not None:
                return number, words[:k] + words[k + 1:]
    return None, words


def kill_signal(args: list[Word]) -> int:
    """kill -9 / -KILL / -SIGKILL / -s KILL / -n 9 / --signal KILL; TERM by default."""
    for k, w in enumerate(args):
        v = w.value
        if v in ("-s", "-n", "--signal") and k + 1 < len(args):
            return first_signal(signal_number(args[k + 1].value), 15)
        if v.startswith("-") and len(v) > 1 and not v.startswith("--"):
            number = signal_number(v[1:])
            if number is not None:
                return number
        if not v.startswith("-"):
            break
    return 15


def first_signal(*candidates: int | None) -> int:
    return next(c for c in candidates if c is not None)


def harmed(proc: Proc, signal: int) -> bool:
    if signal in HARMLESS_SIGNALS:
        return False
    if proc.catches:
        return signal in UNCATCHABLE
    return True
