"""Shell-command hazard checks behind `runward lint`.

The failure this package exists for (docs/from-shell.md, "Stop, then start again"): `pkill -f PATTERN` matches
PATTERN against the whole command line of every process (/proc/PID/cmdline, NULs read as
spaces) and skips only its own pid. Inside `bash -c '...'`, `ssh HOST '...'` (sshd runs the
login shell with -c and the joined words) or `pct exec ID -- bash -lc '...'`, the shell that
runs the line carries the whole line, pattern included, in its own argv, so pkill signals it
too: everything after pkill silently never runs, and `|| true` cannot help.

`lint()` splits the command line as a POSIX shell does, follows the strings nested in ssh,
`bash -c`, `pct exec`, `docker exec`, `sudo` and friends, and keeps, at every nesting level,
the command line of each process that encloses the command (as the kernel shows it). Each
pattern is then evaluated as pkill/pgrep/grep evaluate it (POSIX regular expressions,
unanchored search) against those command lines.

Assumptions, each also stated where it is used and in docs/lint.md:

- The top-level command runs inside `bash -c '<command>'`, as an agent tool or a script runs
  it. Such a shell wraps the command in its own, so it never execs it away and stays alive.
  `lint(command, assume_shell=False)` models a command typed at an interactive prompt.
- sshd runs the remote user's login shell, taken to be bash, as `bash -c '<joined words>'`.
- bash, zsh and ksh exec the only command of a `-c` string (bash >= 5.1 also the last one)
  when it has no redirections, so that shell is gone before pkill looks. `sh` is taken to be
  dash (Debian, Ubuntu), which does not.
- A container hop (pct, lxc-attach, lxc, docker, podman, kubectl exec) has its own PID
  namespace and its own filesystem.
- Words built from `$VAR` or `$(...)` have unknown values: patterns made of them are not
  evaluated.

Pure and standard-library only: nothing is run and nothing is read from disk.

The package, in the order a command line goes through it: lexer (words), parse (pipelines,
options, wrappers), hops (the strings and argvs nested in ssh, bash -c, pct exec ...),
processes (what encloses each command), queries (what pkill, pgrep, killall and ps | grep
select), regex (their pattern flavours), walk (the walk that hands each command to the rule
families in rules/), scan (one pass's state) and report (findings and their text).
"""

from __future__ import annotations

from .report import RULES, Finding, format_findings
from .walk import Linter

__all__ = ["Finding", "RULES", "format_findings", "lint"]


def lint(command: str, *, assume_shell: bool = True) -> list[Finding]:
    """Return the hazards found in a shell command line, in order of position.

    assume_shell=True (the default) treats the command as run by `bash -c '<command>'`, as an
    agent tool, a script or ssh would run it; that shell's command line then contains every
    pattern typed in the command. Use assume_shell=False for a command typed at an
    interactive prompt. Never raises on odd input: quoting a shell cannot parse yields one
    "parse-error" warning.
    """
    if isinstance(command, (bytes, bytearray)):
        command = bytes(command).decode("utf-8", "replace")
    elif not isinstance(command, str):
        command = str(command)
    return Linter(command, assume_shell).run()
